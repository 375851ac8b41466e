"""Per-run scores: the models of one line of ``scores.jsonl`` (:class:`RunScore`).

:func:`harness.scoring.score.score_run` builds a :class:`RunScore` from one
:class:`harness.transcript.RunRecord`; ``harness score`` and ``harness compare`` write
one per run to ``results/<run-id>/scores.jsonl`` (streamed, in transcript order; see
:class:`harness.runfolder.RunFolder`). Failure kinds are the values of
:class:`harness.kinds.FailureKind`. Stable within ``schema_version`` 1 of the scores
(later versions only add optional fields).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.transcript import InfraError

__all__ = [
    "SCORE_SCHEMA_VERSION",
    "CallScore",
    "Divergence",
    "DriftFinding",
    "HistoryRefusal",
    "LeakedCall",
    "MalformedCall",
    "Observation",
    "ProtocolViolation",
    "RunScore",
    "SchemaViolation",
    "SequenceMatch",
    "Termination",
]

SCORE_SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


#: How a run ended, as scored. ``malformed``: the model tried to call a tool but the
#: calls could not be parsed (markup left in ``content`` or unparseable arguments on the
#: last turn). ``error``: an infrastructure error, not a model outcome.
Termination = Literal["final_answer", "turn_cap", "length", "empty_stop", "malformed", "error"]


class DriftFinding(_Model):
    """One drifted argument of one call.

    ``kind``: a :class:`harness.kinds.FailureKind` of the ``drift`` family.
    ``path``: the argument's path inside the arguments object (``values``, ``items[2].id``).
    ``turn``: turn index; ``call_index``: 0-based index of the call within the run.
    ``value``/``expected``: JSON excerpts (at most ~120 characters), ``expected`` may be None.
    ``phrase``: what a reviewer reads, e.g. ``"array sent as a string"``.
    """

    kind: str
    phrase: str
    tool: str
    path: str
    turn: int
    call_index: int
    value: str
    expected: str | None = None


class SchemaViolation(_Model):
    """A jsonschema error of one call's arguments against the tool's ``parameters``."""

    tool: str
    turn: int
    call_index: int
    path: str  # "" for the arguments object itself
    message: str
    validator: str = ""


class MalformedCall(_Model):
    """A call whose arguments could not be used (``kind`` is a failure kind)."""

    kind: str  # malformed_json | stream_truncated_args | object_not_string | not_an_object | unknown_tool
    tool: str | None
    turn: int
    call_index: int
    reason: str
    raw: str  # excerpt of what was received


class HistoryRefusal(_Model):
    """A later request the server refused (HTTP 4xx) over a call the model wrote earlier
    (``tool_call_refused_in_history``, :func:`harness.scoring.calls.history_refusal`).

    ``turn``/``call_index``/``tool``: the call whose arguments, sent back as received, do not
    parse; ``refused_turn``: the request the server refused; ``status``/``message``: its
    HTTP status and message (the evidence).
    """

    turn: int
    call_index: int
    tool: str | None
    refused_turn: int
    status: int | None
    message: str


class ProtocolViolation(_Model):
    """A broken invariant of the OpenAI chat-completions protocol."""

    kind: str  # a FailureKind of the protocol family (finish_reason_mismatch, tool_call_in_content, ...)
    turn: int
    message: str


class Observation(_Model):
    """A finding of the ``information`` family (:class:`harness.kinds.Family`): read by a
    reviewer, a failure only in a scenario whose ``targets`` name its kind."""

    kind: str
    turn: int
    message: str


class LeakedCall(_Model):
    """A call to a declared tool written into ``content`` (:mod:`harness.scoring.leaks`).

    ``turn``: turn index; ``tool``: the tool's name; ``arguments``: the recovered arguments
    as JSON text (cut to ~300 characters); ``dialect``: ``json``, ``openai``, ``pythonic``,
    ``name_json`` or ``xml``.
    """

    turn: int
    tool: str
    arguments: str
    dialect: str


class SequenceMatch(_Model):
    """The calls made against the calls expected (all segments together).

    ``matched``: expected calls matched by a call whose tool and arguments satisfy them;
    ``expected``: number of required (non-optional) expected calls;
    ``missing``: the required expected calls not matched, as ``"seg<i>:<tool>"``;
    ``unexpected``: calls matching no expected call, as ``"turn<t>:<tool>"``;
    ``order_kept``: strict-order segments matched in order.
    """

    matched: int = 0
    expected: int = 0
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(default_factory=list)
    order_kept: bool = True


class CallScore(_Model):
    """One tool call as scored (for marking calls in a report)."""

    turn: int
    call_index: int
    tool: str | None
    arguments: str  # canonical JSON of the parsed arguments, or the raw excerpt
    repeat_of: int | None = None  # call_index of the earlier identical call
    kinds: list[str] = Field(default_factory=list)  # failure kinds found on this call


class RunScore(_Model):
    """Scores of one run (:func:`harness.scoring.score.score_run`): a line of ``scores.jsonl``."""

    schema_version: int = SCORE_SCHEMA_VERSION
    run_key: str
    scenario_id: str
    side: str  # "baseline" / "candidate", or the target label of a one-sided run
    label: str
    repeat: int
    stream: bool = False
    infra_error: InfraError | None = None
    termination: Termination
    turns: int = 0
    tool_calls: int = 0
    repeated_calls: int = 0
    longest_repeat_streak: int = 0
    allowed_repeats: int = 0
    malformed_args: int = 0
    malformed: list[MalformedCall] = Field(default_factory=list)
    schema_violations: list[SchemaViolation] = Field(default_factory=list)
    drift: list[DriftFinding] = Field(default_factory=list)
    protocol_violations: list[ProtocolViolation] = Field(default_factory=list)
    leaked_calls: list[LeakedCall] = Field(default_factory=list)  # calls written into content
    #: findings of the information family (in ``failures`` only where the scenario targets them)
    information: list[Observation] = Field(default_factory=list)
    #: the server refused a later request over a call the model wrote (its error kept as the
    #: evidence; the run is scored, not an infrastructure error)
    history_refusal: HistoryRefusal | None = None
    final_answer: bool = False  # every segment reached a final answer
    final_answer_ok: bool = False  # ... and each meets the segment's expectations
    final_excerpt: str | None = None
    sequence: SequenceMatch = Field(default_factory=SequenceMatch)
    calls: list[CallScore] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)  # sorted failure kinds
    passed: bool = False

    def count(self, metric: str) -> int:
        """The value of a per-run count (:data:`harness.kinds.COUNT_METRICS`): ``tool_calls``,
        ``repeated_calls``, ``malformed_args``, ``turns``, or the number of ``drift``
        findings / ``schema_violations``."""
        value = getattr(self, metric)
        return len(value) if isinstance(value, list) else int(value)


class Divergence(_Model):
    """The first turn at which the two sides' call sequences differ."""

    turn: int
    baseline_run: str
    candidate_run: str
    baseline: list[str]  # "tool {args}" per call, or "final answer: ..." / "(ended: ...)"
    candidate: list[str]
