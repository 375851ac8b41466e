"""The numerics verdict: is the candidate's divergence from the baseline above the noise floor
by more than the tolerance?

Per sequence i: ``ab_i`` = mean per-token KL between the baseline and the candidate,
``aa_i`` = the same between two scorings of the baseline (A/A: the baseline scored
twice, or a second baseline server): the noise floor measured on the same tokens.
The paired differences ``x_i = ab_i - aa_i`` are tested against the tolerance ``tau``
(nats per token), over the independent sequences (:func:`independent`: sequences whose
compared tokens are identical count once), with the one-sided Wilcoxon signed-rank test (``scipy.stats.wilcoxon``;
Wilcoxon 1945; exact null distribution for n <= 50 without ties):

- REGRESSION when ``x_i - tau`` is shifted above 0 (``alternative="greater"``, p < alpha)
  **or** its mean is above 0 (one-sided Student's t, ``scipy.stats.ttest_1samp``,
  ``alternative="greater"``, p < alpha);
- NO CHANGE when it is shifted below 0 (``alternative="less"``, p < alpha) **and** its mean
  is below 0 (Student's t, ``alternative="less"``, p < alpha): the candidate is within
  tolerance of the floor;
- INCONCLUSIVE otherwise (too few sequences, or a divergence near the tolerance).

The signed-rank test alone decides on the typical sequence (its pseudo-median), not on
the mean that the tolerance is stated in: a fault that moves a minority of sequences by a
lot (a template that drops tool results: only the turns after a tool result; a kernel path
taken by some shapes only) has a mean far above the tolerance and a typical sequence
below it, and was called NO CHANGE. The t-test on the mean closes that: REGRESSION when
either says above, NO CHANGE only when both say within. Per-sequence KL is skewed to the
right, where the one-sided t-test for a larger mean is conservative (a large sample mean
comes with a large sample variance). Both rules' error rates, the signed rank alone and
with the mean test, on skewed per-sequence divergences at the tolerance, on an A/A, and on
faults that hit a minority of sequences: ``python -m bench.calibration.numerics_rule``
(``bench/calibration/numerics-rule.json``).

A shift below the tolerance that is real (the reference server's ``kv-cache-quant``) is
therefore NO CHANGE, by design: the tolerance is the size of difference this harness calls
a regression (a real q4_0 KV cache on SmolLM2-135M, 0.037 nats a token, is above it; a
q8_0 one, 0.0022, near it). NaN or infinite logprobs are a finding, decided before the test: on the
candidate only, REGRESSION; on the baseline, INCONCLUSIVE (the floor itself is broken).
The decode path (generation-aligned rows: both sides decode greedily) has one more rule,
first: greedy paths that part within :data:`EARLY` tokens on a share of the prompts above
the A/A paths' share plus :data:`PARTING_MARGIN` (:func:`parting`, an exact binomial test)
are a REGRESSION, however few the scenarios: a decode-only kernel fault moves the argmax
at once.
With fewer than :data:`MIN_SEQUENCES` independent sequences, the unit is a block of
:data:`BLOCK` consecutive positions (:func:`_blocks`; positions within a sequence are
correlated, so this unit is weaker evidence than a sequence: its false alarms are
measured in ``tests/numerics/test_numerics_blocks.py``).
False-alarm rate and power at the defaults: ``bench/calibration/logprobs.py`` (figures: docs/numerics.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from harness.numerics.models import PairStats, SequenceResult, Verdict

__all__ = [
    "ALPHA",
    "BLOCK",
    "EARLY",
    "MIN_SEQUENCES",
    "PARTING_MARGIN",
    "TOLERANCE",
    "decide",
    "independent",
    "parting",
]

#: default tolerance: mean per-token KL (nats) above the A/A floor called a regression.
#: Calibrated on the MoE panel of real llama-server variants (docs/moe-panel.md, ``python
#: -m e2e.panel --sweep``): the largest tolerance at which an expert's weights off by 10%
#: (KL 0.0056) is REGRESSION in every comparison, and the smallest at which flash
#: attention off (0.0019) is NO CHANGE; no benign change and no A/A is REGRESSION at it
#: (a q8_0 KV cache, 0.0022, is INCONCLUSIVE). It was 0.01 before.
TOLERANCE = 0.003
#: one-sided significance level of each test (signed rank and t, each direction)
ALPHA = 0.01
#: fewer sequences than this cannot reach p < ALPHA with the exact test (2^-7 = 0.0078)
MIN_SEQUENCES = 7
TEST = (
    "one-sided Wilcoxon signed-rank and Student's t on (A/B - A/A mean KL per sequence) - tolerance"
)
#: with fewer independent sequences than MIN_SEQUENCES, the paired test's unit is a block
#: of this many consecutive positions (a divergence as large as a dropped routed expert's
#: is then decided with the three scenarios at hand)
BLOCK = 32
BLOCK_TEST = (
    f"one-sided Wilcoxon signed-rank and Student's t on (A/B - A/A mean KL per block of "
    f"{BLOCK} tokens) - tolerance"
)
#: generation-aligned: a greedy path parting within this many generated tokens is "early"
EARLY = 8
#: the share of prompts whose greedy paths part early, above the A/A's share, that is
#: called a regression: a benign change flips a few near-tied tokens (the reference
#: server's KV-cache-like shift: 10 of 72 prompts, 14%); a decode fault most (60%)
PARTING_MARGIN = 0.2
PARTING_TEST = (
    f"one-sided exact binomial: the share of prompts whose greedy paths part within {EARLY} "
    f"tokens, A/B above A/A + {PARTING_MARGIN:g}"
)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def _wilcoxon(x: np.ndarray, alternative: str) -> float:
    """p-value of the one-sided signed-rank test of ``x`` against 0 (1.0 when all zero)."""
    if not np.any(x != 0):
        return 1.0
    return float(stats.wilcoxon(x, alternative=alternative, zero_method="wilcox").pvalue)


def _ttest(x: np.ndarray, alternative: str) -> float:
    """p-value of the one-sided Student's t test that the mean of ``x`` is above
    (``"greater"``) or below (``"less"``) 0. With no spread the mean is known exactly: 0.0
    when it lies on the alternative's side of 0, else 1.0. Fewer than 2 values: 1.0."""
    if len(x) < 2:
        return 1.0
    if float(np.ptp(x)) == 0.0:
        m = float(x[0])
        return 0.0 if (m > 0 if alternative == "greater" else m < 0) else 1.0
    return float(stats.ttest_1samp(x, 0.0, alternative=alternative).pvalue)


def _stats(rows: Sequence[SequenceResult], tolerance: float, alpha: float) -> PairStats:
    return PairStats(
        sequences=len(rows),
        ab_mean_kl=_mean([r.ab.mean_kl for r in rows]),
        aa_mean_kl=_mean([r.aa.mean_kl for r in rows]),
        ab_top1_agreement=_mean([r.ab.top1_agreement for r in rows]),
        aa_top1_agreement=_mean([r.aa.top1_agreement for r in rows]),
        tolerance=tolerance,
        alpha=alpha,
        p_regression=None,
        p_no_change=None,
        test=TEST,
    )


def _nonfinite(rows: Sequence[SequenceResult]) -> tuple[Verdict, str] | None:
    cand = sum(r.ab.nonfinite.get("candidate", 0) for r in rows)
    base = sum(r.aa.nonfinite.get("baseline", 0) + r.aa.nonfinite.get("candidate", 0) for r in rows)
    if base:
        return "INCONCLUSIVE", (
            f"INCONCLUSIVE: the baseline returned NaN/infinite logprobs at {base} positions "
            "(the noise floor itself is broken: check the baseline server)"
        )
    if cand:
        where = next(r for r in rows if r.ab.nonfinite.get("candidate"))
        return "REGRESSION", (
            f"REGRESSION: the candidate returned NaN/infinite logprobs at {cand} positions "
            f"(first in sequence {where.id!r}); the baseline's are all finite"
        )
    return None


def independent(rows: Sequence[SequenceResult]) -> list[SequenceResult]:
    """The rows the paired test counts: the first of each set of rows whose compared
    tokens are identical (``SequenceResult.span``; rows without one all count). Eight
    GSM8K prompts cut inside their shared few-shot preamble are one sequence, not eight."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r.span is not None:
            if r.span in seen:
                continue
            seen.add(r.span)
        out.append(r)
    return out


def parting(
    rows: Sequence[SequenceResult], *, early: int = EARLY, margin: float = PARTING_MARGIN
) -> tuple[int, int, int, float]:
    """Generation-aligned rows: ``(n, ab, aa, p)``: units, units whose A/B greedy paths part
    within the first ``early`` generated tokens, units whose A/A paths do, and the one-sided
    p-value of the exact binomial test (``scipy.stats.binomtest``, ``alternative="greater"``)
    that the A/B share exceeds the A/A share plus ``margin``: ``P(X >= ab)`` for ``X ~
    Binomial(n, min(1, aa/n + margin))`` (1.0 when no A/B path parts early). Its unit is a
    prompt, so its power grows with the prompts, not with the scenarios' tokens: nine
    prompts whose A/B paths all part at once, against A/A paths that never do, give
    ``p = 0.2^9 = 5.1e-7``. The margin keeps a benign change, which flips a few
    near-tied tokens, from being called a regression on many prompts."""
    n = len(rows)
    ab = sum(1 for r in rows if r.parted_at is not None and r.parted_at <= early)
    aa = sum(1 for r in rows if r.aa_parted_at is not None and r.aa_parted_at <= early)
    if ab == 0 or n == 0:
        return n, ab, aa, 1.0
    q = min(1.0, aa / n + margin)
    if q >= 1.0:
        return n, ab, aa, 1.0
    return n, ab, aa, float(stats.binomtest(ab, n, q, alternative="greater").pvalue)


def _blocks(rows: Sequence[SequenceResult]) -> list[tuple[float, float]]:
    """Consecutive blocks of :data:`BLOCK` positions of each row (the last one when it has
    at least half a block): ``(A/B mean KL, A/A mean KL)`` over the block's finite
    positions, from the rows' in-memory per-position values (none for rows read from a
    file)."""
    out = []
    for r in rows:
        ab, aa = r.ab._values[0], r.aa._values[0]
        if not ab or len(ab) != len(aa):
            continue
        for start in range(0, len(ab), BLOCK):
            pairs = [
                (x, y)
                for x, y in zip(ab[start : start + BLOCK], aa[start : start + BLOCK], strict=True)
                if math.isfinite(x) and math.isfinite(y)
            ]
            if len(pairs) >= BLOCK // 2:
                out.append(
                    (float(np.mean([x for x, _ in pairs])), float(np.mean([y for _, y in pairs])))
                )
    return out


def decide(
    rows: Sequence[SequenceResult],
    *,
    tolerance: float = TOLERANCE,
    alpha: float = ALPHA,
    generation: bool = False,
) -> tuple[Verdict, str, PairStats]:
    """The verdict, its one-line message and the evidence (see the module docstring).

    ``rows``: one :class:`SequenceResult` per sequence (A/B and A/A divergence of the same
    tokens). ``generation``: the rows compare greedy decodes (the decode path): before the
    KL test, greedy paths that part early more often than the A/A paths are a REGRESSION
    by themselves (:func:`parting`). Pure; never raises on NaN or infinite values.
    """
    st = _stats(rows, tolerance, alpha)
    finding = _nonfinite(rows)
    if finding is not None:
        return finding[0], finding[1], st
    units = independent(rows)
    st.independent = len(units)
    if generation:
        n, parted_ab, parted_aa, p = parting(units)
        if p < alpha:
            st.test = PARTING_TEST
            return (
                "REGRESSION",
                (
                    f"REGRESSION: the greedy paths part within the first {EARLY} generated tokens "
                    f"on {parted_ab} of {n} prompts, the A/A paths on {parted_aa} (above the "
                    f"A/A share + {PARTING_MARGIN:g}, binomial p={p:.2g})"
                ),
                st,
            )
    pairs = [(r.ab.mean_kl, r.aa.mean_kl) for r in units]
    usable = [(a, b) for a, b in pairs if a is not None and b is not None]
    copies = len(rows) - len(units)
    said = f" ({copies} more were copies of these tokens, counted once)" if copies else ""
    unit = "sequences"
    if len(usable) < MIN_SEQUENCES:
        blocks = _blocks(units)
        if len(blocks) < MIN_SEQUENCES:
            return (
                "INCONCLUSIVE",
                (
                    f"INCONCLUSIVE: {len(usable)} independent sequences scored on both "
                    f"sides{said}; the paired test needs at least {MIN_SEQUENCES} (add "
                    "scenarios or --gsm8k prompts)"
                ),
                st,
            )
        unit = f"blocks of {BLOCK} tokens from {len(usable)} sequences"
        usable = blocks
        st.test = BLOCK_TEST
    x = np.array([a - b for a, b in usable]) - tolerance
    st.p_regression, st.p_no_change = _wilcoxon(x, "greater"), _wilcoxon(x, "less")
    st.p_regression_mean, st.p_no_change_mean = _ttest(x, "greater"), _ttest(x, "less")
    ab, aa = st.ab_mean_kl or 0.0, st.aa_mean_kl or 0.0
    figures = f"A/B KL {ab:.2g} vs A/A {aa:.2g} nats/token, tolerance {tolerance:g}"
    if copies or unit != "sequences":
        figures += f"; {len(usable)} independent {unit}{said}"
    if st.p_regression < alpha:
        return "REGRESSION", f"REGRESSION: {figures} (p={st.p_regression:.2g})", st
    if st.p_regression_mean < alpha:
        return (
            "REGRESSION",
            (
                f"REGRESSION: {figures}: the mean is above tolerance (t-test "
                f"p={st.p_regression_mean:.2g}; the typical {unit.split()[0][:-1]} is not, "
                f"signed rank p={st.p_regression:.2g}: a minority diverges by a lot)"
            ),
            st,
        )
    if st.p_no_change < alpha and st.p_no_change_mean < alpha:
        p = max(st.p_no_change, st.p_no_change_mean)
        return "NO CHANGE", f"NO CHANGE: {figures} (within tolerance, p={p:.2g})", st
    return (
        "INCONCLUSIVE",
        (
            f"INCONCLUSIVE: {figures}; neither above nor within tolerance at alpha {alpha:g} "
            f"(signed rank p={st.p_regression:.2g} / {st.p_no_change:.2g}, mean "
            f"p={st.p_regression_mean:.2g} / {st.p_no_change_mean:.2g}): score more sequences"
        ),
        st,
    )
