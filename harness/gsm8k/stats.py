"""GSM8K scores from per-question records: accuracy intervals, McNemar, verdict.

Pure functions of :class:`~harness.gsm8k.models.GSM8KRecord` lists.

* Accuracy interval: Wilson score interval (``scipy.stats.binomtest(...).proportion_ci``).
* Paired test: McNemar's exact test, i.e. a two-sided binomial test of the
  candidate-only correct count ``c`` among the ``b + c`` discordant pairs, p = 0.5
  (``scipy.stats.binomtest``).
* Paired difference interval: Newcombe (1998), "Improved confidence intervals for
  the difference between binomial proportions based on paired data", Stat Med 17:2635,
  method 10 (hybrid score: Wilson intervals of both marginals, combined with the phi
  correlation of the 2x2 table). Unlike the Wald interval it stays sensible when
  ``b + c`` is small or 0.
"""

from __future__ import annotations

import math

from scipy.stats import binomtest

from harness.gsm8k.models import (
    GSM8KDiscordant,
    GSM8KPaired,
    GSM8KRecord,
    GSM8KSideSummary,
    Interval,
    Verdict,
)

__all__ = ["DISCORDANT_SHOWN", "paired_comparison", "side_summary", "wilson"]

#: discordant questions kept in the summary (both outputs shown in reports)
DISCORDANT_SHOWN = 5


def wilson(k: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval of ``k`` successes in ``n`` trials (``[0, 1]`` if n = 0)."""
    if n == 0:
        return Interval(low=0.0, high=1.0, level=level, method="wilson")
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
    return Interval(low=float(ci.low), high=float(ci.high), level=level, method="wilson")


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
        accuracy_interval=wilson(correct, n),
        invalid=invalid,
        invalid_rate=invalid / n if n else 0.0,
        accuracy_strict=sum(1 for r in scored if r.correct_strict) / n if n else 0.0,
        accuracy_flexible=sum(1 for r in scored if r.correct_flexible) / n if n else 0.0,
        latency_s=max(latency, 0.0),
        completion_tokens=tokens,
        output_throughput=tokens / latency if latency > 0 else 0.0,
    )


def newcombe_paired(a: int, b: int, c: int, d: int, level: float = 0.95) -> Interval:
    """Interval for ``p2 - p1`` with p1 = (a+b)/n, p2 = (a+c)/n (Newcombe method 10).

    ``a`` both correct, ``b`` only side 1, ``c`` only side 2, ``d`` neither. The phi
    correlation uses Newcombe's continuity adjustment (as in Altman et al., *Statistics
    with Confidence*, 2000, and R biostatUZH ``confIntPairedProportion``).
    """
    n = a + b + c + d
    if n == 0:
        return Interval(low=-1.0, high=1.0, level=level, method="newcombe-paired")
    p1, p2 = (a + b) / n, (a + c) / n
    w1, w2 = wilson(a + b, n, level), wilson(a + c, n, level)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    cross: float = a * d - b * c  # Newcombe's continuity adjustment (Altman 2000, p. 52)
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0.0)
    phi = cross / math.sqrt(denom) if denom > 0 else 0.0
    dl = (p2 - w2.low) ** 2 - 2 * phi * (p2 - w2.low) * (w1.high - p1) + (w1.high - p1) ** 2
    du = (w2.high - p2) ** 2 - 2 * phi * (w2.high - p2) * (p1 - w1.low) + (p1 - w1.low) ** 2
    diff = p2 - p1
    return Interval(
        low=max(-1.0, diff - math.sqrt(max(dl, 0.0))),
        high=min(1.0, diff + math.sqrt(max(du, 0.0))),
        level=level,
        method="newcombe-paired",
    )


def _verdict(
    b: int, c: int, p: float, n_pairs: int, alpha: float, infra: str | None
) -> tuple[Verdict, str]:
    if infra:
        return "INCONCLUSIVE", infra
    if n_pairs == 0:
        return "INCONCLUSIVE", "no question answered by both sides"
    if p < alpha and b > c:
        return "REGRESSION", f"candidate lost {b} questions and won {c} (McNemar p={p:.2g})"
    if p < alpha and c > b:
        return "IMPROVEMENT", f"candidate won {c} questions and lost {b} (McNemar p={p:.2g})"
    return "NO CHANGE", f"{b} lost, {c} won: not significant (McNemar p={p:.2g} >= {alpha})"


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


def paired_comparison(
    baseline: list[GSM8KRecord],
    candidate: list[GSM8KRecord],
    *,
    alpha: float = 0.05,
    infra: str | None = None,
) -> GSM8KPaired:
    """McNemar's exact test over questions both sides answered without error.

    ``infra``: a reason the run is too broken to judge (verdict INCONCLUSIVE).
    """
    base = {r.index: r for r in baseline if r.correct is not None}
    cand = {r.index: r for r in candidate if r.correct is not None}
    common = {i: base[i] for i in base.keys() & cand.keys()}
    both = sum(1 for i in common if base[i].correct and cand[i].correct)
    b = sum(1 for i in common if base[i].correct and not cand[i].correct)
    c = sum(1 for i in common if cand[i].correct and not base[i].correct)
    n = len(common)
    p = float(binomtest(c, b + c, 0.5).pvalue) if b + c else 1.0
    verdict, reason = _verdict(b, c, p, n, alpha, infra)
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
        diff_interval=newcombe_paired(both, b, c, n - both - b - c),
        alpha=alpha,
        verdict=verdict,
        reason=reason,
        discordant=_discordant(common, {i: cand[i] for i in common}),
    )
