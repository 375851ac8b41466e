"""Scoring sequences on two servers and deciding: :func:`compare_logprobs`.

Per sequence, in this order: the baseline scores it (B1), the baseline (or the second
baseline server) scores it again (B2: the A/A floor), the candidate scores it (C).
B1 vs C is A/B, B1 vs B2 is A/A; both must have the same tokens as B1
(:func:`~harness.numerics.divergence.check_aligned`). Then
:func:`~harness.numerics.decide.decide`. Any :class:`~harness.errors.LogprobsError`
stops the comparison: nothing half-computed is returned.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import httpx

from harness.numerics.adapters import MAX_TOKENS, Adapter, bounded_request, make_adapter
from harness.numerics.decide import ALPHA, TOLERANCE, decide
from harness.numerics.divergence import (
    TOKEN_TOLERANCE,
    align_generated,
    check_aligned,
    sequence_divergence,
)
from harness.numerics.models import LogprobsResult, Sequence, SequenceResult
from harness.redaction import redact_url

__all__ = ["DEFAULT_TOP_K", "LogprobsOptions", "compare_logprobs"]

#: top-k logprobs asked per position (vLLM's default --max-logprobs is 20)
DEFAULT_TOP_K = 5


@dataclass
class LogprobsOptions:
    """How to score: ``api`` (``auto`` or an adapter name), ``model`` (the request's
    ``model``; ``None`` = the server's first model), ``top_k``, ``tolerance`` (nats per
    token), ``token_tolerance`` (nats, per position), ``max_tokens`` (positions scored per
    sequence at most), ``alpha``, ``timeout_s`` (per
    request), ``aa_url`` (a second baseline server for the A/A floor, else the baseline
    scores every sequence twice), ``api_key`` (a bearer token, or None)."""

    api: str = "auto"
    model: str | None = None
    top_k: int = DEFAULT_TOP_K
    tolerance: float = TOLERANCE
    token_tolerance: float = TOKEN_TOLERANCE
    max_tokens: int = MAX_TOKENS
    alpha: float = ALPHA
    timeout_s: float = 120.0
    aa_url: str | None = None
    api_key: str | None = None


def _model(client: httpx.Client, url: str, given: str | None) -> str | None:
    """``given``, else the first id of ``GET /v1/models`` (None when it does not answer)."""
    if given is not None:
        return given
    try:
        answer = bounded_request(client, "GET", url.rstrip("/") + "/v1/models")
        data = answer.json().get("data") or []
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _adapters(
    client: httpx.Client, base: str, cand: str, opts: LogprobsOptions
) -> tuple[Adapter, Adapter, Adapter]:
    """Baseline, A/A and candidate adapters; the API detected on the baseline is used on
    every side (so both sides' tokens are comparable keys)."""

    def make(name: str, url: str) -> Adapter:
        model = _model(client, url, opts.model)
        return make_adapter(
            name, client, url, model=model, top_k=opts.top_k, max_tokens=opts.max_tokens
        )

    b = make(opts.api, base)
    c = make(b.name, cand)
    return b, (make(b.name, opts.aa_url) if opts.aa_url else b), c


def _score_one(
    seq: Sequence,
    b: Adapter,
    aa: Adapter,
    c: Adapter,
    opts: LogprobsOptions,
    counts: dict[str, int],
) -> SequenceResult:
    b1, b2, cs = b.score(seq), aa.score(seq), c.score(seq)
    counts["baseline"] += b1.requests + (b2.requests if aa is b else 0)
    counts["candidate"] += cs.requests
    if aa is not b:
        counts["baseline2"] = counts.get("baseline2", 0) + b2.requests
    parted, b_aa = None, b1
    if b.generation:  # greedy paths: each pair compared along its common prefix
        b_aa, b2, _ = align_generated(b1, b2)
        cand_texts = cs.texts
        b1, cs, at = align_generated(b1, cs)
        if at is not None:
            parted = f"position {at}: baseline {b1.texts[at]!r} vs candidate {cand_texts[at]!r}"
    check_aligned(seq.id, b1, cs)
    check_aligned(seq.id, b_aa, b2)
    tol = opts.token_tolerance
    return SequenceResult(
        id=seq.id,
        source=seq.source,
        tokens=len(b1),
        ab=sequence_divergence(b1, cs, token_tolerance=tol),
        aa=sequence_divergence(b_aa, b2, token_tolerance=tol),
        parted=parted,
    )


def compare_logprobs(
    sequences: Seq[Sequence],
    baseline_url: str,
    candidate_url: str,
    opts: LogprobsOptions | None = None,
    *,
    on_sequence: Callable[[SequenceResult], None] | None = None,
) -> LogprobsResult:
    """Score ``sequences`` teacher-forced on both servers and decide (module docstring).

    Raises:
        LogprobsError: a server has no logprobs API, answered an error or a malformed or
            truncated list, or a sequence overflows its context.
        TokenizationMismatch: the servers tokenised a sequence differently.
    """
    opts = opts or LogprobsOptions()
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    counts = {"baseline": 0, "candidate": 0}
    with httpx.Client(timeout=opts.timeout_s, headers=headers) as client:
        b, aa, c = _adapters(client, baseline_url, candidate_url, opts)
        rows = []
        for seq in sequences:
            rows.append(_score_one(seq, b, aa, c, opts, counts))
            if on_sequence is not None:
                on_sequence(rows[-1])
    return _result(rows, b, c, opts, counts)


def _result(
    rows: list[SequenceResult],
    b: Adapter,
    c: Adapter,
    opts: LogprobsOptions,
    counts: dict[str, int],
) -> LogprobsResult:
    verdict, message, st = decide(rows, tolerance=opts.tolerance, alpha=opts.alpha)
    return LogprobsResult(
        baseline={"url": redact_url(b.base_url), "api": b.name, "model": b.model},
        candidate={"url": redact_url(c.base_url), "api": c.name, "model": c.model},
        aa_source=f"second baseline server {redact_url(opts.aa_url)}"
        if opts.aa_url
        else "baseline scored twice",
        settings={
            "top_k": opts.top_k,
            "tolerance": opts.tolerance,
            "token_tolerance": opts.token_tolerance,
            "max_tokens": opts.max_tokens,
            "alpha": opts.alpha,
        },
        sequences=rows,
        stats=st,
        verdict=verdict,
        message=message,
        requests=counts,
    )
