"""GSM8K scores from per-question records: per-side accuracy, the paired verdict.

Pure functions of :class:`~harness.gsm8k.models.GSM8KRecord` lists. The statistics are
the harness's general ones (:mod:`harness.stats.tests`, each with its source):

* accuracy interval: :func:`~harness.stats.tests.wilson_interval` (Wilson score);
* paired test: :func:`~harness.stats.tests.mcnemar_exact` of the baseline-only (``b``)
  and candidate-only (``c``) correct counts;
* paired difference interval: :func:`~harness.stats.tests.newcombe_paired_interval`
  (Newcombe 1998, method 10) of candidate minus baseline accuracy, at confidence
  ``1 - 2 * alpha`` (its lower end is the one-sided bound at ``alpha``);
* one-sided paired test: exact McNemar, ``P(X >= b)`` for ``X ~ Binomial(b + c, 1/2)``
  (``scipy.stats.binomtest(b, b + c, 0.5, alternative="greater")``);
* minimum detectable drop: :func:`min_detectable_drop`, Connor's (1987) sample size for
  McNemar's test solved for the difference.

What is GSM8K's own: which records count (errored questions are left out, never
wrong), the verdict rule (:func:`paired_comparison`) and the discordant examples kept.
"""

from __future__ import annotations

import math

from scipy import optimize
from scipy import stats as sps

from harness.gsm8k.models import (
    GSM8KDiscordant,
    GSM8KPaired,
    GSM8KRecord,
    GSM8KSideSummary,
    Interval,
)
from harness.kinds import VerdictName, plural
from harness.stats.tests import mcnemar_exact, newcombe_paired_interval, wilson_interval

__all__ = [
    "DISCORDANT_SHOWN",
    "MARGIN",
    "min_detectable_drop",
    "paired_comparison",
    "paired_verdict",
    "side_summary",
]

#: discordant questions kept in the summary (both outputs shown in reports)
DISCORDANT_SHOWN = 5
#: default ``--margin``: a drop the comparison must be able to rule out (2 points)
MARGIN = 0.02


def min_detectable_drop(
    n: int, discordant: float, alpha: float, power: float = 0.8
) -> float | None:
    """Smallest accuracy drop a one-sided McNemar test at ``alpha`` detects with
    probability ``power`` over ``n`` paired questions with a ``discordant`` share of
    discordant pairs; None when ``n`` or ``discordant`` is 0.

    Source: Connor (1987), "Sample size for testing differences in proportions for the
    paired-sample design", Biometrics 43:207, eq. 3, solved for ``delta``::

        n = (z_{1-alpha} * sqrt(psi) + z_{power} * sqrt(psi - delta^2))^2 / delta^2
    """
    if n <= 0 or discordant <= 0:
        return None
    za, zb = float(sps.norm.ppf(1 - alpha)), float(sps.norm.ppf(power))
    psi = min(discordant, 1.0)

    def gap(delta: float) -> float:
        return (za * math.sqrt(psi) + zb * math.sqrt(psi - delta * delta)) ** 2 / delta**2 - n

    top = psi  # a drop is at most the discordant share
    if gap(top) > 0:  # even the largest drop the discordance allows is not enough
        return None
    return float(optimize.brentq(gap, 1e-9, top))


def _accuracy_interval(k: int, n: int) -> Interval:
    low, high = wilson_interval(k, n)
    return Interval(low=low, high=high, level=0.95, method="wilson")


def side_summary(
    records: list[GSM8KRecord], *, label: str, base_url: str, model: str | None = None
) -> GSM8KSideSummary:
    """Scores of one side. Errored questions are counted in ``n_errors``, not scored.

    ``latency_s`` is the wall clock from the first request sent to the last answer,
    ``output_throughput`` completion tokens per second of it (as SGLang reports).
    """
    scored = [r for r in records if r.correct is not None]
    n = len(scored)
    correct = sum(1 for r in scored if r.correct)
    invalid = sum(1 for r in scored if r.extracted.sglang is None)
    tokens = sum(r.completion_tokens or 0 for r in scored)
    latency = max((r.t_end for r in records), default=0.0) - min(
        (r.t_start for r in records), default=0.0
    )
    errors = sorted(r.index for r in records if r.correct is None)
    return GSM8KSideSummary(
        label=label,
        side=records[0].side if records else None,
        base_url=base_url,
        model=model or next((r.model for r in records if r.model), None),
        n=n,
        n_errors=len(errors),
        error_indices=errors,
        correct=correct,
        accuracy=correct / n if n else 0.0,
        accuracy_interval=_accuracy_interval(correct, n),
        invalid=invalid,
        invalid_rate=invalid / n if n else 0.0,
        accuracy_strict=sum(1 for r in scored if r.correct_strict) / n if n else 0.0,
        accuracy_flexible=sum(1 for r in scored if r.correct_flexible) / n if n else 0.0,
        latency_s=max(latency, 0.0),
        completion_tokens=tokens,
        output_throughput=tokens / latency if latency > 0 else 0.0,
    )


def _one_sided(k: int, m: int) -> float:
    """Exact one-sided McNemar p: ``P(X >= k)``, ``X ~ Binomial(m, 1/2)``; 1 when m = 0."""
    return float(sps.binomtest(k, m, 0.5, alternative="greater").pvalue) if m else 1.0


def _verdict(
    b: int, c: int, n_pairs: int, low: float, rule: tuple[float, float], infra: str | None
) -> tuple[VerdictName, str]:
    """REGRESSION at one-sided p <= alpha; IMPROVEMENT the reverse; INCONCLUSIVE while
    the interval's lower end admits a drop larger than the margin; else NO CHANGE."""
    alpha, margin = rule
    if infra:
        return "INCONCLUSIVE", infra
    if n_pairs == 0:
        return "INCONCLUSIVE", "no question answered by both sides"
    worse, better = _one_sided(b, b + c), _one_sided(c, b + c)
    if worse <= alpha:
        return (
            "REGRESSION",
            f"candidate lost {plural(b, 'question')} and won {c} "
            f"(McNemar one-sided p={worse:.2g} <= {alpha:g})",
        )
    if better <= alpha:
        return (
            "IMPROVEMENT",
            f"candidate won {plural(c, 'question')} and lost {b} "
            f"(McNemar one-sided p={better:.2g} <= {alpha:g})",
        )
    head = f"{b} lost, {c} won: not significant (McNemar one-sided p={worse:.2g} > {alpha:g})"
    if -low > margin:
        return (
            "INCONCLUSIVE",
            f"{head}, but a drop of up to {-low:.2%} is not ruled out (margin {margin:.1%}): "
            "more questions would settle it",
        )
    return "NO CHANGE", f"{head}; a drop over {margin:.1%} is ruled out"


def _discordant(
    base: dict[int, GSM8KRecord], cand: dict[int, GSM8KRecord]
) -> list[GSM8KDiscordant]:
    out: list[GSM8KDiscordant] = []
    for i in sorted(base):
        x, y = base[i], cand[i]
        if x.correct == y.correct or len(out) >= DISCORDANT_SHOWN:
            continue
        out.append(
            GSM8KDiscordant(
                index=i,
                question=x.question,
                reference=x.reference,
                baseline_correct=bool(x.correct),
                baseline_answer=x.extracted.sglang,
                candidate_answer=y.extracted.sglang,
                baseline_output=x.output,
                candidate_output=y.output,
            )
        )
    return out


def _diff_interval(both: int, b: int, c: int, neither: int, level: float) -> Interval:
    low, high = newcombe_paired_interval(both, b, c, neither, level)
    return Interval(low=low, high=high, level=level, method="newcombe-paired")


def paired_verdict(
    table: tuple[int, int, int, int],
    *,
    alpha: float = 0.05,
    margin: float = MARGIN,
    infra: str | None = None,
) -> tuple[VerdictName, str, Interval, float | None]:
    """The rule of :func:`paired_comparison` on the paired counts ``(both, b, c,
    neither)``: ``(verdict, reason, difference interval, minimum detectable drop)``."""
    both, b, c, neither = table
    n = both + b + c + neither
    interval = _diff_interval(both, b, c, neither, 1 - 2 * alpha)
    verdict, reason = _verdict(b, c, n, interval.low, (alpha, margin), infra)
    mdd = min_detectable_drop(n, (b + c) / n if n else 0.0, alpha)
    if verdict in ("NO CHANGE", "INCONCLUSIVE") and not infra and n:
        reason += (
            f"; at {plural(n, 'question')} and this discordance a drop of "
            f"{mdd:.1%} would be detected with 80% probability"
            if mdd is not None
            else "; no discordant question: the minimum detectable drop is unknown"
        )
    return verdict, reason, interval, mdd


def paired_comparison(
    baseline: list[GSM8KRecord],
    candidate: list[GSM8KRecord],
    *,
    alpha: float = 0.05,
    infra: str | None = None,
    margin: float = MARGIN,
) -> GSM8KPaired:
    """McNemar's exact test over questions both sides answered without error.

    Verdict: ``REGRESSION`` when the one-sided exact McNemar p that the candidate is
    worse is at most ``alpha``, ``IMPROVEMENT`` the reverse; else ``INCONCLUSIVE`` when
    the ``1 - 2 * alpha`` interval of the difference still admits a drop larger than
    ``margin``, ``NO CHANGE`` when it rules one out. ``INCONCLUSIVE`` too when ``infra``
    gives a reason the run is too broken to judge, or no question was answered by both
    sides. ``min_detectable_drop``: :func:`min_detectable_drop` at the observed
    discordance.
    """
    base = {r.index: r for r in baseline if r.correct is not None}
    cand = {r.index: r for r in candidate if r.correct is not None}
    common = {i: base[i] for i in base.keys() & cand.keys()}
    both = sum(1 for i in common if base[i].correct and cand[i].correct)
    b = sum(1 for i in common if base[i].correct and not cand[i].correct)
    c = sum(1 for i in common if cand[i].correct and not base[i].correct)
    n = len(common)
    p = mcnemar_exact(b, c)
    verdict, reason, interval, mdd = paired_verdict(
        (both, b, c, n - both - b - c), alpha=alpha, margin=margin, infra=infra
    )
    return GSM8KPaired(
        n_pairs=n,
        both_correct=both,
        b=b,
        c=c,
        neither=n - both - b - c,
        baseline_accuracy=(both + b) / n if n else 0.0,
        candidate_accuracy=(both + c) / n if n else 0.0,
        mcnemar_p=p,
        accuracy_diff=(c - b) / n if n else 0.0,
        diff_interval=interval,
        alpha=alpha,
        verdict=verdict,
        reason=reason,
        p_worse=_one_sided(b, b + c),
        margin=margin,
        min_detectable_drop=mdd,
        discordant=_discordant(common, {i: cand[i] for i in common}),
    )
