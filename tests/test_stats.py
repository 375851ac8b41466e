"""Statistics against known values."""

from __future__ import annotations

import math

import pytest

from harness.stats.tests import (
    fisher_one_sided,
    holm,
    mannwhitney_one_sided,
    pass_hat_k,
    repeats_needed,
    wilson_interval,
)


def test_wilson_known_values() -> None:
    # Newcombe (1998) table I: 81/263 -> 0.2553 to 0.3662 (95%).
    lo, hi = wilson_interval(81, 263)
    assert lo == pytest.approx(0.2553, abs=1e-4) and hi == pytest.approx(0.3662, abs=1e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_pass_hat_k() -> None:
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_hat_k(2, 3, 1) == pytest.approx(2 / 3)
    assert pass_hat_k(2, 3, 2) == pytest.approx(1 / 3)
    assert pass_hat_k(2, 3, 3) == 0.0
    assert pass_hat_k(4, 5, 2) == pytest.approx(6 / 10)
    with pytest.raises(ValueError):
        pass_hat_k(1, 3, 4)


def test_fisher_one_sided_known() -> None:
    # 3/3 vs 0/3: one-sided p = 1 / C(6, 3) = 0.05
    assert fisher_one_sided(3, 3, 0, 3) == pytest.approx(0.05)
    assert fisher_one_sided(0, 3, 3, 3, "less") == pytest.approx(0.05)
    assert fisher_one_sided(5, 5, 0, 5) == pytest.approx(1 / math.comb(10, 5))
    assert fisher_one_sided(0, 5, 5, 5) == 1.0
    assert fisher_one_sided(1, 0, 0, 3) == 1.0


def test_mannwhitney() -> None:
    assert mannwhitney_one_sided([36, 36, 36], [3, 3, 3]) < 0.1
    assert mannwhitney_one_sided([3, 3], [3, 3]) == 1.0
    assert mannwhitney_one_sided([1, 2, 3, 4], [5, 6, 7, 8]) > 0.9
    # exact: no overlap, 4 vs 4 -> 1 / C(8, 4)
    assert mannwhitney_one_sided([5, 6, 7, 8], [1, 2, 3, 4]) == pytest.approx(1 / 70)


def test_holm() -> None:
    # Holm (1979) worked example style: sorted p 0.01, 0.02, 0.03, 0.04 with m=4
    assert holm([0.04, 0.01, 0.03, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_repeats_needed() -> None:
    # 0.1 vs 0.5, one-sided alpha 0.05, power 0.8: textbook ~ 16 per group
    n = repeats_needed(0.1, 0.5, 0.05, 0.8)
    assert n is not None and 14 <= n <= 18
    assert repeats_needed(0.2, 0.2, 0.01) is None
    assert repeats_needed(0.1, 0.2, 0.01) > repeats_needed(0.1, 0.5, 0.01)  # type: ignore[operator]
