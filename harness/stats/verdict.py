"""Baseline-against-candidate tests and the verdict: one pure function, :func:`decide`.

Input: the :class:`~harness.summary.Aggregate` of each side per scenario (and pooled,
``"*"``) and of each side (:class:`~harness.summary.SideInfo`, for the infrastructure-error
limit). Output: one :class:`~harness.summary.ScenarioComparison` per scenario and the
overall :class:`~harness.summary.Verdict`, decided once; nothing changes them afterwards.
Decision rule (documented in ``Settings.decision_rule`` of every summary):

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

6. A side with more infrastructure errors than ``infra_error_limit`` of its runs (20% by
   default) cannot be judged: the verdict names it in ``infra_limited`` (a REGRESSION
   stays one; anything else becomes INCONCLUSIVE) and the command line exits 3.

Counts (tool calls, repeated calls, ...) are shown with a one-sided Mann-Whitney U test;
they do not decide the verdict (their failure kinds do).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.kinds import COUNT_METRICS, SUCCESS_METRICS, VerdictName, label, plural
from harness.stats.tests import (
    Alternative,
    fisher_one_sided,
    format_p,
    holm,
    mannwhitney_one_sided,
    repeats_needed,
)
from harness.summary import (
    Aggregate,
    MetricRow,
    RunOutcome,
    ScenarioComparison,
    SideInfo,
    Verdict,
    scenario_name,
)

__all__ = [
    "ALPHA",
    "DECISION_RULE",
    "INFRA_ERROR_LIMIT",
    "Decision",
    "decide",
    "judge_run",
    "over_infra_limit",
]

#: family-wise level for REGRESSION / IMPROVEMENT
ALPHA = 0.01
#: share of a side's runs that may be infrastructure errors before it cannot be judged
INFRA_ERROR_LIMIT = 0.2
#: unadjusted one-sided p below which an unproven difference makes INCONCLUSIVE
SUGGESTIVE_P = 0.1

DECISION_RULE = (
    "one-sided Fisher's exact test per scenario and pooled, for 'failed' and each failure "
    "kind; tests that cannot reach alpha given their margins are left out (Tarone); Holm "
    f"across the rest; REGRESSION at adjusted p <= alpha (alpha={ALPHA})"
)


def over_infra_limit(runs: int, infra_errors: int, limit: float = INFRA_ERROR_LIMIT) -> bool:
    """Whether ``infra_errors`` of ``runs`` is too many to judge: more than ``limit`` of
    them, or every run. The one rule of ``harness compare``, ``harness run`` and the
    pytest plugin."""
    return runs > 0 and (infra_errors == runs or infra_errors / runs > limit)


def judge_run(
    aggregates: Iterable[Aggregate],
    sides: Sequence[SideInfo],
    *,
    min_pass_rate: float = 1.0,
    infra_error_limit: float = INFRA_ERROR_LIMIT,
) -> RunOutcome:
    """The outcome of a one-sided run: every scenario's pass rate (passed / scored runs)
    at least ``min_pass_rate`` (scenarios with no scored run are not judged), and no side
    over the infrastructure-error limit (:func:`over_infra_limit`).

    With several sides (``harness run`` against several targets, the matrix's
    deployments) each failing scenario is named with its side's label
    (``s on fused (0/2 passed)``); ``failing`` lists each scenario once.
    """
    aggregates = [a for a in aggregates if a.scenario_id != "*"]
    failing = [a for a in aggregates if a.scored and a.rate("passed").k / a.scored < min_pass_rate]
    over = [s for s in sides if over_infra_limit(s.runs, s.infra_errors, infra_error_limit)]
    parts = []
    if over:
        names = ", ".join(f"{s.label} {s.infra_errors}/{s.runs}" for s in over)
        parts.append(
            f"too many infrastructure errors ({names} runs; limit {infra_error_limit:.0%})"
        )
    scenarios = list(dict.fromkeys(a.scenario_id for a in failing))
    if failing:
        several = len({a.side for a in aggregates}) > 1
        parts.append(
            f"{plural(len(scenarios), 'scenario')} below pass rate {min_pass_rate:g}: "
            + ", ".join(_below(a, several) for a in failing)
        )
    return RunOutcome(
        passed=not parts,
        message="; ".join(parts) or f"every scenario reached pass rate {min_pass_rate:g}",
        min_pass_rate=min_pass_rate,
        failing=scenarios,
        infra_limited=[s.label for s in over],
    )


def _below(a: Aggregate, name_side: bool) -> str:
    """``s (0/2 passed)``, or with ``name_side`` ``s on fused (0/2 passed)``."""
    where = f"{a.scenario_id} on {a.label}" if name_side else a.scenario_id
    return f"{where} ({a.rate('passed').text()} passed)"


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
    rb, rc = base.rate(metric), cand.rate(metric)
    bad_b, bad_c = rb.k, rc.k
    if metric in SUCCESS_METRICS:  # success rates: the event tested is failure
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


def _rate_row(
    t: _Test,
    base: Aggregate,
    cand: Aggregate,
    worse_adj: dict[Any, float],
    better_adj: dict[Any, float],
    alpha: float,
) -> MetricRow:
    rb, rc = base.rate(t.metric), cand.rate(t.metric)
    effect = (rc.rate - rb.rate) if rc.rate is not None and rb.rate is not None else None
    worse = (
        None
        if t.k_c / max(t.n_c, 1) == t.k_b / max(t.n_b, 1)
        else t.k_c / max(t.n_c, 1) > t.k_b / max(t.n_b, 1)
    )
    key = (t.scenario, t.metric)
    adj = worse_adj.get(key) if worse else better_adj.get(key) if worse is False else None
    return MetricRow(
        metric=t.metric,
        kind="rate",
        baseline=rb.rate,
        candidate=rc.rate,
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
    alt: Alternative = "greater" if worse is not False else "less"
    p = mannwhitney_one_sided(cc.values(), cb.values(), alt)
    return MetricRow(
        metric=metric,
        kind="count",
        baseline=cb.mean,
        candidate=cc.mean,
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


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` returns: every scenario's comparison (in the aggregates'
    order, ``"*"`` pooled last) and the overall verdict."""

    comparisons: list[ScenarioComparison]
    verdict: Verdict


def _kinds(base: Aggregate, cand: Aggregate) -> list[str]:
    """The failure kinds either side showed in this scenario (the rows that can differ)."""
    seen = {k for a in (base, cand) for k, r in a.rates.items() if r.k}
    return sorted(seen - set(SUCCESS_METRICS))


def decide(
    baseline: Mapping[str, Aggregate],
    candidate: Mapping[str, Aggregate],
    sides: Sequence[SideInfo] = (),
    *,
    alpha: float = ALPHA,
    infra_error_limit: float = INFRA_ERROR_LIMIT,
) -> Decision:
    """Test every scenario's outcomes and decide (pure; see the module docstring).

    ``baseline``/``candidate``: scenario id (``"*"``: pooled) -> that side's aggregate;
    scenarios on one side only are left out. ``sides``: both sides' run and
    infrastructure-error counts, for the infrastructure-error limit (rule 6).
    """
    ids = [s for s in baseline if s in candidate]
    if len(ids) == 2 and "*" in ids:  # one scenario: the pool would only repeat its tests
        ids.remove("*")
    tests = [
        _test(s, m, baseline[s], candidate[s])
        for s in ids
        for m in [*SUCCESS_METRICS, *_kinds(baseline[s], candidate[s])]
    ]
    worse_adj = _holm_family(tests, "p_worse", alpha)
    better_adj = _holm_family(tests, "p_better", alpha)
    by_id: dict[str, list[_Test]] = {}
    for t in tests:
        by_id.setdefault(t.scenario, []).append(t)
    ctx = _Context(worse_adj, better_adj, alpha, max(1, len([s for s in ids if s != "*"])))
    comps = [_scenario_comparison(s, by_id[s], baseline[s], candidate[s], ctx) for s in ids]
    verdict = _overall(comps, ctx)
    return Decision(comps, _with_infra_limit(verdict, sides, infra_error_limit))


@dataclass(frozen=True)
class _Context:
    """The families and settings every scenario's comparison is judged in."""

    worse_adj: dict[tuple[str, str], float]
    better_adj: dict[tuple[str, str], float]
    alpha: float
    n_scenarios: int


def _with_infra_limit(verdict: Verdict, sides: Sequence[SideInfo], limit: float) -> Verdict:
    """Rule 6: name the sides over the infrastructure-error limit."""
    over = [s for s in sides if over_infra_limit(s.runs, s.infra_errors, limit)]
    if not over:
        return verdict
    names = ", ".join(f"{s.label} {s.infra_errors}/{s.runs}" for s in over)
    reason = f"too many infrastructure errors to judge ({names} runs; limit {limit:.0%})"
    update: dict[str, Any] = {
        "infra_limited": [s.label for s in over],
        "reasons": [reason, *verdict.reasons],
    }
    if verdict.verdict != "REGRESSION":
        update["verdict"] = "INCONCLUSIVE"
        update["message"] = f"INCONCLUSIVE: too many infrastructure errors ({names} runs)"
    return verdict.model_copy(update=update)


def _suggestive(tests: list[_Test]) -> list[_Test]:
    """The tests whose outcome is worse in the candidate with unadjusted one-sided
    ``p < SUGGESTIVE_P``, or fails every candidate run and no baseline run (rule 5)."""
    return [
        t
        for t in tests
        if t.metric != "final_answer"
        and t.k_c * t.n_b > t.k_b * t.n_c
        and (t.p_worse < SUGGESTIVE_P or (t.k_c == t.n_c > 0 and t.k_b == 0))
    ]


@dataclass
class _Judged:
    """One scenario's verdict and what explains it (the verdict fields of a comparison)."""

    verdict: VerdictName = "NO CHANGE"
    reasons: list[str] = field(default_factory=list)
    repeats_needed: int | None = None
    display: str | None = None
    note: str | None = None


def _judge_scenario(
    sid: str,
    tests: list[_Test],
    rows: list[MetricRow],
    base: Aggregate,
    cand: Aggregate,
    ctx: _Context,
) -> _Judged:
    """Rule 5 for one scenario: REGRESSION, IMPROVEMENT, INCONCLUSIVE or NO CHANGE."""
    worse = [r for r in rows if r.significant and r.worse]
    better = [r for r in rows if r.significant and r.worse is False]
    if base.scored == 0 or cand.scored == 0:
        return _Judged("INCONCLUSIVE", ["no scored runs on one side (infrastructure errors)"])
    if worse:
        return _Judged("REGRESSION", [_reason(r, base, cand) for r in worse])
    if better:
        return _Judged("IMPROVEMENT", [_reason(r, base, cand) for r in better])
    suggest = _suggestive(tests)
    if not suggest:
        return _Judged()
    needed = _more_repeats(sid, suggest, base, cand, ctx)
    by_metric = {r.metric: r for r in rows}
    tested = any((t.scenario, t.metric) in ctx.worse_adj for t in suggest)
    display, note = _worse_note(sid, len(ctx.worse_adj) if tested else 0, ctx.alpha, needed)
    reasons = [_reason(by_metric[t.metric], base, cand) for t in suggest]
    return _Judged("INCONCLUSIVE", reasons, needed, display, note)


def _scenario_comparison(
    sid: str, tests: list[_Test], base: Aggregate, cand: Aggregate, ctx: _Context
) -> ScenarioComparison:
    """One scenario's table (a row per outcome test, then the counts) and its verdict."""
    rows = [_rate_row(t, base, cand, ctx.worse_adj, ctx.better_adj, ctx.alpha) for t in tests]
    rows += [_count_row(m, base, cand) for m in COUNT_METRICS]
    judged = _judge_scenario(sid, tests, rows, base, cand, ctx)
    new = [t.metric for t in tests if t.metric not in SUCCESS_METRICS and t.k_c and not t.k_b]
    return ScenarioComparison(
        scenario_id=sid,
        rows=rows,
        verdict=judged.verdict,
        reasons=judged.reasons,
        new_failure_kinds=new,
        repeats_needed=judged.repeats_needed,
        display=judged.display,
        note=judged.note,
        holm_tests=len(ctx.worse_adj),
    )


def _more_repeats(
    sid: str, suggest: list[_Test], base: Aggregate, cand: Aggregate, ctx: _Context
) -> int | None:
    """About how many more repeats per scenario and side would settle the suggestive tests."""
    share = ctx.alpha / max(1, len(ctx.worse_adj))
    pooled = ctx.n_scenarios if sid == "*" else 1
    have = min(base.scored, cand.scored) // pooled
    needs = [n for n in (_needed(t, share, pooled) for t in suggest) if n]
    return max(1, min(needs) - have) if needs else None


def _worse_note(sid: str, family: int, alpha: float, needed: int | None) -> tuple[str, str]:
    """``(display label, note)`` of an INCONCLUSIVE comparison whose candidate is worse;
    ``family`` 0: its tests cannot reach ``alpha`` with so few runs (left out, Tarone)."""
    alone = " alone" if sid != "*" else ""
    settle = (
        f"; about {plural(needed, 'more repeat')} per scenario and side would settle it"
        if needed
        else ""
    )
    why = (
        f"after Holm's correction over {plural(family, 'test')} at alpha {alpha:g}"
        if family
        else f"(too few runs for any test to reach alpha {alpha:g})"
    )
    note = f"worse in the candidate, but not significant{alone} {why}{settle}"
    return f"WORSE (not significant{alone})", note


def _reason(r: MetricRow, base: Aggregate, cand: Aggregate) -> str:
    """``passed: candidate 0/5, baseline 5/5 (p one-sided 0.004; p adj. Holm 0.35)``.

    Rates are shown as the tables show them: successes for ``passed``/``final_answer``,
    failing runs for a failure kind.
    """
    unit = "" if r.metric in SUCCESS_METRICS else " runs"
    adj = "not in the family" if r.p_adjusted is None else format_p(r.p_adjusted)
    return (
        f"{label(r.metric)}: candidate {cand.rate(r.metric).text()}{unit}, "
        f"baseline {base.rate(r.metric).text()}{unit} "
        f"(p one-sided {format_p(r.p_value)}; p adj. Holm {adj})"
    )


def _significant_kinds(adjusted: dict[tuple[str, str], float], alpha: float) -> list[str]:
    """The failure kinds with a significant test in a family (sorted; not passed/final)."""
    return sorted({m for (_, m), p in adjusted.items() if p <= alpha} - set(SUCCESS_METRICS))


def _regression(comps: list[ScenarioComparison], ctx: _Context, only: list[str]) -> Verdict:
    """The overall REGRESSION: the significant kinds and the scenarios that regressed."""
    sig_w = _significant_kinds(ctx.worse_adj, ctx.alpha)
    bad = [c.scenario_id for c in comps if c.verdict == "REGRESSION" and c.scenario_id != "*"]
    where = f"in {', '.join(bad)}" if bad else "pooled over scenarios"
    msg = f"REGRESSION: {', '.join(sig_w) if sig_w else 'more runs fail'} ({where}){_also(only)}"
    return Verdict(
        verdict="REGRESSION",
        message=msg,
        regressed_kinds=sig_w,
        candidate_only_kinds=only,
        reasons=_where(c for c in comps if c.verdict == "REGRESSION"),
    )


def _inconclusive(unsure: list[ScenarioComparison], only: list[str]) -> Verdict:
    """The overall INCONCLUSIVE, with the fewest more repeats any scenario needs."""
    needs = [c.repeats_needed for c in unsure if c.repeats_needed]
    n = min(needs) if needs else None
    tail = f"; about {plural(n, 'more repeat')} per scenario and side would settle it" if n else ""
    return Verdict(
        verdict="INCONCLUSIVE",
        repeats_needed=n,
        message=f"INCONCLUSIVE: differences not significant{tail}{_also(only)}",
        candidate_only_kinds=only,
        reasons=_where(unsure),
    )


def _also(only: list[str]) -> str:
    """The message's tail naming the kinds seen only in the candidate, if any."""
    return (
        f"; also only in the candidate (not significant alone): {', '.join(only)}" if only else ""
    )


def _overall(comps: list[ScenarioComparison], ctx: _Context) -> Verdict:
    """Rule 5 over all scenarios: a significant regression anywhere, else a significant
    improvement, else INCONCLUSIVE if a scenario is, else NO CHANGE."""
    sig_w = _significant_kinds(ctx.worse_adj, ctx.alpha)
    only = sorted({k for c in comps for k in c.new_failure_kinds} - set(sig_w))
    if any(p <= ctx.alpha for p in ctx.worse_adj.values()):
        return _regression(comps, ctx, only)
    if any(p <= ctx.alpha for p in ctx.better_adj.values()):
        sig_b = _significant_kinds(ctx.better_adj, ctx.alpha)
        return Verdict(
            verdict="IMPROVEMENT",
            message="IMPROVEMENT: " + (", ".join(sig_b) or "fewer runs fail"),
            improved_kinds=sig_b,
            reasons=_where(c for c in comps if c.verdict == "IMPROVEMENT"),
        )
    unsure = [c for c in comps if c.verdict == "INCONCLUSIVE"]
    if unsure:
        return _inconclusive(unsure, only)
    return Verdict(
        verdict="NO CHANGE",
        message=f"NO CHANGE: no significant difference between the sides{_also(only)}",
        candidate_only_kinds=only,
    )


def _where(comps: Iterable[ScenarioComparison]) -> list[str]:
    """The comparisons' reasons, each prefixed with where it holds (``all scenarios`` first)."""
    ordered = sorted(comps, key=lambda c: c.scenario_id != "*")
    return [f"{scenario_name(c.scenario_id)}: {r}" for c in ordered for r in c.reasons]
