"""Per-position and per-sequence divergence between two scorings of the same tokens.

Per position i (the forced token t_i, both sides' top-k at i):

- the forced token's logprob difference ``candidate - baseline`` (nats);
- top-1 agreement: both sides' most likely token at i is the same;
- :func:`kl_topk`: KL(P_baseline || P_candidate) between the two next-token distributions,
  estimated from what the servers return.

Per sequence (:func:`sequence_divergence`): mean, p99 and max KL, top-1 agreement rate,
mean |logprob difference|, the first position over the token tolerance and the worst
positions with the text around them and both sides' top-5. A position where either side
returned a NaN or infinite logprob is counted apart (``nonfinite``), never averaged.

The same comparison of top-k logprobs token by token is what vLLM's model tests do
(``tests/models/utils.py``: ``check_logprobs_close``) and SGLang's tests against a
reference implementation (``test/srt/models/test_generation_models.py``).
"""

from __future__ import annotations

import math

import numpy as np

from harness.errors import TokenizationMismatch
from harness.numerics.classes import CLASSES
from harness.numerics.kld import KldStats, kld_stats
from harness.numerics.models import (
    ClassStats,
    ScoredSequence,
    SequenceDivergence,
    TopToken,
    WorstToken,
)

__all__ = [
    "pooled_by_class",
    "pooled_kld",
    "STRIP_BINS",
    "TOKEN_TOLERANCE",
    "align_generated",
    "check_aligned",
    "kl_topk",
    "sequence_divergence",
]

#: per-position KL (nats) above which a position is "over tolerance" (first_over, the strip)
TOKEN_TOLERANCE = 0.1
#: at most this many values in a sequence's divergence strip (the max of each bin)
STRIP_BINS = 400
#: probability floor of the remaining-mass bucket (keeps log(0) out; see kl_topk)
REST_FLOOR = 1e-10
_WORST = 5
_CONTEXT_CHARS = 80


def kl_topk(base: dict[str, float], cand: dict[str, float]) -> float:
    """KL(P || Q) in nats, P the baseline's and Q the candidate's next-token distribution,
    from their top-k logprobs (``key -> logprob``, the forced token included).

    Estimator: both distributions are coarsened onto the partition {each token both sides
    report} + {one bucket holding all remaining mass}: ``p_rest = 1 - sum(p_shared)``
    (likewise q), so a token only one side reports falls in the bucket on both sides.
    On that partition the KL is exact. By the log-sum inequality (Cover & Thomas,
    *Elements of Information Theory*, 2nd ed., Thm 2.7.1; the data-processing inequality
    for KL) coarsening never increases KL, so the estimate is biased low: it is a lower
    bound of the full-vocabulary KL, equal to it when the shared tokens carry all the
    mass. A bucket below :data:`REST_FLOOR` is floored there (only its contribution,
    at most ~1e-9 nats, changes). NaN when a logprob is not finite.
    """
    shared = base.keys() & cand.keys()
    values = [base[k] for k in shared] + [cand[k] for k in shared]
    if not shared or any(not math.isfinite(v) for v in values):
        return math.nan
    kl = 0.0
    p_sum = q_sum = 0.0
    for k in shared:
        p, q = math.exp(base[k]), math.exp(cand[k])
        kl += p * (base[k] - cand[k])
        p_sum, q_sum = p_sum + p, q_sum + q
    p_rest = max(1.0 - p_sum, 0.0)
    q_rest = max(1.0 - q_sum, 0.0)
    if p_rest > 0:
        kl += p_rest * math.log(max(p_rest, REST_FLOOR) / max(q_rest, REST_FLOOR))
    return max(kl, 0.0)


def check_aligned(seq_id: str, base: ScoredSequence, cand: ScoredSequence) -> None:
    """Refuse to compare two scorings whose tokens differ.

    Raises:
        TokenizationMismatch: the token lists differ; names the first differing position
            and both sides' tokens there (or the lengths when one is a prefix).
    """
    for i, (a, b) in enumerate(zip(base.keys, cand.keys, strict=False)):
        if a != b:
            raise TokenizationMismatch(
                f"sequence {seq_id!r}: the servers tokenised it differently at position {i}: "
                f"baseline {base.texts[i]!r} (token {a}) vs candidate {cand.texts[i]!r} "
                f"(token {b}); compare servers that share a tokenizer (same model files)"
            )
    if len(base) != len(cand):
        raise TokenizationMismatch(
            f"sequence {seq_id!r}: the baseline gave {len(base)} tokens, the candidate "
            f"{len(cand)} (the first {min(len(base), len(cand))} agree); compare servers "
            "that share a tokenizer, or check for a truncated logprob list"
        )


def align_generated(
    a: ScoredSequence, b: ScoredSequence
) -> tuple[ScoredSequence, ScoredSequence, int | None]:
    """Two greedy generations cut to their common prefix plus the first position where they
    part (its two distributions are still conditioned on the same tokens, so comparable);
    the index of that position, or None when one path is a prefix of the other. At the
    cut, b's token there is shown as a's (the key compared is the distribution)."""
    n = min(len(a), len(b))
    parted = next((i for i in range(n) if a.keys[i] != b.keys[i]), None)
    end = n if parted is None else parted + 1

    def cut(s: ScoredSequence) -> ScoredSequence:
        return ScoredSequence(s.keys[:end], s.texts[:end], s.logprobs[:end], s.top[:end],
                              s.names, s.requests)  # fmt: skip

    a2, b2 = cut(a), cut(b)
    if parted is not None:
        b2.keys[parted], b2.texts[parted] = a2.keys[parted], a2.texts[parted]
    return a2, b2, parted


def _top1(top: dict[str, float]) -> str | None:
    finite = {k: v for k, v in top.items() if math.isfinite(v)}
    return max(finite, key=lambda k: finite[k]) if finite else None


def _strip(kl: list[float]) -> list[float]:
    """Per-position KL in at most STRIP_BINS bins (max per bin; NaN shown as -1)."""
    vals = [-1.0 if math.isnan(v) else v for v in kl]
    if len(vals) <= STRIP_BINS:
        return [round(v, 6) for v in vals]
    edges = np.linspace(0, len(vals), STRIP_BINS + 1).astype(int)
    return [round(max(vals[a:b]), 6) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _top5(seq: ScoredSequence, i: int) -> list[TopToken]:
    ranked = sorted(seq.top[i].items(), key=lambda kv: -kv[1] if math.isfinite(kv[1]) else 1e9)
    return [TopToken(token=seq.names.get(k, k), logprob=_num(v)) for k, v in ranked[:5]]


def _num(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


def _worst(base: ScoredSequence, cand: ScoredSequence, i: int, kl: float) -> WorstToken:
    before = "".join(base.texts[max(0, i - 24) : i])[-_CONTEXT_CHARS:]
    after = "".join(base.texts[i + 1 : i + 12])[:_CONTEXT_CHARS]
    return WorstToken(
        position=i,
        token=base.texts[i],
        before=before,
        after=after,
        kl=_num(kl),
        baseline_logprob=_num(base.logprobs[i]),
        candidate_logprob=_num(cand.logprobs[i]),
        baseline_top=_top5(base, i),
        candidate_top=_top5(cand, i),
    )


def _per_position(
    base: ScoredSequence, cand: ScoredSequence
) -> tuple[list[float], list[float], list[bool], list[float]]:
    """Positions 1..n-1: KL, |logprob difference| (NaN when not finite), top-1 agreement,
    Δp (``p_cand - p_base`` of the forced token, NaN when not finite)."""
    kls, dlps, agree, dps = [], [], [], []
    for i in range(1, len(base)):
        kls.append(kl_topk(base.top[i], cand.top[i]))
        a, b = base.logprobs[i], cand.logprobs[i]
        ok = a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
        dlps.append(abs(b - a) if ok else math.nan)  # type: ignore[operator]
        dps.append(math.exp(b) - math.exp(a) if ok else math.nan)  # type: ignore[arg-type]
        agree.append(_top1(base.top[i]) == _top1(cand.top[i]))
    return kls, dlps, agree, dps


def sequence_divergence(
    base: ScoredSequence, cand: ScoredSequence, *, token_tolerance: float = TOKEN_TOLERANCE
) -> SequenceDivergence:
    """The divergence of two aligned scorings of one sequence (call :func:`check_aligned`
    first). Statistics are over positions 1..n-1 with finite values; ``None`` when a
    sequence has no such position."""
    kls, dlps, agree, dps = _per_position(base, cand)
    finite = np.array([v for v in kls if math.isfinite(v)])
    over = next((i for i, v in enumerate(kls) if math.isnan(v) or v > token_tolerance), None)
    order = sorted(range(len(kls)), key=lambda i: -math.inf if math.isnan(kls[i]) else -kls[i])
    d = np.array([v for v in dlps if math.isfinite(v)])
    out = SequenceDivergence(
        positions=len(kls),
        mean_kl=float(finite.mean()) if finite.size else None,
        p99_kl=float(np.percentile(finite, 99)) if finite.size else None,
        max_kl=float(finite.max()) if finite.size else None,
        top1_agreement=float(np.mean(agree)) if agree else None,
        mean_abs_dlogp=float(d.mean()) if d.size else None,
        first_over=None if over is None else _worst(base, cand, over + 1, kls[over]),
        worst=[_worst(base, cand, i + 1, kls[i]) for i in order[:_WORST]],
        nonfinite={"baseline": base.nonfinite(), "candidate": cand.nonfinite()},
        strip=_strip(kls),
        kld=kld_stats(kls, dps, agree),
    )
    out._values = (kls, dps, agree)
    return out


def pooled_by_class(
    pairs: list[tuple[SequenceDivergence, SequenceDivergence]],
) -> list[ClassStats]:
    """llama-perplexity's statistics per token class over ``(A/B, A/A)`` divergences
    (their in-memory values and classes), in :data:`~harness.numerics.classes.CLASSES`
    order; classes no A/B position has are left out."""
    out = []
    for cls in CLASSES:
        ab, aa = (_class_stats([p[j] for p in pairs], cls) for j in (0, 1))
        if ab is not None:
            out.append(ClassStats(token_class=cls, ab=ab, aa=aa))
    return out


def _class_stats(divs: list[SequenceDivergence], cls: str) -> KldStats | None:
    kls: list[float] = []
    dps: list[float] = []
    same: list[bool] = []
    for d in divs:
        for i, c in enumerate(d._classes):
            if c == cls and i < len(d._values[0]):
                kls.append(d._values[0][i])
                dps.append(d._values[1][i])
                same.append(d._values[2][i])
    return kld_stats(kls, dps, same)


def pooled_kld(divs: list[SequenceDivergence]) -> KldStats | None:
    """llama-perplexity's statistics over every position of ``divs`` together (their
    in-memory per-position values; None when none has any)."""
    kls: list[float] = []
    dps: list[float] = []
    same: list[bool] = []
    for d in divs:
        k, p, a = d._values
        kls += k
        dps += p
        same += a
    return kld_stats(kls, dps, same)
