"""The agent loop over real HTTP (127.0.0.1): healthy runs, stops, and infrastructure errors.

The server is tests/runner_fault_server.py (uvicorn in a thread), one behaviour per URL
prefix, so every fault is a real HTTP exchange the openai SDK sees.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.client.target import TargetConfig, make_client, openai_base_url, server_root
from harness.runfolder import RunFolder
from harness.runner import run_many, run_many_sync, run_scenario
from harness.scenario.model import Scenario, load_scenarios
from harness.transcript import RunRecord
from tests.runner_fault_server import FaultServer, serve

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = {s.id: s for s in load_scenarios([REPO / "scenarios"])}
PIPELINE = SCENARIOS["sensor_entropy_pipeline"]


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with serve(list(SCENARIOS.values()), hang_s=2.0) as srv:
        yield srv


def target(srv: FaultServer, mode: str, **kw: Any) -> TargetConfig:
    kw = {"timeout_s": 5.0, "max_retries": 1, "backoff_s": 0.01, **kw}
    return TargetConfig(base_url=srv.url(mode), label=mode, **kw)


def run_one(sc: Scenario, tgt: TargetConfig, *, stream: bool, repeat: int = 0) -> RunRecord:
    async def go() -> RunRecord:
        client = make_client(tgt)
        try:
            return await run_scenario(sc, tgt, repeat=repeat, stream=stream, client=client)
        finally:
            await client.close()

    return asyncio.run(go())


def test_urls() -> None:
    assert openai_base_url("http://h:1") == "http://h:1/v1"
    assert openai_base_url("http://h:1/v1/") == "http://h:1/v1"
    assert server_root("http://h:1/v1") == "http://h:1"
    assert server_root("http://h:1/") == "http://h:1"


def test_retry_delay_doubles_up_to_the_cap() -> None:
    t = TargetConfig("http://h:1", backoff_s=0.5)
    assert [t.retry_delay_s(a) for a in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert t.retry_delay_s(20) == 30.0  # MAX_BACKOFF_S


@pytest.mark.parametrize("stream", [False, True])
def test_healthy_pipeline_reaches_final_answer(server: FaultServer, stream: bool) -> None:
    rec = run_one(PIPELINE, target(server, "ok"), stream=stream)
    assert rec.stop_reason == "final_answer"
    assert rec.error is None
    assert "1.5" in (rec.final_content or "")
    calls = [c for _, c in rec.all_tool_calls()]
    assert [c.name for c in calls] == ["get_sensor_readings", "normalize", "compute_entropy"]
    # raw argument strings exactly as the server sent them (json.dumps spacing kept)
    assert calls[2].arguments == '{"values": [0.5, 0.25, 0.25], "base": 2}'
    results = [r.content for t in rec.turns for r in t.tool_results]
    assert results == [
        '{"counts":[2,1,1],"sensor_id":"S-17","unit":"events"}',
        '{"values":[0.5,0.25,0.25]}',
        '{"base":2,"entropy":1.5}',
    ]
    assert len(rec.turns) == 4 and all(t.response.stream is stream for t in rec.turns)
    assert rec.turns[-1].response.usage == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
    }
    raw = rec.turns[0].response.raw
    assert isinstance(raw, list) if stream else raw["object"] == "chat.completion"


@pytest.mark.parametrize("stream", [False, True])
def test_request_messages_pair_tool_results_with_call_ids(
    server: FaultServer, stream: bool
) -> None:
    rec = run_one(PIPELINE, target(server, "ok"), stream=stream)
    msgs = rec.request_messages(3)  # the full request of the last turn
    assert [m["role"] for m in msgs] == ["system", "user"] + ["assistant", "tool"] * 3
    for a, t in zip(msgs[2::2], msgs[3::2], strict=True):
        assert a["tool_calls"][0]["id"] == t["tool_call_id"]
    # what the server received at the last turn is exactly what the record rebuilds
    sent = [b for m, b in server.requests if m == "ok" and len(b["messages"]) == 8][-1]
    assert sent["messages"] == msgs
    assert sent["stream"] is stream
    assert ("stream_options" in sent) is stream
    assert sent["model"] == "default"  # run_scenario without target info or --model


def test_followups_continue_the_conversation(server: FaultServer) -> None:
    rec = run_one(SCENARIOS["entropy_followups"], target(server, "ok"), stream=False)
    assert rec.stop_reason == "final_answer"
    assert [t.segment for t in rec.turns] == [0, 0, 1, 1, 2, 2]
    users = [m["content"] for m in rec.request_messages(5) if m["role"] == "user"]
    assert users[1:] == [f.user for f in SCENARIOS["entropy_followups"].followups]
    assert "0.325" in (rec.final_content or "")


@pytest.mark.parametrize(
    ("mode", "stop", "turns"),
    [("loop", "turn_cap", 12), ("length", "length", 1), ("empty", "empty_stop", 1)],
)
@pytest.mark.parametrize("stream", [False, True])
def test_model_stops(server: FaultServer, mode: str, stop: str, turns: int, stream: bool) -> None:
    rec = run_one(PIPELINE, target(server, mode), stream=stream)
    assert rec.stop_reason == stop
    assert rec.error is None
    assert len(rec.turns) == turns
    if mode == "loop":  # 12 requests, 12 identical calls, each answered
        assert sum(1 for _ in rec.all_tool_calls()) == 12
        assert all(len(t.tool_results) == 1 for t in rec.turns)


@pytest.mark.parametrize("stream", [False, True])
def test_calls_without_id_are_answered_under_a_synthetic_id(
    server: FaultServer, stream: bool
) -> None:
    rec = run_one(SCENARIOS["no_params_tool"], target(server, "noid"), stream=stream)
    assert rec.stop_reason == "final_answer"
    call = rec.turns[0].response.tool_calls[0]
    assert call.id is None and call.arguments == "{}"
    result = rec.turns[0].tool_results[0]
    assert result.tool_call_id == "synthetic_0_0" and not result.error
    assert rec.turns[1].new_messages[1] == {
        "role": "tool",
        "tool_call_id": "synthetic_0_0",
        "content": '{"utc":"2026-01-15T09:30:00Z","weekday":"Thursday"}',
    }


@pytest.mark.parametrize("stream", [False, True])
def test_object_arguments_are_recorded_as_objects(server: FaultServer, stream: bool) -> None:
    rec = run_one(SCENARIOS["numeric_string_ids"], target(server, "objargs"), stream=stream)
    assert rec.stop_reason == "final_answer"
    args = [c.arguments for _, c in rec.all_tool_calls()]
    assert args == [{"order_id": "123_456"}, {"order_id": "007"}]
    echoed = rec.turns[1].new_messages[0]["tool_calls"][0]["function"]["arguments"]
    assert echoed == '{"order_id":"123_456"}'  # sent back as a string


def test_sampling_seed_per_repeat_and_extra_body_pass_through(server: FaultServer) -> None:
    sc = PIPELINE.model_copy(deep=True)
    sc.sampling.seed = 5
    sc.sampling.top_p = 0.9
    sc.extra_body = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 1}
    sc.tool_choice, sc.parallel_tool_calls = "auto", False
    tgt = target(server, "ok", extra_body={"top_k": 20}, model="m1")
    recs = [run_one(sc, tgt, stream=False, repeat=r) for r in (0, 1)]
    assert [r.sampling["seed"] for r in recs] == [5, 6]
    sent = [b for m, b in server.requests if m == "ok" and b.get("seed") in (5, 6)]
    assert {b["seed"] for b in sent} == {5, 6}
    body = sent[0]
    assert body["top_k"] == 20  # the target's extra_body wins over the scenario's
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["top_p"] == 0.9 and body["temperature"] == 0.0 and body["model"] == "m1"
    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("auto", False)
    assert [t["function"]["name"] for t in body["tools"]] == [t.name for t in sc.tools]
    assert recs[0].turns[0].request_params["extra_body"]["top_k"] == 20


@pytest.mark.parametrize("stream", [False, True])
def test_transient_500_is_retried(server: FaultServer, stream: bool) -> None:
    server.counts.pop("flaky", None)
    rec = run_one(PIPELINE, target(server, "flaky", max_retries=2), stream=stream)
    assert rec.stop_reason == "final_answer"
    assert server.counts["flaky"] == 4 + server.flaky_failures


INFRA = {
    # mode: (kind, status, attempts with max_retries=1)
    "always500": ("http_status", 500, 2),
    "hang": ("timeout", None, 2),
    "drop": ("connection", None, 2),
    "badjson": ("invalid_body", None, 1),
    "nochoices": ("invalid_body", None, 1),
}


@pytest.mark.parametrize("stream", [False, True])
def test_infra_errors_are_recorded_and_other_runs_complete(
    server: FaultServer, tmp_path: Path, stream: bool
) -> None:
    modes = ["ok", *INFRA, "badstream"] if stream else ["ok", *INFRA]
    targets = [target(server, m, timeout_s=0.5) for m in modes]
    recs = run_many_sync(
        [PIPELINE], targets, repeats=2, stream=stream, out_dir=tmp_path, progress=False
    )
    assert len(recs) == 2 * len(modes)
    on_disk = {r.run_key: r for r in RunFolder(tmp_path).records()}
    assert set(on_disk) == {r.run_key for r in recs}
    for rec in on_disk.values():
        mode = rec.target.label
        if mode == "ok":
            assert rec.stop_reason == "final_answer" and rec.error is None
            continue
        kind, status, attempts = INFRA.get(mode, ("invalid_body", None, 1))
        assert rec.stop_reason == "error", mode
        assert rec.error is not None and rec.error.kind == kind, (mode, rec.error)
        assert (rec.error.status, rec.error.attempts, rec.error.turn) == (status, attempts, 0)
        assert rec.turns[0].error == rec.error


def test_run_many_resumes_and_records_target_info(server: FaultServer, tmp_path: Path) -> None:
    folder = RunFolder.create("run", results=tmp_path, run_id="r1")
    scs = [SCENARIOS["no_params_tool"], SCENARIOS["numeric_string_ids"]]
    tgt = target(server, "ok")
    first = run_many_sync(scs[:1], [tgt], repeats=2, stream="both", out_dir=folder, progress=False)
    assert sorted(r.run_key for r in first) == [
        "ok/no_params_tool/0/nostream",
        "ok/no_params_tool/0/stream",
        "ok/no_params_tool/1/nostream",
        "ok/no_params_tool/1/stream",
    ]
    again = run_many_sync(scs, [tgt], repeats=2, stream="both", out_dir=folder, progress=False)
    assert {r.scenario_id for r in again} == {"numeric_string_ids"}
    keys = [r.run_key for r in RunFolder(folder).records()]
    assert len(keys) == len(set(keys)) == 8
    manifest = folder.manifest()
    assert manifest is not None
    assert [(t.label, t.model) for t in manifest.targets] == [("ok", "scripted")]
    assert manifest.targets[0].models["data"][0]["id"] == "scripted"
    assert all(r.target.model == "scripted" for r in again)
    sent_models = {b["model"] for m, b in server.requests if m == "ok" and b.get("seed") is None}
    assert "scripted" in sent_models  # model resolved from GET /v1/models


def test_concurrency_limits_requests_in_flight(server: FaultServer, tmp_path: Path) -> None:
    server.latency_s = 0.2
    server.max_in_flight = 0
    recs = asyncio.run(
        run_many(
            [SCENARIOS["no_params_tool"]],
            [target(server, "slowok")],
            repeats=6,
            concurrency=2,
            out_dir=tmp_path,
            progress=False,
        )
    )
    assert all(r.stop_reason == "final_answer" for r in recs)
    assert server.max_in_flight == 2  # runs overlap, but never more than --concurrency
    lines = (tmp_path / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["stop_reason"] for line in lines)


@pytest.mark.parametrize(
    ("argv", "mode", "paths"),
    [
        ([], False, []),
        (["--stream"], True, []),
        (["--stream", "both"], "both", []),
        (["--stream", "scenarios/a.yaml"], True, ["scenarios/a.yaml"]),
        (["--stream", "scenarios/a.yaml", "b.yaml"], True, ["scenarios/a.yaml", "b.yaml"]),
    ],
)
def test_stream_flag_forms(argv: list[str], mode: object, paths: list[str]) -> None:
    import argparse

    from harness.cli import run as run_cmd
    from harness.cli._common import stream_mode

    p = argparse.ArgumentParser()
    run_cmd.add_arguments(p)
    args = p.parse_args(["--target", "http://x", *argv])
    assert stream_mode(args) == mode
    assert args.scenarios == paths


def test_a_harness_error_ends_only_that_run(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.runner as runner_mod

    real = runner_mod.simulate

    def fragile(tool: Any, raw: Any, index: int) -> Any:
        if tool.name == "lookup_order":
            raise RuntimeError("simulator bug")
        return real(tool, raw, index)

    monkeypatch.setattr(runner_mod, "simulate", fragile)
    scs = [SCENARIOS["numeric_string_ids"], SCENARIOS["no_params_tool"]]
    recs = {
        r.scenario_id: r
        for r in run_many_sync(
            scs, [target(server, "ok")], repeats=1, out_dir=tmp_path, progress=False
        )  # fmt: skip
    }
    bad = recs["numeric_string_ids"]
    assert bad.stop_reason == "error" and bad.error is not None
    assert bad.error.kind == "other" and "simulator bug" in bad.error.message
    assert recs["no_params_tool"].stop_reason == "final_answer"
