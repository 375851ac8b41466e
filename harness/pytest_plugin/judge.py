"""The pass/fail rule of one scenario test: thresholds alone, or the comparison with a baseline.

:func:`judge` is a pure function of the scenario, the scored runs (and their records,
for the evidence), the plugin's settings and, with a baseline, the comparison. Its rule,
in order:

1. Infrastructure errors (server or network, ``RunScore.infra_error``) are never model
   failures: they are left out of every rate. When more than ``max_infra_error_rate``
   of a side's runs have one, or no run of a side could be scored, the outcome is
   ``infra`` (the test is reported as an *error*, not a failure). With a baseline, a
   scenario the comparison could not decide (unfinished) is an ``infra`` outcome too.
2. Without a baseline: absolute thresholds, on the target's runs:
   - the fraction of runs ending in an acceptable final answer >= ``min_final_answer_rate``;
   - in every run, repeated identical calls beyond those the scenario itself expects
     (``RunScore.allowed_repeats``) <= ``max_repeated_calls``;
   - the fraction of runs passing every check of the scenario >= ``min_pass_rate``.
3. With a baseline (a server or a recording): the test fails when the comparison finds
   its scenario worse, i.e. **the comparison's verdict is REGRESSION and the scenario is
   worse in it**: a row of its own is significantly worse (its verdict is REGRESSION), or
   a metric is significantly worse pooled over the scenarios and the scenario's candidate
   is worse on that metric (a higher failure rate than the baseline's, significant alone
   or not: the scenarios the pooled regression comes from). Both are judged in compare's
   one Westfall-Young family at the look's level (``summary.comparisons``: the rows'
   ``significant`` and ``worse``), so a session of equal servers fails any test with
   probability at most ``alpha`` (0.01; under ``--harness-batch off`` each test is a
   comparison of its own scenario alone, at most ``alpha`` each). A scenario that is only ``WORSE (not
   significant alone)`` under an overall NO CHANGE or INCONCLUSIVE passes: that is noise
   until a look says otherwise. The thresholds of 2 apply on top only when given
   explicitly (flag, environment or ini: ``HarnessSettings.explicit``); their defaults
   would fail a real model that its own baseline fails as often.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.kinds import label
from harness.present.evidence import (
    expected_sequence,
    failure_counts,
    format_comparison,
    format_run,
    run_line,
)
from harness.present.terminal import printable
from harness.pytest_plugin.options import HarnessSettings
from harness.scenario.model import Scenario
from harness.scoring.models import RunScore
from harness.stats.verdict import over_infra_limit
from harness.summary import MetricRow, Summary

__all__ = ["Judgement", "compare_reasons", "judge"]

Outcome = Literal["passed", "failed", "infra"]


@dataclass
class Judgement:
    """The outcome of one scenario test.

    ``reasons``: one line per broken rule (empty when passed); ``evidence``: the text
    shown under a failure; ``properties``: ``(name, value)`` pairs for JUnit XML.
    """

    outcome: Outcome
    reasons: list[str] = field(default_factory=list)
    evidence: str = ""
    properties: list[tuple[str, object]] = field(default_factory=list)
    verdict: str | None = None  # the compare verdict, with a baseline

    def __post_init__(self) -> None:
        # model and server text, printed by pytest: no terminal escape sequences
        self.reasons = [printable(r) for r in self.reasons]
        self.evidence = printable(self.evidence)

    @property
    def headline(self) -> str:
        """The reasons in one line, or the outcome when there are none."""
        return "; ".join(self.reasons) if self.reasons else self.outcome


def _pct(rate: float) -> str:
    return f"{rate:.0%}"


def _infra_reason(side: str, scores: Sequence[RunScore], limit: float) -> str | None:
    errors = [s for s in scores if s.infra_error is not None]
    if not scores:
        return f"{side}: no runs were made"
    if over_infra_limit(len(scores), len(errors), limit):
        first = errors[0].infra_error
        assert first is not None
        return (
            f"{side}: {len(errors)} of {len(scores)} runs failed for server/network reasons "
            f"(limit {_pct(limit)}); first: {first.kind}: {first.message[:200]}"
        )
    return None


def _threshold_reasons(scores: Sequence[RunScore], s: HarnessSettings) -> list[str]:
    """Rule 2: the absolute thresholds that apply (all without a baseline; with one, only
    those given explicitly)."""
    judged = [x for x in scores if x.infra_error is None]
    n = len(judged)
    reasons: list[str] = []
    finals = sum(x.final_answer_ok for x in judged)
    if s.applies("min_final_answer_rate") and finals / n < s.min_final_answer_rate:
        reasons.append(
            f"acceptable final answer in {finals}/{n} runs "
            f"(--harness-min-final-answer-rate {s.min_final_answer_rate:g})"
        )
    looping = [x for x in judged if x.repeated_calls - x.allowed_repeats > s.max_repeated_calls]
    if looping and s.applies("max_repeated_calls"):
        worst = max(looping, key=lambda x: x.repeated_calls)
        reasons.append(
            f"repeated identical tool calls in {len(looping)}/{n} runs, up to "
            f"{worst.repeated_calls} in one run (--harness-max-repeated-calls {s.max_repeated_calls})"
        )
    passed = sum(x.passed for x in judged)
    if s.applies("min_pass_rate") and passed / n < s.min_pass_rate:
        reasons.append(
            f"passed {passed}/{n} runs (--harness-min-pass-rate {s.min_pass_rate:g}); "
            f"failures: {failure_counts(judged)}"
        )
    return reasons


def _rate_text(summary: Summary, scenario_id: str, metric: str) -> str:
    """``candidate 0/10, baseline 10/10`` (as the tables show the metric)."""
    cells = []
    for side in ("candidate", "baseline"):
        agg = summary.aggregate(side, scenario_id)
        cells.append(f"{side} {agg.rate(metric).text() if agg else '-'}")
    return ", ".join(cells)


def _rows_text(summary: Summary, scenario_id: str, rows: Sequence[MetricRow]) -> str:
    """The first two rows' rates (``passed`` first), and how many more."""
    rows = sorted(rows, key=lambda r: r.metric != "passed")
    text = "; ".join(
        f"{label(r.metric)}: {_rate_text(summary, scenario_id, r.metric)}" for r in rows[:2]
    )
    return text + (f"; {len(rows) - 2} more" if len(rows) > 2 else "")


def compare_reasons(scenario_id: str, summary: Summary) -> list[str]:
    """Rule 3: why the comparison finds ``scenario_id`` worse (one line), or ``[]``."""
    verdict = summary.verdict
    comp = summary.comparison(scenario_id)
    if verdict is None or verdict.verdict != "REGRESSION" or comp is None:
        return []
    own = [r for r in comp.rows if r.significant and r.worse]
    if own:
        what = _rows_text(summary, scenario_id, own)
        return [
            "compare verdict REGRESSION against the baseline: this scenario is "
            f"significantly worse ({what})"
        ]
    pool = summary.comparison("*")
    pooled = {r.metric for r in pool.rows if r.significant and r.worse} if pool else set()
    mine = [r for r in comp.rows if r.metric in pooled and r.worse]
    if not mine:
        return []
    what = _rows_text(summary, scenario_id, mine)
    names = ", ".join(label(m) for m in sorted(pooled))
    return [
        f"compare verdict REGRESSION against the baseline (pooled over scenarios: {names}); "
        f"this scenario is worse on it, not significant alone ({what})"
    ]


def _evidence(
    scenario: Scenario, scores: Sequence[RunScore], summary: Summary | None, pooled: bool
) -> str:
    lines = ["expected calls:"]
    lines += ["  " + x for x in expected_sequence(scenario)] or ["  (none)"]
    lines.append(f"runs ({len(scores)}):")
    lines += ["  " + run_line(x) for x in scores]
    worst = _worst_run(scores)
    if worst is not None:
        lines.append(f"first failed run ({worst.side} run {worst.repeat}):")
        lines += format_run(worst)
    if summary is not None:
        lines += format_comparison(summary, scenario.id)
        if pooled:  # what the pool found
            lines += [line.replace("compare verdict:", "pooled over scenarios:", 1)
                      for line in format_comparison(summary, "*")]  # fmt: skip
    return "\n".join(lines)


def _worst_run(scores: Sequence[RunScore]) -> RunScore | None:
    """The first failed scored run of the side under test (``candidate`` first)."""
    failed = [s for s in scores if s.infra_error is None and not s.passed]
    failed.sort(key=lambda s: (s.side == "baseline", s.repeat))
    return failed[0] if failed else None


def judge(
    scenario: Scenario,
    scores: Sequence[RunScore],
    settings: HarnessSettings,
    *,
    summary: Summary | None = None,
) -> Judgement:
    """Apply the rule of the module docstring; see :class:`Judgement`. ``summary``: with
    a baseline, the comparison this scenario was judged in (the session's, over every
    selected scenario; or its own under ``--harness-batch off``)."""
    scores = sorted(scores, key=lambda s: (s.side == "baseline", s.repeat, s.stream))
    tested = [s for s in scores if s.side != "baseline"]
    base = [s for s in scores if s.side == "baseline"]
    comparison = summary.comparison(scenario.id) if summary is not None else None
    props = _properties(tested, comparison.verdict if comparison else None)
    infra = [
        _infra_reason("target" if not base else "candidate", tested, settings.max_infra_error_rate)
    ]
    if settings.baseline:
        infra.append(_infra_reason("baseline", base, settings.max_infra_error_rate))
    infra_reasons = [r for r in infra if r]
    if infra_reasons:
        return Judgement("infra", infra_reasons, "\n".join(run_line(x) for x in scores), props)
    verdict = comparison.verdict if comparison is not None else None
    if settings.baseline and comparison is None:
        why = summary.verdict.message if summary is not None and summary.verdict else None
        reason = f"no comparison of this scenario against the baseline ({why or 'no runs'})"
        return Judgement("infra", [reason], "\n".join(run_line(x) for x in scores), props)
    reasons = compare_reasons(scenario.id, summary) if summary is not None else []
    pooled = bool(reasons) and "(pooled over scenarios:" in reasons[0]
    reasons += _threshold_reasons(tested, settings)
    shown = summary if comparison else None
    evidence = _evidence(scenario, scores, shown, pooled) if reasons else ""
    return Judgement("failed" if reasons else "passed", reasons, evidence, props, verdict)


def _properties(tested: Sequence[RunScore], verdict: str | None) -> list[tuple[str, object]]:
    judged = [s for s in tested if s.infra_error is None]
    props: list[tuple[str, object]] = [
        ("runs", len(tested)),
        ("infra_errors", len(tested) - len(judged)),
        ("tool_calls", sum(s.tool_calls for s in judged)),
        ("repeated_calls", sum(s.repeated_calls for s in judged)),
        ("final_answers", sum(s.final_answer_ok for s in judged)),
        ("passed_runs", sum(s.passed for s in judged)),
        ("failure_kinds", failure_counts(judged)),
    ]
    if verdict is not None:
        props.append(("verdict", verdict))
    return props
