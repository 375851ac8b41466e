"""Aggregates over repeats, baseline-against-candidate tests, and the verdict (pure).

Used by :mod:`harness.pipeline`. Decision rule (documented in ``Settings.decision_rule`` of every summary):

1. Each scored run gives binary outcomes: ``failed`` (not passed) and one per failure kind.
   Infrastructure errors are excluded.
2. For every scenario, and for all scenarios pooled (``"*"``; both sides run the same
   scenarios and repeats, so pooling is balanced), each outcome is tested with a one-sided
   Fisher's exact test that the candidate's rate is higher (regression family) and, apart,
   lower (improvement family).
3. A test enters its family only if it could reach ``alpha`` at all: its smallest p-value
   given the table's margins is ``<= alpha`` (Tarone 1990). Tests with no events never do.
4. Holm's step-down adjustment over each family; a test is significant at adjusted
   ``p <= alpha`` (default 0.01).
5. ``REGRESSION``: any significant regression. ``IMPROVEMENT``: none, and a significant
   improvement. ``INCONCLUSIVE``: neither, but some outcome is worse in the candidate with
   unadjusted one-sided ``p < 0.1``, or fails every candidate run and no baseline run (too
   few repeats to prove it); the verdict gives about how many more repeats per
   scenario a two-proportion test at the Bonferroni share of ``alpha`` and 80% power needs
   for the observed rates (:func:`harness.stats.tests.repeats_needed`). ``NO CHANGE`` otherwise
   (failure kinds seen only in the candidate are still listed in ``new_failure_kinds``).

Counts (tool calls, repeated calls, ...) are shown with a one-sided Mann-Whitney U test;
they do not decide the verdict (their failure kinds do).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.stats.tests import (
    fisher_one_sided,
    holm,
    mannwhitney_one_sided,
    pass_hat_k,
    repeats_needed,
    wilson_interval,
)
from harness.summary import (
    Aggregate,
    CountStat,
    MetricRow,
    Rate,
    RunScore,
    ScenarioComparison,
    Summary,
    Verdict,
    VerdictName,
)

__all__ = [
    "ALPHA",
    "COUNT_METRICS",
    "DECISION_RULE",
    "INFRA_ERROR_LIMIT",
    "aggregate",
    "compare_sides",
    "count_of",
    "format_p",
    "outcomes",
    "p_legend",
    "scenario_name",
    "verdict_label",
]

#: family-wise level for REGRESSION / IMPROVEMENT
ALPHA = 0.01
#: share of a side's runs that may be infrastructure errors before the exit code is 3
INFRA_ERROR_LIMIT = 0.2
#: unadjusted one-sided p below which an unproven difference makes INCONCLUSIVE
SUGGESTIVE_P = 0.1

DECISION_RULE = (
    "one-sided Fisher's exact test per scenario and pooled, for 'failed' and each failure "
    "kind; tests that cannot reach alpha given their margins are left out (Tarone); Holm "
    f"across the rest; REGRESSION at adjusted p <= alpha (alpha={ALPHA})"
)

#: per-run counts shown in the tables: metric -> (label, getter)
COUNT_METRICS: dict[str, str] = {
    "tool_calls": "tool calls",
    "repeated_calls": "repeated identical calls",
    "malformed_args": "malformed arguments",
    "drift": "drifted arguments",
    "schema_violations": "schema violations",
    "turns": "turns",
}


def format_p(p: float | None) -> str:
    """A p-value as every view prints it: two significant digits (``0.004``, ``2.7e-31``);
    ``""`` for None."""
    return "" if p is None else f"{p:.2g}"


def scenario_name(scenario_id: str) -> str:
    """How a comparison is named in reasons: the scenario id, or ``all scenarios`` for ``*``."""
    return "all scenarios" if scenario_id == "*" else scenario_id


def p_legend(summary: Summary) -> str:
    """The one-line legend of the p columns and of ``*`` (console, HTML and Markdown).

    ``N``, the Holm family's size, is read from the comparisons (``holm_tests``)."""
    family = max((c.holm_tests or 0 for c in summary.comparisons), default=0)
    over = f" over the {family} tests that decide the verdict" if family else ""
    return (
        "p (one-sided): Fisher's exact test for rates, Mann-Whitney U for counts; "
        f"p adj. (Holm): Holm-adjusted{over} (blank: not among them); "
        f"* significant after Holm at alpha {summary.settings.alpha:g}"
    )


def verdict_label(comp: ScenarioComparison) -> str:
    """What a comparison is labelled: ``comp.display`` (``WORSE (not significant alone)``)
    or its verdict."""
    return comp.display or comp.verdict


def count_of(score: RunScore, metric: str) -> int:
    """The value of a count metric (see :data:`COUNT_METRICS`) for one run."""
    value = getattr(score, metric)
    return len(value) if isinstance(value, list) else int(value)


def _rate(k: int, n: int) -> Rate:
    lo, hi = wilson_interval(k, n)
    return Rate(k=k, n=n, rate=k / n if n else None, low=lo, high=hi)


def _count(values: list[int]) -> CountStat:
    return CountStat(
        n=len(values),
        mean=statistics.fmean(values) if values else None,
        median=float(statistics.median(values)) if values else None,
        total=sum(values),
        values=values,
    )


def outcomes(score: RunScore, kinds: Iterable[str]) -> dict[str, bool]:
    """Binary outcomes of one scored run: ``passed``, ``final_answer`` and each kind."""
    out = {"passed": score.passed, "final_answer": score.final_answer}
    out.update({k: k in score.failures for k in kinds})
    return out


def aggregate(
    side: str, label: str, scenario_id: str, scores: Sequence[RunScore], kinds: Sequence[str]
) -> Aggregate:
    """One side x one scenario (or ``"*"``) over its runs; infra errors counted, not scored."""
    scored = [s for s in scores if s.infra_error is None]
    rates = {
        m: _rate(sum(outcomes(s, kinds)[m] for s in scored), len(scored))
        for m in ["passed", "final_answer", *kinds]
    }
    counts = {m: _count([count_of(s, m) for s in scored]) for m in COUNT_METRICS}
    n, c = len(scored), sum(s.passed for s in scored)
    pass_k: dict[str, float] = {}
    if scenario_id != "*":
        pass_k = {str(k): pass_hat_k(c, n, k) for k in range(1, n + 1)}
    return Aggregate(
        side=side,
        label=label,
        scenario_id=scenario_id,
        runs=len(scores),
        infra_errors=len(scores) - n,
        scored=n,
        rates=rates,
        counts=counts,
        pass_hat_k=pass_k,
        termination=dict(Counter(s.termination for s in scores)),
        termination_failed=dict(Counter(s.termination for s in scores if not s.passed)),
    )


@dataclass
class _Test:
    """One candidate-vs-baseline outcome test (a row and its place in a family)."""

    scenario: str
    metric: str
    k_b: int
    n_b: int
    k_c: int
    n_c: int
    p_worse: float
    p_better: float
    min_p_worse: float
    min_p_better: float


def _min_p(k_b: int, n_b: int, k_c: int, n_c: int, alternative: str) -> float:
    """Smallest one-sided Fisher p attainable with these margins (Tarone 1990)."""
    t = k_b + k_c
    if alternative == "greater":
        kc = min(t, n_c)
        return fisher_one_sided(kc, n_c, t - kc, n_b, "greater")
    kb = min(t, n_b)
    return fisher_one_sided(t - kb, n_c, kb, n_b, "less")


def _test(scenario: str, metric: str, base: Aggregate, cand: Aggregate) -> _Test:
    rb, rc = base.rates[metric], cand.rates[metric]
    bad_b, bad_c = rb.k, rc.k
    if metric in ("passed", "final_answer"):  # success rates: the event tested is failure
        bad_b, bad_c = rb.n - rb.k, rc.n - rc.k
    return _Test(
        scenario,
        metric,
        bad_b,
        rb.n,
        bad_c,
        rc.n,
        p_worse=fisher_one_sided(bad_c, rc.n, bad_b, rb.n, "greater"),
        p_better=fisher_one_sided(bad_c, rc.n, bad_b, rb.n, "less"),
        min_p_worse=_min_p(bad_b, rb.n, bad_c, rc.n, "greater"),
        min_p_better=_min_p(bad_b, rb.n, bad_c, rc.n, "less"),
    )


def _holm_family(tests: list[_Test], attr: str, alpha: float) -> dict[tuple[str, str], float]:
    side = "worse" if attr == "p_worse" else "better"
    family = [
        t for t in tests if getattr(t, f"min_p_{side}") <= alpha and t.metric != "final_answer"
    ]
    adjusted = holm([getattr(t, attr) for t in family])
    return {(t.scenario, t.metric): p for t, p in zip(family, adjusted, strict=True)}


def _fmt_rate(r: Rate, success: bool) -> str:
    return f"{r.k}/{r.n}" if success else f"{r.k}/{r.n} runs"


def _fmt_count(c: CountStat) -> str:
    if not c.values:
        return "-"
    vals = ", ".join(map(str, c.values)) if len(c.values) <= 5 else f"median {c.median:g}"
    return f"{c.total} ({vals})"


_LABELS = {"passed": "passed", "final_answer": "reached a final answer", "failed": "failed"}


def _rate_row(
    t: _Test,
    base: Aggregate,
    cand: Aggregate,
    worse_adj: dict[Any, float],
    better_adj: dict[Any, float],
    alpha: float,
) -> MetricRow:
    rb, rc = base.rates[t.metric], cand.rates[t.metric]
    effect = (rc.rate - rb.rate) if rc.rate is not None and rb.rate is not None else None
    worse = (
        None
        if t.k_c / max(t.n_c, 1) == t.k_b / max(t.n_b, 1)
        else t.k_c / max(t.n_c, 1) > t.k_b / max(t.n_b, 1)
    )
    key = (t.scenario, t.metric)
    adj = worse_adj.get(key) if worse else better_adj.get(key) if worse is False else None
    success = t.metric in ("passed", "final_answer")
    return MetricRow(
        metric=t.metric,
        label=_LABELS.get(t.metric, t.metric),
        kind="rate",
        baseline=rb.rate,
        candidate=rc.rate,
        baseline_text=_fmt_rate(rb, success),
        candidate_text=_fmt_rate(rc, success),
        effect=effect,
        worse=worse,
        p_value=t.p_worse if worse else t.p_better if worse is False else 1.0,
        p_adjusted=adj,
        test=f"Fisher exact, one-sided ({'worse' if worse else 'better'})",
        significant=adj is not None and adj <= alpha,
        decisive=key in worse_adj or key in better_adj,
    )


def _count_row(metric: str, base: Aggregate, cand: Aggregate) -> MetricRow:
    cb, cc = base.counts[metric], cand.counts[metric]
    effect = cc.mean - cb.mean if cc.mean is not None and cb.mean is not None else None
    worse = None if not effect else effect > 0
    alt = "greater" if worse is not False else "less"
    p = mannwhitney_one_sided(cc.values, cb.values, alt)  # type: ignore[arg-type]
    return MetricRow(
        metric=metric,
        label=COUNT_METRICS[metric],
        kind="count",
        baseline=cb.mean,
        candidate=cc.mean,
        baseline_text=_fmt_count(cb),
        candidate_text=_fmt_count(cc),
        effect=effect,
        worse=worse,
        p_value=p,
        test=f"Mann-Whitney U, one-sided ({'more' if alt == 'greater' else 'fewer'})",
    )


def _needed(t: _Test, alpha_share: float, pooled_over: int) -> int | None:
    """Repeats per scenario (in total) to settle ``t`` at its observed rates.

    Observed rates are smoothed by half a run, ``(k + 0.5) / (n + 1)``, so that 0/n and n/n
    give a finite size; pooled tests divide the runs needed by the number of scenarios.
    """
    pb = (t.k_b + 0.5) / (t.n_b + 1)
    pc = (t.k_c + 0.5) / (t.n_c + 1)
    n = repeats_needed(pb, pc, alpha_share)
    return None if n is None else math.ceil(n / max(pooled_over, 1))


@dataclass
class Comparison:
    """The comparisons of every scenario (plus ``"*"``) and the overall verdict."""

    scenarios: list[ScenarioComparison]
    verdict: Verdict


def compare_sides(
    base_aggs: dict[str, Aggregate],
    cand_aggs: dict[str, Aggregate],
    kinds: Sequence[str],
    *,
    alpha: float = ALPHA,
) -> Comparison:
    """Test every scenario's outcomes (keys of the dicts, ``"*"`` pooled) and decide.

    See the module docstring for the rule. The returned verdict's ``exit_code`` is 1 for
    REGRESSION and 0 otherwise (the caller applies the infrastructure-error limit).
    """
    ids = [s for s in base_aggs if s in cand_aggs]
    if len(ids) == 2 and "*" in ids:  # one scenario: the pool would only repeat its tests
        ids.remove("*")
    metrics = ["passed", "final_answer", *kinds]
    tests = [_test(s, m, base_aggs[s], cand_aggs[s]) for s in ids for m in metrics]
    worse_adj = _holm_family(tests, "p_worse", alpha)
    better_adj = _holm_family(tests, "p_better", alpha)
    by_id: dict[str, list[_Test]] = {}
    for t in tests:
        by_id.setdefault(t.scenario, []).append(t)
    n_scen = max(1, len([s for s in ids if s != "*"]))
    out = [
        _scenario_comparison(
            s, by_id[s], base_aggs[s], cand_aggs[s], worse_adj, better_adj, alpha, n_scen
        )
        for s in ids
    ]
    return Comparison(out, _overall(out, tests, worse_adj, better_adj, alpha, n_scen))


def _scenario_comparison(
    sid: str,
    tests: list[_Test],
    base: Aggregate,
    cand: Aggregate,
    worse_adj: dict[Any, float],
    better_adj: dict[Any, float],
    alpha: float,
    n_scen: int,
) -> ScenarioComparison:
    rows = [_rate_row(t, base, cand, worse_adj, better_adj, alpha) for t in tests]
    rows += [_count_row(m, base, cand) for m in COUNT_METRICS]
    worse = [r for r in rows if r.significant and r.worse]
    better = [r for r in rows if r.significant and r.worse is False]
    new = [t.metric for t in tests if t.metric not in _LABELS and t.k_c > 0 and t.k_b == 0]
    suggest = [
        t
        for t in tests
        if t.metric != "final_answer"
        and t.k_c * t.n_b > t.k_b * t.n_c
        and (t.p_worse < SUGGESTIVE_P or (t.k_c == t.n_c > 0 and t.k_b == 0))
    ]
    verdict: VerdictName = "NO CHANGE"
    reasons: list[str] = []
    needed: int | None = None
    display = note = None
    family = len(worse_adj)
    if base.scored == 0 or cand.scored == 0:
        verdict, reasons = "INCONCLUSIVE", ["no scored runs on one side (infrastructure errors)"]
    elif worse:
        verdict, reasons = "REGRESSION", [_reason(r) for r in worse]
    elif better:
        verdict, reasons = "IMPROVEMENT", [_reason(r) for r in better]
    elif suggest:
        share = alpha / max(1, family)
        pooled = n_scen if sid == "*" else 1
        have = min(base.scored, cand.scored) // pooled
        needs = [n for n in (_needed(t, share, pooled) for t in suggest) if n]
        needed = max(1, min(needs) - have) if needs else None
        verdict = "INCONCLUSIVE"
        by_metric = {r.metric: r for r in rows}
        reasons = [_reason(by_metric[t.metric]) for t in suggest]
        tested = any((t.scenario, t.metric) in worse_adj for t in suggest)
        display, note = _worse_note(sid, family if tested else 0, alpha, needed)
    return ScenarioComparison(
        scenario_id=sid,
        rows=rows,
        verdict=verdict,
        reasons=reasons,
        new_failure_kinds=new,
        repeats_needed=needed,
        display=display,
        note=note,
        holm_tests=family,
    )


def _worse_note(sid: str, family: int, alpha: float, needed: int | None) -> tuple[str, str]:
    """``(display label, note)`` of an INCONCLUSIVE comparison whose candidate is worse;
    ``family`` 0: its tests cannot reach ``alpha`` with so few runs (left out, Tarone)."""
    alone = " alone" if sid != "*" else ""
    settle = f"; about {needed} more repeats per side would settle it" if needed else ""
    why = (
        f"after Holm's correction over {family} tests at alpha {alpha:g}"
        if family
        else f"(too few runs for any test to reach alpha {alpha:g})"
    )
    note = f"worse in the candidate, but not significant{alone} {why}{settle}"
    return f"WORSE (not significant{alone})", note


def _reason(r: MetricRow) -> str:
    """``passed: candidate 0/5, baseline 5/5 (p one-sided 0.004; p adj. Holm 0.35)``.

    Rates are shown as the row shows them: successes for ``passed``/``final_answer``,
    failing runs for a failure kind.
    """
    adj = "not in the family" if r.p_adjusted is None else format_p(r.p_adjusted)
    return (
        f"{r.label}: candidate {r.candidate_text}, baseline {r.baseline_text} "
        f"(p one-sided {format_p(r.p_value)}; p adj. Holm {adj})"
    )


def _overall(
    comps: list[ScenarioComparison],
    tests: list[_Test],
    worse_adj: dict[Any, float],
    better_adj: dict[Any, float],
    alpha: float,
    n_scen: int,
) -> Verdict:
    sig_w = sorted({m for (s, m), p in worse_adj.items() if p <= alpha} - set(_LABELS))
    sig_b = sorted({m for (s, m), p in better_adj.items() if p <= alpha} - set(_LABELS))
    any_w = any(p <= alpha for p in worse_adj.values())
    any_b = any(p <= alpha for p in better_adj.values())
    bad = [c.scenario_id for c in comps if c.verdict == "REGRESSION" and c.scenario_id != "*"]
    only = sorted({k for c in comps for k in c.new_failure_kinds} - set(sig_w))
    also = (
        f"; also only in the candidate (not significant alone): {', '.join(only)}" if only else ""
    )
    if any_w:
        where = f"in {', '.join(bad)}" if bad else "pooled over scenarios"
        msg = f"REGRESSION: {', '.join(sig_w) if sig_w else 'more runs fail'} ({where}){also}"
        return Verdict(
            verdict="REGRESSION",
            message=msg,
            regressed_kinds=sig_w,
            candidate_only_kinds=only,
            exit_code=1,
            reasons=_where(c for c in comps if c.verdict == "REGRESSION"),
        )
    if any_b:
        return Verdict(
            verdict="IMPROVEMENT",
            message="IMPROVEMENT: " + (", ".join(sig_b) or "fewer runs fail"),
            improved_kinds=sig_b,
            reasons=_where(c for c in comps if c.verdict == "IMPROVEMENT"),
        )
    unsure = [c for c in comps if c.verdict == "INCONCLUSIVE"]
    if unsure:
        needs = [c.repeats_needed for c in unsure if c.repeats_needed]
        n = min(needs) if needs else None
        tail = f"; about {n} more repeats per scenario would settle it" if n else ""
        return Verdict(
            verdict="INCONCLUSIVE",
            repeats_needed=n,
            message=f"INCONCLUSIVE: differences not significant{tail}{also}",
            candidate_only_kinds=only,
            reasons=_where(unsure),
        )
    return Verdict(
        verdict="NO CHANGE",
        message=f"NO CHANGE: no significant difference between the sides{also}",
        candidate_only_kinds=only,
    )


def _where(comps: Iterable[ScenarioComparison]) -> list[str]:
    """The comparisons' reasons, each prefixed with where it holds (``all scenarios`` first)."""
    ordered = sorted(comps, key=lambda c: c.scenario_id != "*")
    return [f"{scenario_name(c.scenario_id)}: {r}" for c in ordered for r in c.reasons]
