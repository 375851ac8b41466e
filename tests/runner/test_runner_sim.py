"""The runner against the reference server (``harness.sim``), healthy profile, both modes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.client import completions
from harness.client.target import TargetConfig
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = load_scenarios([REPO / "scenarios"])
STARTERS = [
    "sensor_entropy_pipeline",
    "entropy_followups",
    "no_params_tool",
    "numeric_string_ids",
]


def test_starter_scenarios_reach_final_answer_on_healthy_sim(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    url = sim_url("healthy", scenarios_dir=REPO / "scenarios")
    scs = [s for s in SCENARIOS if s.id in STARTERS]
    tgt = TargetConfig(base_url=url, label="healthy", timeout_s=10, max_retries=1, backoff_s=0.01)
    recs = run_many_sync(
        scs, [tgt], repeats=1, stream="both", concurrency=4, out_dir=tmp_path, progress=False
    )
    assert len(recs) == 2 * len(STARTERS)
    for rec in RunFolder(tmp_path).records():
        sc = next(s for s in scs if s.id == rec.scenario_id)
        assert rec.stop_reason == "final_answer", (rec.run_key, rec.error)
        sent = [c.arguments for _, c in rec.all_tool_calls()]
        expected = [c.arguments for seg in sc.segments() for c in seg.calls]
        assert [json.loads(a) for a in sent] == expected, rec.run_key
        assert not any(r.error for t in rec.turns for r in t.tool_results), rec.run_key


@pytest.mark.parametrize("stream", [False, True])
def test_fused_regression_sim_loops_to_the_turn_cap(
    sim_url: Callable[..., str], tmp_path: Path, stream: bool
) -> None:
    url = sim_url("fused-regression", scenarios_dir=REPO / "scenarios")
    sc = [s for s in SCENARIOS if s.id == "sensor_entropy_pipeline"]
    tgt = TargetConfig(base_url=url, label="fused", timeout_s=10, max_retries=1, backoff_s=0.01)
    recs = run_many_sync(sc, [tgt], repeats=3, stream=stream, out_dir=tmp_path, progress=False)
    assert not any(r.is_infra_error for r in recs)
    capped = [r for r in recs if r.stop_reason == "turn_cap"]
    assert capped, [r.stop_reason for r in recs]
    for r in capped:  # 12 requests, every one answered with tool calls, each call answered
        assert len(r.turns) == sc[0].max_turns == 12
        assert all(t.response is not None and t.response.tool_calls for t in r.turns)
        assert all(len(t.tool_results) == len(t.response.tool_calls) for t in r.turns)


@pytest.mark.parametrize("profile", ["no-choices", "invalid-json", "http-500"])
@pytest.mark.parametrize("stream", [False, True])
def test_broken_sim_profiles_are_infrastructure_errors(
    sim_url: Callable[..., str], tmp_path: Path, stream: bool, profile: str
) -> None:
    url = sim_url(profile, scenarios_dir=REPO / "scenarios")
    sc = [s for s in SCENARIOS if s.id == "no_params_tool"]
    tgt = TargetConfig(base_url=url, label=profile, timeout_s=10, max_retries=1, backoff_s=0.01)
    (rec,) = run_many_sync(sc, [tgt], repeats=1, stream=stream, out_dir=tmp_path, progress=False)
    assert rec.stop_reason == "error", (rec.stop_reason, rec.turns[-1].response)
    assert rec.error is not None
    assert rec.error.kind == ("http_status" if profile == "http-500" else "invalid_body")


@pytest.mark.parametrize("stream", [False, True])
def test_each_request_is_the_sdk_encoding_of_the_conversation_so_far(
    sim_url: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    # the runner encodes each message once (ConversationBody) and posts the bytes; they
    # must be what the SDK would have sent for the same body (follow-ups, extra_body too)
    sent: list[tuple[bytes | None, bytes]] = []
    post = completions._post

    async def spy(client: Any, params: dict[str, Any], content: bytes | None) -> Any:
        body = completions.request_body(params)
        sdk = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        sent.append((content, sdk.encode()))
        return await post(client, params, content)

    monkeypatch.setattr(completions, "_post", spy)
    url = sim_url("healthy", scenarios_dir=REPO / "scenarios")
    scs = [s for s in SCENARIOS if s.id in STARTERS]
    tgt = TargetConfig(base_url=url, label="h", extra_body={"top_k": 1, "note": "é"})
    recs = run_many_sync(scs, [tgt], repeats=2, stream=stream, out_dir=tmp_path, progress=False)
    assert all(r.stop_reason == "final_answer" for r in recs)
    assert len(sent) == sum(len(r.turns) for r in recs) > len(recs)
    # an SDK without ``content=`` gets ``body=`` and encodes it itself (same bytes)
    fast = completions._POST_TAKES_CONTENT
    assert all(content == (sdk if fast else None) for content, sdk in sent)
    for rec in recs:  # the scenario's hash and JSON, computed once per scenario
        sc = next(s for s in scs if s.id == rec.scenario_id)
        assert (rec.scenario_hash, rec.scenario) == (sc.content_hash(), sc.model_dump(mode="json"))
