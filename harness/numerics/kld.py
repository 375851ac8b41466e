"""Token-level statistics as ``llama-perplexity --kl-divergence`` reports them.

llama.cpp's ``tools/perplexity/perplexity.cpp`` (``kl_divergence``) reports, over every
scored position: the mean KL divergence with its standard error and its percentiles
(``Maximum``, ``99.9%``, ``99.0%``, ``95.0%``, ``90.0%``, ``Median``, ``10.0%``,
``5.0%``, ``1.0%``, ``0.1%``, ``Minimum``); the change of the scored token's probability
``Δp = p_candidate(token) - p_base(token)`` (a probability, reported in %), its mean,
percentiles (with ``75.0%`` and ``25.0%`` as well) and RMS; and ``Same top p``, the
share of positions whose most likely token agrees. This module computes the same
figures with the same estimators:

- ``mean ± uncertainty``: the mean, and ``sqrt((E[x²] - E[x]²) / (n - 1))``, 0 for
  ``n <= 10`` (``mean_and_uncertainty``);
- a percentile at fraction ``f``: linear interpolation at ``f * (n - 1)`` in the sorted
  values; the median is the mean of the two middle values for an even ``n``;
- RMS Δp: ``sqrt(E[Δp²])``, its uncertainty ``0.5 / RMS * unc(Δp², Δp⁴)``;
- ``Same top p``: ``k / n`` and ``sqrt(p (1 - p) / (n - 1))``.

Differences from llama.cpp: the KL here is the harness's top-k estimate (a lower bound of
the full-vocabulary KLD, :func:`harness.numerics.divergence.kl_topk`), and positions with a
non-finite value are left out (they are counted apart, as a finding). llama.cpp prints
its statistics only from 100 positions; these are given for any count, with ``positions``
beside them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

__all__ = [
    "KLD_PERCENTILES",
    "DP_PERCENTILES",
    "KldStats",
    "kld_stats",
    "mean_and_uncertainty",
    "percentile",
]

#: the KLD percentiles llama-perplexity prints, label -> fraction
KLD_PERCENTILES: dict[str, float] = {
    "Maximum": 1.0, "99.9%": 0.999, "99.0%": 0.99, "95.0%": 0.95, "90.0%": 0.9,
    "Median": 0.5, "10.0%": 0.1, "5.0%": 0.05, "1.0%": 0.01, "0.1%": 0.001, "Minimum": 0.0,
}  # fmt: skip
#: the Δp percentiles llama-perplexity prints, label -> fraction
DP_PERCENTILES: dict[str, float] = {
    "Maximum": 1.0, "99.9%": 0.999, "99.0%": 0.99, "95.0%": 0.95, "90.0%": 0.9,
    "75.0%": 0.75, "Median": 0.5, "25.0%": 0.25, "10.0%": 0.1, "5.0%": 0.05, "1.0%": 0.01,
    "0.1%": 0.001, "Minimum": 0.0,
}  # fmt: skip


def mean_and_uncertainty(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, uncertainty)`` as llama.cpp's ``mean_and_uncertainty`` computes them from
    the sums (uncertainty 0 for 10 values or fewer, or a non-positive variance);
    ``(0, 0)`` for none."""
    n = len(values)
    if n < 1:
        return 0.0, 0.0
    f = math.fsum(values) / n
    var = math.fsum(v * v for v in values) / n - f * f
    return f, (math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """llama.cpp's percentile of ascending ``sorted_values``: linear interpolation at
    ``fraction * (n - 1)``; the median (``0.5``) is the mean of the two middle values for
    an even count. Raises :class:`ValueError` for no values."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if fraction == 0.5:
        mid = n // 2
        return sorted_values[mid] if n % 2 else 0.5 * (sorted_values[mid] + sorted_values[mid - 1])
    if fraction <= 0:
        return sorted_values[0]
    if fraction >= 1:
        return sorted_values[-1]
    p = fraction * (n - 1)
    ip = int(p)
    p -= ip
    return (1 - p) * sorted_values[ip] + p * sorted_values[min(ip + 1, n - 1)]


class KldStats(BaseModel):
    """llama-perplexity's KL-divergence and token-probability statistics over
    ``positions`` scored positions. KLD values in nats; Δp values as probabilities
    (fractions: llama.cpp prints them times 100, in %); ``same_top_p`` a fraction. Each
    ``*_se`` is the uncertainty llama.cpp prints after ``±``."""

    model_config = ConfigDict(extra="forbid")

    positions: int
    kld_mean: float
    kld_mean_se: float
    kld: dict[str, float]
    dp_mean: float
    dp_mean_se: float
    dp: dict[str, float]
    dp_rms: float
    dp_rms_se: float
    same_top_p: float
    same_top_p_se: float


def kld_stats(
    kld: Sequence[float], dp: Sequence[float], same_top: Sequence[bool]
) -> KldStats | None:
    """The statistics of per-position ``kld`` (nats), ``dp`` (``p_cand - p_base`` of the
    scored token) and ``same_top`` (the two sides' most likely tokens agree), all of one
    length; non-finite positions are dropped. None when no position is left.

    Raises:
        ValueError: the three lists differ in length.
    """
    if not len(kld) == len(dp) == len(same_top):
        raise ValueError(f"{len(kld)} KLD, {len(dp)} Δp and {len(same_top)} top values")
    keep = [i for i in range(len(kld)) if math.isfinite(kld[i]) and math.isfinite(dp[i])]
    if not keep:
        return None
    k = sorted(kld[i] for i in keep)
    d = sorted(dp[i] for i in keep)
    n = len(keep)
    kld_mean, kld_se = mean_and_uncertainty(k)
    dp_mean, dp_se = mean_and_uncertainty(d)
    mse, mse_se = mean_and_uncertainty([x * x for x in d])
    rms = math.sqrt(mse)
    same = sum(1 for i in keep if same_top[i]) / n
    return KldStats(
        positions=n,
        kld_mean=kld_mean,
        kld_mean_se=kld_se,
        kld={label: percentile(k, f) for label, f in KLD_PERCENTILES.items()},
        dp_mean=dp_mean,
        dp_mean_se=dp_se,
        dp={label: percentile(d, f) for label, f in DP_PERCENTILES.items()},
        dp_rms=rms,
        dp_rms_se=0.5 / rms * mse_se if rms > 0 else 0.0,
        same_top_p=same,
        same_top_p_se=math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else 0.0,
    )
