"""A side that cannot be judged: two reference servers that do not
know the scenarios compared (every run HTTP 404 "unknown scenario") give a verdict that
says so and nothing else; no test is run on 0 scored runs against 0."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import HarnessCli

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ROOT / "scenarios" / "sensor_entropy_pipeline.yaml"
UNKNOWN = ROOT / "scenarios" / "entropy_followups.yaml"


def _compare(
    sim_url: Callable[..., str], cli: HarnessCli, folder: Path
) -> tuple[int, dict[str, object]]:
    a = sim_url("healthy", scenarios_dir=folder, refuse_unknown=True)
    b = sim_url("healthy", scenarios_dir=folder, refuse_unknown=True)
    sides = ["--baseline", a, "--candidate", b]
    code = cli("compare", *sides, "--repeats", "3", KNOWN, UNKNOWN, run_id="c")
    summary = json.loads((cli.results / "c" / "summary.json").read_text(encoding="utf-8"))
    return code, summary["verdict"]


def test_two_servers_that_know_no_scenario_cannot_be_judged_and_say_only_that(
    sim_url: Callable[..., str],
    tmp_path: Path,
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(ROOT / "scenarios" / "enum_units.yaml", other)
    code, verdict = _compare(sim_url, harness_cli, other)
    out = capsys.readouterr().out
    assert code == 3
    assert verdict["verdict"] == "INCONCLUSIVE"
    assert verdict["message"] == (
        "INCONCLUSIVE: cannot be judged: every run of baseline (6/6 runs) and candidate "
        "(6/6 runs) was an infrastructure error; no test was run"
    )
    assert verdict["reasons"] == [] and verdict["power"] is None
    assert verdict["infra_limited"] == ["baseline", "candidate"]
    headline = next(line for line in out.splitlines() if "INFRASTRUCTURE ERRORS" in line)
    assert "cannot be judged: every run of baseline (6/6 runs)" in headline
    for wrong in ("REGRESSION", "but better", "decided at round", "significant at one-sided"):
        assert wrong not in out


def test_a_scenario_neither_server_knows_is_never_tested(
    sim_url: Callable[..., str], tmp_path: Path, harness_cli: HarnessCli
) -> None:
    known = tmp_path / "known"
    known.mkdir()
    shutil.copy(KNOWN, known)
    code, verdict = _compare(sim_url, harness_cli, known)
    assert code == 3  # half the runs are infrastructure errors: over the limit
    assert verdict["verdict"] == "INCONCLUSIVE"  # was REGRESSION: 0/0 tested "significant"
    assert not verdict["regressed_kinds"] and not verdict["improved_kinds"]
