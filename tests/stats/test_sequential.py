"""Sequential mode: the spent levels, the stopping rule, and ``harness compare`` in rounds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.stats.sequential import (
    FUTILITY,
    SUGGESTIVE_P,
    Look,
    first_look,
    look_alpha,
    should_stop,
    suggestive_p,
)
from harness.summary import MetricRow, ScenarioComparison, Summary, Verdict
from tests.compare.test_compare import CLOCK, ENTROPY, LOOKUP
from tests.conftest import HarnessCli


def test_power_family_spending_rho_2() -> None:
    # alpha * ((k/K)^2 - ((k-1)/K)^2): 1/16, 3/16, 5/16, 7/16 of alpha for K = 4
    got = [look_alpha(0.01, k, 4) for k in range(1, 5)]
    assert got == pytest.approx([0.01 * x / 16 for x in (1, 3, 5, 7)])
    assert sum(got) == pytest.approx(0.01)  # the union bound: at most alpha over all looks
    assert look_alpha(0.01, 1, 1) == pytest.approx(0.01)
    with pytest.raises(ValueError):
        look_alpha(0.01, 5, 4)


def _summary(verdict: str, adjusted: float | None) -> Summary:
    row = MetricRow(
        metric="repeat_loop", kind="rate", baseline=0.0, candidate=0.2, effect=0.2,
        worse=True, p_value=0.01, p_adjusted=adjusted, test="t", decisive=True,
    )  # fmt: skip
    comp = ScenarioComparison(scenario_id="*", rows=[row], verdict="NO CHANGE")
    return Summary(
        run_id="s", comparisons=[comp], verdict=Verdict(verdict=verdict, message=verdict)
    )  # type: ignore[arg-type]


def test_stopping_rule() -> None:
    assert should_stop(_summary("REGRESSION", 0.001), 1, 4)  # efficacy
    assert not should_stop(_summary("INCONCLUSIVE", 0.05), 1, 4)  # worth another round
    assert not should_stop(_summary("NO CHANGE", FUTILITY), 2, 4)
    assert should_stop(_summary("NO CHANGE", FUTILITY + 0.01), 1, 4)  # futility
    assert should_stop(_summary("INCONCLUSIVE", 0.05), 4, 4)  # the last look


def test_a_resumed_comparison_finishes_its_round_before_a_look() -> None:
    assert first_look(0, 34, 4) == 1
    assert first_look(34, 34, 4) == 1  # round 1 complete: decide it (again)
    assert first_look(35, 34, 4) == 2  # round 2 begun: finish it, then look
    assert first_look(500, 34, 4) == 4  # never past the cap


@pytest.fixture
def scenarios(write_scenarios: Callable[..., Path]) -> Path:
    return write_scenarios(ENTROPY, LOOKUP, CLOCK)


def _run(cli: HarnessCli, scenarios: Path, *extra: str) -> tuple[int, dict, int]:  # type: ignore[type-arg]
    code = cli("compare", scenarios, *extra, run_id="r")
    summary = json.loads((cli.results / "r" / "summary.json").read_text())
    runs = sum(1 for _ in (cli.results / "r" / "transcripts.jsonl").open())
    return code, summary, runs


def test_a_large_regression_stops_after_the_first_round(
    scenarios: Path, harness_cli: HarnessCli
) -> None:
    code, s, runs = _run(harness_cli, scenarios, "--repeats", "3")
    assert code == 1 and s["verdict"]["verdict"] == "REGRESSION"
    assert s["settings"]["sequential"] and s["settings"]["look"] == 1
    assert runs == 2 * 3 * 3  # one round: 3 scenarios x 3 repeats x 2 sides
    assert s["verdict"]["power"].startswith("sequential (group-sequential")
    assert (
        "decided at round 1 of 4" in s["verdict"]["power"]
        and "18 runs spent" in s["verdict"]["power"]
    )


def test_fixed_mode_runs_the_repeats_once(scenarios: Path, harness_cli: HarnessCli) -> None:
    code, s, runs = _run(harness_cli, scenarios, "--repeats", "2", "--no-sequential", "--aa")
    assert code == 0 and not s["settings"]["sequential"] and s["settings"]["look"] is None
    assert runs == 2 * 3 * 2
    assert s["verdict"]["verdict"] in ("NO CHANGE", "INCONCLUSIVE")
    assert "Westfall-Young over" in s["verdict"]["power"]


def test_rounds_are_whole_and_capped(scenarios: Path, harness_cli: HarnessCli) -> None:
    code, s, runs = _run(harness_cli, scenarios, "--repeats", "1", "--rounds", "2", "--aa")
    look = s["settings"]["look"]
    assert look in (1, 2) and runs == 2 * 3 * look  # every round complete on both sides
    assert s["settings"]["repeats"] == look


def test_futility_never_drops_a_kind_only_the_candidate_shows() -> None:
    # every worse test far from significant, but the candidate shows a kind no
    # baseline run shows: the rounds go on (the stop would drop the evidence it prints)
    s = _summary("NO CHANGE", FUTILITY + 0.3)
    assert s.verdict is not None
    s.verdict.candidate_only_kinds = ["container_as_string"]
    assert not should_stop(s, 1, 4)
    assert not should_stop(s, 3, 4)
    assert should_stop(s, 4, 4)  # the last look always stops


def test_the_inconclusive_band_keeps_its_ratio_to_the_look_level() -> None:
    # SUGGESTIVE_P * alpha_k / alpha: 0.1 * 7/16 = 0.04375 at the last of 4 looks,
    # 0.1 * 1/16 at the first, 0.1 in a fixed comparison (one look)
    assert suggestive_p(look_alpha(0.01, 4, 4), 0.01) == pytest.approx(0.04375)
    assert suggestive_p(look_alpha(0.01, 1, 4), 0.01) == pytest.approx(0.00625)
    assert suggestive_p(0.01, 0.01) == pytest.approx(SUGGESTIVE_P) == pytest.approx(0.1)
    look = Look(2, 4, 0.01)
    assert look.level == pytest.approx(0.01 * 3 / 16)
    assert look.final_level == pytest.approx(0.01 * 7 / 16)
    assert look.left == 2
    with pytest.raises(ValueError):
        suggestive_p(0.01, 0.0)
