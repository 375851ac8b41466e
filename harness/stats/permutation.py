"""Exact stratified tests and the Westfall-Young permutation procedure.

The unit of every test is a scored run; runs are exchangeable only within a scenario (a
stratum), so every null distribution here permutes the side labels within each scenario,
keeping each scenario's numbers of baseline and candidate runs (infrastructure errors are
left out of both, which cannot unbalance a stratum).

- :func:`tail_table`: one scenario's one-sided p-values for every possible candidate count
  of an event: the hypergeometric tails, i.e. one-sided Fisher's exact test
  (``scipy.stats.fisher_exact(..., alternative="greater"/"less")`` gives the same value).
- :func:`stratified_null`: the exact conditional null distribution of the candidate's
  event count summed over scenarios, the convolution of the scenarios' hypergeometric
  distributions; its tails are the exact conditional (Cochran-)Mantel-Haenszel test of
  Mantel & Haenszel (1959) / Gart (1970), the one R's ``mantelhaen.test(exact = TRUE)``
  computes (statistic ``S``: the sum of the ``[1, 1]`` cells).
- :func:`westfall_young`: step-down min-p adjusted p-values (Westfall & Young 1993,
  *Resampling-Based Multiple Testing*, Algorithm 2.8): for each permutation the smallest
  p-value over the tests still in the step; the adjusted p of a test is the share of
  permutations (the observed labelling counted as one of them) whose minimum is at most
  its p-value. It controls the family-wise error (strongly, under subset pivotality) and,
  unlike Holm, uses the dependence between tests: near-identical tests of one broken
  scenario cost the family one test, and tests that cannot reach a small p cost nothing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps

__all__ = [
    "Stratum",
    "min_detectable_rate",
    "one_scenario_p",
    "permuted_columns",
    "permuted_counts",
    "stratified_null",
    "stratified_p",
    "tail_table",
    "westfall_young",
    "westfall_young_columns",
]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


@dataclass(frozen=True)
class Stratum:
    """One scenario's runs: ``events`` (runs x events, 0/1; row order is free) and
    ``n_cand``, how many of the runs are the candidate's (the first ``n_cand`` rows in
    the observed labelling)."""

    events: NDArray[np.int8]
    n_cand: int

    @property
    def runs(self) -> int:
        """The number of runs (rows of ``events``)."""
        return int(self.events.shape[0])

    def observed(self) -> Ints:
        """The candidate's count of each event (shape ``(events,)``)."""
        return np.asarray(self.events[: self.n_cand].sum(axis=0), dtype=np.int64)


@functools.lru_cache(maxsize=4096)
def _pmf_cached(runs: int, events: int, n_cand: int) -> Floats:
    pmf = np.asarray(sps.hypergeom.pmf(np.arange(n_cand + 1), runs, events, n_cand), float)
    pmf.setflags(write=False)
    return pmf


def _pmf(runs: int, events: int, n_cand: int) -> Floats:
    """P(candidate count = t), t = 0..n_cand, under random labels (hypergeometric;
    cached per margins, read-only)."""
    return _pmf_cached(runs, events, n_cand)


def _tails(pmf: Floats) -> tuple[Floats, Floats]:
    """``(P(T >= t), P(T <= t))`` for every t, clipped to [0, 1]."""
    upper = np.minimum(1.0, np.cumsum(pmf[::-1])[::-1])
    lower = np.minimum(1.0, np.cumsum(pmf))
    return upper, lower


def tail_table(runs: int, events: int, n_cand: int) -> tuple[Floats, Floats]:
    """One-sided Fisher p-values of every candidate count ``t = 0..n_cand`` of an event
    seen in ``events`` of ``runs`` runs, ``n_cand`` of them the candidate's:
    ``(worse[t], better[t]) = (P(T >= t), P(T <= t))``, ``T`` hypergeometric.

    Raises:
        ValueError: counts outside ``0 <= events, n_cand <= runs``.
    """
    if not (0 <= events <= runs and 0 <= n_cand <= runs):
        raise ValueError(f"need 0 <= events, n_cand <= runs; got {events}, {n_cand}, {runs}")
    return _tails(_pmf(runs, events, n_cand))


def stratified_null(strata: Sequence[tuple[int, int, int]]) -> Floats:
    """Exact null distribution of the candidate's event count summed over strata.

    ``strata``: ``(runs, events, n_cand)`` per scenario. Returns ``pmf[t]``,
    ``t = 0..sum(n_cand)``: the convolution of the strata's hypergeometric distributions
    (the exact conditional distribution of Mantel-Haenszel's ``S``; Gart 1970).
    """
    pmf = np.ones(1)
    for runs, events, n_cand in strata:
        pmf = np.convolve(pmf, _pmf(runs, events, n_cand))
    return np.asarray(pmf, dtype=float)


def stratified_p(
    observed: int, strata: Sequence[tuple[int, int, int]], alternative: str = "greater"
) -> float:
    """Exact conditional stratified p-value of the summed candidate count ``observed``.

    ``alternative``: ``"greater"`` (P(S >= observed)), ``"less"`` or ``"two-sided"``
    (the sum of the probabilities at most that of ``observed``, with R's relative
    tolerance 1e-7: R ``mantelhaen.test(exact = TRUE)``).

    Raises:
        ValueError: an unknown ``alternative``.
    """
    pmf = stratified_null(strata)
    if not 0 <= observed < len(pmf):
        return 0.0
    if alternative == "greater":
        return float(min(1.0, pmf[observed:].sum()))
    if alternative == "less":
        return float(min(1.0, pmf[: observed + 1].sum()))
    if alternative == "two-sided":
        return float(min(1.0, pmf[pmf <= pmf[observed] * (1 + 1e-7)].sum()))
    raise ValueError(f"alternative must be greater, less or two-sided, not {alternative!r}")


def permuted_counts(strata: Sequence[Stratum], permutations: int, seed: int) -> list[Ints]:
    """The candidate's count of every event in every scenario under ``permutations``
    random relabellings within each scenario: one ``(permutations, events)`` array per
    stratum (numpy ``default_rng(seed)``; the same ``seed`` gives the same arrays)."""
    return [c for c, _ in _draws(strata, permutations, seed)]


def _draws(strata: Sequence[Stratum], permutations: int, seed: int) -> Iterator[tuple[Ints, bool]]:
    """Each stratum's ``(permutations, events)`` counts in turn, and whether they were
    drawn (False: every relabelling gives the observed counts, a broadcast view)."""
    rng = np.random.default_rng(seed)
    for s in strata:
        if s.runs == 0 or s.n_cand in (0, s.runs) or bool((s.events == s.events[0]).all()):
            yield np.broadcast_to(s.observed(), (permutations, s.events.shape[1])), False
            continue
        keys = rng.random((permutations, s.runs))
        chosen = np.argpartition(keys, s.n_cand - 1, axis=1)[:, : s.n_cand]
        yield s.events[chosen].sum(axis=1, dtype=np.int64), True


def permuted_columns(
    strata: Sequence[Stratum],
    permutations: int,
    seed: int,
    keep: Sequence[Sequence[int]],
    pooled: Sequence[int],
) -> tuple[list[NDArray[np.int32]], Ints]:
    """:func:`permuted_counts` (the same draws from ``seed``), keeping of stratum ``i``
    only the event columns ``keep[i]`` (``(permutations, len(keep[i]))``, int32), and the
    sum over every stratum of the columns ``pooled`` (``(permutations, len(pooled))``):
    memory grows with the columns tested, not with every event of every scenario."""
    total = np.zeros((permutations, len(pooled)), dtype=np.int64)
    out: list[NDArray[np.int32]] = []
    for (counts, drawn), cols in zip(_draws(strata, permutations, seed), keep, strict=True):
        if drawn:
            out.append(np.ascontiguousarray(counts[:, list(cols)], dtype=np.int32))
        else:  # one row broadcast: no memory per permutation
            row = counts[0, list(cols)].astype(np.int32)
            out.append(np.broadcast_to(row, (permutations, len(cols))))
        if pooled:
            total += counts[:, list(pooled)]
    return out, total


def westfall_young(observed: Floats, permuted: Floats) -> Floats:
    """Step-down min-p adjusted p-values (Westfall & Young 1993, Algorithm 2.8).

    ``observed``: the tests' p-values, shape ``(tests,)``; ``permuted``: their p-values
    under each permutation, shape ``(permutations, tests)``. The observed labelling counts
    as one more permutation, so an adjusted p is at least ``1 / (permutations + 1)``.
    Returns the adjusted p-values in the input order, monotone in the observed ones.
    """
    m = observed.shape[0]
    if m == 0:
        return np.zeros(0)
    order = np.argsort(observed, kind="stable")
    q = np.minimum.accumulate(permuted[:, order][:, ::-1], axis=1)[:, ::-1]
    hits = (q <= observed[order] * (1 + 1e-9)).sum(axis=0)
    adjusted = np.maximum.accumulate((hits + 1) / (permuted.shape[0] + 1))
    out = np.empty(m)
    out[order] = np.minimum(1.0, adjusted)
    return out


def westfall_young_columns(
    observed: Floats, column: Callable[[int], Floats], permutations: int
) -> tuple[Floats, Floats]:
    """:func:`westfall_young` with the permuted p-values of test ``i`` given as
    ``column(i)`` (shape ``(permutations,)``), one at a time: memory ``O(permutations)``
    whatever the number of tests, the same adjusted p-values. Also returns each
    permutation's smallest p over the tests (all ones without a test)."""
    m = observed.shape[0]
    low = np.ones(permutations)
    if m == 0:
        return np.zeros(0), low
    order = np.argsort(observed, kind="stable")
    hits = np.empty(m)
    for rank in range(m - 1, -1, -1):  # the suffix minimum, largest observed p first
        i = int(order[rank])
        np.minimum(low, column(i), out=low)
        hits[rank] = np.count_nonzero(low <= observed[i] * (1 + 1e-9))
    adjusted = np.maximum.accumulate((hits + 1) / (permutations + 1))
    out = np.empty(m)
    out[order] = np.minimum(1.0, adjusted)
    return out, low


def one_scenario_p(n_cand: int, n_base: int) -> float:
    """One-sided Fisher p of a scenario failing in all ``n_cand`` candidate runs and in
    none of ``n_base`` baseline runs: ``1 / C(n_cand + n_base, n_cand)``."""
    return 1.0 / math.comb(n_cand + n_base, n_cand)


def min_detectable_rate(
    n_cand: int, n_base: int, critical: float, power: float = 0.8
) -> float | None:
    """Smallest rate of a new failure kind (absent from the baseline) in the candidate's
    runs that the stratified test detects with probability ``power``; None when even
    every run failing would not be detected.

    With ``t`` events, all in the candidate, the exact stratified p is at most
    ``share ** t`` (``share = n_cand / (n_cand + n_base)``; equal when each event is in a
    different scenario), so ``t* = floor(log(critical) / log(share)) + 1`` events are
    enough; the rate is the ``q`` with ``P(Binomial(n_cand, q) >= t*) = power``, i.e. the
    ``power`` quantile of ``Beta(t*, n_cand - t* + 1)`` (the binomial-beta identity).
    """
    if n_cand <= 0 or n_base <= 0 or critical <= 0:
        return None
    share = n_cand / (n_cand + n_base)
    t = math.floor(math.log(critical) / math.log(share) + 1e-9) + 1
    if t > n_cand:
        return None
    return float(sps.beta.ppf(power, t, n_cand - t + 1))
