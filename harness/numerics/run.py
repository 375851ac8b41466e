"""Scoring sequences on two servers and deciding: :func:`compare_logprobs`.

Per sequence, in this order: the baseline scores it (B1), the baseline (or the second
baseline server) scores it again (B2: the A/A floor), the candidate scores it (C).
B1 vs C is A/B, B1 vs B2 is A/A; both must have the same tokens as B1
(:func:`~harness.numerics.divergence.check_aligned`). Then
:func:`~harness.numerics.decide.decide`. Any :class:`~harness.errors.LogprobsError`
stops the comparison: nothing half-computed is returned.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, replace
from typing import Any

import httpx

from harness.errors import LogprobsError, TokenizationMismatch
from harness.numerics.adapters import (
    ADAPTERS,
    MAX_TOKENS,
    Adapter,
    answers,
    bounded_request,
    comparable,
    make_adapter,
)
from harness.numerics.classes import Labels, label_conversation, label_generated, label_plain
from harness.numerics.decide import ALPHA, TOLERANCE, decide, independent
from harness.numerics.divergence import (
    TOKEN_TOLERANCE,
    align_generated,
    check_aligned,
    pooled_by_class,
    pooled_kld,
    sequence_divergence,
)
from harness.numerics.models import (
    LogprobsResult,
    RecordedScores,
    RecordedSequence,
    ScoredSequence,
    Sequence,
    SequenceResult,
)
from harness.redaction import redact_url

__all__ = [
    "DEFAULT_TOP_K",
    "LogprobsOptions",
    "RecordedScores",
    "compare_logprobs",
    "compare_recorded",
    "decode_units",
    "record_logprobs",
    "record_numerics",
]

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
    """Baseline, A/A and candidate adapters, each side's API detected on that side (a
    vLLM baseline and an SGLang candidate each get their own); the A/A server is asked
    with the baseline's. Sides whose APIs cannot be compared position by position
    (:func:`~harness.numerics.adapters.comparable`) are both compared on generated tokens
    when both can be, else refused."""

    def make(name: str, url: str) -> Adapter:
        model = _model(client, url, opts.model)
        return make_adapter(
            name, client, url, model=model, top_k=opts.top_k, max_tokens=opts.max_tokens
        )

    b = make(opts.api, base)
    c = make(opts.api, cand)
    if not comparable(b, c):
        b, c = _common_ground(b, c, make)
    return b, (make(b.name, opts.aa_url) if opts.aa_url else b), c


def _common_ground(
    b: Adapter, c: Adapter, make: Callable[[str, str], Adapter]
) -> tuple[Adapter, Adapter]:
    """Two sides detected with incomparable APIs: the one side's API on the other, else
    generated tokens (greedy) on both, each tried with a probe request; else
    :class:`LogprobsError` in one line."""
    for name in dict.fromkeys((b.name, c.name, "greedy")):
        pair = make(name, b.base_url), make(name, c.base_url)
        if not (answers(pair[0]) and answers(pair[1])):
            continue
        pair[0].notes[:0] = [
            f"the baseline answers {b.label} and the candidate {c.label}: the two cannot be "
            f"compared position by position, both scored with {pair[0].label}"
        ]
        return pair
    raise LogprobsError(
        f"the baseline answers {b.label} (keyed by token {b.keyed}) and the candidate "
        f"{c.label} (keyed by token {c.keyed}): no API both answer can compare them"
    )


def _side_like(
    client: httpx.Client, url: str, recorded: RecordedScores, opts: LogprobsOptions
) -> Adapter:
    """A live candidate's adapter against a recording: its own API when comparable with
    the recording's, else the recording's API asked of it.

    Raises:
        LogprobsError: it answers neither.
    """
    model = _model(client, url, opts.model or recorded.model)
    like = ADAPTERS.get(recorded.api, ADAPTERS["greedy"])

    def make(name: str) -> Adapter:
        return make_adapter(
            name, client, url, model=model, top_k=recorded.top_k, max_tokens=recorded.max_tokens
        )

    if opts.api != "auto":
        return make(recorded.api)
    try:
        own = make("auto")
    except LogprobsError:
        return make(recorded.api)
    return own if comparable(own, like) else make(recorded.api)


def decode_units(sequences: Seq[Sequence]) -> list[Sequence]:
    """The prompts a generation-aligned comparison decodes from: one per assistant turn of
    each conversation (the conversation up to that turn; the greedy adapter drops the turn
    itself and decodes in its place), a plain prompt as it is. More units from the same
    scenarios: a decode fault seen at every turn is decided with three scenarios."""
    out: list[Sequence] = []
    for seq in sequences:
        msgs = list(seq.messages or ())
        turns = [j for j, m in enumerate(msgs) if m.get("role") == "assistant" and j > 0]
        if seq.messages is None or not turns:
            out.append(seq)
            continue
        for t, j in enumerate(turns, 1):
            out.append(replace(seq, id=f"{seq.id} @turn {t}", messages=tuple(msgs[: j + 1])))
    return out


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
    return _pair_result(seq, b1, b2, cs, generation=b.generation, opts=opts)


def _pair_result(
    seq: Sequence,
    b1: ScoredSequence,
    b2: ScoredSequence,
    cs: ScoredSequence,
    *,
    generation: bool,
    opts: LogprobsOptions,
) -> SequenceResult:
    """A/B (``b1`` vs ``cs``) and A/A (``b1`` vs ``b2``) of one sequence.

    Raises:
        TokenizationMismatch: ``cs`` or ``b2`` scored other tokens than ``b1``.
    """
    cut = [x.unreadable_from for x in (b1, b2, cs) if x.unreadable_from is not None]
    if cut and not generation:  # a side could not send past a non-finite value
        b1, b2, cs = (_first(x, min(cut)) for x in (b1, b2, cs))
    labels = _labels(seq, b1, generation=generation)
    parted, b_aa, at, aa_at = None, b1, None, None
    if generation:  # greedy paths: each pair compared along its common prefix
        b_aa, b2, aa_at = align_generated(b1, b2)
        cand_texts, cand_keys = cs.texts, list(cs.keys)
        b1, cs, at = align_generated(b1, cs)
        if at is not None:
            b_in = b1.keys[at] in _top_n(cs.top[at])
            c_in = cand_keys[at] in _top_n(b1.top[at])
            parted = (
                f"position {at}: baseline {b1.texts[at]!r} vs candidate {cand_texts[at]!r} "
                f"(baseline's in the candidate's top {TOP_N}: {'yes' if b_in else 'no'}; "
                f"candidate's in the baseline's: {'yes' if c_in else 'no'})"
            )
    check_aligned(seq.id, b1, cs)
    check_aligned(seq.id, b_aa, b2)
    tol = opts.token_tolerance
    ab = sequence_divergence(b1, cs, token_tolerance=tol)
    aa = sequence_divergence(b_aa, b2, token_tolerance=tol)
    ab._classes, aa._classes = labels.classes[1 : len(b1)], labels.classes[1 : len(b_aa)]
    return SequenceResult(
        id=seq.id,
        source=seq.source,
        tokens=len(b1),
        ab=ab,
        aa=aa,
        parted=parted,
        parted_at=at,
        aa_parted_at=aa_at,
        parted_class=labels.classes[at] if at is not None else None,
        classes=dict(Counter(ab._classes)),
        unlabelled=labels.missing,
        span=hashlib.sha256("\x1f".join(b1.keys).encode()).hexdigest()[:16],
    )


def _labels(seq: Sequence, scored: ScoredSequence, *, generation: bool) -> Labels:
    """The class of each of ``scored``'s tokens (:mod:`harness.numerics.classes`): from
    the rendered conversation (teacher-forced), the generated text (greedy: position 0 is
    the prompt, markup), or prose (a plain prompt)."""
    if generation:
        gen = label_generated(scored.texts[1:])
        return Labels(["markup", *gen.classes])
    if seq.messages is None:
        return label_plain(scored.texts)
    return label_conversation(seq.messages, scored.texts)


#: at the first greedy divergence: is each side's token in the other's top N (vLLM's model
#: tests, ``tests/models/utils.py`` ``check_logprobs_close``, use the same check)
TOP_N = 5


def _top_n(top: dict[str, float], n: int = TOP_N) -> set[str]:
    """The ``n`` most likely keys of a top-k row."""
    return set(sorted(top, key=lambda k: -top[k] if top[k] == top[k] else math.inf)[:n])


def _first(s: ScoredSequence, n: int) -> ScoredSequence:
    """``s`` cut to its first ``n`` positions."""
    return replace(s, keys=s.keys[:n], texts=s.texts[:n], logprobs=s.logprobs[:n], top=s.top[:n])


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
        if b.generation:
            sequences = decode_units(sequences)
        rows = []
        for seq in sequences:
            try:
                rows.append(_score_one(seq, b, aa, c, opts, counts))
            except TokenizationMismatch as exc:
                notes = [*b.notes, *c.notes]
                if not notes:
                    raise
                raise TokenizationMismatch(
                    f"{exc} (how each side scored: {'; '.join(notes)})"
                ) from None
            if on_sequence is not None:
                on_sequence(rows[-1])
    return _result(rows, b, c, opts, counts)


def record_logprobs(
    sequences: Seq[Sequence], url: str, opts: LogprobsOptions | None = None,
    *, units: bool = True,
) -> RecordedScores:  # fmt: skip
    """Score ``sequences`` twice on one server (the baseline's own A/A floor), for a
    recorded baseline (:mod:`harness.recording`): what :func:`compare_recorded` later
    compares a candidate with, the server gone. One path only (the one ``opts.api``
    names): :func:`record_numerics` records them all. ``units``: a generation-aligned
    API decodes one unit per assistant turn (:func:`decode_units`); False when
    ``sequences`` are such units already (another recording's).

    Raises:
        LogprobsError: the server has no logprobs API, answered an error or a malformed
            list.
        TokenizationMismatch: the second pass scored other tokens than the first.
    """
    opts = opts or LogprobsOptions()
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    with httpx.Client(timeout=opts.timeout_s, headers=headers) as client:
        model = _model(client, url, opts.model)
        b = make_adapter(
            opts.api, client, url, model=model, top_k=opts.top_k, max_tokens=opts.max_tokens
        )
        rows = []
        for seq in decode_units(sequences) if b.generation and units else sequences:
            first, second = b.score(seq), b.score(seq)
            cut = [x.unreadable_from for x in (first, second) if x.unreadable_from is not None]
            if cut and not b.generation:  # the server could not send past a NaN
                first, second = _first(first, min(cut)), _first(second, min(cut))
            if not b.generation:
                check_aligned(seq.id, first, second)
            rows.append(RecordedSequence.of(seq, first, second))
    return RecordedScores(
        url=redact_url(url), api=b.name, model=b.model, top_k=b.top_k,
        max_tokens=opts.max_tokens, generation=b.generation, sequences=rows, notes=b.notes,
    )  # fmt: skip


def record_numerics(
    sequences: Seq[Sequence], url: str, opts: LogprobsOptions | None = None
) -> RecordedScores:
    """Every numerics path of one server, each scored twice (its own A/A floor), for a
    recording: what a live comparison's numerics section runs
    (:func:`harness.numerics.section.logprobs_section`), the candidate side left out.

    - prefill: ``sequences`` teacher-forced (:func:`record_logprobs`, ``opts.api``);
    - decode (``decode``): the conversations among them (not the plain GSM8K prompts, as
      a live comparison decodes none) decoded greedily, one unit per assistant turn
      (:func:`decode_units`), at most
      :data:`~harness.numerics.adapters.GENERATED_TOKENS` tokens each with their
      per-step logprobs and top-k; not run when the prefill is itself generation-aligned;
    - routed experts (``experts``): the same conversations
      (:func:`~harness.numerics.experts_ab.record_experts`).

    A path the server cannot give is None with its one line in ``not_recorded``.

    Raises:
        LogprobsError: the prefill path could not be recorded (no logprobs API, an error,
            a malformed list).
        TokenizationMismatch: the second prefill pass scored other tokens than the first.
    """
    from harness.numerics.experts_ab import record_experts

    opts = opts or LogprobsOptions()
    out = record_logprobs(sequences, url, opts)
    chats = [s for s in sequences if s.messages is not None]
    if out.generation:
        pass  # the prefill is the decode path already (a greedy-only server)
    elif not chats:
        out.not_recorded["decode"] = "no conversation to decode"
    else:
        try:
            out.decode = record_logprobs(chats, url, replace(opts, api="greedy"))
        except LogprobsError as exc:
            out.not_recorded["decode"] = str(exc)
    experts = record_experts(chats, url, opts) if chats else "no conversation to ask"
    if isinstance(experts, str):
        out.not_recorded["experts"] = experts
    else:
        out.experts = experts
    return out


def live_sequences(baseline: RecordedScores) -> list[RecordedSequence]:
    """What a live candidate scores against a recording: every recorded sequence (the
    baseline's own conversations, as a live comparison's numerics section scores, then the
    scenarios' reference conversations and any GSM8K prompts: more sequences for the
    paired test, each scored twice at recording for the A/A floor)."""
    return list(baseline.sequences)


def check_recorded_tokens(
    baseline: RecordedScores, candidate_url: str, opts: LogprobsOptions | None = None
) -> None:
    """Before a comparison against a recording: the candidate scores the first recorded
    sequence, which must give the recorded tokens (one request). A candidate without the
    recording's logprobs API passes (the numerics section will say so).

    Raises:
        TokenizationMismatch: the candidate tokenises it differently (the recording can no
            longer serve the numerics: record the baseline again).
    """
    if baseline.generation or not baseline.sequences:
        return
    opts = opts or LogprobsOptions()
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    seq, b1, _ = live_sequences(baseline)[0].unpack()
    with httpx.Client(timeout=opts.timeout_s, headers=headers) as client:
        try:
            c = _side_like(client, candidate_url, baseline, opts)
            cs = c.score(seq)
        except TokenizationMismatch:
            raise
        except LogprobsError:
            return
    check_aligned(seq.id, b1, cs)


def compare_recorded(
    baseline: RecordedScores,
    candidate: str | RecordedScores,
    opts: LogprobsOptions | None = None,
) -> LogprobsResult:
    """A candidate (a server URL, or another recording) against a recorded baseline:
    A/B is the recording's first pass against the candidate's, A/A the recording's two
    passes (module docstring). A live candidate is asked with the recording's API, top-k
    and token budget, so both sides score the same positions.

    Raises:
        LogprobsError: the candidate has no such logprobs API, or answered an error.
        TokenizationMismatch: the candidate tokenised a recorded sequence differently
            (the recording can no longer serve: record the baseline again).
    """
    opts = opts or LogprobsOptions()
    counts = {"baseline": 0, "candidate": 0}
    rows = []
    if isinstance(candidate, RecordedScores):
        ours = (baseline.api, baseline.top_k, baseline.max_tokens)
        apis = [ADAPTERS.get(r.api, ADAPTERS["greedy"]) for r in (baseline, candidate)]
        if not comparable(*apis) or candidate.max_tokens != baseline.max_tokens:
            raise LogprobsError(
                f"the two recordings scored with other settings (api, top-k, max tokens): "
                f"{ours} vs {(candidate.api, candidate.top_k, candidate.max_tokens)}"
            )
        # the sequences both recordings scored: the scenarios' reference conversations
        # (each recording's own transcripts differ from the other's)
        theirs = {(r.id, r.source): r for r in candidate.sequences}
        for rec in baseline.sequences:
            other = theirs.get((rec.id, rec.source))
            if other is None or (other.messages, other.text) != (rec.messages, rec.text):
                continue
            seq, b1, b2 = rec.unpack()
            cs = other.first_pass()
            rows.append(_pair_result(seq, b1, b2, cs, generation=baseline.generation, opts=opts))
        c_info = {"url": candidate.url, "api": candidate.api, "model": candidate.model}
        notes = [*baseline.notes, *candidate.notes]
    else:
        headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
        with httpx.Client(timeout=opts.timeout_s, headers=headers) as client:
            c = _side_like(client, candidate, baseline, opts)
            for rec in live_sequences(baseline):
                seq, b1, b2 = rec.unpack()
                cs = c.score(seq)
                counts["candidate"] += cs.requests
                rows.append(_pair_result(seq, b1, b2, cs, generation=c.generation, opts=opts))
        c_info = {"url": redact_url(candidate), "api": c.name, "model": c.model}
        notes = [*baseline.notes, *c.notes]
    if not rows:
        raise LogprobsError(
            "no sequence scored by both recordings (record both with the same scenario files)"
        )
    b_info = {"url": baseline.url, "api": baseline.api, "model": baseline.model}
    settings = replace(opts, top_k=baseline.top_k, max_tokens=baseline.max_tokens)
    out = _decided(
        rows, b_info, c_info, "recorded baseline, scored twice", settings, counts,
        generation=baseline.generation,
    )  # fmt: skip
    out.notes = list(dict.fromkeys([*notes, *out.notes]))
    return out


def _result(
    rows: list[SequenceResult],
    b: Adapter,
    c: Adapter,
    opts: LogprobsOptions,
    counts: dict[str, int],
) -> LogprobsResult:
    out = _decided(
        rows,
        {"url": redact_url(b.base_url), "api": b.name, "model": b.model},
        {"url": redact_url(c.base_url), "api": c.name, "model": c.model},
        f"second baseline server {redact_url(opts.aa_url)}"
        if opts.aa_url
        else "baseline scored twice",
        replace(opts, top_k=min(b.top_k, c.top_k)),
        counts,
        generation=b.generation,
    )
    out.notes = list(dict.fromkeys([*b.notes, *c.notes, *out.notes]))
    return out


def _decided(
    rows: list[SequenceResult],
    b_info: dict[str, Any],
    c_info: dict[str, Any],
    aa_source: str,
    opts: LogprobsOptions,
    counts: dict[str, int],
    *,
    generation: bool = False,
) -> LogprobsResult:
    verdict, message, st = decide(
        rows, tolerance=opts.tolerance, alpha=opts.alpha, generation=generation
    )
    units = independent(rows)
    kld, kld_aa = pooled_kld([r.ab for r in units]), pooled_kld([r.aa for r in units])
    missing = [r for r in rows if r.unlabelled]
    notes = (
        [
            f"token classes: {sum(r.unlabelled for r in missing)} segments of {len(missing)} "
            f"sequences (first {missing[0].id!r}) not found in the rendered text: their "
            "tokens counted as markup"
        ]
        if missing
        else []
    )
    return LogprobsResult(
        baseline=b_info,
        candidate=c_info,
        aa_source=aa_source,
        settings={
            "top_k": opts.top_k,
            "tolerance": opts.tolerance,
            "token_tolerance": opts.token_tolerance,
            "max_tokens": opts.max_tokens,
            "alpha": opts.alpha,
            "generation": generation,
        },
        sequences=rows,
        stats=st,
        verdict=verdict,
        message=message,
        requests=counts,
        kld=kld,
        kld_aa=kld_aa,
        by_class=pooled_by_class([(r.ab, r.aa) for r in units]),
        notes=notes,
    )
