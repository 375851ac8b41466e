"""Each fault of the reference server appears as specified, streaming and non-streaming."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from harness.kinds import FailureKind
from harness.sim.faults import Fault
from harness.sim.profiles import get_profile
from harness.sim.stats import RECENT_REQUESTS, SimStats, fetch_stats
from tests.sim_driver import (
    ENTROPY_ARGS,
    Turn,
    ask,
    chain_scenario,
    client_for,
    entropy_scenario,
    openai_tools,
    opening,
    play,
    triple_scenario,
)

COMPACT = '{"values":[0.5,0.25,0.25],"base":2}'


def _markup_ok(t: Turn) -> bool:
    inner = t.content.split("<tool_call>")[1].split("</tool_call>")[0]
    return json.loads(inner) == {"name": "entropy", "arguments": ENTROPY_ARGS}


def _malformed_ok(t: Turn) -> bool:
    try:
        json.loads(t.calls[0][2])
    except json.JSONDecodeError:
        return t.calls[0][2] + "}" == COMPACT
    return False


FIRST_TURN: dict[str, Callable[[Turn], bool]] = {
    "container-as-string": lambda t: t.args() == {"values": "[0.5, 0.25, 0.25]", "base": 2},
    "dropped-keys": lambda t: t.args() == {"base": 2},
    "unexpected-keys": lambda t: t.args() == {**ENTROPY_ARGS, "unexpected_option": True},
    "malformed-json": _malformed_ok,
    "markup-in-content": lambda t: t.calls == [] and t.finish_reason == "stop" and _markup_ok(t),
    "finish-reason-mismatch": lambda t: t.finish_reason == "stop" and t.args() == ENTROPY_ARGS,
    "reasoning-leak": lambda t: (
        t.reasoning is None and t.content.startswith("<think>") and t.args() == ENTROPY_ARGS
    ),
    "healthy": lambda t: t.finish_reason == "tool_calls" and t.calls[0][2] == COMPACT,
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("profile", sorted(FIRST_TURN))
def test_first_turn_fault(sim_url, write_scenarios, profile, stream):
    sc = entropy_scenario()
    url = sim_url(profile, scenarios_dir=write_scenarios(sc))
    turn = ask(client_for(url), opening(sc), stream=stream, tools=openai_tools(sc))
    assert FIRST_TURN[profile](turn), turn


def test_scalars_as_strings(sim_url, write_scenarios):
    tool = {"name": "configure", "parameters": {"type": "object", "properties": {}}}
    args = {"n": 42, "flag": True, "x": None, "name": "abc", "xs": [1]}
    sc = entropy_scenario(
        tools=[tool], expect={"calls": [{"tool": "configure", "arguments": args}]}
    )
    url = sim_url("scalar-as-string", scenarios_dir=write_scenarios(sc))
    for stream in (False, True):
        turn = ask(client_for(url), opening(sc), stream=stream, tools=openai_tools(sc))
        assert turn.args() == {"n": "42", "flag": "true", "x": "null", "name": "abc", "xs": [1]}


def test_stream_truncated_args_lose_last_piece(sim_url, write_scenarios):
    sc = entropy_scenario()
    url = sim_url("stream-truncated-args", scenarios_dir=write_scenarios(sc))
    plain = ask(client_for(url), opening(sc), tools=openai_tools(sc))
    assert plain.calls[0][2] == COMPACT
    streamed = ask(client_for(url), opening(sc), stream=True, tools=openai_tools(sc))
    args = streamed.calls[0][2]
    assert args and COMPACT.startswith(args) and len(args) < len(COMPACT)
    with pytest.raises(json.JSONDecodeError):
        json.loads(args)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_repeat_loop_36_calls_no_answer(sim_url, write_scenarios, stream):
    sc = triple_scenario()
    url = sim_url("repeat-loop", scenarios_dir=write_scenarios(sc))
    turns = play(url, sc, stream=stream, max_turns=12)
    assert len(turns) == 12 and all(t.finish_reason == "tool_calls" for t in turns)
    assert sum(len(t.calls) for t in turns) == 36
    assert all(t.content is None for t in turns)


def test_collapse_progresses_over_turns(sim_url, write_scenarios):
    sc = chain_scenario()
    turns = play(sim_url("collapse", scenarios_dir=write_scenarios(sc)), sc)
    assert [t.args() for t in turns[:3]] == [
        ENTROPY_ARGS,
        {"values": [0, 0, 0], "base": 0},
        {"values": ["", "", ""], "base": ""},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_fused_regression_reproduces_motivating_case(sim_url, write_scenarios, stream):
    sc = triple_scenario()
    turns = play(sim_url("fused-regression", scenarios_dir=write_scenarios(sc)), sc, stream=stream)
    assert sum(len(t.calls) for t in turns) == 36 and turns[-1].calls
    values = [json.loads(t.calls[0][2])["values"] for t in turns[:4]]
    assert values == ["[0.5, 0.25, 0.25]", [0, 0, 0], ["", "", ""], ["", "", ""]]
    assert json.loads(turns[2].calls[0][2])["base"] == ""


def test_repeated_ids_across_turns(sim_url, write_scenarios):
    sc = chain_scenario()
    turns = play(sim_url("repeated-ids", scenarios_dir=write_scenarios(sc)), sc)
    assert len(turns) == 4, "the conversation still completes"
    assert len({t.calls[0][0] for t in turns[:3]}) == 1


def test_reasoning_leak_into_arguments(sim_url, write_scenarios):
    prof = dataclasses.replace(
        get_profile("healthy"), reasoning=True, faults=(Fault("reasoning_leak_args"),)
    )
    sc = entropy_scenario()
    turn = ask(
        client_for(sim_url(prof, scenarios_dir=write_scenarios(sc))),
        opening(sc),
        tools=openai_tools(sc),
    )
    assert turn.calls[0][2].startswith("<think>") and turn.calls[0][2].endswith(COMPACT)


def test_fault_rate_and_start_turn(sim_url, write_scenarios):
    sc = chain_scenario()
    prof = dataclasses.replace(
        get_profile("healthy"), faults=(Fault("container_as_string", rate=0.5, start_turn=1),)
    )
    url = sim_url(prof, scenarios_dir=write_scenarios(sc))
    runs = [play(url, sc, temperature=0.5, seed=s, max_turns=2) for s in range(12)]
    assert all(r[0].args() == ENTROPY_ARGS for r in runs), "nothing before start_turn"
    hit = [isinstance(r[1].args()["values"], str) for r in runs]
    assert 0 < sum(hit) < len(hit)
    again = [
        isinstance(play(url, sc, temperature=0.5, seed=s, max_turns=2)[1].args()["values"], str)
        for s in range(12)
    ]
    assert again == hit, "fault draws are deterministic under the seed"


def test_fault_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("nope")  # type: ignore[arg-type]


# ------------------------------------------------------------------ infrastructure


def test_http_500(sim_url):
    url = sim_url("http-500")
    with pytest.raises(openai.InternalServerError):
        ask(client_for(url), [{"role": "user", "content": "hi"}])


def test_flaky_500_fails_first_try_only(sim_url):
    url = sim_url("flaky-500")
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError):
        ask(client_for(url), msgs)
    assert ask(client_for(url), msgs).content
    other = [{"role": "user", "content": "hello"}]
    assert ask(client_for(url, max_retries=2), other).content, "the SDK's retry gets through"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_invalid_json_body(sim_url, stream):
    url = sim_url("invalid-json")
    with pytest.raises((openai.APIError, json.JSONDecodeError)):
        ask(client_for(url), [{"role": "user", "content": "hi"}], stream=stream)


def test_no_choices(sim_url):
    r = client_for(sim_url("no-choices")).chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "hi"}]
    )
    assert r.choices == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_http_400_refuses_every_post(sim_url, stream):
    url = sim_url("http-400")
    with pytest.raises(openai.BadRequestError, match="simulated refusal"):
        ask(client_for(url, max_retries=2), [{"role": "user", "content": "hi"}], stream=stream)
    resp = httpx.post(f"{url}/v1/completions", json={"model": "sim", "prompt": "hi"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == 400
    assert httpx.get(f"{url}/health").status_code == 200  # GETs are answered
    stats = fetch_stats(url)  # the SDK does not retry a 400
    assert stats.requests == stats.faults_served == 2


def test_slow_times_out(sim_url):
    url = sim_url(dataclasses.replace(get_profile("slow"), delay_s=0.6))
    with pytest.raises(openai.APITimeoutError):
        ask(client_for(url, timeout=0.15), [{"role": "user", "content": "hi"}])


def test_finish_reason_mismatch_on_final_answer(sim_url, write_scenarios):
    sc = entropy_scenario()
    turns = play(sim_url("finish-reason-mismatch", scenarios_dir=write_scenarios(sc)), sc)
    assert [t.finish_reason for t in turns] == ["stop", "tool_calls"]
    assert turns[-1].calls == [] and "1.5" in turns[-1].content


def test_capture_crash_refuses_to_serve():
    from harness.sim.server import SimBootCrash, serve_in_thread

    with (
        pytest.raises(SimBootCrash, match="RuntimeError"),
        serve_in_thread("capture-crash", capture=True, scenarios_dir=None),
    ):
        pass  # pragma: no cover
    with serve_in_thread("capture-crash", capture=False, scenarios_dir=None) as url:
        assert url.startswith("http://127.0.0.1:")


# ------------------------------------------------- wire shapes read raw (no SDK in between)


def _raw(url: str, sc: dict, *, stream: bool, messages: list | None = None) -> dict:
    """One chat request with httpx: the ``message`` as sent (streaming: the deltas merged
    by key, ``tool_calls`` deltas kept as a list) and ``finish_reason``."""
    body = {"model": "sim", "messages": messages or opening(sc), "tools": openai_tools(sc)}
    resp = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": stream})
    resp.raise_for_status()
    if not stream:
        choice = resp.json()["choices"][0]
        return {**choice["message"], "finish_reason": choice["finish_reason"]}
    out: dict = {"content": "", "tool_calls": [], "finish_reason": None}
    for line in resp.text.splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            delta = choice["delta"]
            out["content"] += delta.get("content") or ""
            out["tool_calls"] += delta.get("tool_calls") or []
            out["finish_reason"] = choice["finish_reason"] or out["finish_reason"]
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_missing_call_id_sends_calls_without_id(sim_url, write_scenarios, stream):
    sc = entropy_scenario()
    url = sim_url("missing-call-id", scenarios_dir=write_scenarios(sc))
    msg = _raw(url, sc, stream=stream)
    assert msg["finish_reason"] == "tool_calls" and msg["tool_calls"]
    assert all("id" not in tc for tc in msg["tool_calls"]), msg["tool_calls"]
    sent = "".join(tc["function"].get("arguments") or "" for tc in msg["tool_calls"])
    assert json.loads(sent) == ENTROPY_ARGS
    # answered under an id of the client's own, the scenario plays on to its answer
    call = {"id": "mine_0", "type": "function", "function": {"name": "entropy", "arguments": sent}}
    history = [
        *opening(sc),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "mine_0", "content": '{"entropy": 1.5}'},
    ]
    final = _raw(url, sc, stream=stream, messages=history)
    assert final["finish_reason"] == "stop" and "1.5" in final["content"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_object_not_string_sends_arguments_as_an_object(sim_url, write_scenarios, stream):
    sc = entropy_scenario()
    url = sim_url("object-not-string", scenarios_dir=write_scenarios(sc))
    msg = _raw(url, sc, stream=stream)
    args = [tc["function"]["arguments"] for tc in msg["tool_calls"] if "function" in tc]
    assert args == [ENTROPY_ARGS], msg  # streaming: the whole object in one delta
    assert msg["tool_calls"][0]["id"].startswith("call_")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_empty_stop_answers_nothing(sim_url, write_scenarios, stream):
    sc = entropy_scenario()
    url = sim_url("empty-stop", scenarios_dir=write_scenarios(sc))
    msg = _raw(url, sc, stream=stream)
    assert msg["content"] == "" and not msg.get("tool_calls")
    assert msg["finish_reason"] == "stop"
    sdk = ask(client_for(url), opening(sc), stream=stream, tools=openai_tools(sc))
    assert sdk.calls == [] and not sdk.content and sdk.finish_reason == "stop"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_connection_drop_closes_mid_body(sim_url, stream):
    url = sim_url("connection-drop")
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    seen = _Records()
    logging.getLogger("uvicorn.error").addHandler(seen)
    try:
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete|without sending complete"):
            httpx.post(f"{url}/v1/chat/completions", json=body)
        with pytest.raises(openai.APIConnectionError):
            ask(client_for(url), body["messages"], stream=stream)
    finally:
        logging.getLogger("uvicorn.error").removeHandler(seen)
    assert seen.records == []  # the deliberate drop is not logged as a server error
    assert httpx.get(f"{url}/health").status_code == 200  # still serving
    stats = fetch_stats(url)
    assert stats.requests == stats.faults_served == 2 and stats.in_flight == 0


# ------------------------------------------------------------------ GET /sim/stats


def test_stats_count_requests_and_keep_recent_bodies(sim_url):
    url = sim_url("healthy")
    assert fetch_stats(url) == SimStats()
    for i in range(RECENT_REQUESTS + 3):
        ask(client_for(url), [{"role": "user", "content": f"hi {i}"}])
    httpx.get(f"{url}/v1/models")  # GETs are not counted
    stats = fetch_stats(url + "/v1")  # the OpenAI base URL works too
    assert stats.requests == RECENT_REQUESTS + 3 and stats.faults_served == 0
    assert len(stats.recent) == RECENT_REQUESTS
    first, last = stats.recent[0], stats.recent[-1]
    assert first.path == "/v1/chat/completions"
    assert first.body["messages"][0]["content"] == "hi 3"  # the oldest three dropped
    assert last.body["messages"][0]["content"] == f"hi {RECENT_REQUESTS + 2}"


def test_stats_max_in_flight_under_latency(sim_url):
    url = sim_url("healthy", latency_ms=300)
    msgs = [{"role": "user", "content": "hi"}]
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(lambda _: ask(client_for(url), msgs), range(3)))
    stats = fetch_stats(url)
    assert (stats.requests, stats.max_in_flight, stats.in_flight) == (3, 3, 0)


def test_stats_count_the_faults_served(sim_url):
    url = sim_url("http-500")
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            ask(client_for(url), [{"role": "user", "content": "hi"}])
    assert fetch_stats(url).faults_served == 2
    slow = sim_url(dataclasses.replace(get_profile("slow"), delay_s=0.01))
    ask(client_for(slow), [{"role": "user", "content": "hi"}])
    assert fetch_stats(slow).faults_served == 0  # a delay is not a fault answer


# ------------------------------------------------- the profiles show their failure kinds


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("profile", ["missing-call-id", "object-not-string", "empty-stop"])
def test_new_model_faults_are_scored_as_their_kind(
    sim_url, write_scenarios, tmp_path, profile, stream
):
    from harness.client.target import TargetConfig
    from harness.runner import run_many_sync
    from harness.scenario.model import load_scenarios
    from harness.scoring.score import score_run

    folder = write_scenarios(entropy_scenario())
    (rec,) = run_many_sync(
        load_scenarios([folder]),
        [TargetConfig(sim_url(profile, scenarios_dir=folder), label=profile)],
        repeats=1,
        stream=stream,
        out_dir=tmp_path,
        progress=False,
    )
    kind = {
        "missing-call-id": FailureKind.MISSING_CALL_ID,
        "object-not-string": FailureKind.OBJECT_NOT_STRING,
        "empty-stop": FailureKind.MISSING_FINAL_ANSWER,
    }[profile]
    score = score_run(rec)
    assert not score.passed and kind.value in score.failures, score.failures
    assert (rec.stop_reason == "empty_stop") is (profile == "empty-stop")


def test_new_profiles_are_documented_and_listed():
    from harness.sim import profiles

    for name in (
        "missing-call-id", "object-not-string", "empty-stop", "connection-drop", "http-400"
    ):  # fmt: skip
        assert f"``{name}``" in (profiles.__doc__ or ""), name
        assert get_profile(name).description
    assert get_profile("connection-drop").infra == "connection-drop"
    assert get_profile("http-400").infra == "http-400"
    assert "``gsm8k_faults``" in (profiles.__doc__ or "")
    kinds = {get_profile(n).faults[0].kind for n in ("missing-call-id", "object-not-string")}
    assert kinds == {FailureKind.MISSING_CALL_ID.value, FailureKind.OBJECT_NOT_STRING.value}


# ------------------------------------------------- GSM8K: per-question faults, stats, data


def _gsm8k_file(folder: Path) -> Path:
    """Three GSM8K questions (indices 0, 1, 2) in a jsonl under ``folder``."""
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"}
            for i in range(3)]  # fmt: skip
    path = folder / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _complete(url: str, i: int, **kw) -> httpx.Response:
    prompt = f"Question: What is {i} + {i}?\nAnswer:"
    return httpx.post(f"{url}/v1/completions", json={"model": "sim", "prompt": prompt, **kw})


def test_gsm8k_faults_answer_only_their_question(sim_url, tmp_path):
    faults = {1: "http-500", 2: "invalid-json"}
    url = sim_url("healthy", gsm8k_path=_gsm8k_file(tmp_path), gsm8k_faults=faults)
    ok = _complete(url, 0)
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"].strip()
    for _ in range(2):  # every time it is asked, not only the first
        assert _complete(url, 1).status_code == 500
    garbage = _complete(url, 2)
    assert garbage.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        garbage.json()
    with pytest.raises(openai.InternalServerError):  # the chat endpoint too
        ask(client_for(url), [{"role": "user", "content": "Question: What is 1 + 1?\nAnswer:"}])
    httpx.post(f"{url}/v1/completions", json={"model": "sim", "prompt": "Hello"})  # no question
    stats = fetch_stats(url)
    assert stats.gsm8k_questions == {0: 1, 1: 3, 2: 1} and stats.faults_served == 4
    assert stats.paths == {"/v1/completions": 5, "/v1/chat/completions": 1}
    assert sum(stats.paths.values()) == stats.requests


def test_gsm8k_faults_override_the_profile_fault(sim_url, tmp_path):
    url = sim_url("flaky-500", gsm8k_path=_gsm8k_file(tmp_path), gsm8k_faults={0: "http-400"})
    assert [_complete(url, 0).status_code for _ in range(2)] == [400, 400]
    assert [_complete(url, 1).status_code for _ in range(2)] == [500, 200]  # the profile's


def test_gsm8k_fault_slow_delays_its_question_only(sim_url, tmp_path):
    profile = dataclasses.replace(get_profile("healthy"), delay_s=0.4)
    url = sim_url(profile, gsm8k_path=_gsm8k_file(tmp_path), gsm8k_faults={0: "slow"})
    durations = {}
    for i in (0, 1):
        start = time.monotonic()
        assert _complete(url, i).status_code == 200
        durations[i] = time.monotonic() - start
    assert durations[0] >= 0.4 > durations[1]
    assert fetch_stats(url).faults_served == 0  # a delay is not a fault answer


def test_gsm8k_faults_refuse_unknown_names(tmp_path):
    from harness.errors import OptionValueError
    from harness.sim.app import create_app
    from harness.sim.profiles import INFRA_FAULTS, gsm8k_fault

    with pytest.raises(OptionValueError, match="unknown infrastructure fault 'nope'"):
        create_app(scenarios_dir=None, gsm8k_faults={0: "nope"})
    assert gsm8k_fault("7=http-500") == (7, "http-500")
    assert gsm8k_fault(" 0 = slow") == (0, "slow")
    for bad in ("7", "x=http-500", "-1=http-500", "7=http-501"):
        with pytest.raises(OptionValueError, match="INDEX=FAULT|unknown infrastructure"):
            gsm8k_fault(bad)
    assert "http-400" in INFRA_FAULTS


def test_gsm8k_data_file_is_served(sim_url, tmp_path, monkeypatch):
    from harness.gsm8k.data import GSM8KDataError, load_dataset
    from harness.sim.app import GSM8K_DATA_PATH

    data = _gsm8k_file(tmp_path)
    url = sim_url(gsm8k_path=data) + GSM8K_DATA_PATH
    resp = httpx.get(url)
    assert resp.status_code == 200 and resp.content == data.read_bytes()
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(GSM8KDataError, match="sha256"):  # downloaded, not the official split
        load_dataset(url=url)
    missing = httpx.get(sim_url(gsm8k_path=tmp_path / "absent.jsonl") + GSM8K_DATA_PATH)
    assert missing.status_code == 404 and "--gsm8k" in missing.json()["error"]["message"]
