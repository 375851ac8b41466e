r"""Aggregates over repeats: one side x one scenario, built one score at a time.

:class:`AggregateBuilder` takes :class:`~harness.scoring.models.RunScore`\ s one by one
(``scores.jsonl`` is streamed through it) and keeps only counters: per outcome the runs
showing it, per count metric a histogram of values, how runs ended. Its memory is
bounded by the number of distinct failure kinds and values and by the number of repeats
(one outcome set each: with ``--stream both`` a repeat's two runs are one unit of the
tests, :attr:`~harness.summary.Aggregate.units`), never by the number of runs.
:meth:`AggregateBuilder.build` gives the :class:`~harness.summary.Aggregate` written to
``summary.json``: rates with Wilson intervals, counts with mean and median, tau-bench
pass^k (:mod:`harness.stats.tests`).

Infrastructure errors are counted, never scored: they are left out of every rate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness.kinds import COUNT_METRICS, STREAM_ONLY_KINDS
from harness.scoring.models import RunScore
from harness.stats.tests import pass_hat_k, wilson_interval
from harness.summary import Aggregate, CountStat, Rate

__all__ = [
    "AggregateBuilder",
    "aggregate",
    "count_stat",
    "holding",
    "outcomes",
    "rate",
    "unit_count_stat",
    "unit_outcomes",
    "unit_rate",
]


def outcomes(score: RunScore) -> list[str]:
    """The binary outcomes a scored run counts towards: ``passed`` and ``final_answer``
    when it reached them, and each of its failure kinds."""
    out = ["passed"] if score.passed else []
    out += ["final_answer"] if score.final_answer else []
    return out + list(score.failures)


def rate(k: int, n: int) -> Rate:
    """``k`` of ``n`` with its 95% Wilson interval."""
    lo, hi = wilson_interval(k, n)
    return Rate(k=k, n=n, rate=k / n if n else None, low=lo, high=hi)


def count_stat(histogram: Counter[int]) -> CountStat:
    """Mean, median and total of the values in ``histogram`` (value -> runs)."""
    n = sum(histogram.values())
    if not n:
        return CountStat(n=0, mean=None, median=None, total=0, histogram={})
    total = sum(v * c for v, c in histogram.items())
    return CountStat(
        n=n,
        mean=total / n,
        median=_median(histogram, n),
        total=total,
        histogram=dict(sorted(histogram.items())),
    )


def _median(histogram: Counter[int], n: int) -> float:
    """The median of the values (the mean of the two middle ones for even ``n``)."""
    middle = [(n - 1) // 2, n // 2]
    found: list[int] = []
    seen = 0
    for value, runs in sorted(histogram.items()):
        while len(found) < 2 and middle[len(found)] < seen + runs:
            found.append(value)
        seen += runs
    return (found[0] + found[1]) / 2


@dataclass
class AggregateBuilder:
    """Counters of one side x one scenario (``"*"``: all scenarios pooled)."""

    side: str
    label: str
    scenario_id: str
    runs: int = 0
    scored: int = 0
    events: Counter[str] = field(default_factory=Counter)
    counts: dict[str, Counter[int]] = field(
        default_factory=lambda: {m: Counter() for m in COUNT_METRICS}
    )
    termination: Counter[str] = field(default_factory=Counter)
    termination_failed: Counter[str] = field(default_factory=Counter)
    patterns: Counter[str] = field(default_factory=Counter)
    #: (scenario id, repeat) -> streamed or not -> that run's outcome set
    repeats: dict[tuple[str, int], dict[bool, frozenset[str]]] = field(default_factory=dict)
    #: (scenario id, repeat) -> streamed or not -> that run's counts, in COUNT_METRICS order
    repeat_counts: dict[tuple[str, int], dict[bool, tuple[int, ...]]] = field(default_factory=dict)

    def add(self, score: RunScore) -> None:
        """Count one run (an infrastructure error counts as a run, not as scored)."""
        self.runs += 1
        self.termination[score.termination] += 1
        if not score.passed:
            self.termination_failed[score.termination] += 1
        if score.infra_error is not None:
            return
        self.scored += 1
        found = outcomes(score)
        self.events.update(found)
        self.patterns[",".join(sorted(found))] += 1
        self.repeats.setdefault((score.scenario_id, score.repeat), {})[score.stream] = frozenset(
            found
        )
        for metric, histogram in self.counts.items():
            histogram[score.count(metric)] += 1
        self.repeat_counts.setdefault((score.scenario_id, score.repeat), {})[score.stream] = tuple(
            score.count(m) for m in COUNT_METRICS
        )

    def kinds(self) -> set[str]:
        """The failure kinds some scored run showed."""
        return {k for k in self.events if k not in ("passed", "final_answer")}

    def build(self, kinds: Iterable[str] = ()) -> Aggregate:
        """The :class:`Aggregate`: rates of ``passed``, ``final_answer``, of each kind seen
        here and of each of ``kinds`` (the kinds the other side showed, so both sides of
        a comparison have the same rows)."""
        metrics = ["passed", "final_answer", *sorted(self.kinds() | set(kinds))]
        passes = self.events["passed"]
        pass_k: dict[str, float] = {}
        units = self._units()
        if self.scenario_id != "*" and self.scored:  # over repeats under --stream both
            n = sum(units.values()) if units else self.scored
            ok = holding(units, "passed") if units else passes
            pass_k = {str(k): pass_hat_k(ok, n, k) for k in {1, n}}
        return Aggregate(
            side=self.side,
            label=self.label,
            scenario_id=self.scenario_id,
            runs=self.runs,
            infra_errors=self.runs - self.scored,
            scored=self.scored,
            rates={m: rate(self.events[m], self.scored) for m in metrics},
            counts={m: count_stat(h) for m, h in self.counts.items()},
            pass_hat_k=pass_k,
            termination=dict(self.termination),
            termination_failed=dict(self.termination_failed),
            patterns=dict(sorted(self.patterns.items())),
            units=units,
            unit_counts=self._unit_counts() if units else {},
        )

    def _unit_counts(self) -> dict[str, CountStat]:
        """Each count over repeats: a repeat's non-streamed run's value (its streamed
        run's when that is the only one scored), as :func:`unit_outcomes` designates."""
        histograms: dict[str, Counter[int]] = {m: Counter() for m in COUNT_METRICS}
        for modes in self.repeat_counts.values():
            values = modes.get(False, modes.get(True, ()))
            for metric, value in zip(COUNT_METRICS, values, strict=True):
                histograms[metric][value] += 1
        return {m: count_stat(h) for m, h in histograms.items()}

    def _units(self) -> dict[str, int]:
        """Repeats per outcome set (:func:`unit_outcomes`), when some repeat has a
        streamed and a non-streamed scored run (else empty: the units are the runs,
        ``patterns``)."""
        if all(len(modes) == 1 for modes in self.repeats.values()):
            return {}
        found = Counter(",".join(sorted(unit_outcomes(m))) for m in self.repeats.values())
        return dict(sorted(found.items()))


def holding(patterns: dict[str, int], outcome: str) -> int:
    """How many of the runs or repeats counted in ``patterns`` (outcome set -> count) hold
    ``outcome``."""
    return sum(c for p, c in patterns.items() if outcome in p.split(","))


def unit_rate(agg: Aggregate, metric: str) -> Rate:
    """``metric``'s rate over the units the tests count: over repeats when ``agg.units``
    is set (``--stream both``: :func:`unit_outcomes`), else over scored runs
    (:meth:`~harness.summary.Aggregate.rate`)."""
    if not agg.units:
        return agg.rate(metric)
    return rate(holding(agg.units, metric), sum(agg.units.values()))


def unit_count_stat(agg: Aggregate, metric: str) -> CountStat | None:
    """``metric``'s count statistic over the units the tests count: over repeats when
    ``agg.units`` is set (:attr:`~harness.summary.Aggregate.unit_counts`), else over
    scored runs; None when ``agg`` has no such count."""
    if agg.units and metric in agg.unit_counts:
        return agg.unit_counts[metric]
    return agg.counts.get(metric)


def unit_outcomes(modes: dict[bool, frozenset[str]]) -> frozenset[str]:
    """One repeat's outcome set as a unit of the tests, from its runs by stream mode: the
    stream-only kinds (:data:`~harness.kinds.STREAM_ONLY_KINDS`) of its streamed run,
    every other outcome of its non-streamed run (of the streamed run when that is the
    only one scored).

    One designated run per outcome, not a combination of the two: each outcome's rate
    over units is then its rate over runs of that mode whatever the two runs share. A
    combination (failed if either run failed) would fail a repeat at p on a server that
    gives both runs the same draw and at 2p - p^2 on one that does not: a difference in
    how a server reproduces seeded samples read as one in quality."""
    main = modes.get(False, modes.get(True, frozenset()))
    streamed = modes.get(True, frozenset())
    return frozenset(k for k in main if k not in STREAM_ONLY_KINDS) | (streamed & STREAM_ONLY_KINDS)


def aggregate(
    side: str,
    label: str,
    scenario_id: str,
    scores: Iterable[RunScore],
    kinds: Iterable[str] = (),
) -> Aggregate:
    """The :class:`Aggregate` of ``scores`` (one side, one scenario or ``"*"``), with rows
    for ``kinds`` too (see :meth:`AggregateBuilder.build`)."""
    builder = AggregateBuilder(side, label, scenario_id)
    for score in scores:
        builder.add(score)
    return builder.build(kinds)
