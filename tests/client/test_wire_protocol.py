"""The wire-protocol profiles of the reference server, walked end to end over sockets.

Each leak dialect and each streaming-delta fault of :mod:`harness.sim.profiles` is run
through the real runner (streamed and not) on ``scenarios/order_lookup_wire.yaml`` and
``scenarios/order_as_json_answer.yaml``, scored, and must show its failure kind by name;
the healthy profile stays clean in both modes; ``--stream both`` parity shows a server
that leaks only when streaming.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.client.target import TargetConfig
from harness.kinds import FailureKind
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios
from harness.scoring.parity import parity_report
from harness.scoring.score import score_run
from harness.transcript import RunRecord

SCENARIOS = Path(__file__).parents[2] / "scenarios"
WIRE = [SCENARIOS / "order_lookup_wire.yaml", SCENARIOS / "order_as_json_answer.yaml"]
LEAK = FailureKind.TOOL_CALL_IN_CONTENT.value

#: profile -> (kind in streamed runs, kind in non-streamed runs); None = the run passes
EXPECTED: dict[str, tuple[str | None, str | None]] = {
    "healthy": (None, None),
    "tool-call-in-content": (LEAK, LEAK),
    "tool-call-in-content-json-list": (LEAK, LEAK),
    "tool-call-in-content-openai": (LEAK, LEAK),
    "tool-call-in-content-pythonic": (LEAK, LEAK),
    "tool-call-in-content-tokens": (LEAK, LEAK),
    "tool-call-in-content-fenced": (LEAK, LEAK),
    "tool-call-in-content-prose": (LEAK, LEAK),
    "tool-call-in-content-late": (LEAK, LEAK),
    "tool-call-in-content-after-calls": (LEAK, LEAK),
    "tool-call-in-content-stream": (LEAK, None),
    "markup-in-content": ("markup_in_content", "markup_in_content"),
    "missing-call-index": ("missing_call_index", None),
    "shared-call-index": ("shared_call_index", None),
    "index-offset": ("index_offset", None),
    "length-with-tool-calls": ("length_with_tool_calls", "length_with_tool_calls"),
    "repeated-empty-name": (None, None),
}


def _run(sim_url, tmp_path: Path, profile: str, stream: bool | str) -> list[RunRecord]:
    url = sim_url(profile, scenarios_dir=SCENARIOS)
    return run_many_sync(
        load_scenarios(WIRE),
        [TargetConfig(url, label=profile)],
        repeats=1,
        stream=stream,  # type: ignore[arg-type]
        out_dir=tmp_path,
        progress=False,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_each_profile_shows_its_kind(sim_url, tmp_path, profile, stream):
    kind = EXPECTED[profile][0 if stream else 1]
    records = _run(sim_url, tmp_path, profile, stream)
    assert len(records) == 2 and not any(r.is_infra_error for r in records)
    scores = {r.scenario_id: score_run(r) for r in records}
    wire = scores["order_lookup_wire"]
    if kind is None:
        assert all(s.passed for s in scores.values()), {k: s.failures for k, s in scores.items()}
        assert all(s.leaked_calls == [] for s in scores.values())
        return
    assert kind in wire.failures and not wire.passed, wire.failures
    assert wire.termination != "final_answer" or kind != LEAK
    if kind == LEAK:
        leaked = wire.leaked_calls[0]
        assert leaked.tool in ("lookup_order", "track_shipment") and "A-17" in leaked.arguments
        assert "missing_final_answer" in wire.failures  # never accepted as the answer


def test_leak_after_every_expected_call_fails_the_run(sim_url, tmp_path):
    """The call leaks where the answer goes: every expected call made, yet the run fails."""
    (rec,) = [r for r in _run(sim_url, tmp_path, "tool-call-in-content-after-calls", False)
              if r.scenario_id == "order_as_json_answer"]  # fmt: skip
    score = score_run(rec)
    assert score.sequence.missing == [] and score.sequence.matched == 1
    assert not score.final_answer and {LEAK, "missing_final_answer"} <= set(score.failures)
    assert score.leaked_calls[0].turn == 1 and score.termination == "malformed"


def test_late_leak_is_found_in_a_later_turn(sim_url, tmp_path):
    (rec,) = [r for r in _run(sim_url, tmp_path, "tool-call-in-content-late", True)
              if r.scenario_id == "order_lookup_wire"]  # fmt: skip
    score = score_run(rec)
    assert [(x.turn, x.tool, x.arguments) for x in score.leaked_calls] == [
        (1, "track_shipment", '{"order_id": "A-17"}')
    ]
    assert score.sequence.matched == 2  # the turn-0 pair was sent as tool_calls


def test_shared_index_keeps_both_ids(sim_url, tmp_path):
    (rec,) = [r for r in _run(sim_url, tmp_path, "shared-call-index", True)
              if r.scenario_id == "order_lookup_wire"]  # fmt: skip
    calls = rec.turns[0].response.tool_calls  # type: ignore[union-attr]
    assert [c.index for c in calls] == [0, 0] and len({c.id for c in calls}) == 2
    assert [c.arguments for c in calls] == ['{"order_id":"A-17"}', '{"order_id":"B-2"}']


def test_repeated_empty_name_is_a_note_not_a_failure(sim_url, tmp_path):
    records = _run(sim_url, tmp_path, "repeated-empty-name", True)
    rec = next(r for r in records if r.scenario_id == "order_lookup_wire")
    notes = rec.turns[0].response.notes  # type: ignore[union-attr]
    assert notes and all("repeats name ''" in n for n in notes), notes
    assert score_run(rec).passed
    healthy = _run(sim_url, tmp_path / "h", "healthy", True)
    assert all(not t.response.notes for r in healthy for t in r.turns if t.response)


def test_stream_both_parity_shows_a_leak_only_when_streaming(sim_url, tmp_path):
    records = _run(sim_url, tmp_path, "tool-call-in-content-stream", "both")
    diffs = [d for d in parity_report(records) if d.scenario_id == "order_lookup_wire"]
    fields = {d.field for d in diffs}
    assert {"leak", "calls"} <= fields, diffs
    leak = next(d for d in diffs if d.field == "leak")
    assert leak.turn == 0 and "lookup_order" in leak.stream and leak.nostream == "none"
    healthy = _run(sim_url, tmp_path / "h", "healthy", "both")
    assert parity_report(healthy) == []
