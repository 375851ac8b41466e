"""The family of baseline-against-candidate tests and its Westfall-Young adjustment.

Input: each side's :class:`~harness.summary.Aggregate` per scenario, whose ``patterns``
give every scored run's outcomes. Output: one :class:`FamilyTest` per (scenario, outcome)
and per outcome pooled over scenarios (``"*"``), each with its one-sided p-values and its
adjusted p-values, and the family's critical p-value at ``alpha``.

- A run's events: ``passed``/``final_answer`` not reached (success metrics count their
  failures), and each failure kind it showed. Infrastructure errors are not runs here.
- Per scenario: one-sided Fisher's exact test (:func:`~harness.stats.permutation.tail_table`).
- Pooled: the exact conditional stratified test, scenarios as strata
  (:func:`~harness.stats.permutation.stratified_null`; Mantel-Haenszel's ``S``).
- Multiplicity: both families (worse, better) are adjusted by the step-down min-p
  procedure of Westfall & Young (1993) over ``permutations`` relabellings within each
  scenario (:func:`~harness.stats.permutation.westfall_young`); ``final_answer`` is shown,
  never in a family (a missing final answer is already a failed run).
- Units: a run, or with ``--stream both`` a repeat (its streamed and its non-streamed run
  send one request seed, so on a server that honours it they are often one draw twice;
  counted as two, an A/A difference of 3 of 4 draws against 0 of 4 reads 6/8 against 0/8,
  Fisher's one-sided p 0.0035 instead of 0.071): the repeat's outcomes are its
  non-streamed run's, and its streamed run's stream-only kinds
  (:func:`harness.stats.aggregate.unit_outcomes`, :attr:`~harness.summary.Aggregate.units`).
- Greedy scenarios (temperature 0): the repeats of one side are copies of one transcript,
  not independent trials; each side's runs collapse to one unit (the most common outcome
  set) and the evidence comes from the test across scenarios.
- Copies (a side that ignores temperature and seed: the contract pre-flight,
  :mod:`harness.preflight`): that side's repeats of every scenario are one transcript
  replayed, not trials; its runs collapse to one unit in every scenario (the other side's
  stay as they are: they are independent), so no test counts a copy twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harness.kinds import SUCCESS_METRICS
from harness.stats.permutation import (
    Floats,
    Stratum,
    permuted_columns,
    stratified_null,
    tail_table,
    westfall_young_columns,
)
from harness.summary import Aggregate

__all__ = ["Family", "FamilyTest", "run_family", "runs_of"]

#: default number of permutations (Monte Carlo error of an adjusted p near 0.01: +-0.001)
PERMUTATIONS = 10_000


@dataclass
class FamilyTest:
    """One test: candidate ``k_c`` of ``n_c`` units (runs, or repeats under ``--stream
    both``) with the event, baseline ``k_b`` of ``n_b`` (after any collapse); one-sided
    p-values and, when in a family, the Westfall-Young adjusted ones."""

    scenario: str
    metric: str
    k_b: int
    n_b: int
    k_c: int
    n_c: int
    p_worse: float
    p_better: float
    adj_worse: float | None = None
    adj_better: float | None = None
    #: the smallest one-sided p (worse) these margins allow: every event in the candidate
    min_p_worse: float = 0.0

    @property
    def in_family(self) -> bool:
        """Whether the test is in the multiple-testing family (every metric but final_answer)."""
        return self.metric != "final_answer"


@dataclass(frozen=True)
class Family:
    """Every test, how many permutations adjusted them, the critical p-values (a test is
    significant iff its one-sided p is below ``critical_worse``/``critical_better``), and
    the scenarios whose repeats collapsed to one unit (greedy), and the sides whose repeats
    collapsed in every scenario (copies: they ignore temperature and seed)."""

    tests: list[FamilyTest]
    permutations: int
    critical_worse: float
    critical_better: float
    collapsed: list[str]
    copies: list[str] = field(default_factory=list)


def _comonotone(agg: Aggregate) -> dict[str, int]:
    """Outcome sets consistent with the rates alone (summaries without ``patterns``):
    run ``i`` shows a failure kind iff ``i < k``, fails iff ``i < n - passed``."""
    n = agg.scored
    out: Counter[str] = Counter()
    for i in range(n):
        found = [m for m in SUCCESS_METRICS if i >= n - agg.rate(m).k]
        found += [m for m in agg.failing_kinds() if i < agg.rate(m).k]
        out[",".join(sorted(found))] += 1
    return dict(out)


def runs_of(agg: Aggregate, collapse: bool = False) -> list[frozenset[str]]:
    """The outcome set of every unit of ``agg``: each repeat when a repeat has more than
    one scored run (``--stream both``: :attr:`~harness.summary.Aggregate.units`), else
    each scored run; with ``collapse``, only the most common one (a greedy scenario's
    repeats are one unit)."""
    patterns = agg.units or agg.patterns or _comonotone(agg)
    runs = [frozenset(p.split(",")) - {""} for p, c in patterns.items() for _ in range(c)]
    if collapse and runs:
        return [Counter(runs).most_common(1)[0][0]]
    return runs


def _events(runs: Sequence[frozenset[str]], metrics: Sequence[str]) -> np.ndarray:
    """Runs x metrics 0/1: the event of each metric (a success metric's failure)."""
    rows = [[(m not in r) if m in SUCCESS_METRICS else (m in r) for m in metrics] for r in runs]
    return np.asarray(rows, dtype=np.int8).reshape(len(runs), len(metrics))


@dataclass
class _Tables:
    """A test's stratum (``None``: pooled) and p-value lookup by candidate count."""

    stratum: int | None
    col: int
    worse: Floats
    better: Floats


def _build(
    baseline: Mapping[str, Aggregate],
    candidate: Mapping[str, Aggregate],
    metrics_by_id: Mapping[str, Sequence[str]],
    greedy: set[str],
    copies: frozenset[str] = frozenset(),
) -> tuple[list[Stratum], list[FamilyTest], list[_Tables]]:
    """The strata, the tests (observed p-values) and their lookup tables."""
    ids = [s for s in metrics_by_id if s != "*"]
    cols = list(dict.fromkeys(m for ms in metrics_by_id.values() for m in ms))
    strata = []
    for s in ids:
        rc = runs_of(candidate[s], s in greedy or "candidate" in copies)
        rb = runs_of(baseline[s], s in greedy or "baseline" in copies)
        strata.append(Stratum(_events([*rc, *rb], cols), len(rc)))
    tests, tables = [], []
    for i, s in enumerate(ids):
        st = strata[i]
        for m in metrics_by_id[s]:
            j = cols.index(m)
            k = int(st.events[:, j].sum())
            w, b = tail_table(st.runs, k, st.n_cand)
            tables.append(_Tables(i, j, w, b))
            tests.append(_observed(s, m, st.observed()[j], k, st.n_cand, st.runs, w, b))
    for m in metrics_by_id.get("*", ()):
        j = cols.index(m)
        shape = [(st.runs, int(st.events[:, j].sum()), st.n_cand) for st in strata]
        pmf = stratified_null(shape)
        w = np.minimum(1.0, np.cumsum(pmf[::-1])[::-1])
        b = np.minimum(1.0, np.cumsum(pmf))
        tables.append(_Tables(None, j, w, b))
        obs = sum(int(st.observed()[j]) for st in strata)
        k = sum(x[1] for x in shape)
        n_c = sum(st.n_cand for st in strata)
        tests.append(_observed("*", m, obs, k, n_c, sum(st.runs for st in strata), w, b))
    return strata, tests, tables


def _observed(
    s: str, m: str, k_c: int, k: int, n_c: int, runs: int, w: Floats, b: Floats
) -> FamilyTest:
    k_c = int(k_c)
    t = FamilyTest(s, m, k - k_c, runs - n_c, k_c, n_c, float(w[k_c]), float(b[k_c]))
    t.min_p_worse = float(w[min(k, n_c)])
    return t


def _critical(permuted_min: Floats, alpha: float) -> float:
    """The p below which a test is significant: the adjusted p
    ``(1 + #{min p* <= p}) / (B + 1)`` stays at most ``alpha`` below it (and an
    adjusted p is never below the test's own, so it is at most ``alpha``)."""
    allowed = int(np.floor(alpha * (permuted_min.shape[0] + 1) + 1e-9)) - 1
    if allowed < 0:
        return 0.0
    ordered = np.sort(permuted_min)
    return min(alpha, float(ordered[allowed]) if allowed < ordered.shape[0] else 1.0)


def _drawn_columns(
    strata: Sequence[Stratum],
    tables: Sequence[_Tables],
    fam: Sequence[int],
    permutations: int,
    seed: int,
) -> Callable[[int], NDArray[Any]]:
    """``drawn(i)``: the candidate's permuted counts of test ``i``'s event (its stratum's,
    or pooled over the strata), ``(permutations,)``, from the draws of
    :func:`~harness.stats.permutation.permuted_columns` (only the columns the family
    tests are kept: memory grows with the tests, not with every event of every scenario)."""
    keep: list[list[int]] = [[] for _ in strata]
    pooled: list[int] = []
    for i in fam:
        tb = tables[i]
        cols = keep[tb.stratum] if tb.stratum is not None else pooled
        if tb.col not in cols:
            cols.append(tb.col)
    counts, total = permuted_columns(strata, permutations, seed, keep, pooled)

    def drawn(i: int) -> NDArray[Any]:
        tb = tables[i]
        if tb.stratum is None:
            return total[:, pooled.index(tb.col)]
        return counts[tb.stratum][:, keep[tb.stratum].index(tb.col)]

    return drawn


def run_family(
    baseline: Mapping[str, Aggregate],
    candidate: Mapping[str, Aggregate],
    metrics_by_id: Mapping[str, Sequence[str]],
    *,
    alpha: float,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    greedy: Sequence[str] = (),
    copies: Sequence[str] = (),
) -> Family:
    """Test every (scenario, metric) of ``metrics_by_id`` (``"*"``: pooled, stratified)
    and adjust both directions by Westfall-Young over ``permutations`` within-scenario
    relabellings drawn from ``seed`` (the same inputs give the same result). ``greedy``:
    scenarios whose runs collapse on both sides; ``copies``: sides (``"baseline"``,
    ``"candidate"``) whose runs collapse in every scenario."""
    copied = frozenset(copies) & {"baseline", "candidate"}
    strata, tests, tables = _build(baseline, candidate, metrics_by_id, set(greedy), copied)
    fam = [i for i, t in enumerate(tests) if t.in_family]
    drawn = _drawn_columns(strata, tables, fam, permutations, seed)
    crit = []
    for direction in ("worse", "better"):

        def column(k: int, direction: str = direction) -> Floats:
            return getattr(tables[fam[k]], direction)[drawn(fam[k])]  # type: ignore[no-any-return]

        obs = np.asarray([getattr(tests[i], f"p_{direction}") for i in fam], dtype=float)
        adjusted, low = westfall_young_columns(obs, column, permutations)
        for i, adj in zip(fam, adjusted, strict=True):
            setattr(tests[i], f"adj_{direction}", float(adj))
        crit.append(_critical(low, alpha))
    collapsed = [s for s in metrics_by_id if s in set(greedy)]
    return Family(tests, permutations, crit[0], crit[1], collapsed, sorted(copied))
