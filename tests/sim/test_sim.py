"""The reference server, healthy: scenario following, wire format, endpoints, CLI."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from harness.cli import sim as sim_command
from harness.sim.profiles import PROFILES, get_profile
from tests.sim_driver import (
    ENTROPY_ARGS,
    ask,
    chain_scenario,
    client_for,
    entropy_scenario,
    openai_tools,
    opening,
    play,
    triple_scenario,
)


@pytest.mark.parametrize("stream", [False, True])
def test_healthy_follows_expected_calls_then_answers(sim_url, write_scenarios, stream):
    sc = triple_scenario()
    url = sim_url("healthy", scenarios_dir=write_scenarios(sc, chain_scenario()))
    turns = play(url, sc, stream=stream)
    assert len(turns) == 2
    first, last = turns
    assert first.finish_reason == "tool_calls"
    assert [(n, json.loads(a)) for _, n, a in first.calls] == [
        ("entropy", ENTROPY_ARGS),
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 3, "b": 4}),
    ]
    assert first.calls[0][2] == '{"values":[0.5,0.25,0.25],"base":2}'  # compact JSON
    assert len({i for i, _, _ in first.calls}) == 3
    assert (last.finish_reason, last.calls) == ("stop", [])
    assert last.content == "Entropy 1.5 bits; sums 3 and 7."


def test_sequential_steps_and_contains_answer(sim_url, write_scenarios):
    sc = chain_scenario()
    turns = play(sim_url(scenarios_dir=write_scenarios(sc)), sc)
    assert [len(t.calls) for t in turns] == [1, 1, 1, 0]
    ids = [t.calls[0][0] for t in turns[:3]]
    assert len(set(ids)) == 3, "tool_call ids must be unique across turns"
    assert "1.5" in turns[-1].content


def test_streaming_deltas_are_openai_shaped(sim_url, write_scenarios):
    sc = triple_scenario()
    url = sim_url(scenarios_dir=write_scenarios(sc))
    turn = ask(client_for(url), opening(sc), stream=True, tools=openai_tools(sc))
    assert len(turn.first_deltas) == 3
    for i, first in enumerate(turn.first_deltas):
        assert first["index"] == i and first["id"].startswith("call_")
        assert first["type"] == "function" and first["function"]["name"]
    assert all(n >= 2 for n in turn.arg_pieces.values()), turn.arg_pieces
    assert turn.usage is not None and turn.usage.completion_tokens > 0


def test_unknown_conversation_gets_polite_answer(sim_url, write_scenarios):
    url = sim_url(scenarios_dir=write_scenarios(entropy_scenario()))
    msgs = [{"role": "user", "content": "What is the weather like?"}]
    turn = ask(client_for(url), msgs, tools=openai_tools(entropy_scenario()))
    assert turn.calls == [] and turn.finish_reason == "stop"
    assert turn.content and "help" in turn.content


def test_followup_segment_is_played(sim_url, write_scenarios):
    sc = entropy_scenario(
        followups=[
            {
                "user": "Now add 2 and 3.",
                "expect": {
                    "calls": [{"tool": "add", "arguments": {"a": 2, "b": 3}}],
                    "final_answer": {"example": "2 + 3 = 5"},
                },
            }
        ]
    )
    client = client_for(sim_url(scenarios_dir=write_scenarios(sc)))
    msgs, tools = opening(sc), openai_tools(sc)
    first = ask(client, msgs, tools=tools)
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": _wire(first.calls)},
        {"role": "tool", "tool_call_id": first.calls[0][0], "content": "1.5"},
    ]
    answer = ask(client, msgs, tools=tools)
    msgs += [
        {"role": "assistant", "content": answer.content},
        {"role": "user", "content": "Now add 2 and 3."},
    ]
    follow = ask(client, msgs, tools=tools)
    assert [(n, json.loads(a)) for _, n, a in follow.calls] == [("add", {"a": 2, "b": 3})]


def _wire(calls):
    return [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
    ]


def test_tool_choice_is_honoured(sim_url, write_scenarios):
    sc = entropy_scenario()
    client = client_for(sim_url(scenarios_dir=write_scenarios(sc)))
    msgs, tools = opening(sc), openai_tools(sc)
    assert ask(client, msgs, tools=tools, tool_choice="none").calls == []
    named = ask(
        client, msgs, tools=tools, tool_choice={"type": "function", "function": {"name": "add"}}
    )
    assert [n for _, n, _ in named.calls] == ["add"]
    done = msgs + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": _wire(ask(client, msgs, tools=tools).calls),
        },
        {"role": "tool", "tool_call_id": "x", "content": "1.5"},
    ]
    assert ask(client, done, tools=tools).calls == []
    assert [n for _, n, _ in ask(client, done, tools=tools, tool_choice="required").calls] == [
        "entropy"
    ]


def test_max_tokens_truncates_with_length(sim_url, write_scenarios):
    example = "A long final answer. " * 20
    sc = entropy_scenario(expect={"final_answer": {"example": example}})
    client = client_for(sim_url(scenarios_dir=write_scenarios(sc)))
    turn = ask(client, opening(sc), tools=openai_tools(sc), max_tokens=5)
    assert turn.finish_reason == "length" and turn.content == example[:20]
    assert turn.usage.completion_tokens == 5


def test_sampling_noise_is_deterministic_and_varies(sim_url, write_scenarios):
    calls = [
        {"tool": "entropy", "arguments": ENTROPY_ARGS},
        {"tool": "add", "arguments": {"a": 1, "b": 1}, "optional": True},
    ]
    sc = entropy_scenario(expect={"calls": calls, "final_answer": {"contains": ["1.5"]}})
    url = sim_url(scenarios_dir=write_scenarios(sc))

    def shape(seed: int) -> list[int]:
        return [len(t.calls) for t in play(url, sc, temperature=0.7, seed=seed)]

    shapes = [shape(s) for s in range(16)]
    assert shapes == [shape(s) for s in range(16)], "same seed, same conversation -> same run"
    assert [1, 0] in shapes and [1, 1, 0] in shapes, "optional call sometimes made, sometimes not"
    assert all(s == [1, 0] for s in [[len(t.calls) for t in play(url, sc)] for _ in range(3)])


def test_failure_rate_makes_failed_runs(sim_url, write_scenarios):
    sc = chain_scenario()
    prof = dataclasses.replace(get_profile("healthy"), noise_failure_rate=1.0)
    url = sim_url(prof, scenarios_dir=write_scenarios(sc))
    for seed in range(4):
        turns = play(url, sc, temperature=1.0, seed=seed)
        needless_repeat = sum(len(t.calls) for t in turns) == 4
        assert needless_repeat or turns[-1].content in (None, "")


def test_reasoning_model_keeps_reasoning_separate(sim_url, write_scenarios):
    sc = entropy_scenario()
    url = sim_url("healthy-reasoning", scenarios_dir=write_scenarios(sc))
    for stream in (False, True):
        turn = ask(client_for(url), opening(sc), stream=stream, tools=openai_tools(sc))
        assert turn.reasoning and "entropy" in turn.reasoning
        assert turn.content in (None, "") and turn.args() == ENTROPY_ARGS


def test_info_endpoints(sim_url):
    url = sim_url("fusion-on")
    with httpx.Client(base_url=url) as http:
        assert http.get("/health").status_code == 200
        assert http.get("/v1/models").json()["data"][0]["id"] == "harness-sim"
        assert http.get("/server_info").json() == http.get("/get_server_info").json()
        assert http.get("/model_info").status_code == 200


def test_completions_stop_and_max_tokens(sim_url, tmp_path: Path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}) + "\n")
    client = client_for(sim_url(gsm8k_path=data))
    prompt = "Question: What is 2+2?\nAnswer:"
    r = client.completions.create(
        model="sim", prompt=prompt, max_tokens=512, stop=["Question:", "\n\n\n"]
    )
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text.strip()
    cut = client.completions.create(model="sim", prompt=prompt, max_tokens=2)
    assert cut.choices[0].finish_reason == "length" and len(cut.choices[0].text) <= 8
    with_stop = client.completions.create(model="sim", prompt=prompt, max_tokens=512, stop=["="])
    assert "=" not in with_stop.choices[0].text


def test_generate_and_routed_experts(sim_url):
    url = sim_url("healthy", capture=True)
    with httpx.Client(base_url=url) as http:
        body = {
            "text": "Hello",
            "sampling_params": {"max_new_tokens": 4},
            "return_routed_experts": True,
        }
        out = http.post("/generate", json=body).json()
        meta = out["meta_info"]
        assert meta["prompt_tokens"] == 2 and meta["completion_tokens"] <= 4
        assert base64.b64decode(meta["routed_experts"])
        chat = http.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "return_routed_experts": True,
            },
        ).json()
        assert "routed_experts" in chat["sglext"]
    without = sim_url("healthy", capture=False)
    out = httpx.post(without + "/generate", json=body).json()
    assert "routed_experts" not in out["meta_info"]


def test_bad_request_is_400(sim_url):
    url = sim_url()
    r = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": "nope"})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    assert httpx.post(url + "/v1/chat/completions", content=b"{").status_code == 400


def _sim_cli(argv: list[str]) -> int:
    """``harness sim ARGV`` in-process, without importing every other command."""
    parser = argparse.ArgumentParser()
    sim_command.add_arguments(parser)
    return sim_command.run(parser.parse_args(argv))


def test_profiles_listed_and_unknown_rejected(capsys):
    assert _sim_cli(["--list-profiles"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PROFILES)
    assert _sim_cli(["--profile", "no-such"]) == 2
    assert "healthy" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        _sim_cli(["--gsm8k-fault", "3=no-such"])
    assert exit_info.value.code == 2
    assert "--gsm8k-fault: unknown infrastructure fault 'no-such'" in capsys.readouterr().err
    with pytest.raises(KeyError, match="fused-regression"):
        get_profile("no-such")


def test_harness_sim_is_a_cli_command(capsys):
    from harness.cli import main

    assert main(["sim", "--list-profiles"]) == 0
    assert "fused-regression" in capsys.readouterr().out


def test_cli_capture_crash_exits_1(capsys):
    assert _sim_cli(["--profile", "capture-crash", "--enable-return-routed-experts"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_cli_serves_until_sigterm(tmp_path: Path):
    data = tmp_path / "gsm8k.jsonl"
    rows = [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(2)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = (tmp_path / "sim.log").open("w+")
    cmd = [sys.executable, "-m", "harness", "sim", "--profile", "healthy"]
    cmd += ["--scenarios", str(tmp_path), "--gsm8k", str(data), "--gsm8k-fault", "1=http-400"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = _wait_for_url(tmp_path / "sim.log", proc)
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/health").status_code == 200
        statuses = [
            httpx.post(
                url + "/v1/completions",
                json={"model": "m", "prompt": f"Question: What is {i} + 1?\nAnswer:"},
            ).status_code
            for i in range(2)
        ]
        assert statuses == [200, 400]  # --gsm8k-fault 1=http-400: question 1 only
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    assert "Serving on" in (tmp_path / "sim.log").read_text()


def _wait_for_url(path: Path, proc: subprocess.Popen) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines():
            if line.startswith("Serving on "):
                return line.split()[-1]
        assert proc.poll() is None, path.read_text()
        time.sleep(0.1)
    raise AssertionError("no 'Serving on' line")


def test_unseeded_sampling_runs_stay_consistent(sim_url, write_scenarios):
    calls = [
        {"tool": "entropy", "arguments": ENTROPY_ARGS},
        {"tool": "add", "arguments": {"a": 1, "b": 1}, "optional": True},
    ]
    sc = entropy_scenario(expect={"calls": calls, "final_answer": {"contains": ["1.5"]}})
    prof = dataclasses.replace(get_profile("healthy"), noise_optional_rate=0.5)
    url = sim_url(prof, scenarios_dir=write_scenarios(sc))
    shapes = [[len(t.calls) for t in play(url, sc, temperature=1.0)] for _ in range(10)]
    assert set(map(tuple, shapes)) == {(1, 0), (1, 1, 0)}, "runs differ, each one coherent"


def test_chat_gsm8k_prompt_is_answered(sim_url, tmp_path: Path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "What is 3+4?", "answer": "3+4=7\n#### 7"}) + "\n")
    client = client_for(sim_url(gsm8k_path=data))
    turn = ask(client, [{"role": "user", "content": "Question: What is 3+4?\nAnswer:"}])
    assert turn.calls == [] and turn.content and turn.content[-1].isdigit()


def test_scenarios_reread_when_files_change(sim_url, write_scenarios, monkeypatch):
    from harness.sim import app as sim_app

    monkeypatch.setattr(sim_app, "RELOAD_CHECK_S", 0.0)
    folder = write_scenarios(entropy_scenario())
    url = sim_url(scenarios_dir=folder)
    sc = entropy_scenario(id="added", messages=[{"role": "user", "content": "Add 5 and 6."}])
    sc["expect"] = {"calls": [{"tool": "add", "arguments": {"a": 5, "b": 6}}]}
    assert ask(client_for(url), opening(sc), tools=openai_tools(sc)).calls == []
    (folder / "added.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
    turn = ask(client_for(url), opening(sc), tools=openai_tools(sc))
    assert turn.args() == {"a": 5, "b": 6}


def test_completions_streaming_and_latency(sim_url):
    url = sim_url(latency_ms=300)
    client = client_for(url)
    start = time.monotonic()
    pieces = list(
        client.completions.create(model="sim", prompt="Hello", max_tokens=64, stream=True)
    )
    assert time.monotonic() - start >= 0.3
    text = "".join(c.choices[0].text for c in pieces if c.choices)
    assert (
        text
        == client.completions.create(model="sim", prompt="Hello", max_tokens=64).choices[0].text
    )
    assert pieces[-1].choices[0].finish_reason in ("stop", "length")
