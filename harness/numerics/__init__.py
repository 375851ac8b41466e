"""Numerics divergence: teacher-forced token log-probabilities of two servers on the same
tokens (``harness logprobs``, the numerics section of ``harness compare``).

:func:`compare_logprobs` scores sequences on a baseline and a candidate (and the baseline
again for the noise floor) and decides REGRESSION / NO CHANGE / INCONCLUSIVE; see
:mod:`harness.numerics.adapters` (server APIs), :mod:`harness.numerics.divergence`
(per-position KL, per-sequence statistics) and :mod:`harness.numerics.decide` (the
verdict).
"""

from harness.numerics.models import LogprobsResult, Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs

__all__ = ["LogprobsOptions", "LogprobsResult", "Sequence", "compare_logprobs"]
