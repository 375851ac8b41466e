"""The failure-kind vocabulary (``harness.kinds``) as the rest of the harness uses it:
scores hold plain strings equal to the kinds, the reference server's faults are kinds,
the report labels with ``kinds.label``, and no module keeps a list of its own."""

from __future__ import annotations

import ast
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import harness.present.report.annotate
import harness.scoring.answers
import harness.scoring.bfcl
import harness.scoring.calls
import harness.scoring.contract
import harness.scoring.drift
import harness.scoring.protocol
import harness.scoring.score
import harness.scoring.sequence
import harness.sim.app
import harness.sim.faults
import harness.sim.profiles
from harness.client.target import TargetConfig
from harness.kinds import METRIC_LABELS, TERMINATION_LABELS, FailureKind, label
from harness.present.report.annotate import SummaryAnnotator
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios
from harness.scoring.models import RunScore
from harness.scoring.score import score_run
from harness.sim.faults import FAULT_KINDS, SIM_ONLY_FAULTS, Fault
from harness.sim.profiles import PROFILES
from tests.report_data import candidate_record, write_case
from tests.sim_driver import entropy_scenario

#: modules that emit or compare failure kinds: they name them as FailureKind members
ADOPTERS = [
    harness.scoring.score,
    harness.scoring.calls,
    harness.scoring.sequence,
    harness.scoring.answers,
    harness.scoring.protocol,
    harness.scoring.contract,
    harness.scoring.drift,
    harness.sim.faults,
    harness.sim.profiles,
    harness.sim.app,
    harness.present.report.annotate,
]


def _string_constants(module: ModuleType) -> set[str]:
    """Every string literal in a module's code (docstrings left out)."""
    tree = ast.parse(inspect.getsource(module))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    }


@pytest.mark.parametrize("module", ADOPTERS, ids=lambda m: m.__name__)
def test_no_module_spells_a_kind_as_a_string(module: ModuleType) -> None:
    spelled = _string_constants(module) & {k.value for k in FailureKind}
    assert not spelled, f"{module.__name__}: use the FailureKind members for {sorted(spelled)}"


def test_every_kind_has_scoring_code_that_finds_it() -> None:
    scoring = (harness.scoring.score, harness.scoring.calls, harness.scoring.sequence)
    scoring += (harness.scoring.answers, harness.scoring.protocol, harness.scoring.drift)
    source = "".join(inspect.getsource(m) for m in scoring)
    source += inspect.getsource(harness.scoring.bfcl)  # state_mismatch: BFCL tasks only
    source += inspect.getsource(harness.scoring.contract)  # what the request asked for
    missing = [k.name for k in FailureKind if f"FailureKind.{k.name}" not in source]
    assert not missing, f"no scoring code emits {missing}"


def test_scores_hold_plain_strings_equal_to_the_kinds(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path
) -> None:
    """A real run on the fused-regression profile: the kinds found are FailureKind values,
    held and written as plain strings, and read back equal."""
    folder = write_scenarios(entropy_scenario(max_turns=4))
    url = sim_url("fused-regression", scenarios_dir=folder)
    (rec,) = run_many_sync(
        load_scenarios([folder]), [TargetConfig(url, label="fused")],
        repeats=1, out_dir=tmp_path / "out", progress=False,
    )  # fmt: skip
    score = score_run(rec)
    found = {FailureKind.REPEAT_LOOP, FailureKind.CONTAINER_AS_STRING, FailureKind.COLLAPSE}
    assert found <= set(score.failures), score.failures
    assert "repeat_loop" in score.failures and FailureKind.COLLAPSE in score.failures
    kinds = [
        *score.failures,
        *(d.kind for d in score.drift),
        *(k for c in score.calls for k in c.kinds),
    ]
    assert kinds and all(type(k) is str for k in kinds)
    text = score.model_dump_json()
    data = json.loads(text)
    assert '"failures":["' in text and "FailureKind" not in text
    assert data["failures"] == score.failures == sorted(str(k) for k in score.failures)
    assert RunScore.model_validate_json(text) == score


def test_every_profile_fault_is_a_failure_kind_or_sim_only() -> None:
    assert not set(SIM_ONLY_FAULTS) & {k.value for k in FailureKind}
    assert all(isinstance(k, FailureKind) for k in FAULT_KINDS)
    faults = [f for p in PROFILES.values() for f in p.faults]
    assert faults
    for f in faults:
        assert isinstance(f.kind, FailureKind) or f.kind in SIM_ONLY_FAULTS, f
    for p in PROFILES.values():  # a single-fault profile is named after its kind (+ variant)
        if len(p.faults) == 1:
            base = p.faults[0].kind.replace("_", "-")
            assert p.name == base or p.name.startswith(base + "-"), p.name


def test_fault_kinds_given_as_strings_become_members() -> None:
    assert Fault("collapse", start_turn=1).kind is FailureKind.COLLAPSE
    with pytest.raises(ValueError, match="unknown fault kind 'colapse'"):
        Fault("colapse")
    with pytest.raises(ValueError, match="unknown fault kind 'value_mismatch'"):
        Fault(FailureKind.VALUE_MISMATCH)  # a kind the reference server cannot inject


def test_labels_of_kinds_metrics_and_terminations() -> None:
    assert all(label(k.value) == k.label for k in FailureKind)
    assert all(label(m) == text for m, text in METRIC_LABELS.items())
    # a name that is both a metric and a termination reads as the metric (a success rate)
    assert label("final_answer") == METRIC_LABELS["final_answer"] == "reached a final answer"
    assert label("turn_cap") == TERMINATION_LABELS["turn_cap"] == "turn cap"
    assert label("some_new_name") == "some new name"
    assert not hasattr(harness.present.report.annotate, "KIND_LABELS")


def test_report_run_badges_use_the_vocabulary_labels(tmp_path: Path) -> None:
    folder = write_case(tmp_path / "case", repeats=2, summary=True)
    rf = RunFolder.open(folder)
    scores = {s.run_key: s for _, s in rf.scores_with_offsets()}
    annotator = SummaryAnnotator(rf.read_summary(), scores)
    rec = candidate_record(0)
    score = annotator.scores[rec.run_key]
    assert FailureKind.REPEAT_LOOP in score.failures
    badges = annotator.run_badges(rec)
    assert [b.text for b in badges] == ["failed"] + [FailureKind(k).label for k in score.failures]
