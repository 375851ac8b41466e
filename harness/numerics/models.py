"""What ``harness logprobs`` measures and writes (``results/<run-id>/logprobs.json``).

- :class:`Sequence`: one teacher-forced sequence (a conversation or a plain prompt).
- :class:`ScoredSequence`: what one server returned for it: per position the forced token,
  its log-probability and the server's top-k (in memory only).
- :class:`SequenceDivergence`: the per-sequence statistics of one pair of scorings.
- :class:`LogprobsResult`: the whole comparison (A/B and A/A per sequence, the decision);
  the file on disk, re-rendered by the report without recomputing anything.

Log-probabilities are natural logs (nats), as every server returns them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from harness.numerics.experts_ab import ExpertsComparison, RecordedExperts
from harness.numerics.kld import KldStats

__all__ = [
    "LOGPROBS_VERSION",
    "ClassStats",
    "LogprobsResult",
    "NumericsPath",
    "PairStats",
    "ScoredSequence",
    "Sequence",
    "SequenceDivergence",
    "SequenceResult",
    "TopToken",
    "WorstToken",
    "PATHS",
    "RECORDED_VERSION",
    "RecordedScores",
    "RecordedSequence",
    "ScoredPass",
]

LOGPROBS_VERSION = 1
#: the format of a recording's ``numerics.json`` (:class:`RecordedScores`): 1 = the
#: teacher-forced (prefill) sequences only, as recorded before the decode path and the
#: routed experts were; 2 = prefill, the decode path (``decode``) and the routed experts
#: (``experts``)
RECORDED_VERSION = 2
#: the numerics paths of a comparison, as :attr:`LogprobsResult.missing_paths` names them
PATHS = ("prefill", "decode", "routed experts")
Verdict = Literal["REGRESSION", "NO CHANGE", "INCONCLUSIVE"]


@dataclass(frozen=True)
class Sequence:
    """One sequence to score. ``messages`` (OpenAI chat messages: a conversation, rendered
    by the server's chat template where the adapter can ask for it) or ``text`` (a plain
    prompt, e.g. a GSM8K few-shot prompt). ``id`` names it in the report; ``source`` says
    where it came from (``scenario``, ``transcript``, ``gsm8k``)."""

    id: str
    source: str
    messages: tuple[dict[str, Any], ...] | None = None
    text: str | None = None


@dataclass
class ScoredSequence:
    """One server's teacher-forced scores of one sequence, position by position.

    ``keys[i]``: the token at position i as a comparable key (its id as a string, or its
    text for servers that only return token strings); ``texts[i]``: its text;
    ``logprobs[i]``: log P(token i | tokens < i) in nats, ``None`` at position 0 (nothing
    conditions it); ``top[i]``: the server's top-k at position i, key -> logprob (the forced
    token included); ``names``: key -> text of every key seen. ``requests``: HTTP requests
    it took. Non-finite values are kept as they came (NaN, -inf): they are a finding.
    """

    keys: list[str]
    texts: list[str]
    logprobs: list[float | None]
    top: list[dict[str, float]]
    names: dict[str, str] = field(default_factory=dict)
    requests: int = 1
    #: the server could not send the positions from this one on (vLLM cannot encode a
    #: NaN): the last position kept is the first non-finite one; the pair is compared up
    #: to it on every side (``None``: every position was read)
    unreadable_from: int | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def nonfinite(self) -> int:
        """Positions whose forced or top-k logprob is NaN or infinite (-inf included:
        a probability of exactly 0 for a token the model was fed is a numerics symptom)."""
        bad = 0
        for lp, top in zip(self.logprobs, self.top, strict=True):
            values = [lp] if lp is not None else []
            if any(not math.isfinite(v) for v in [*values, *top.values()]):
                bad += 1
        return bad


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopToken(_Model):
    """One entry of a side's top-k at a position: the token's text and logprob (nats)."""

    token: str
    logprob: float | None


class WorstToken(_Model):
    """A position where the two sides differ most: ``kl`` (nats), the forced token, the
    text before and after it, both sides' forced logprob and top-5."""

    position: int
    token: str
    before: str
    after: str
    kl: float | None
    baseline_logprob: float | None
    candidate_logprob: float | None
    baseline_top: list[TopToken]
    candidate_top: list[TopToken]


class SequenceDivergence(_Model):
    """One pair of scorings of one sequence (A/B: baseline vs candidate; A/A: baseline vs
    itself). KL in nats per token (estimator: :func:`harness.numerics.divergence.kl_topk`);
    ``p99_kl``: the 99th percentile over positions (numpy's linear interpolation);
    ``top1_agreement``: the share of positions whose top-1 token is the same on both sides;
    ``mean_abs_dlogp``: mean |candidate - baseline| logprob of the forced token;
    ``first_over``: the first position whose KL exceeds the token tolerance (with context);
    ``nonfinite``: positions with a NaN/inf logprob, per side; ``strip``: per-position KL,
    at most :data:`~harness.numerics.divergence.STRIP_BINS` values (the max of each bin)."""

    positions: int
    mean_kl: float | None
    p99_kl: float | None
    max_kl: float | None
    top1_agreement: float | None
    mean_abs_dlogp: float | None
    first_over: WorstToken | None = None
    worst: list[WorstToken] = Field(default_factory=list)
    nonfinite: dict[str, int] = Field(default_factory=dict)
    strip: list[float] = Field(default_factory=list)
    #: llama-perplexity's statistics of this pair (:mod:`harness.numerics.kld`)
    kld: KldStats | None = None
    #: per position (1..n-1): KL, Δp of the forced token, same top token; kept in memory
    #: to pool the comparison's statistics, not written
    _values: tuple[list[float], list[float], list[bool]] = PrivateAttr(default=([], [], []))
    #: per position (1..n-1): the forced token's class (:mod:`harness.numerics.classes`),
    #: in memory only (``SequenceResult.classes`` counts them)
    _classes: list[str] = PrivateAttr(default_factory=list)


class SequenceResult(_Model):
    """A sequence's A/B and A/A divergence."""

    id: str
    source: str
    tokens: int
    ab: SequenceDivergence
    aa: SequenceDivergence
    #: generation-aligned only: where the two greedy paths part (position and both tokens)
    parted: str | None = None
    #: generation-aligned only: the generated position where the A/B paths part and where
    #: the A/A paths part (None: they never part within the tokens generated)
    parted_at: int | None = None
    aa_parted_at: int | None = None
    #: generation-aligned only: the class of the baseline's token where the A/B paths part
    #: (:mod:`harness.numerics.classes`)
    parted_class: str | None = None
    #: scored positions (1..n-1) per token class (:mod:`harness.numerics.classes`)
    classes: dict[str, int] = Field(default_factory=dict)
    #: segments of the conversation its rendered text did not hold (their tokens are
    #: labelled ``markup``)
    unlabelled: int = 0
    #: a digest of the compared token keys: sequences with one digest are one
    #: independent sequence to the paired test (counterfeit copies count once)
    span: str | None = None


class ClassStats(_Model):
    """llama-perplexity's statistics of one token class (:mod:`harness.numerics.classes`)
    over the independent sequences: A/B and the A/A floor."""

    token_class: str
    ab: KldStats | None
    aa: KldStats | None


class PairStats(_Model):
    """The decision's evidence: per-sequence mean KL pooled (mean over sequences), the
    paired test's p-values, the tolerance it tests against."""

    sequences: int
    ab_mean_kl: float | None
    aa_mean_kl: float | None
    ab_top1_agreement: float | None
    aa_top1_agreement: float | None
    tolerance: float
    alpha: float
    p_regression: float | None
    p_no_change: float | None
    test: str
    #: the one-sided t-tests of the mean (above / within tolerance); None in files written
    #: before the mean test, or when the decision never reached the paired tests
    p_regression_mean: float | None = None
    p_no_change_mean: float | None = None
    #: sequences the paired test counted: those whose compared tokens differ (identical
    #: token spans, e.g. prompts cut inside a shared preamble, count once)
    independent: int | None = None


class NumericsPath(_Model):
    """One numerics path of a comparison and its verdict against its own A/A floor:
    ``path`` is ``prefill`` (teacher-forced), ``decode`` (greedy decodes, per-step
    logprobs) or ``routed experts``; ``message`` the path's one-line message (it opens
    with the verdict)."""

    path: str
    verdict: Verdict
    message: str

    def line(self) -> str:
        """``numerics (<path>): <message>``: how the verdict's reasons name the path."""
        return f"numerics ({self.path}): {self.message}"


class LogprobsResult(_Model):
    """``logprobs.json``: a teacher-forced numerics comparison, decided."""

    version: int = LOGPROBS_VERSION
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    aa_source: str  # "baseline scored twice" or "second baseline server <url>"
    settings: dict[str, Any]
    sequences: list[SequenceResult]
    stats: PairStats
    verdict: Verdict
    message: str
    requests: dict[str, int] = Field(default_factory=dict)
    #: one line each: how a side was scored where the reader must know (a conversation
    #: scored as ChatML, a top-k capped at the server's limit, a value it could not send)
    notes: list[str] = Field(default_factory=list)
    #: the decode path (compare's numerics section): the same conversations decoded
    #: greedily on both sides, each step's logprobs compared along the common prefix
    #: (``settings.generation``); None when not run
    decode: LogprobsResult | None = None
    #: routed experts of the same tokens, A/B against the A/A floor
    #: (:mod:`harness.numerics.experts_ab`); None when a side returns none
    experts: ExpertsComparison | None = None
    #: numerics paths (``"decode"``, ``"routed experts"``: :data:`PATHS`) this comparison should
    #: have run and could not because a recorded side lacks them (a recording made
    #: before they were recorded), path -> the one-line refusal (also in ``notes``: the
    #: console shows it as its own line); ``decode``/``experts`` is None for each. Not a
    #: pass: the decision counts such a path as not decided. Empty in a live comparison.
    missing_paths: dict[str, str] = Field(default_factory=dict)
    #: llama-perplexity's statistics over every position of the independent sequences:
    #: A/B and the A/A floor (:mod:`harness.numerics.kld`)
    kld: KldStats | None = None
    kld_aa: KldStats | None = None
    #: the same statistics per token class, in :data:`~harness.numerics.classes.CLASSES`
    #: order (classes with no position left out)
    by_class: list[ClassStats] = Field(default_factory=list)

    def paths(self) -> list[NumericsPath]:
        """Every numerics path this comparison ran, each with its own A/A floor and
        verdict, in the order the console prints them: the teacher-forced one (``prefill``,
        or ``decode`` when the API itself scores generated tokens, ``settings.generation``),
        then the decode path (:attr:`decode`), then the routed experts (:attr:`experts`),
        then each path a recorded side lacks (:attr:`missing_paths`: INCONCLUSIVE, its
        refusal as the message). Each is an input of the one decision
        (:func:`harness.stats.verdict.decide`)."""
        first = "decode" if self.settings.get("generation") else "prefill"
        out = [NumericsPath(path=first, verdict=self.verdict, message=self.message)]
        if self.decode is not None:
            out.append(
                NumericsPath(
                    path="decode", verdict=self.decode.verdict, message=self.decode.message
                )
            )
        if self.experts is not None:
            out.append(
                NumericsPath(
                    path="routed experts",
                    verdict=self.experts.verdict,
                    message=self.experts.message,
                )
            )
        # a path a recorded side predates is not a pass: it stays undecided
        out += [
            NumericsPath(path=path, verdict="INCONCLUSIVE", message=f"INCONCLUSIVE: {why}")
            for path, why in self.missing_paths.items()
            if path in ("decode", "routed experts")
        ]
        return out

    def verdict_over_paths(self) -> Verdict:
        """Every path's verdict together: REGRESSION when any path is one, else
        INCONCLUSIVE when any is (a path a recording lacks included), else NO CHANGE (the
        rule of :func:`harness.stats.verdict.numerics_verdict`, for ``harness logprobs``)."""
        verdicts = {p.verdict for p in self.paths()}
        for name in ("REGRESSION", "INCONCLUSIVE"):
            if name in verdicts:
                return name
        return "NO CHANGE"

    def largest_class(self) -> ClassStats | None:
        """The class whose A/B mean KLD is largest (None without classes)."""
        scored = [c for c in self.by_class if c.ab is not None]
        return max(scored, key=lambda c: c.ab.kld_mean if c.ab else 0.0, default=None)


class _Lenient(BaseModel):
    """Keeps NaN and infinities as they came (written as JSON ``NaN``/``Infinity``)."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class ScoredPass(_Lenient):
    """A :class:`ScoredSequence` as stored in a recording (same fields)."""

    keys: list[str]
    texts: list[str]
    logprobs: list[float | None]
    top: list[dict[str, float]]
    names: dict[str, str] = Field(default_factory=dict)
    requests: int = 1
    unreadable_from: int | None = None

    def scored(self) -> ScoredSequence:
        """This pass as a :class:`ScoredSequence` (copies of its fields)."""
        return ScoredSequence(
            keys=list(self.keys), texts=list(self.texts), logprobs=list(self.logprobs),
            top=[dict(t) for t in self.top], names=dict(self.names), requests=self.requests,
            unreadable_from=self.unreadable_from,
        )  # fmt: skip


class RecordedSequence(_Lenient):
    """One sequence of a recorded baseline: what was scored (``messages`` or ``text``)
    and the baseline's two passes over it (A/B uses ``first``, the A/A floor both)."""

    id: str
    source: str
    messages: list[dict[str, Any]] | None = None
    text: str | None = None
    first: ScoredPass
    second: ScoredPass

    @classmethod
    def of(cls, seq: Sequence, first: ScoredSequence, second: ScoredSequence) -> RecordedSequence:
        """The recorded form of ``seq`` and the baseline's two passes over it."""
        return cls(
            id=seq.id, source=seq.source,
            messages=list(seq.messages) if seq.messages is not None else None, text=seq.text,
            first=ScoredPass(**vars(first)), second=ScoredPass(**vars(second)),
        )  # fmt: skip

    def sequence(self) -> Sequence:
        """The :class:`Sequence` that was scored."""
        msgs = tuple(self.messages) if self.messages is not None else None
        return Sequence(id=self.id, source=self.source, messages=msgs, text=self.text)

    def first_pass(self) -> ScoredSequence:
        """The baseline's first pass (what an A/B comparison reads)."""
        return self.first.scored()

    def unpack(self) -> tuple[Sequence, ScoredSequence, ScoredSequence]:
        """(the sequence, the first pass, the second pass)."""
        return self.sequence(), self.first.scored(), self.second.scored()


class RecordedScores(_Lenient):
    """``numerics.json`` of a recorded baseline (:func:`harness.numerics.run.record_numerics`):
    the server's logprobs API (``api``, an :data:`~harness.numerics.adapters.ADAPTERS` key),
    model, ``top_k`` and ``max_tokens`` (positions per sequence), whether the API scores
    generated tokens (``generation``), and every sequence scored twice.

    From format 2 (``version``, :data:`RECORDED_VERSION`) it carries every path a live
    comparison runs: ``decode``, the decode path (the conversations decoded greedily,
    one unit per assistant turn, at most
    :data:`~harness.numerics.adapters.GENERATED_TOKENS` tokens each, per-step logprobs and
    top-k, scored twice: a :class:`RecordedScores` with ``generation`` true and no
    ``decode``/``experts`` of its own), and ``experts``, the routed experts asked twice
    (:class:`~harness.numerics.experts_ab.RecordedExperts`); each None when the server
    could not give it, the reason in ``not_recorded`` (path -> one line). A format-1 file
    (before either was recorded) has neither and no reason: :meth:`lacks` tells."""

    version: int = RECORDED_VERSION
    url: str
    api: str
    model: str | None
    top_k: int
    max_tokens: int
    generation: bool = False
    sequences: list[RecordedSequence]
    notes: list[str] = Field(default_factory=list)
    decode: RecordedScores | None = None
    experts: RecordedExperts | None = None
    not_recorded: dict[str, str] = Field(default_factory=dict)

    def lacks(self, path: str) -> bool:
        """Whether this recording predates ``path`` (``"decode"`` or ``"experts"``): a
        format-1 file, which never recorded it (a recording of format 2 that could not
        record a path says why in ``not_recorded`` instead). A generation-aligned
        recording (``generation``: its prefill is already the decode path) lacks no
        decode path."""
        if self.version >= 2:
            return False
        return not (path == "decode" and self.generation)
