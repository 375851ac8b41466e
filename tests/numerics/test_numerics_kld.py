"""llama-perplexity's KL-divergence statistics (``harness.numerics.kld``), each against a
hand computation with llama.cpp's estimators (``tools/perplexity/perplexity.cpp``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from harness.numerics.divergence import pooled_kld, sequence_divergence
from harness.numerics.kld import kld_stats, mean_and_uncertainty, percentile
from harness.numerics.models import ScoredSequence
from harness.numerics.run import compare_logprobs
from harness.numerics.sequences import from_scenario
from harness.scenario.model import load_scenarios


def test_mean_and_uncertainty_as_llama_cpp() -> None:
    # 1..12: mean 6.5, E[x^2] = 650/12, variance 11.9167, se = sqrt(11.9167 / 11)
    mean, se = mean_and_uncertainty([float(v) for v in range(1, 13)])
    assert mean == pytest.approx(6.5)
    assert se == pytest.approx(math.sqrt((650 / 12 - 6.5**2) / 11))
    # 10 values or fewer: no uncertainty (llama.cpp prints 0)
    assert mean_and_uncertainty([1.0, 2.0, 3.0]) == (2.0, 0.0)
    assert mean_and_uncertainty([]) == (0.0, 0.0)


def test_percentile_interpolates_as_llama_cpp() -> None:
    v = [0.1, 0.2, 0.3, 0.4]
    assert percentile(v, 0.9) == pytest.approx(0.3 * 0.3 + 0.7 * 0.4)  # at 0.9 * 3 = 2.7
    assert percentile(v, 0.5) == pytest.approx(0.25)  # even count: the two middle values
    assert percentile([1.0, 5.0, 9.0], 0.5) == 5.0
    assert percentile(v, 0.0) == 0.1 and percentile(v, 1.0) == 0.4
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_kld_stats_against_a_hand_computation() -> None:
    kld = [float(v) / 100 for v in range(1, 13)]
    dp = [0.1, -0.1] * 6
    same = [True] * 9 + [False] * 3
    st = kld_stats(kld, dp, same)
    assert st is not None and st.positions == 12
    assert st.kld_mean == pytest.approx(0.065)
    assert st.kld["Maximum"] == 0.12 and st.kld["Minimum"] == 0.01
    assert st.kld["Median"] == pytest.approx(0.065)
    assert st.kld["99.0%"] == pytest.approx(0.12 - 0.01 * (1 - 0.99 * 11 % 1))
    assert st.dp_mean == pytest.approx(0.0) and st.dp["Maximum"] == 0.1
    assert st.dp_rms == pytest.approx(0.1) and st.dp_rms_se == 0.0  # every dp^2 is 0.01
    assert st.same_top_p == pytest.approx(0.75)
    assert st.same_top_p_se == pytest.approx(math.sqrt(0.75 * 0.25 / 11))
    # non-finite positions are left out; none left: None
    assert kld_stats([math.nan, 0.1], [0.0, 0.0], [True, True]).positions == 1  # type: ignore[union-attr]
    assert kld_stats([math.nan], [0.0], [True]) is None
    with pytest.raises(ValueError):
        kld_stats([0.1], [], [True])


def test_delta_p_and_same_top_from_two_scorings() -> None:
    """Δp is p_cand - p_base of the forced token; same top p compares the argmax."""
    base = ScoredSequence(
        ["a", "b", "c"], ["a", "b", "c"], [None, math.log(0.5), math.log(0.6)],
        [{}, {"b": math.log(0.5), "x": math.log(0.3)}, {"c": math.log(0.6), "y": math.log(0.2)}],
    )  # fmt: skip
    cand = ScoredSequence(
        ["a", "b", "c"], ["a", "b", "c"], [None, math.log(0.4), math.log(0.6)],
        [{}, {"b": math.log(0.4), "x": math.log(0.45)}, {"c": math.log(0.6), "y": math.log(0.2)}],
    )  # fmt: skip
    div = sequence_divergence(base, cand)
    assert div.kld is not None and div.kld.positions == 2
    assert div.kld.dp["Minimum"] == pytest.approx(-0.1)
    assert div.kld.dp["Maximum"] == pytest.approx(0.0)
    assert div.kld.same_top_p == pytest.approx(0.5)  # position 1's argmax moved from b to x
    assert div.kld.kld["Minimum"] == pytest.approx(0.0, abs=1e-12)
    assert pooled_kld([div, div]).positions == 4  # type: ignore[union-attr]


def test_a_comparison_carries_the_statistics(sim_url: Callable[..., str]) -> None:
    seqs = [from_scenario(s) for s in load_scenarios(["scenarios"])][:8]
    res = compare_logprobs(seqs, sim_url("healthy"), sim_url("fused-regression"))
    assert res.kld is not None and res.kld_aa is not None
    assert res.kld.positions == sum(r.ab.kld.positions for r in res.sequences if r.ab.kld)
    assert res.kld.kld_mean > 10 * res.kld_aa.kld_mean
    assert res.kld.same_top_p < res.kld_aa.same_top_p
    assert all(r.ab.kld is not None for r in res.sequences)
