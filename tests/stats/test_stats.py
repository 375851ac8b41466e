"""Statistics against known values."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest

from harness.stats.tests import (
    fisher_one_sided,
    holm,
    mannwhitney_one_sided,
    mcnemar_exact,
    newcombe_paired_interval,
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


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_equals_scipy(confidence: float) -> None:
    """The one Wilson routine gives scipy's ``proportion_ci(method="wilson")`` values
    (what the GSM8K module computed before it used this one)."""
    for n in (1, 2, 7, 30, 263, 500):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
            lo, hi = wilson_interval(k, n, confidence)
            assert lo == pytest.approx(ci.low, abs=1e-12)
            assert hi == pytest.approx(ci.high, abs=1e-12)


def test_wilson_closed_form_at_440_of_500() -> None:
    k, n, z = 440, 500, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(centre - half, abs=1e-9)
    assert hi == pytest.approx(centre + half, abs=1e-9)


def test_mcnemar_exact_known_values() -> None:
    # Altman et al. (2000), Statistics with Confidence, table 6.2: b=5, c=0 -> 2 * 0.5**5
    assert mcnemar_exact(5, 0) == pytest.approx(0.0625)
    # 2 against 8 of 10: 2 * P(X <= 2), X ~ Bin(10, 1/2) = 2 * (1 + 10 + 45) / 1024
    assert mcnemar_exact(2, 8) == pytest.approx(112 / 1024)
    assert mcnemar_exact(8, 2) == mcnemar_exact(2, 8)  # two-sided: symmetric
    assert mcnemar_exact(35, 0) == pytest.approx(2 * 0.5**35)
    assert mcnemar_exact(4, 4) == 1.0 and mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_newcombe_paired_altman_worked_example() -> None:
    # Altman et al. (2000), Statistics with Confidence, table 6.2 (p. 52): 14 both,
    # 5 only on side 1, 0 only on side 2, 22 neither: p1 - p2 = 0.122, 95% CI
    # 0.011 to 0.226. Ours is for p2 - p1, so the same interval mirrored.
    lo, hi = newcombe_paired_interval(14, 5, 0, 22)
    assert lo == pytest.approx(-0.226, abs=5e-4) and hi == pytest.approx(-0.011, abs=5e-4)


def test_newcombe_paired_matches_reference_formula() -> None:
    """Against R biostatUZH confIntPairedProportion (Newcombe 1998) for p1 - p2."""
    r, s, t, u = 30, 9, 2, 19  # both, only 1, only 2, neither
    n = r + s + t + u
    p1, p2 = (r + s) / n, (r + t) / n
    l1, u1 = wilson_interval(r + s, n)
    l2, u2 = wilson_interval(r + t, n)
    cross = r * u - s * t
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = cross / math.sqrt((r + s) * (t + u) * (r + t) * (s + u))
    low = (p1 - p2) - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = (p1 - p2) + math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    ours = newcombe_paired_interval(r, s, t, u)  # interval for p2 - p1
    assert ours == pytest.approx((-high, -low))


def test_newcombe_paired_properties() -> None:
    none = newcombe_paired_interval(440, 0, 0, 60)
    assert none[0] < 0 < none[1] and none[1] - none[0] > 0.005  # no discordance: not [0, 0]
    lost = newcombe_paired_interval(405, 35, 0, 60)
    won = newcombe_paired_interval(405, 0, 35, 60)
    assert lost == pytest.approx((-won[1], -won[0]))  # swapping the sides mirrors it
    wide = newcombe_paired_interval(81, 7, 0, 12)
    assert wide[1] - wide[0] > lost[1] - lost[0]  # fewer pairs, wider
    assert newcombe_paired_interval(0, 0, 0, 0) == (-1.0, 1.0)
    with pytest.raises(ValueError):
        newcombe_paired_interval(1, -1, 0, 0)


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
