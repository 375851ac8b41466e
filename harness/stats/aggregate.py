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

from harness.kinds import COUNT_METRICS, SUCCESS_METRICS
from harness.scoring.models import RunScore
from harness.stats.tests import pass_hat_k, wilson_interval
from harness.summary import Aggregate, CountStat, Rate

__all__ = ["AggregateBuilder", "aggregate", "count_stat", "outcomes", "rate"]


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
    #: (scenario id, repeat) -> the repeat's outcome set so far and its scored runs
    repeats: dict[tuple[str, int], tuple[frozenset[str], int]] = field(default_factory=dict)

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
        key, now = (score.scenario_id, score.repeat), frozenset(found)
        kept = self.repeats.get(key)
        self.repeats[key] = (now, 1) if kept is None else (_unit(kept[0], now), kept[1] + 1)
        for metric, histogram in self.counts.items():
            histogram[score.count(metric)] += 1

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
        if self.scenario_id != "*" and self.scored:
            pass_k = {str(k): pass_hat_k(passes, self.scored, k) for k in {1, self.scored}}
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
            units=self._units(),
        )

    def _units(self) -> dict[str, int]:
        """Repeats per outcome set, when some repeat has more than one scored run (else
        empty: the units are the runs, ``patterns``)."""
        if all(n == 1 for _, n in self.repeats.values()):
            return {}
        found = Counter(",".join(sorted(o)) for o, _ in self.repeats.values())
        return dict(sorted(found.items()))


def _unit(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    """Two runs of one repeat as one unit: the success outcomes (``passed``,
    ``final_answer``) both reached, and every failure kind either showed."""
    return (a & b) | frozenset(k for k in a | b if k not in SUCCESS_METRICS)


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
