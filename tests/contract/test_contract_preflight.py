"""The contract pre-flight (``harness.preflight``) against reference servers on 127.0.0.1,
and what a side that ignores temperature and seed does to the verdict: its repeats are
copies, counted once per scenario, said in the verdict, and the power is that of the units
left (``harness.stats.family``)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import ExitCode
from harness.client.target import TargetConfig
from harness.kinds import FailureKind
from harness.preflight import CHECKS, REQUESTS, check_contract_sync
from harness.runfolder import RunFolder
from harness.sim.faults import Fault
from harness.sim.profiles import SimProfile
from harness.sim.stats import fetch_stats
from harness.stats.aggregate import aggregate
from harness.stats.verdict import decide
from harness.summary import SideContract
from tests.compare.test_compare_verdict import _scores
from tests.conftest import HarnessCli


def _row(comparison: Any, metric: str) -> Any:
    return next((r for r in comparison.rows if r.metric == metric), None) if comparison else None


def _contract(url: str) -> SideContract:
    return check_contract_sync(TargetConfig(base_url=url, label="s", timeout_s=10))


def _not_ok(c: SideContract) -> dict[str, str]:
    return {x.name: x.status for x in c.checks if x.status != "ok"}


def test_a_healthy_server_honours_every_check_within_the_request_budget(
    sim_url: Callable[..., str],
) -> None:
    url = sim_url("healthy")
    c = _contract(url)
    assert [x.name for x in c.checks] == list(CHECKS)
    assert _not_ok(c) == {}, c.checks
    assert not c.sampling_ignored
    assert c.requests <= REQUESTS
    stats = fetch_stats(url)
    assert stats.requests == c.requests  # every request counted, none retried
    assert stats.max_in_flight <= 4


@pytest.mark.parametrize(
    ("profile", "check"),
    [
        ("sampling-ignored", "temperature"),
        ("calls-under-tool-choice-none", "tool_choice none"),
        ("required-tool-choice-ignored", "tool_choice required"),
        ("named-tool-choice-ignored", "tool_choice named"),
        ("parallel-calls-when-disabled", "parallel_tool_calls false"),
        ("max-tokens-exceeded", "max_tokens"),
        ("n-not-honoured", "n"),
        ("stop-string-in-output", "stop"),
    ],
)
def test_each_fault_fails_its_own_check_and_no_other(
    sim_url: Callable[..., str], profile: str, check: str
) -> None:
    c = _contract(sim_url(profile))
    bad = _not_ok(c)
    assert bad.pop(check) == "failed", c.checks
    if profile == "sampling-ignored":  # nothing to reproduce: a note, not a fault
        assert bad.pop("seed") == "unsupported"
    assert bad == {}, c.checks
    assert c.sampling_ignored == (check == "temperature")


def test_look_alikes_are_not_flagged(sim_url: Callable[..., str]) -> None:
    # a server that ignores the seed but samples: not reproducible, still independent
    c = _contract(sim_url("seed-ignored"))
    assert _not_ok(c) == {"seed": "unsupported"}
    assert not c.sampling_ignored
    # identical choices under n are a legitimate repeat (the reference server sends n
    # identical ones): n honoured
    n = c.check("n")
    assert n is not None and n.status == "ok" and "2 choices" in n.detail
    # a refused request is "unsupported" for its check, not a fault, and the rest run on
    refused = _contract(sim_url("http-400"))
    assert {x.status for x in refused.checks} == {"unsupported"}
    assert not refused.sampling_ignored


@pytest.mark.parametrize("seed", range(5))
def test_the_copies_rule_false_alarms_and_detections_over_server_seeds(
    sim_url: Callable[..., str], seed: int
) -> None:
    # the rule (three seeds at 0.7, one output) against five draws of each server
    assert not _contract(sim_url("healthy", seed=seed)).sampling_ignored
    assert _contract(sim_url("sampling-ignored", seed=seed)).sampling_ignored


# ------------------------------------------------------------------ the statistics


def _aggs(side: str, failures: dict[str, list[list[str]]]) -> dict[str, Any]:
    scores = {s: _scores(side, s, f) for s, f in failures.items()}
    kinds = sorted({k for fs in failures.values() for f in fs for k in f})
    out = {s: aggregate(side, side, s, v, kinds) for s, v in scores.items()}
    out["*"] = aggregate(side, side, "*", [x for v in scores.values() for x in v], kinds)
    return out


def test_copies_count_once_per_scenario_with_the_exact_pooled_p() -> None:
    # candidate: every run of 6 scenarios shows a kind; 5 repeats per side
    ids = [f"s{i}" for i in range(6)]
    base = _aggs("baseline", {s: [[]] * 5 for s in ids})
    cand = _aggs("candidate", {s: [["unexpected_keys"]] * 5 for s in ids})
    as_trials = decide(base, cand, permutations=2000)
    as_copies = decide(base, cand, permutations=2000, copies=["candidate"])
    pooled = _row(next(t for t in as_copies.comparisons if t.scenario_id == "*"), "unexpected_keys")
    # one candidate unit against 5 baseline runs per scenario: the exact stratified
    # p is (1/6)^6 (the candidate's unit is the event in every stratum)
    assert pooled is not None and pooled.p_value == pytest.approx(6.0**-6, rel=1e-9)
    trials = _row(next(t for t in as_trials.comparisons if t.scenario_id == "*"), "unexpected_keys")
    assert trials is not None and trials.p_value < pooled.p_value  # copies would overstate
    assert as_copies.verdict.verdict == "REGRESSION"
    assert "copies, not trials, counted once per scenario" in as_copies.verdict.message
    assert "copies" not in as_trials.verdict.message
    assert "candidate's repeats counted once per scenario" in (as_copies.verdict.power or "")


def test_copies_counted_as_trials_raise_false_alarms_counted_once_they_do_not() -> None:
    # equal servers: every run fails with probability 0.3 on both sides, but the
    # candidate's 5 repeats of a scenario are one draw replayed (it ignores sampling).
    # Measured over 100 seeded comparisons of 6 scenarios: counted as trials, the copies
    # make REGRESSION common; counted once, it stays within the level (alpha 0.01).
    false_trials = false_copies = 0
    for seed in range(100):
        rng = random.Random(seed)
        ids = [f"s{i}" for i in range(6)]
        fail = [["spurious_calls"]]
        base = {s: [fail[0] if rng.random() < 0.3 else [] for _ in range(5)] for s in ids}
        cand = {s: [fail[0] if rng.random() < 0.3 else []] * 5 for s in ids}
        b, c = _aggs("baseline", base), _aggs("candidate", cand)
        false_trials += decide(b, c, permutations=1000).verdict.verdict == "REGRESSION"
        copies = decide(b, c, permutations=1000, copies=["candidate"])
        false_copies += copies.verdict.verdict == "REGRESSION"
    assert false_trials >= 15, false_trials
    assert false_copies <= 2, false_copies


def _rate(power: str) -> float:
    found = re.search(r">= ([\d.]+)% of candidate runs", power)
    assert found, power
    return float(found.group(1))


def test_power_is_that_of_the_units_left() -> None:
    ids = [f"s{i}" for i in range(6)]
    base = _aggs("baseline", {s: [[]] * 5 for s in ids})
    cand = _aggs("candidate", {s: [[]] * 5 for s in ids})
    trials = decide(base, cand, permutations=2000)
    copies = decide(base, cand, permutations=2000, copies=["candidate"])
    assert trials.verdict.verdict == "NO CHANGE"
    # 6 candidate units, not 30 runs: a new kind must be far more common to be detected
    assert _rate(copies.verdict.power or "") > _rate(trials.verdict.power or "")
    assert "one scenario failing every candidate run would not have been detected" in (
        copies.verdict.power or ""
    )


# ------------------------------------------------------------------ end to end


def _ledger(folder: Path) -> Path:
    """Six one-call scenarios written for these tests."""
    folder.mkdir()
    ops = [("add", 12, 30), ("multiply", 7, 6), ("subtract", 50, 8), ("add", 19, 23),
           ("multiply", 3, 14), ("subtract", 45, 3)]  # fmt: skip
    for i, (op, a, b) in enumerate(ops):
        sc = {
            "id": f"ledger_{i}",
            "description": f"{op} {a} and {b} with the tool",
            "messages": [{"role": "user", "content": f"Please {op} {a} and {b} with the tool."}],
            "tools": [
                {
                    "name": op,
                    "description": f"{op} two numbers",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"],
                        "additionalProperties": False,
                    },
                    "simulator": {"builtin": op},
                }
            ],
            "expect": {
                "calls": [{"tool": op, "arguments": {"a": a, "b": b}}],
                "final_answer": {"contains": ["42"], "example": "The result is 42."},
            },
            "repeats": 5,
        }
        (folder / f"ledger_{i}.yaml").write_text(yaml.safe_dump(sc), encoding="utf-8")
    return folder


def _compare(
    cli: HarnessCli, base: str, cand: str, scs: Path, *extra: str
) -> tuple[int, RunFolder]:
    run_id = f"r{len(list(cli.results.glob('r*')))}"
    sides = ["--baseline", base, "--candidate", cand]
    code = cli("compare", scs, *sides, "--no-logprobs", *extra, run_id=run_id)
    return code, cli.folder(run_id)


def test_a_side_that_ignores_temperature_end_to_end(
    sim_url: Callable[..., str],
    tmp_path: Path,
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scs = _ledger(tmp_path / "scenarios")
    cand = SimProfile(
        name="copies-with-a-fault", ignores_sampling=True,
        faults=(Fault(FailureKind.UNEXPECTED_KEYS),),
    )  # fmt: skip
    base_url, cand_url = sim_url("healthy", scenarios_dir=scs), sim_url(cand, scenarios_dir=scs)
    code, folder = _compare(harness_cli, base_url, cand_url, scs)
    out = capsys.readouterr().out
    assert code == ExitCode.REGRESSION
    summary = folder.read_summary()
    assert summary is not None and summary.verdict is not None
    assert "candidate ignored temperature and seed" in summary.verdict.message
    assert "unexpected_keys" in summary.verdict.regressed_kinds
    sides = {s.side: s for s in summary.sides}
    assert sides["candidate"].contract is not None and sides["candidate"].contract.sampling_ignored
    assert (
        sides["baseline"].contract is not None and not sides["baseline"].contract.sampling_ignored
    )
    # the difference between the sides is a finding: console, warnings and contract.json
    assert "contract pre-flight, candidate: 10/12 checks honoured" in out
    assert "temperature (the sides differ)" in out
    stored = json.loads(folder.file(RunFolder.CONTRACT).read_text(encoding="utf-8"))
    assert stored["differences"][0].startswith("temperature: baseline ok, candidate failed")
    assert any("contract differs" in w for w in summary.warnings)
    report = folder.file(RunFolder.REPORT_MD).read_text(encoding="utf-8")
    assert (
        "**Contract pre-flight**" in report
        and "| temperature **(differs)** | ok | failed" in report
    )
    assert "Contract pre-flight" in folder.file(RunFolder.REPORT_HTML).read_text(encoding="utf-8")
    # the pooled test counted one unit per scenario on the candidate's side: (1/6)^6
    row = _row(summary.comparison("*"), "unexpected_keys")
    assert row is not None and row.p_value == pytest.approx(6.0**-6, rel=1e-6)
    assert "more repeat" not in " ".join(c.note or "" for c in summary.comparisons)

    # the same servers with the pre-flight skipped: the copies count as 30 trials
    code, skipped = _compare(harness_cli, base_url, cand_url, scs, "--skip-contract")
    again = skipped.read_summary()
    assert again is not None and again.verdict is not None
    assert "ignored temperature" not in again.verdict.message
    assert not skipped.file(RunFolder.CONTRACT).exists()
    row2 = _row(again.comparison("*"), "unexpected_keys")
    assert row2 is not None and row2.p_value < row.p_value


def test_record_then_compare_against_the_recording_shows_the_contract(
    sim_url: Callable[..., str],
    tmp_path: Path,
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # one box: the baseline recorded while it runs (it ignores temperature), then the
    # candidate compared against the recording
    scs = _ledger(tmp_path / "scenarios")
    base_url = sim_url("sampling-ignored", scenarios_dir=scs)
    code = harness_cli(
        "record", scs, "--target", base_url, "--no-logprobs", "--repeats", "5", run_id="base"
    )
    assert code == 0
    rec = harness_cli.folder("base")
    assert (
        json.loads(rec.file(RunFolder.CONTRACT).read_text(encoding="utf-8"))["sides"]["baseline"][
            "checks"
        ][0]["status"]
        == "failed"
    )
    cand_url = sim_url("healthy", scenarios_dir=scs)
    code, folder = _compare(harness_cli, str(rec.path), cand_url, scs)
    out = capsys.readouterr().out
    summary = folder.read_summary()
    assert summary is not None and summary.verdict is not None
    sides = {s.side: s for s in summary.sides}
    assert sides["baseline"].recorded and sides["baseline"].contract is not None
    assert sides["baseline"].contract.sampling_ignored
    assert "baseline ignored temperature and seed" in summary.verdict.message
    assert "contract pre-flight, baseline: 10/12 checks honoured" in out


def test_run_checks_its_one_side_first_unless_skipped(
    sim_url: Callable[..., str],
    tmp_path: Path,
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scs = _ledger(tmp_path / "scenarios")
    url = sim_url("n-not-honoured", scenarios_dir=scs)
    argv = [scs, "--target", url, "--repeats", "1", "--temperature", "0"]
    assert harness_cli("run", *argv, run_id="checked") == 0  # n is not asked by these scenarios
    out = capsys.readouterr().out
    assert "contract pre-flight, target: 11/12 checks honoured" in out
    assert "n: target failed: n 2: 1 choices" in out
    stored = json.loads((harness_cli.results / "checked/contract.json").read_text(encoding="utf-8"))
    assert [c["name"] for c in stored["sides"]["target"]["checks"] if c["status"] != "ok"] == ["n"]
    assert harness_cli("run", *argv, "--skip-contract", run_id="skipped") == 0
    assert "contract pre-flight" not in capsys.readouterr().out
    assert not (harness_cli.results / "skipped/contract.json").exists()


def test_both_sides_copies_collapse_both() -> None:
    ids = [f"s{i}" for i in range(4)]
    base = _aggs("baseline", {s: [[]] * 5 for s in ids})
    cand = _aggs("candidate", {s: [["unexpected_keys"]] * 5 for s in ids})
    both = decide(base, cand, permutations=2000, copies=["baseline", "candidate"])
    pooled = _row(next(t for t in both.comparisons if t.scenario_id == "*"), "unexpected_keys")
    # one unit a side per scenario: the exact stratified p is (1/2)^4
    assert pooled is not None and pooled.p_value == pytest.approx(0.5**4, rel=1e-9)
    assert "their repeats are copies" in both.verdict.message
    assert both.verdict.verdict != "REGRESSION"  # 4 units a side cannot reach alpha 0.01
