"""Realistic faults of the reference server: a fault in a share of runs, or in one scenario."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.client.target import TargetConfig
from harness.errors import UnknownProfileError
from harness.runner import SamplingPolicy, run_many_sync
from harness.scenario.model import load_scenarios
from harness.scoring.score import score_run
from harness.sim.profiles import get_profile

ROOT = Path(__file__).resolve().parents[2]
IDS = ("enum_units", "parallel_calls")


def _loops(url: str, tmp: Path, temperature: float, repeats: int) -> Counter[str]:
    """Runs per scenario that show ``repeat_loop``."""
    scenarios = [s for s in load_scenarios([ROOT / "scenarios"]) if s.id in IDS]
    recs = run_many_sync(
        scenarios, [TargetConfig(url, label="c", side="candidate")], repeats=repeats,
        out_dir=tmp, progress=False, sampling=SamplingPolicy(temperature, seed=1),
    )  # fmt: skip
    return Counter(r.scenario_id for r in recs if "repeat_loop" in score_run(r).failures)


def test_fault_rate_shows_in_a_share_of_sampled_runs(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    url = sim_url("repeat-loop@0.3", scenarios_dir=ROOT / "scenarios")
    loops = _loops(url, tmp_path / "r", 0.7, 20)
    total = sum(loops.values())
    assert 3 <= total <= 22  # 40 runs at 30%: mean 12, far outside is a bug (p < 0.001)
    assert all(loops[s] < 20 for s in IDS)  # not every run: drawn per run


def test_fault_in_one_scenario_only(sim_url: Callable[..., str], tmp_path: Path) -> None:
    url = sim_url("repeat-loop@enum_units", scenarios_dir=ROOT / "scenarios")
    assert _loops(url, tmp_path / "r", 0.7, 3) == Counter({"enum_units": 3})


def test_greedy_repeats_are_one_run_faults_included(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    """At temperature 0 the per-run seed changes nothing: a 50% fault is all or none."""
    url = sim_url("repeat-loop@0.5", scenarios_dir=ROOT / "scenarios")
    loops = _loops(url, tmp_path / "r", 0.0, 4)
    assert all(loops[s] in (0, 4) for s in IDS)


def test_profile_variants_parse_and_refuse() -> None:
    p = get_profile("repeat-loop@0.1@enum_units")
    assert p.name == "repeat-loop@0.1@enum_units"
    assert [(f.rate, f.scenarios) for f in p.faults] == [(0.1, ("enum_units",))]
    assert p.for_scenario("other").faults == () and p.for_scenario("enum_units") is p
    for bad in ("repeat-loop@1.5", "healthy@0.1", "nope@0.1"):
        with pytest.raises(UnknownProfileError):
            get_profile(bad)


def test_sim_cli_refuses_fault_rate_without_faults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--profile", "healthy", "--fault-rate", "0.1", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --fault-rate") and "\n" not in err
