"""The pass/fail rule of one scenario test: thresholds, and the compare verdict with a baseline.

:func:`judge` is a pure function of the scenario, the scored runs (and their records,
for the evidence) and the plugin's settings. Its rule, in order:

1. Infrastructure errors (server or network, ``RunScore.infra_error``) are never model
   failures: they are left out of every rate. When more than ``max_infra_error_rate``
   of a side's runs have one, or no run of a side could be scored, the outcome is
   ``infra`` (the test is reported as an *error*, not a failure).
2. Absolute thresholds, on the side under test (the target, or the candidate):
   - the fraction of runs ending in an acceptable final answer >= ``min_final_answer_rate``;
   - in every run, repeated identical calls beyond those the scenario itself expects
     (``RunScore.allowed_repeats``) <= ``max_repeated_calls``;
   - the fraction of runs passing every check of the scenario >= ``min_pass_rate``.
3. With a baseline: the compare verdict of the scenario is not ``REGRESSION``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.present.evidence import (
    expected_sequence,
    failure_counts,
    format_comparison,
    format_run,
    run_line,
)
from harness.pytest_plugin.options import HarnessSettings
from harness.scenario.model import Scenario
from harness.scoring.models import RunScore
from harness.stats.verdict import over_infra_limit
from harness.summary import Summary

__all__ = ["Judgement", "judge"]

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

    @property
    def headline(self) -> str:
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
    judged = [x for x in scores if x.infra_error is None]
    n = len(judged)
    reasons: list[str] = []
    finals = sum(x.final_answer_ok for x in judged)
    if finals / n < s.min_final_answer_rate:
        reasons.append(
            f"acceptable final answer in {finals}/{n} runs "
            f"(--min-final-answer-rate {s.min_final_answer_rate:g})"
        )
    looping = [x for x in judged if x.repeated_calls - x.allowed_repeats > s.max_repeated_calls]
    if looping:
        worst = max(looping, key=lambda x: x.repeated_calls)
        reasons.append(
            f"repeated identical tool calls in {len(looping)}/{n} runs, up to "
            f"{worst.repeated_calls} in one run (--max-repeated-calls {s.max_repeated_calls})"
        )
    passed = sum(x.passed for x in judged)
    if passed / n < s.min_pass_rate:
        reasons.append(
            f"passed {passed}/{n} runs (--min-pass-rate {s.min_pass_rate:g}); "
            f"failures: {failure_counts(judged)}"
        )
    return reasons


def _evidence(scenario: Scenario, scores: Sequence[RunScore], summary: Summary | None) -> str:
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
    """Apply the rule of the module docstring; see :class:`Judgement`. ``summary``: the
    comparison of this scenario's runs with a baseline (``summarize`` of both sides)."""
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
    reasons = _threshold_reasons(tested, settings)
    verdict = comparison.verdict if comparison is not None else None
    if verdict == "REGRESSION":
        reasons.append("compare verdict REGRESSION against the baseline")
    evidence = _evidence(scenario, scores, summary if comparison else None) if reasons else ""
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
