"""Statistics for comparing two targets: intervals, pass^k, exact and rank tests, Holm.

Tests come from :mod:`scipy.stats`; the formulas we write ourselves are given with their
source:

- :func:`wilson_interval`: Wilson score interval (Wilson 1927; Agresti & Coull 1998);
  equal to ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``.
- :func:`mcnemar_exact`: McNemar's test (McNemar 1947), exact conditional version: a
  two-sided binomial test of one discordant count among all discordant pairs, p = 0.5
  (``scipy.stats.binomtest``; Fagerland, Lydersen & Laake 2013).
- :func:`newcombe_paired_interval`: interval for the difference of two paired
  proportions, Newcombe (1998) method 10 (Wilson intervals of both marginals combined
  with the phi correlation of the 2x2 table).
- :func:`pass_hat_k`: tau-bench's pass^k (Yao et al. 2024, "tau-bench", section 3): the
  probability that all ``k`` i.i.d. trials succeed, estimated without bias from ``c``
  successes in ``n`` trials as ``C(c, k) / C(n, k)``.
- :func:`fisher_one_sided` / :func:`mannwhitney_one_sided`: ``scipy.stats.fisher_exact``
  and ``scipy.stats.mannwhitneyu`` with ``alternative="greater"``/``"less"``.
- :func:`holm`: Holm (1979) step-down adjusted p-values (controls the family-wise error).
- :func:`repeats_needed`: per-group sample size for a one-sided two-proportion z-test
  (Fleiss, Levin & Paik 2003, eq. 4.14, without continuity correction)::

      n = (z_{1-a} * sqrt(2 * pbar * (1 - pbar)) + z_{1-b} * sqrt(p1(1-p1) + p2(1-p2)))^2
          / (p1 - p2)^2,   pbar = (p1 + p2) / 2
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Literal

from scipy import stats as sps

__all__ = [
    "fisher_one_sided",
    "format_p",
    "holm",
    "mannwhitney_one_sided",
    "mcnemar_exact",
    "newcombe_paired_interval",
    "pass_hat_k",
    "repeats_needed",
    "wilson_interval",
]

Alternative = Literal["greater", "less"]


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k/n``; ``(0.0, 1.0)`` when ``n == 0``.

    Raises:
        ValueError: ``k`` outside ``[0, n]``.
    """
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value of ``b`` and ``c`` discordant pairs (side 1 only
    right, side 2 only right); 1.0 when there is no discordant pair.

    Source: McNemar (1947), "Note on the sampling error of the difference between
    correlated proportions or percentages", Psychometrika 12:153; the exact conditional
    test is ``scipy.stats.binomtest(c, b + c, 0.5)`` (Fagerland, Lydersen & Laake 2013,
    "The McNemar test for binary matched-pairs data", BMC Med Res Methodol 13:91).

    Raises:
        ValueError: a negative count.
    """
    if b < 0 or c < 0:
        raise ValueError(f"need b >= 0 and c >= 0, got b={b}, c={c}")
    return float(sps.binomtest(c, b + c, 0.5).pvalue) if b + c else 1.0


def newcombe_paired_interval(
    a: int, b: int, c: int, d: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Interval for ``p2 - p1`` of paired proportions, p1 = (a+b)/n, p2 = (a+c)/n.

    ``a`` pairs right on both sides, ``b`` only on side 1, ``c`` only on side 2, ``d``
    on neither; ``(-1.0, 1.0)`` when n = 0. Unlike the Wald interval it stays sensible
    when ``b + c`` is small or 0.

    Source: Newcombe (1998), "Improved confidence intervals for the difference between
    binomial proportions based on paired data", Stat Med 17:2635, method 10, with the
    continuity adjustment of the phi correlation as in Altman et al., *Statistics with
    Confidence* (2000), p. 52, and R biostatUZH ``confIntPairedProportion``.

    Raises:
        ValueError: a negative count.
    """
    if min(a, b, c, d) < 0:
        raise ValueError(f"need counts >= 0, got {(a, b, c, d)}")
    n = a + b + c + d
    if n == 0:
        return -1.0, 1.0
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, confidence)
    l2, u2 = wilson_interval(a + c, n, confidence)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    cross: float = a * d - b * c
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0.0)
    phi = cross / math.sqrt(denom) if denom > 0 else 0.0
    dl = (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2
    du = (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2
    diff = p2 - p1
    return max(-1.0, diff - math.sqrt(max(dl, 0.0))), min(1.0, diff + math.sqrt(max(du, 0.0)))


def pass_hat_k(c: int, n: int, k: int) -> float:
    """tau-bench pass^k: ``C(c, k) / C(n, k)`` (``c`` successes of ``n`` trials).

    Raises:
        ValueError: ``k`` not in ``[1, n]`` or ``c`` not in ``[0, n]``.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"need 1 <= k <= n and 0 <= c <= n, got c={c}, n={n}, k={k}")
    return math.comb(c, k) / math.comb(n, k)


@functools.lru_cache(maxsize=65536)
def fisher_one_sided(
    k_cand: int, n_cand: int, k_base: int, n_base: int, alternative: Alternative = "greater"
) -> float:
    """One-sided Fisher's exact test that the candidate's rate is ``greater`` (or ``less``).

    ``k_*`` events of ``n_*`` runs. Returns 1.0 when either side has no runs or no side
    has an event (the test has no information). Results are cached per table.
    """
    if n_cand == 0 or n_base == 0 or k_cand + k_base == 0:
        return 1.0
    table = [[k_cand, n_cand - k_cand], [k_base, n_base - k_base]]
    return float(sps.fisher_exact(table, alternative=alternative).pvalue)


def mannwhitney_one_sided(
    cand: Sequence[float], base: Sequence[float], alternative: Alternative = "greater"
) -> float:
    """One-sided Mann-Whitney U test that candidate values tend to be ``greater`` (or ``less``).

    Returns 1.0 when a side is empty or all values are equal (no evidence either way).
    scipy chooses the exact distribution for small samples without ties, else the normal
    approximation with tie correction.
    """
    if not cand or not base or len(set(cand) | set(base)) == 1:
        return 1.0
    return _mwu(tuple(sorted(cand)), tuple(sorted(base)), alternative)


@functools.lru_cache(maxsize=65536)
def _mwu(cand: tuple[float, ...], base: tuple[float, ...], alternative: Alternative) -> float:
    return float(sps.mannwhitneyu(cand, base, alternative=alternative).pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (each in [0, 1])."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def repeats_needed(p_base: float, p_cand: float, alpha: float, power: float = 0.8) -> int | None:
    """Runs per side for a one-sided two-proportion test to detect ``p_base`` vs ``p_cand``.

    ``alpha`` is the per-test level (pass the Bonferroni share of the family's alpha for a
    conservative figure). Returns None when the rates are equal (no finite size).
    """
    if p_base == p_cand:
        return None
    z_a = float(sps.norm.ppf(1 - alpha))
    z_b = float(sps.norm.ppf(power))
    pbar = (p_base + p_cand) / 2
    num = z_a * math.sqrt(2 * pbar * (1 - pbar)) + z_b * math.sqrt(
        p_base * (1 - p_base) + p_cand * (1 - p_cand)
    )
    return max(2, math.ceil(num * num / (p_base - p_cand) ** 2))


def format_p(p: float | None) -> str:
    """A p-value as every view and reason prints it: two significant digits (``0.004``,
    ``2.7e-31``); ``""`` for None."""
    return "" if p is None else f"{p:.2g}"
