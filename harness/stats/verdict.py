"""Baseline-against-candidate tests and the verdict: one pure function, :func:`decide`.

Input: the :class:`~harness.summary.Aggregate` of each side per scenario (and pooled,
``"*"``) and of each side (:class:`~harness.summary.SideInfo`, for the infrastructure-error
limit). Output: one :class:`~harness.summary.ScenarioComparison` per scenario and the
overall :class:`~harness.summary.Verdict`, decided once; nothing changes them afterwards.
Decision rule (documented in ``Settings.decision_rule`` of every summary):

1. Each scored run gives binary outcomes: ``failed`` (not passed) and one per failure kind.
   Infrastructure errors are excluded. Runs are independent trials only when sampled:
   a greedy scenario (temperature 0) counts once per side (its most common outcome), so
   the evidence comes from the test across scenarios (:mod:`harness.stats.family`); a
   side that ignores temperature and seed (the contract pre-flight,
   :mod:`harness.preflight`) counts once per scenario the same way, the verdict's message
   says so, and its power is that of the units left.
2. For every scenario a one-sided Fisher's exact test per outcome, and for all scenarios
   pooled (``"*"``) the exact conditional test stratified by scenario (Mantel-Haenszel's
   ``S``), each that the candidate's rate is higher (regression family) and, apart, lower
   (improvement family).
3. Each family is adjusted by Westfall & Young's step-down min-p procedure over
   ``permutations`` (10,000) relabellings of the runs within each scenario (seeded), which
   controls the family-wise error at ``alpha`` (default 0.01) and uses the dependence of
   the tests (:mod:`harness.stats.permutation`).
4. ``REGRESSION``: any significant regression (a significant improvement elsewhere is
   named too: a mixed result). ``IMPROVEMENT``: none, and a significant improvement.
5. ``INCONCLUSIVE``: neither, but some outcome is worse in the candidate with an adjusted
   p at most ``SUGGESTIVE_P`` (0.1: the rate of INCONCLUSIVE between equal servers stays
   at most about 10% whatever the repeats; a sequential look's band keeps its ratio to
   the look's level, :func:`harness.stats.sequential.suggestive_p`); the verdict gives
   about how many more repeats per scenario a two-proportion test at the family's
   critical p and 80% power needs
   (:func:`harness.stats.tests.repeats_needed`). ``NO CHANGE`` otherwise, with the
   smallest rate of a new failure kind it would have detected with 80% probability
   (:func:`harness.stats.permutation.min_detectable_rate`) in ``Verdict.power``
   (failure kinds seen only in the candidate's runs of a scenario are still listed in its
   ``new_failure_kinds``; the message names those the baseline never shows in any scenario);
   ``INCONCLUSIVE`` instead when no rate could have been detected at this budget (too few
   independent runs: a difference there is no evidence either way). A sequential
   verdict's power speaks of the rule as it ran (:func:`_power`): what the runs spent
   detect, and what the rounds left would have (the rounds go on while anything looks
   worse). A REGRESSION's headline names, beside each significant kind, the kinds worse
   in the candidate that share at least half of its candidate runs (a loop that never
   answers is ``missing_final_answer`` with ``repeat_loop`` in the same runs, even when
   the baseline's noise keeps the loop's own test from significance).
6. A side with more infrastructure errors than ``infra_error_limit`` of its runs (20% by
   default) cannot be judged: the verdict names it in ``infra_limited`` (a REGRESSION
   stays one; anything else becomes INCONCLUSIVE) and the command line exits 3. A side
   with no scored run at all (every run an infrastructure error: a server that answers
   404 to every scenario) is INCONCLUSIVE saying only that, and no test is run (a test
   of 0 runs against 0 decides nothing); nor is any scenario with no scored run on a side
   tested (it reads INCONCLUSIVE, ``NO_SCORED``).
7. The numerics section (``logprobs.json``, :mod:`harness.numerics`) is an input, one
   :class:`NumericsFinding` per path it ran (prefill, decode, routed experts), each
   decided against its own A/A floor: when any path is a REGRESSION, a judged comparison
   that is not already one is a REGRESSION, its message naming the path(s) and the
   behavioural verdict (kept in ``Verdict.behaviour``); when none is but some path is
   INCONCLUSIVE (or could not be compared, e.g. a recording without that path), a
   behavioural NO CHANGE becomes INCONCLUSIVE naming the path: NO CHANGE on one path
   never hides another that could not be settled. An unjudged side (rule 6) stays
   unjudged.

Counts (tool calls, repeated calls, ...) are shown with a one-sided Mann-Whitney U test;
they do not decide the verdict (their failure kinds do).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.kinds import COUNT_METRICS, SUCCESS_METRICS, VerdictName, label, plural
from harness.stats.aggregate import unit_count_stat, unit_rate
from harness.stats.family import PERMUTATIONS, Family, FamilyTest, run_family
from harness.stats.permutation import min_detectable_rate, one_scenario_p
from harness.stats.sequential import SUGGESTIVE_P, Look, suggestive_p
from harness.stats.tests import (
    Alternative,
    format_p,
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
    "NumericsFinding",
    "RecordedBudget",
    "decide",
    "judge_run",
    "numerics_verdict",
    "over_infra_limit",
]

#: family-wise level for REGRESSION / IMPROVEMENT
ALPHA = 0.01
#: share of a side's runs that may be infrastructure errors before it cannot be judged
INFRA_ERROR_LIMIT = 0.2
#: the reason of a scenario with no scored run on a side (always INCONCLUSIVE)
NO_SCORED = "no scored runs on one side (infrastructure errors)"

DECISION_RULE = (
    "one-sided Fisher's exact test per scenario and an exact test stratified by scenario "
    "(Mantel-Haenszel) pooled, for 'failed' and each failure kind; Westfall-Young step-down "
    "min-p adjustment over permutations of the runs within each scenario (under --stream "
    "both, of the repeats: a non-streamed run's outcomes and its streamed twin's stream-only "
    "kinds); greedy scenarios "
    f"count once per side; REGRESSION at adjusted p <= alpha (alpha={ALPHA})"
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


def _rate_row(t: FamilyTest, base: Aggregate, cand: Aggregate, ctx: _Context) -> MetricRow:
    rb, rc = unit_rate(base, t.metric), unit_rate(cand, t.metric)
    effect = (rc.rate - rb.rate) if rc.rate is not None and rb.rate is not None else None
    worse = None if t.k_c * t.n_b == t.k_b * t.n_c else t.k_c * t.n_b > t.k_b * t.n_c
    adj = t.adj_worse if worse else t.adj_better if worse is False else None
    how = "Fisher exact" if t.scenario != "*" else "exact stratified (Mantel-Haenszel)"
    return MetricRow(
        metric=t.metric,
        kind="rate",
        baseline=rb.rate,
        candidate=rc.rate,
        effect=effect,
        worse=worse,
        p_value=t.p_worse if worse else t.p_better if worse is False else 1.0,
        p_adjusted=adj,
        test=f"{how}, one-sided ({'worse' if worse else 'better'})",
        significant=adj is not None and adj <= ctx.alpha,
        decisive=t.in_family,
    )


def _count_row(metric: str, base: Aggregate, cand: Aggregate) -> MetricRow:
    cb = unit_count_stat(base, metric) or base.counts[metric]  # over repeats or runs
    cc = unit_count_stat(cand, metric) or cand.counts[metric]
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


def _needed(t: FamilyTest, critical: float, pooled_over: int) -> int | None:
    """Repeats per scenario (in total) to settle ``t`` at its observed rates, with a
    two-proportion test at the family's critical p (:func:`repeats_needed`).

    Observed rates are smoothed by half a run, ``(k + 0.5) / (n + 1)``, so that 0/n and n/n
    give a finite size; pooled tests divide the runs needed by the number of scenarios.
    """
    pb = (t.k_b + 0.5) / (t.n_b + 1)
    pc = (t.k_c + 0.5) / (t.n_c + 1)
    n = repeats_needed(pb, pc, max(critical, 1e-12))
    return None if n is None else math.ceil(n / max(pooled_over, 1))


@dataclass(frozen=True)
class RecordedBudget:
    """A comparison with a recorded side (an input of :func:`decide`): its runs are all
    the recording holds (a comparison asking more is refused), so an INCONCLUSIVE is
    settled by recording again with more rounds, not by more repeats.

    ``roles``: the recorded sides (``"baseline"``, ``"candidate"``); ``repeats``: the
    comparison's runs per scenario and side per round (``--repeats``); ``rounds``: the
    rounds it spent (the look it decided at; 1 for a fixed comparison).
    """

    roles: tuple[str, ...]
    repeats: int
    rounds: int = 1

    def rounds_for(self, more: int) -> int:
        """``K``: the rounds of :attr:`repeats` that hold ``more`` repeats per scenario
        and side beyond those spent (``harness record --rounds K``)."""
        return self.rounds + math.ceil(more / max(1, self.repeats))

    def advice(self, more: int) -> str:
        """What to record so that ``more`` repeats per scenario and side are there."""
        k = self.rounds_for(more)
        who = " and ".join(self.roles)
        return (
            f"about {plural(more, 'more repeat')} per scenario and side would settle it, more "
            f"than the recording holds: record the {who} again with harness record --repeats "
            f"{self.repeats} --rounds {k} ({plural(k * self.repeats, 'run')} per scenario) and "
            f"compare with --rounds {k}"
        )


@dataclass(frozen=True)
class NumericsFinding:
    """One numerics path's verdict, an input of :func:`decide` (rule 7).

    ``verdict``: the path's verdict against its own A/A floor; ``message``: its one-line
    message (it opens with the verdict); ``path``: ``prefill`` (teacher-forced),
    ``decode`` (greedy decodes) or ``routed experts``
    (:meth:`harness.numerics.models.LogprobsResult.paths`).
    """

    verdict: VerdictName
    message: str
    path: str = "prefill"

    def line(self) -> str:
        """``numerics (<path>): <message>``: the reason naming the path."""
        return f"numerics ({self.path}): {self.message}"


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
    recorded: RecordedBudget | None = None,
    infra_error_limit: float = INFRA_ERROR_LIMIT,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
    greedy: Sequence[str] = (),
    look: Look | None = None,
    copies: Sequence[str] = (),
    numerics: Sequence[NumericsFinding] = (),
) -> Decision:
    """Test every scenario's outcomes and decide (pure; see the module docstring).

    ``baseline``/``candidate``: scenario id (``"*"``: pooled) -> that side's aggregate;
    scenarios on one side only are left out. ``sides``: both sides' run and
    infrastructure-error counts, for the infrastructure-error limit (rule 6).
    ``recorded``: a side is a recording: an INCONCLUSIVE says what to record to settle it
    (``harness record --rounds K``, ``Verdict.record_rounds``) instead of more repeats.
    ``permutations``/``seed``: the Westfall-Young relabellings (rule 3); ``greedy``: the
    scenarios sampled at temperature 0, whose repeats count as one unit (rule 1);
    ``copies``: the sides (``"baseline"``/``"candidate"``) that ignore temperature and seed,
    whose repeats count as one unit in every scenario (rule 1).
    ``look``: a sequential comparison's look (``alpha`` is then that look's level): the
    INCONCLUSIVE band (rule 5) and the power statement follow the rule's rounds.
    ``numerics``: the numerics section's verdict of each path it ran (rule 7).
    """
    ids = [s for s in baseline if s in candidate]
    if len(ids) == 2 and "*" in ids:  # one scenario: the pool would only repeat its tests
        ids.remove("*")
    # no test on 0/0: a scenario with no scored run on a side stays out of the family
    tested = [s for s in ids if baseline[s].scored and candidate[s].scored]
    if len(tested) == 2 and "*" in tested:
        tested.remove("*")
    metrics = {s: [*SUCCESS_METRICS, *_kinds(baseline[s], candidate[s])] for s in tested}
    fam = run_family(
        baseline, candidate, metrics,
        alpha=alpha, permutations=permutations, seed=seed, greedy=greedy, copies=copies,
    )  # fmt: skip
    by_id: dict[str, list[FamilyTest]] = {}
    for t in fam.tests:
        by_id.setdefault(t.scenario, []).append(t)
    band = suggestive_p(alpha, look.alpha) if look else SUGGESTIVE_P
    pooled = candidate.get("*") if "*" in ids else None
    unit = "repeat" if any(candidate[s].units for s in ids) else "run"
    n = max(1, len([s for s in ids if s != "*"]))
    ctx = _Context(fam, alpha, n, band, look, pooled, unit, recorded)
    comps = [_scenario_comparison(s, by_id.get(s, []), baseline[s], candidate[s], ctx) for s in ids]
    unjudged = _unjudged(baseline, candidate, sides, infra_error_limit)
    if unjudged is not None:  # the verdict says so and nothing else: no test was run
        return Decision(comps, unjudged)
    verdict = _copies_note(_overall(comps, ctx), fam, sides)
    verdict = _with_infra_limit(verdict, sides, infra_error_limit)
    return Decision(comps, _with_numerics(verdict, numerics))


def numerics_verdict(numerics: Sequence[NumericsFinding]) -> VerdictName | None:
    """The numerics paths' verdict together (rule 7): ``REGRESSION`` when any path is one,
    else ``INCONCLUSIVE`` when any path is one, else ``NO CHANGE``; None with no path."""
    verdicts = {f.verdict for f in numerics}
    for name in ("REGRESSION", "INCONCLUSIVE", "NO CHANGE"):
        if name in verdicts:
            return name
    return None


def _with_numerics(verdict: Verdict, numerics: Sequence[NumericsFinding]) -> Verdict:
    """Rule 7: a numerics REGRESSION on any path makes a judged comparison a REGRESSION;
    a path left INCONCLUSIVE makes a behavioural NO CHANGE INCONCLUSIVE."""
    if verdict.verdict == "REGRESSION" or verdict.infra_limited:
        return verdict
    regressed = [f for f in numerics if f.verdict == "REGRESSION"]
    unsettled = [f for f in numerics if f.verdict == "INCONCLUSIVE"]
    if regressed:
        to: VerdictName = "REGRESSION"
        lines = [f.line() for f in regressed]
    elif unsettled and verdict.verdict == "NO CHANGE":
        to, lines = "INCONCLUSIVE", [f.line() for f in unsettled]
    elif unsettled:  # already INCONCLUSIVE (or an IMPROVEMENT): the path is named beside
        return verdict.model_copy(
            update={"reasons": [*(f.line() for f in unsettled), *verdict.reasons]}
        )
    else:
        return verdict
    return verdict.model_copy(
        update={
            "verdict": to,
            "message": f"{to}: {'; '.join(lines)}; behaviour: {verdict.message}",
            "reasons": [*lines, *verdict.reasons],
            "behaviour": verdict.verdict,
        }
    )


def _copies_note(verdict: Verdict, fam: Family, sides: Sequence[SideInfo]) -> Verdict:
    """Rule 1: the verdict's message says which side's repeats are copies (it ignores
    temperature and seed) and that they counted once per scenario."""
    if not fam.copies:
        return verdict
    labels = {s.side: s.label for s in sides}
    names = " and ".join(labels.get(c, c) for c in fam.copies)
    their = "their" if len(fam.copies) > 1 else "its"
    note = (
        f"; {names} ignored temperature and seed (contract pre-flight): {their} repeats are "
        "copies, not trials, counted once per scenario"
    )
    return verdict.model_copy(update={"message": verdict.message + note})


@dataclass(frozen=True)
class _Context:
    """The family every scenario's comparison is judged in, and the settings."""

    family: Family
    alpha: float
    n_scenarios: int
    #: the INCONCLUSIVE band on adjusted p (rule 5)
    band: float = SUGGESTIVE_P
    look: Look | None = None
    #: the candidate's pooled aggregate (its runs' or repeats' outcome sets), when pooled
    pooled: Aggregate | None = None
    #: what the tests count: ``"repeat"`` under ``--stream both``, else ``"run"``
    unit: str = "run"
    #: a recorded side: more repeats come from recording again (:class:`RecordedBudget`)
    recorded: RecordedBudget | None = None

    def settle(self, more: int | None) -> str:
        """``; about N more repeats per scenario and side would settle it`` (or, against a
        recording, what to record: :meth:`RecordedBudget.advice`); "" for None."""
        if not more:
            return ""
        if self.recorded is not None:
            return f"; {self.recorded.advice(more)}"
        return f"; about {plural(more, 'more repeat')} per scenario and side would settle it"

    def significant(self, direction: str) -> list[FamilyTest]:
        return [
            t
            for t in self.family.tests
            if t.in_family and (getattr(t, f"adj_{direction}") or 1.0) <= self.alpha
        ]

    def suggestive(self) -> list[FamilyTest]:
        """Rule 5: worse in the candidate with an adjusted p at most ``band``, or
        failing every candidate unit of a scenario and no baseline unit where too few
        units let no test reach the critical p (greedy scenarios, one repeat)."""
        crit = self.family.critical_worse
        return [
            t
            for t in self.family.tests
            if t.in_family
            and t.k_c * t.n_b > t.k_b * t.n_c
            and (
                (t.adj_worse or 1.0) <= self.band
                or (t.k_c == t.n_c > 0 and t.k_b == 0 and t.min_p_worse >= crit)
            )
        ]


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


def _unjudged(
    baseline: Mapping[str, Aggregate],
    candidate: Mapping[str, Aggregate],
    sides: Sequence[SideInfo],
    limit: float,
) -> Verdict | None:
    """Rule 6 at its extreme: a side none of whose runs was scored (every one an
    infrastructure error) cannot be judged. The verdict is INCONCLUSIVE and says only that
    (no reason, no power: there was nothing to test); else None."""
    labels = {s.side: s.label for s in sides}
    found = []
    for role, aggs in (("baseline", baseline), ("candidate", candidate)):
        mine = [a for sid, a in aggs.items() if sid != "*"] or list(aggs.values())
        runs = sum(a.runs for a in mine)
        if runs and not any(a.scored for a in mine):
            found.append(f"{labels.get(role, role)} ({runs}/{runs} runs)")
    if not found:
        return None
    over = [s.label for s in sides if over_infra_limit(s.runs, s.infra_errors, limit)]
    return Verdict(
        verdict="INCONCLUSIVE",
        message=f"INCONCLUSIVE: cannot be judged: every run of {' and '.join(found)} was an "
        "infrastructure error; no test was run",
        infra_limited=over or [f.rsplit(" (", 1)[0] for f in found],
    )


def _suggestive(tests: list[FamilyTest]) -> list[FamilyTest]:
    """A scenario's tests worse in the candidate with unadjusted one-sided
    ``p < SUGGESTIVE_P``, or failing every candidate run and no baseline run: the
    scenario reads INCONCLUSIVE (worse, not significant alone). The overall verdict is
    INCONCLUSIVE only on adjusted evidence (:meth:`_Context.suggestive`)."""
    return [
        t
        for t in tests
        if t.in_family
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
    tests: list[FamilyTest],
    rows: list[MetricRow],
    base: Aggregate,
    cand: Aggregate,
    ctx: _Context,
) -> _Judged:
    """Rule 5 for one scenario: REGRESSION (naming any improvement too), IMPROVEMENT,
    INCONCLUSIVE or NO CHANGE."""
    worse = [r for r in rows if r.significant and r.worse]
    better = [r for r in rows if r.significant and r.worse is False]
    if base.scored == 0 or cand.scored == 0:
        return _Judged("INCONCLUSIVE", [NO_SCORED])
    if worse:
        return _Judged("REGRESSION", [_reason(r, base, cand) for r in [*worse, *better]])
    if better:
        return _Judged("IMPROVEMENT", [_reason(r, base, cand) for r in better])
    suggest = _suggestive(tests)
    if not suggest:
        return _Judged()
    needed = _more_repeats(sid, suggest, base, cand, ctx)
    by_metric = {r.metric: r for r in rows}
    display, note = _worse_note(sid, ctx, needed, suggest)
    reasons = [_reason(by_metric[t.metric], base, cand) for t in suggest]
    return _Judged("INCONCLUSIVE", reasons, needed, display, note)


def _scenario_comparison(
    sid: str, tests: list[FamilyTest], base: Aggregate, cand: Aggregate, ctx: _Context
) -> ScenarioComparison:
    """One scenario's table (a row per outcome test, then the counts) and its verdict."""
    rows = [_rate_row(t, base, cand, ctx) for t in tests]
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
        holm_tests=sum(t.in_family for t in ctx.family.tests),
    )


def _more_repeats(
    sid: str, suggest: list[FamilyTest], base: Aggregate, cand: Aggregate, ctx: _Context
) -> int | None:
    """About how many more repeats per scenario and side would settle the suggestive tests;
    None when a side's repeats are copies (more of them add no trial)."""
    if ctx.family.copies:
        return None
    pooled = ctx.n_scenarios if sid == "*" else 1
    have = min(base.unit_count(), cand.unit_count()) // pooled
    crit = ctx.family.critical_worse or ctx.alpha / max(1, len(ctx.family.tests))
    needs = [n for n in (_needed(t, crit, pooled) for t in suggest) if n]
    return max(1, min(needs) - have) if needs else None


def _worse_note(
    sid: str, ctx: _Context, needed: int | None, suggest: list[FamilyTest]
) -> tuple[str, str]:
    """``(display label, note)`` of an INCONCLUSIVE comparison whose candidate is worse;
    when no suggestive test could reach the critical p with its margins, it says so."""
    alone = " alone" if sid != "*" else ""
    settle = ctx.settle(needed)
    tests = sum(t.in_family for t in ctx.family.tests)
    why = (
        f"after Westfall-Young's correction over {plural(tests, 'test')} "
        f"({ctx.family.permutations} permutations) at alpha {ctx.alpha:g}"
    )
    if all(t.min_p_worse >= ctx.family.critical_worse for t in suggest):
        why += f" (too few runs for any test to reach alpha {ctx.alpha:g} here)"
    note = f"worse in the candidate, but not significant{alone} {why}{settle}"
    return f"WORSE (not significant{alone})", note


def _reason(r: MetricRow, base: Aggregate, cand: Aggregate) -> str:
    """``passed: candidate 0/5, baseline 5/5 (p one-sided 0.004; p adj. W-Y 0.035)``.

    Rates are shown as the tables show them: successes for ``passed``/``final_answer``,
    failing runs for a failure kind.
    """
    noun = " repeats" if base.units or cand.units else " runs"
    unit = "" if r.metric in SUCCESS_METRICS else noun
    adj = "not in the family" if r.p_adjusted is None else format_p(r.p_adjusted)
    return (
        f"{label(r.metric)}: candidate {unit_rate(cand, r.metric).text()}{unit}, "
        f"baseline {unit_rate(base, r.metric).text()}{unit} "
        f"(p one-sided {format_p(r.p_value)}; p adj. W-Y {adj})"
    )


def _significant_kinds(tests: list[FamilyTest]) -> list[str]:
    """The failure kinds among ``tests`` (sorted; not passed/final_answer)."""
    return sorted({t.metric for t in tests} - set(SUCCESS_METRICS))


def _places(comps: list[ScenarioComparison], tests: list[FamilyTest]) -> str:
    """``in a, b`` (the scenarios with a significant test) or ``pooled over scenarios``."""
    bad = sorted({t.scenario for t in tests if t.scenario != "*"})
    order = [c.scenario_id for c in comps if c.scenario_id in bad]
    return f"in {', '.join(order)}" if order else "pooled over scenarios"


def _regression(comps: list[ScenarioComparison], ctx: _Context, only: list[str]) -> Verdict:
    """The overall REGRESSION: the significant kinds, the scenarios that regressed, and
    what is significantly better (a mixed result names both)."""
    worse, better = ctx.significant("worse"), ctx.significant("better")
    sig_w, sig_b = _significant_kinds(worse), _significant_kinds(better)
    msg = (
        f"REGRESSION: {', '.join(sig_w) or 'more runs fail'}{_sharing(ctx, sig_w)} "
        f"({_places(comps, worse)})"
    )
    if better:
        msg += f"; but better: {', '.join(sig_b) or 'fewer runs fail'} ({_places(comps, better)})"
    return Verdict(
        verdict="REGRESSION",
        message=msg + _also(only),
        regressed_kinds=sig_w,
        improved_kinds=sig_b,
        candidate_only_kinds=only,
        reasons=_where(c for c in comps if c.verdict == "REGRESSION"),
        power=_budget(ctx),
    )


def _sharing(ctx: _Context, named: list[str]) -> str:
    """`` with repeat_loop (9 of its 13 candidate runs; not significant alone)``: the kinds
    worse in the candidate pooled, not named, that show in at least half of the candidate's
    runs with a named kind (with none named: of its failed runs). What the significant
    kind is made of: a loop that never answers fails as ``missing_final_answer``, and the
    baseline's noise loops (that answer) can keep ``repeat_loop``'s own test above the line."""
    if ctx.pooled is None or not ctx.pooled.patterns:
        return ""
    units = ctx.pooled.units or ctx.pooled.patterns  # repeats under --stream both
    noun = f"{ctx.unit}s"
    runs = [(frozenset(p.split(",")) - {""}, c) for p, c in units.items()]
    worse = (
        {
            t.metric
            for t in ctx.family.tests
            if t.scenario == "*" and t.in_family and t.k_c * t.n_b > t.k_b * t.n_c
        }
        - set(SUCCESS_METRICS)
        - set(named)
    )
    parts = []
    for kind in sorted(worse):
        for s in named or ["passed"]:
            has = [(r, c) for r, c in runs if (s in r if s != "passed" else s not in r)]
            total = sum(c for _, c in has)
            both = sum(c for r, c in has if kind in r)
            if total and 2 * both >= total:
                parts.append(f"{kind} ({both} of its {total} candidate {noun}")
                break
    if not parts:
        return ""
    return " with " + ", ".join(p + "; not significant alone)" for p in parts)


def _inconclusive(unsure: list[ScenarioComparison], ctx: _Context, only: list[str]) -> Verdict:
    """The overall INCONCLUSIVE, with the fewest more repeats any scenario needs."""
    needs = [c.repeats_needed for c in unsure if c.repeats_needed]
    n = min(needs) if needs else None
    tail = ctx.settle(n)
    return Verdict(
        verdict="INCONCLUSIVE",
        repeats_needed=n,
        record_rounds=ctx.recorded.rounds_for(n) if ctx.recorded and n else None,
        message=f"INCONCLUSIVE: worse, not significant{tail}{_also(only)}",
        candidate_only_kinds=only,
        reasons=_where(unsure),
        power=_budget(ctx),
    )


def _also(only: list[str]) -> str:
    """The message's tail naming the kinds seen only in the candidate, if any."""
    return (
        f"; also only in the candidate (not significant alone): {', '.join(only)}" if only else ""
    )


def _budget(ctx: _Context) -> str:
    """What the family was: tests, permutations, the critical p, collapsed scenarios."""
    fam = ctx.family
    tests = sum(t.in_family for t in fam.tests)
    text = (
        f"Westfall-Young over {plural(tests, 'test')}, {fam.permutations} permutations within "
        f"scenarios: significant at one-sided p < {format_p(fam.critical_worse)}"
    )
    if fam.copies:
        text += (
            f"; the {' and '.join(fam.copies)}'s repeats counted once per scenario: they "
            "are copies (temperature and seed ignored), not independent trials"
        )
    if fam.collapsed:
        text += (
            f"; {plural(len(fam.collapsed), 'greedy scenario')} (temperature 0) counted once "
            "per side: their repeats are one transcript, not independent trials"
        )
    return text


def _min_rate(ctx: _Context) -> float | None:
    """The smallest new-failure rate of the candidate's runs detected with 80% probability
    by the rule (:func:`min_detectable_rate`): at this budget, or, at a sequential look
    with rounds left, at the last look's (:func:`_end`); None when no rate could be."""
    runs = [t for t in ctx.family.tests if t.metric == "passed" and t.scenario != "*"]
    scale, crit = _end(ctx)
    n_c, n_b = sum(t.n_c for t in runs), sum(t.n_b for t in runs)
    return min_detectable_rate(round(n_c * scale), round(n_b * scale), crit)


def _end(ctx: _Context) -> tuple[float, float]:
    """``(runs scale, critical p)`` of the last look the rule could reach from this one:
    the runs grow with the rounds; the critical p is this look's times the levels' ratio
    (an approximation: Westfall-Young's critical p is about proportional to the level at
    these levels). ``(1, critical p)`` for a fixed comparison or the last look."""
    crit, look = ctx.family.critical_worse, ctx.look
    if look is None or not look.left:
        return 1.0, crit
    return look.rounds / look.look, crit * look.final_level / look.level


def _power_at(ctx: _Context, scale: float, crit: float) -> tuple[str, str]:
    """``(new kind, one scenario)``: what runs ``scale`` times those spent, judged at the
    critical p ``crit``, detect: the smallest rate of a new failure kind detected with 80%
    probability, and whether one sampled scenario failing every candidate run (never the
    baseline's) is significant."""
    runs = [t for t in ctx.family.tests if t.metric == "passed" and t.scenario != "*"]
    n_c = round(sum(t.n_c for t in runs) * scale)
    n_b = round(sum(t.n_b for t in runs) * scale)
    q = min_detectable_rate(n_c, n_b, crit)
    noun = f"{ctx.unit}s"
    first = (
        f"a new failure kind in >= {q:.1%} of candidate {noun} would have been detected "
        "with 80% probability"
        if q is not None
        else "no new failure kind could have been detected"
    )
    sampled = set(ctx.family.collapsed)
    one = [t for t in runs if t.n_c and t.n_b and t.scenario not in sampled]
    caught = bool(one) and all(
        one_scenario_p(round(t.n_c * scale), round(t.n_b * scale)) < crit for t in one
    )
    which = "sampled scenario" if sampled else "scenario"
    return first, f"one {which} failing every candidate {ctx.unit} would " + (
        "have been detected" if caught else "not have been detected"
    )


def _power(ctx: _Context) -> str:
    """NO CHANGE's statement of what it could have missed (rule 5). After a sequential
    look with rounds left, it speaks of the rule as it ran: the rounds go on while a worse
    test's adjusted p is within the futility bound or a kind shows only in the candidate
    (:func:`harness.stats.sequential.should_stop`), so a fault that shows would have been
    judged with the rounds left, at the last look's runs and level; the critical p there
    is this look's scaled by the levels' ratio (Westfall-Young's critical p is close to
    proportional to the level at these levels), an approximation. Then what the runs
    spent detect."""
    crit = ctx.family.critical_worse
    new, one = _power_at(ctx, 1.0, crit)
    look = ctx.look
    if look is None or not look.left:
        return f"power: {new}; {one} ({_budget(ctx)})"
    scale, crit_end = _end(ctx)
    new_end, one_end = _power_at(ctx, scale, crit_end)
    return (
        f"power of the sequential rule as it ran: it stopped at round {look.look} of "
        f"{look.rounds} because nothing looked worse and no failure kind showed only in the "
        f"candidate; had something looked worse, the {plural(look.left, 'round')} left would "
        f"have run: there {new_end}, and {one_end} (about: the last look's critical p taken "
        f"as {format_p(crit_end)}); the runs spent alone: {new}; {one} ({_budget(ctx)})"
    )


def _overall(comps: list[ScenarioComparison], ctx: _Context) -> Verdict:
    """Rule 5 over all scenarios: a significant regression anywhere, else a significant
    improvement, else INCONCLUSIVE if a scenario is, else NO CHANGE (with its power)."""
    sig_w = _significant_kinds(ctx.significant("worse"))
    # kinds the candidate shows and the baseline never does, in any scenario (a kind new in
    # one scenario but seen in the baseline's runs of another stays in that scenario's
    # ``new_failure_kinds`` only)
    in_baseline = {t.metric for t in ctx.family.tests if t.k_b}
    only = sorted({k for c in comps for k in c.new_failure_kinds} - set(sig_w) - in_baseline)
    if ctx.significant("worse"):
        return _regression(comps, ctx, only)
    if ctx.significant("better"):
        sig_b = _significant_kinds(ctx.significant("better"))
        return Verdict(
            verdict="IMPROVEMENT",
            message="IMPROVEMENT: " + (", ".join(sig_b) or "fewer runs fail"),
            improved_kinds=sig_b,
            reasons=_where(c for c in comps if c.verdict == "IMPROVEMENT"),
            power=_budget(ctx),
        )
    unsure = [c for c in comps if c.verdict == "INCONCLUSIVE"]
    if ctx.suggestive() or any(NO_SCORED in c.reasons for c in unsure):
        return _inconclusive(unsure, ctx, only)
    power = _power(ctx)
    if _min_rate(ctx) is None:  # no difference could have been significant: not evidence
        return Verdict(
            verdict="INCONCLUSIVE",
            message="INCONCLUSIVE: no change could have been detected at this budget (too "
            "few independent runs: more repeats, more scenarios, or sampling at "
            f"temperature > 0){_also(only)}",
            candidate_only_kinds=only,
            power=power,
        )
    return Verdict(
        verdict="NO CHANGE",
        message=f"NO CHANGE: no significant difference between the sides{_also(only)}",
        candidate_only_kinds=only,
        power=power,
    )


def _where(comps: Iterable[ScenarioComparison]) -> list[str]:
    """The comparisons' reasons, each prefixed with where it holds (``all scenarios`` first)."""
    ordered = sorted(comps, key=lambda c: c.scenario_id != "*")
    return [f"{scenario_name(c.scenario_id)}: {r}" for c in ordered for r in c.reasons]
