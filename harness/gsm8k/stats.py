"""GSM8K scores from per-question records: per-side accuracy, the paired verdict.

Pure functions of :class:`~harness.gsm8k.models.GSM8KRecord` lists. The statistics are
the harness's general ones (:mod:`harness.stats.tests`, each with its source):

* accuracy interval: :func:`~harness.stats.tests.wilson_interval` (Wilson score);
* paired test: :func:`~harness.stats.tests.mcnemar_exact` of the baseline-only (``b``)
  and candidate-only (``c``) correct counts;
* paired difference interval: :func:`~harness.stats.tests.newcombe_paired_interval`
  (Newcombe 1998, method 10) of candidate minus baseline accuracy.

What is GSM8K's own: which records count (errored questions are left out, never
wrong), the verdict rule (:func:`paired_comparison`) and the discordant examples kept.
"""

from __future__ import annotations

from harness.gsm8k.models import (
    GSM8KDiscordant,
    GSM8KPaired,
    GSM8KRecord,
    GSM8KSideSummary,
    Interval,
)
from harness.kinds import VerdictName, plural
from harness.stats.tests import mcnemar_exact, newcombe_paired_interval, wilson_interval

__all__ = ["DISCORDANT_SHOWN", "paired_comparison", "side_summary"]

#: discordant questions kept in the summary (both outputs shown in reports)
DISCORDANT_SHOWN = 5


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


def _verdict(
    b: int, c: int, p: float, n_pairs: int, alpha: float, infra: str | None
) -> tuple[VerdictName, str]:
    if infra:
        return "INCONCLUSIVE", infra
    if n_pairs == 0:
        return "INCONCLUSIVE", "no question answered by both sides"
    if p < alpha and b > c:
        return (
            "REGRESSION",
            f"candidate lost {plural(b, 'question')} and won {c} (McNemar p={p:.2g})",
        )
    if p < alpha and c > b:
        return (
            "IMPROVEMENT",
            f"candidate won {plural(c, 'question')} and lost {b} (McNemar p={p:.2g})",
        )
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


def _diff_interval(both: int, b: int, c: int, neither: int) -> Interval:
    low, high = newcombe_paired_interval(both, b, c, neither)
    return Interval(low=low, high=high, level=0.95, method="newcombe-paired")


def paired_comparison(
    baseline: list[GSM8KRecord],
    candidate: list[GSM8KRecord],
    *,
    alpha: float = 0.05,
    infra: str | None = None,
) -> GSM8KPaired:
    """McNemar's exact test over questions both sides answered without error.

    Verdict: ``REGRESSION`` when McNemar p < ``alpha`` and the candidate lost more
    questions than it won, ``IMPROVEMENT`` the reverse, else ``NO CHANGE``;
    ``INCONCLUSIVE`` when ``infra`` gives a reason the run is too broken to judge, or
    no question was answered by both sides.
    """
    base = {r.index: r for r in baseline if r.correct is not None}
    cand = {r.index: r for r in candidate if r.correct is not None}
    common = {i: base[i] for i in base.keys() & cand.keys()}
    both = sum(1 for i in common if base[i].correct and cand[i].correct)
    b = sum(1 for i in common if base[i].correct and not cand[i].correct)
    c = sum(1 for i in common if cand[i].correct and not base[i].correct)
    n = len(common)
    p = mcnemar_exact(b, c)
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
        diff_interval=_diff_interval(both, b, c, n - both - b - c),
        alpha=alpha,
        verdict=verdict,
        reason=reason,
        discordant=_discordant(common, {i: cand[i] for i in common}),
    )
