"""Smoke test of the detection-power benchmark (bench/calibration/power.py) on a few seeds.

The measured figures (>= 200 A/A, >= 100 regression comparisons) come from
``python -m bench.calibration.power``; this only checks that its path decides as ``compare`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.calibration.power import _noisy, compare_in_process
from harness.scenario.model import load_scenarios
from harness.sim.model import ScenarioIndex
from tests.compare.test_compare import CLOCK, ENTROPY, LOOKUP


@pytest.fixture
def setup(write_scenarios):  # type: ignore[no-untyped-def]
    folder: Path = write_scenarios(ENTROPY, LOOKUP, CLOCK)
    return _noisy(load_scenarios([folder])), ScenarioIndex.from_dir(folder)


def test_in_process_comparisons_decide(setup) -> None:  # type: ignore[no-untyped-def]
    scenarios, index = setup
    for seed in range(2):
        aa = compare_in_process(scenarios, index, "healthy", "healthy", seed=seed, repeats=3)
        assert aa.verdict is not None and aa.verdict.verdict != "REGRESSION"
        assert {s.label for s in aa.sides} == {"healthy"} and sum(s.runs for s in aa.sides) == 18
    reg = compare_in_process(scenarios, index, "healthy", "fused-regression", seed=7, repeats=3)
    assert reg.verdict is not None and reg.verdict.verdict == "REGRESSION"
    assert "repeat_loop" in reg.verdict.regressed_kinds
    leak = compare_in_process(scenarios, index, "healthy", "markup-in-content", seed=9, repeats=3)
    assert leak.verdict is not None and "markup_in_content" in leak.verdict.regressed_kinds
