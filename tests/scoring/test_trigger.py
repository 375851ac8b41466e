"""``compare --single-turn``: a vendor verifier's figures (harness.scoring.trigger).

The figures are checked against a hand computation on a small fixture of first
responses, then end to end: ``harness compare --single-turn`` against the reference
server writes the same figures to ``verifier.json`` that the transcripts give.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.runfolder import RunFolder
from harness.scenario.model import scenario_from_data
from harness.scoring.trigger import (
    VerifierFigures,
    calls_valid,
    single_turn,
    trigger_agreement,
    verifier_figures,
)
from harness.transcript import ResponseRecord, RunRecord, TargetInfo, ToolCallRecord, TurnRecord
from tests.sim_driver import ADD_TOOL, ENTROPY_TOOL, entropy_scenario

TOOLS = [{"type": "function", "function": f} for f in (ENTROPY_TOOL, ADD_TOOL)]
GOOD = ("entropy", '{"values": [0.5, 0.5]}')
AS_STRING = ("entropy", '{"values": "[0.5, 0.5]"}')  # breaks the schema
NOT_JSON = ("add", '{"a": 1, "b": ')
UNKNOWN = ("subtract", '{"a": 1, "b": 2}')


def record(side: str, scenario: str, finish: str, *calls: tuple[str, str]) -> RunRecord:
    response = ResponseRecord(
        finish_reason=finish,
        content=None if calls else "done",
        tool_calls=[ToolCallRecord(index=i, id=f"c{i}", name=n, arguments=a)
                    for i, (n, a) in enumerate(calls)],
    )  # fmt: skip
    return RunRecord(
        run_key=f"{side}/{scenario}/0/nostream", scenario_id=scenario, scenario_hash="h",
        scenario={}, repeat=0, stream=False, target=TargetInfo(label=side, side=side, base_url="u"),
        tools=TOOLS, turns=[TurnRecord(index=0, response=response)], stop_reason="turn_cap",
    )  # fmt: skip


#: (baseline, candidate) first responses of eight requests
FIXTURE = [
    (("tool_calls", GOOD), ("tool_calls", GOOD)),  # TP, both valid
    (("tool_calls", GOOD), ("tool_calls", AS_STRING)),  # TP, candidate invalid
    (("tool_calls", GOOD), ("tool_calls", GOOD, NOT_JSON)),  # TP, candidate invalid (one call)
    (("tool_calls", GOOD), ("stop",)),  # FN
    (("stop",), ("tool_calls", UNKNOWN)),  # FP, candidate invalid
    (("stop",), ("stop",)),  # TN
    (("length",), ("stop",)),  # TN ("others" count as not triggered)
    (("tool_calls", GOOD), ("tool_calls", GOOD)),  # TP, both valid
]


def fixture_records() -> list[RunRecord]:
    out = []
    for i, (base, cand) in enumerate(FIXTURE):
        out.append(record("baseline", f"s{i}", base[0], *base[1:]))  # type: ignore[arg-type]
        out.append(record("candidate", f"s{i}", cand[0], *cand[1:]))  # type: ignore[arg-type]
    return out


def test_figures_match_a_hand_computation() -> None:
    fig = verifier_figures(fixture_records())
    # by hand: TP 4 (records 0,1,2,7), FP 1 (record 4), FN 1 (record 3), TN 2 (records 5,6)
    t = fig.trigger
    assert (t.tp, t.fp, t.fn, t.tn) == (4, 1, 1, 2)
    assert t.precision == pytest.approx(4 / 5)  # TP / (TP + FP)
    assert t.recall == pytest.approx(4 / 5)  # TP / (TP + FN)
    assert t.f1 == pytest.approx(2 * 0.8 * 0.8 / 1.6)  # harmonic mean = 0.8
    # baseline: 5 tool_calls responses, all valid; candidate: 5, valid rows 0 and 7 only
    assert (fig.baseline.valid, fig.baseline.tool_call_responses) == (5, 5)
    assert fig.baseline.accuracy == 1.0
    assert (fig.candidate.valid, fig.candidate.tool_call_responses) == (2, 5)
    assert fig.candidate.accuracy == pytest.approx(0.4)
    assert fig.baseline.finish_reasons == {"tool_calls": 5, "stop": 2, "length": 1}
    assert fig.pairs == 8


def test_f1_edges() -> None:
    assert trigger_agreement([(False, False)] * 3).f1 is None  # nobody ever calls a tool
    none_hit = trigger_agreement([(True, False), (False, True)])
    assert none_hit.f1 == 0.0 and none_hit.precision == 0.0 and none_hit.recall == 0.0
    only_fn = trigger_agreement([(True, False)])
    assert only_fn.precision is None and only_fn.f1 == 0.0


def test_unpaired_runs_are_left_out() -> None:
    records = fixture_records()[:-1]  # the last candidate run is missing
    assert verifier_figures(records).pairs == 7


def test_calls_valid_is_the_verifiers_rule() -> None:
    def resp(*calls: tuple[str, Any]) -> ResponseRecord:
        return ResponseRecord(
            finish_reason="tool_calls",
            tool_calls=[ToolCallRecord(name=n, arguments=a) for n, a in calls],
        )

    assert calls_valid(resp(GOOD), TOOLS)
    assert calls_valid(resp(("entropy", {"values": [1.0]})), TOOLS)  # an object is parsed too
    assert not calls_valid(resp(AS_STRING), TOOLS)
    assert not calls_valid(resp(NOT_JSON), TOOLS)
    assert not calls_valid(resp(UNKNOWN), TOOLS)
    assert not calls_valid(resp(("add", "[1, 2]")), TOOLS)


def test_single_turn_keeps_the_first_step() -> None:
    data = entropy_scenario()
    data["expect"]["calls"] += [
        {"tool": "add", "arguments": {"a": 1, "b": 2}, "parallel": True},
        {"tool": "add", "arguments": {"a": 3, "b": 4}},
    ]
    data["followups"] = [{"user": "again"}]
    sc = single_turn(scenario_from_data(data))
    assert sc.max_turns == 1 and sc.followups == []
    assert [c.arguments for c in sc.expect.calls] == [
        {"values": [0.5, 0.25, 0.25], "base": 2},
        {"a": 1, "b": 2},
    ]
    assert not sc.expect.final_answer.required
    plain = single_turn(scenario_from_data(entropy_scenario(expect={"max_calls": 0})))
    assert plain.expect.final_answer.required and plain.expect.max_calls == 0


def test_compare_single_turn_writes_the_figures(
    tmp_path: Path, sim_url: Callable[..., str], write_scenarios: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    folder = write_scenarios(entropy_scenario())
    base = sim_url("healthy", scenarios_dir=folder)
    cand = sim_url("container-as-string", scenarios_dir=folder)
    rc = main([
        "compare", "--single-turn", "--baseline", base, "--candidate", cand, "--repeats", "3",
        "--no-sequential", "--results", str(tmp_path / "res"), "--run-id", "st", "--no-progress", str(folder),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert rc in (0, 1)
    run = RunFolder(tmp_path / "res" / "st")
    saved = VerifierFigures.model_validate(json.loads(run.file(RunFolder.VERIFIER).read_text()))
    assert saved == verifier_figures(run.records())
    assert saved.pairs == 3 and saved.trigger.tp == 3 and saved.trigger.f1 == 1.0
    assert saved.baseline.accuracy == 1.0 and saved.candidate.accuracy == 0.0
    assert "F1 1.00 (TP 3, FP 0, FN 0, TN 0)" in out
    assert "candidate: schema accuracy 0/3 (0.00%)" in out
    assert all(len(r.turns) == 1 for r in run.records())
    run.file(RunFolder.VERIFIER).write_text(VerifierFigures().model_dump_json())
    assert main(["score", str(run.path)]) == rc  # re-scored: the figures rewritten
    assert "F1 1.00 (TP 3, FP 0, FN 0, TN 0)" in capsys.readouterr().out
    rewritten = json.loads(run.file(RunFolder.VERIFIER).read_text())
    assert VerifierFigures.model_validate(rewritten) == saved
