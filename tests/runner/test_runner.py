"""The agent loop over real HTTP (127.0.0.1): healthy runs, stops, and infrastructure errors.

The server is the reference server (``harness.sim``, the ``sim_url`` fixture) playing the
repository's scenarios, one profile per behaviour, so every fault is a real HTTP exchange
the openai SDK sees; what the server received is read back from ``GET /sim/stats``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.client.target import TargetConfig, make_client, openai_base_url, server_root
from harness.runfolder import RunFolder
from harness.runner import SamplingPolicy, run_many, run_many_sync, run_scenario, run_seed
from harness.scenario.model import Scenario, load_scenarios
from harness.sim.app import MODEL_NAME
from harness.sim.profiles import SimProfile, get_profile
from harness.sim.stats import fetch_stats
from harness.transcript import RunRecord

REPO = Path(__file__).resolve().parents[2]
SCENARIOS_DIR = REPO / "scenarios"
SCENARIOS = {s.id: s for s in load_scenarios([SCENARIOS_DIR])}
PIPELINE = SCENARIOS["sensor_entropy_pipeline"]
STARTERS = ["sensor_entropy_pipeline", "entropy_followups", "no_params_tool", "numeric_string_ids"]
#: a server that answers after the client's 0.5 s timeout (the ``slow`` profile, shorter)
HANG = dataclasses.replace(get_profile("slow"), delay_s=1.0)


@pytest.fixture(scope="module")
def starters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenarios these tests play, alone (a server indexes them faster than all)."""
    folder = tmp_path_factory.mktemp("starters")
    for name in STARTERS:
        shutil.copy(SCENARIOS_DIR / f"{name}.yaml", folder)
    return folder


@pytest.fixture
def sim(sim_url: Callable[..., str], starters: Path) -> Callable[..., str]:
    """``sim(profile="healthy", **kw) -> base URL``: a reference server playing the
    starter scenarios (``kw``: ``sim_url``'s, e.g. ``latency_ms``)."""

    def start(profile: str | SimProfile = "healthy", **kw: Any) -> str:
        return sim_url(profile, scenarios_dir=starters, **kw)

    return start


def target(url: str, label: str = "sim", **kw: Any) -> TargetConfig:
    kw = {"timeout_s": 5.0, "max_retries": 1, "backoff_s": 0.01, **kw}
    return TargetConfig(base_url=url, label=label, **kw)


def run_one(sc: Scenario, tgt: TargetConfig, *, stream: bool, repeat: int = 0) -> RunRecord:
    async def go() -> RunRecord:
        client = make_client(tgt)
        try:
            return await run_scenario(sc, tgt, repeat=repeat, stream=stream, client=client)
        finally:
            await client.close()

    return asyncio.run(go())


def received(url: str) -> list[dict[str, Any]]:
    """The chat request bodies the server at ``url`` received, oldest first."""
    return [r.body for r in fetch_stats(url).recent if r.path == "/v1/chat/completions"]


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
def test_healthy_pipeline_reaches_final_answer(sim: Callable[..., str], stream: bool) -> None:
    rec = run_one(PIPELINE, target(sim()), stream=stream)
    assert rec.stop_reason == "final_answer"
    assert rec.error is None
    assert "1.5" in (rec.final_content or "")
    calls = [c for _, c in rec.all_tool_calls()]
    assert [c.name for c in calls] == ["get_sensor_readings", "normalize", "compute_entropy"]
    # raw argument strings exactly as the server sent them (its compact JSON kept)
    assert calls[2].arguments == '{"values":[0.5,0.25,0.25],"base":2}'
    results = [r.content for t in rec.turns for r in t.tool_results]
    assert results == [
        '{"counts":[2,1,1],"sensor_id":"S-17","unit":"events"}',
        '{"values":[0.5,0.25,0.25]}',
        '{"base":2,"entropy":1.5}',
    ]
    assert len(rec.turns) == 4 and all(t.response.stream is stream for t in rec.turns)
    usages = [t.response.usage for t in rec.turns if t.response]
    assert all(
        u and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages
    )
    prompts = [u["prompt_tokens"] for u in usages if u]
    assert len(prompts) == 4 and prompts == sorted(prompts) and prompts[0] < prompts[-1]
    raw = rec.turns[-1].response.raw
    if stream:  # usage from the include_usage chunk (choices: []) that ends the stream
        assert raw[-1]["choices"] == [] and raw[-1]["usage"] == usages[-1]
    else:
        assert raw["object"] == "chat.completion" and raw["usage"] == usages[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_request_messages_pair_tool_results_with_call_ids(
    sim: Callable[..., str], stream: bool
) -> None:
    url = sim()
    rec = run_one(PIPELINE, target(url), stream=stream)
    msgs = rec.request_messages(3)  # the full request of the last turn
    assert [m["role"] for m in msgs] == ["system", "user"] + ["assistant", "tool"] * 3
    for a, t in zip(msgs[2::2], msgs[3::2], strict=True):
        assert a["tool_calls"][0]["id"] == t["tool_call_id"]
    # what the server received at the last turn is exactly what the record rebuilds
    sent = [b for b in received(url) if len(b["messages"]) == 8]
    assert len(sent) == 1
    assert sent[0]["messages"] == msgs
    assert sent[0]["stream"] is stream
    assert ("stream_options" in sent[0]) is stream
    assert sent[0]["model"] == "default"  # run_scenario without target info or --model


def test_followups_continue_the_conversation(sim: Callable[..., str]) -> None:
    rec = run_one(SCENARIOS["entropy_followups"], target(sim()), stream=False)
    assert rec.stop_reason == "final_answer"
    assert [t.segment for t in rec.turns] == [0, 0, 1, 1, 2, 2]
    users = [m["content"] for m in rec.request_messages(5) if m["role"] == "user"]
    assert users[1:] == [f.user for f in SCENARIOS["entropy_followups"].followups]
    assert "0.325" in (rec.final_content or "")


@pytest.mark.parametrize(
    ("profile", "max_tokens", "stop", "turns"),
    [
        ("repeat-loop", None, "turn_cap", 12),
        ("healthy", 3, "length", 1),  # the request's max_tokens cuts the first call short
        ("empty-stop", None, "empty_stop", 1),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_model_stops(
    sim: Callable[..., str],
    profile: str,
    max_tokens: int | None,
    stop: str,
    turns: int,
    stream: bool,
) -> None:
    sc = PIPELINE.model_copy(deep=True)
    sc.sampling.max_tokens = max_tokens
    rec = run_one(sc, target(sim(profile)), stream=stream)
    assert rec.stop_reason == stop
    assert rec.error is None
    assert len(rec.turns) == turns
    last = rec.turns[-1].response
    assert last is not None
    if profile == "repeat-loop":  # 12 requests, 12 calls (the 3 steps cycling), each answered
        assert sum(1 for _ in rec.all_tool_calls()) == 12
        assert all(len(t.tool_results) == 1 for t in rec.turns)
        assert [c.name for _, c in rec.all_tool_calls()][3:6] == [
            "get_sensor_readings",
            "normalize",
            "compute_entropy",
        ]
    if stop == "length":
        assert last.finish_reason == "length" and not rec.turns[-1].tool_results
    if stop == "empty_stop":
        assert last.content == "" and last.tool_calls == [] and last.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_calls_without_id_are_answered_under_a_synthetic_id(
    sim: Callable[..., str], stream: bool
) -> None:
    rec = run_one(SCENARIOS["no_params_tool"], target(sim("missing-call-id")), stream=stream)
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
def test_object_arguments_are_recorded_as_objects(sim: Callable[..., str], stream: bool) -> None:
    url = sim("object-not-string")
    rec = run_one(SCENARIOS["numeric_string_ids"], target(url), stream=stream)
    assert rec.stop_reason == "final_answer"
    args = [c.arguments for _, c in rec.all_tool_calls()]
    assert args == [{"order_id": "123_456"}, {"order_id": "007"}]
    echoed = rec.turns[1].new_messages[0]["tool_calls"][0]["function"]["arguments"]
    assert echoed == '{"order_id":"123_456"}'  # sent back as a string
    assert received(url)[1]["messages"][-2]["tool_calls"][0]["function"]["arguments"] == echoed


def test_sampling_seed_per_repeat_and_extra_body_pass_through(sim: Callable[..., str]) -> None:
    url = sim()
    sc = PIPELINE.model_copy(deep=True)
    sc.sampling.seed = 5
    sc.sampling.top_p = 0.9
    sc.extra_body = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 1}
    sc.tool_choice, sc.parallel_tool_calls = "auto", False
    tgt = target(url, extra_body={"top_k": 20}, model="m1")
    recs = [run_one(sc, tgt, stream=False, repeat=r) for r in (0, 1)]
    assert [r.sampling["seed"] for r in recs] == [5, 6]
    sent = received(url)
    assert len(sent) == 8 and [b["seed"] for b in sent] == [5] * 4 + [6] * 4
    body = sent[0]
    assert body["top_k"] == 20  # the target's extra_body wins over the scenario's
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["top_p"] == 0.9 and body["temperature"] == 0.0 and body["model"] == "m1"
    assert (body["tool_choice"], body["parallel_tool_calls"]) == ("auto", False)
    assert [t["function"]["name"] for t in body["tools"]] == [t.name for t in sc.tools]
    assert recs[0].turns[0].request_params["extra_body"]["top_k"] == 20


def test_tool_choice_after_result_switches_once_a_result_is_sent(sim: Callable[..., str]) -> None:
    """``required`` then ``auto``: the first request forces a call, the ones after a tool
    result let the model answer (what the reference server received, over a socket)."""
    url = sim()
    sc = PIPELINE.model_copy(deep=True)
    sc.tool_choice, sc.tool_choice_after_result = "required", "auto"
    rec = run_one(sc, target(url), stream=False, repeat=0)
    sent = received(url)
    assert len(sent) >= 2
    assert sent[0]["tool_choice"] == "required"
    for body in sent[1:]:
        assert any(m["role"] == "tool" for m in body["messages"])
        assert body["tool_choice"] == "auto"
    assert [t.request_params["tool_choice"] for t in rec.turns] == [b["tool_choice"] for b in sent]
    assert rec.stop_reason == "final_answer"


@pytest.mark.parametrize("stream", [False, True])
def test_transient_500_is_retried(sim: Callable[..., str], stream: bool) -> None:
    url = sim("flaky-500")
    rec = run_one(PIPELINE, target(url, max_retries=2), stream=stream)
    assert rec.stop_reason == "final_answer" and len(rec.turns) == 4
    stats = fetch_stats(url)
    assert stats.faults_served == 1  # the first try of the first request
    assert stats.requests == 4 + 1  # one request per turn, and the retry
    first, retry = received(url)[:2]
    assert first == retry


#: profile -> (kind, status, attempts with max_retries=1, answered by the fault)
INFRA: dict[str, tuple[str, int | None, int, bool]] = {
    "http-500": ("http_status", 500, 2, True),
    "slow": ("timeout", None, 2, False),  # HANG: answers after the timeout
    "connection-drop": ("connection", None, 2, True),
    "invalid-json": ("invalid_body", None, 2, True),  # streaming: an event that is not JSON
    "no-choices": (
        "invalid_body",
        None,
        2,
        True,
    ),  # garbage is retried too (docs/misbehaving-servers.md)
}


def test_infra_errors_are_recorded_and_other_runs_complete(
    sim: Callable[..., str], tmp_path: Path
) -> None:
    urls = {p: sim(HANG if p == "slow" else p) for p in ["healthy", *INFRA]}
    # only the hanging server must meet the 0.5 s deadline; the others get room to answer
    # on a loaded machine (a 0.5 s deadline once turned an invalid body into a timeout)
    targets = [target(url, label, timeout_s=0.5 if label == "slow" else 5.0)
               for label, url in urls.items()]  # fmt: skip
    recs = run_many_sync(
        [PIPELINE], targets, repeats=2, stream="both", out_dir=tmp_path, progress=False
    )
    assert len(recs) == 2 * 2 * len(urls)  # repeats x stream modes x servers
    on_disk = {r.run_key: r for r in RunFolder(tmp_path).records()}
    assert set(on_disk) == {r.run_key for r in recs}
    for rec in on_disk.values():
        profile = rec.target.label
        if profile == "healthy":
            assert rec.stop_reason == "final_answer" and rec.error is None
            continue
        kind, status, attempts, _ = INFRA[profile]
        assert rec.stop_reason == "error", profile
        assert rec.error is not None and rec.error.kind == kind, (profile, rec.error)
        assert (rec.error.status, rec.error.attempts, rec.error.turn) == (status, attempts, 0)
        assert rec.turns[0].error == rec.error
        assert rec.turns[0].request_params["stream"] is rec.stream
    for profile, (_, _, attempts, faulted) in INFRA.items():
        stats = fetch_stats(urls[profile])  # every attempt reached the server
        assert stats.requests == 2 * 2 * attempts, profile
        assert stats.faults_served == (stats.requests if faulted else 0), profile


def test_run_many_resumes_and_records_target_info(sim: Callable[..., str], tmp_path: Path) -> None:
    url = sim()
    folder = RunFolder.create("run", results=tmp_path, run_id="r1")
    scs = [SCENARIOS["no_params_tool"], SCENARIOS["numeric_string_ids"]]
    tgt = target(url)
    first = run_many_sync(scs[:1], [tgt], repeats=2, stream="both", out_dir=folder, progress=False)
    assert sorted(r.run_key for r in first) == [
        "sim/no_params_tool/0/nostream",
        "sim/no_params_tool/0/stream",
        "sim/no_params_tool/1/nostream",
        "sim/no_params_tool/1/stream",
    ]
    again = run_many_sync(scs, [tgt], repeats=2, stream="both", out_dir=folder, progress=False)
    assert {r.scenario_id for r in again} == {"numeric_string_ids"}
    records = list(folder.records())
    keys = [r.run_key for r in records]
    assert len(keys) == len(set(keys)) == 8
    manifest = folder.manifest()
    assert manifest is not None
    assert [(t.label, t.model) for t in manifest.targets] == [("sim", MODEL_NAME)]
    assert manifest.targets[0].models["data"][0]["id"] == MODEL_NAME
    assert all(r.target.model == MODEL_NAME for r in again)
    sent = received(url)
    assert len(sent) == sum(len(r.turns) for r in records)  # finished runs were not redone
    assert {b["model"] for b in sent} == {MODEL_NAME}  # resolved from GET /v1/models


def test_concurrency_limits_requests_in_flight(sim: Callable[..., str], tmp_path: Path) -> None:
    url = sim(latency_ms=200)
    recs = asyncio.run(
        run_many(
            [SCENARIOS["no_params_tool"]],
            [target(url)],
            repeats=6,
            concurrency=2,
            out_dir=tmp_path,
            progress=False,
        )
    )
    assert all(r.stop_reason == "final_answer" for r in recs)
    stats = fetch_stats(url)
    assert stats.requests == 6 * 2  # a call, then the answer
    assert stats.max_in_flight == 2  # runs overlap, but never more than --concurrency
    assert stats.in_flight == 0
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
    sim: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
            scs, [target(sim())], repeats=1, out_dir=tmp_path, progress=False
        )  # fmt: skip
    }
    bad = recs["numeric_string_ids"]
    assert bad.stop_reason == "error" and bad.error is not None
    assert bad.error.kind == "other" and "simulator bug" in bad.error.message
    assert recs["no_params_tool"].stop_reason == "final_answer"


def test_sampling_policy_sets_temperature_and_a_seed_per_run(
    sim: Callable[..., str], tmp_path: Path
) -> None:
    """``--temperature``/``--sampling-seed``: every run of every side gets its own request
    seed (recorded), the scenario's own temperature wins over the command's."""
    url = sim()
    own = PIPELINE.model_copy(deep=True, update={"id": "own_temperature"})
    own.sampling.temperature = 0.0  # the scenario sets its own: kept
    free = PIPELINE.model_copy(deep=True, update={"id": "free"})
    free.sampling = type(free.sampling)()  # sets nothing: the command's temperature
    base = dataclasses.replace(target(url), side="baseline")
    cand = dataclasses.replace(target(url), side="candidate")
    recs = run_many_sync(
        [own, free], [base, cand], repeats=2, out_dir=tmp_path / "r", progress=False,
        sampling=SamplingPolicy(temperature=0.7, seed=3),
    )  # fmt: skip
    by = {r.run_key: r for r in recs}
    assert {by[k].sampling["temperature"] for k in by if "/free/" in k} == {0.7}
    assert {by[k].sampling["temperature"] for k in by if "/own_temperature/" in k} == {0.0}
    seeds = [r.sampling["seed"] for r in recs]
    assert len(set(seeds)) == len(recs) == 8  # one seed per run, sides differ
    r = by["candidate/free/1/nostream"]
    assert r.sampling["seed"] == run_seed(3, "candidate", "free", 1)
    sent = [b for b in received(url) if b.get("seed") == r.sampling["seed"]]
    assert sent and all(b["temperature"] == 0.7 for b in sent)
