"""With few scenarios, the teacher-forced test's unit is a block of tokens: a divergence as
large as a dropped routed expert's is decided from three scenarios, and the A/A and a
benign shift are not called regressions (false alarms checked over server seeds)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.numerics.decide import BLOCK, BLOCK_TEST
from harness.numerics.run import compare_logprobs
from harness.numerics.sequences import from_scenario
from harness.scenario.model import load_scenarios

THREE = [from_scenario(s) for s in load_scenarios(["scenarios"])][:3]


@pytest.mark.parametrize("seed", range(4))
def test_three_scenarios_decide_by_blocks(sim_url: Callable[..., str], seed: int) -> None:
    base = sim_url("healthy", seed=seed)
    fused = compare_logprobs(THREE, base, sim_url("fused-regression", seed=seed + 50))
    assert fused.verdict == "REGRESSION", fused.message
    assert f"blocks of {BLOCK} tokens from 3 sequences" in fused.message
    assert fused.stats.test == BLOCK_TEST
    for benign in ("healthy", "kv-cache-quant"):
        res = compare_logprobs(THREE, base, sim_url(benign, seed=seed + 100))
        assert res.verdict == "NO CHANGE", (benign, res.message)
