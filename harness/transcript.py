"""Transcripts on disk: one :class:`RunRecord` per run of a scenario.

A run folder (:class:`harness.runfolder.RunFolder`, which alone reads and writes the
files) holds ``manifest.json`` (:class:`RunManifest`) and ``transcripts.jsonl`` (one
:class:`RunRecord` per line, appended and fsynced as each run ends).

Records are the one source of truth: scores, verdicts and reports are computed
from them, so any result can be re-scored and re-rendered later.

Request messages are stored incrementally: ``TurnRecord.new_messages`` holds the
messages appended since the previous turn's request (for turn 0, the whole
opening), so a transcript grows linearly with the conversation.
:meth:`RunRecord.request_messages` rebuilds the full request of any turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.redaction import redact_text, redact_url

__all__ = [
    "InfraError",
    "RunManifest",
    "RunRecord",
    "StateCheck",
    "StopReason",
    "TargetInfo",
    "ToolCallRecord",
    "ToolResultRecord",
    "TurnRecord",
    "ResponseRecord",
    "TRANSCRIPT_SCHEMA_VERSION",
    "render",
]

TRANSCRIPT_SCHEMA_VERSION = 1

#: Why a run ended.
#: ``final_answer``: an assistant message with no tool calls (after the last follow-up);
#: ``turn_cap``: ``max_turns`` requests made, the model still calling tools;
#: ``length``: finish_reason ``length``; ``empty_stop``: no content and no tool calls;
#: ``error``: an infrastructure error (see ``RunRecord.error``), not a model failure.
StopReason = Literal["final_answer", "turn_cap", "length", "empty_stop", "error"]

InfraErrorKind = Literal["http_status", "timeout", "connection", "invalid_body", "other"]


def render(value: Any) -> str:
    """A value as message text: strings unchanged, anything else compact JSON, keys sorted.

    How a tool result is sent as a ``tool`` message, an object's arguments as the wire's
    ``arguments`` string, and a server's error object shown in one line.
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class InfraError(_Model):
    """A failure of the server or network, never counted as a model failure."""

    kind: InfraErrorKind
    message: str
    status: int | None = None  # HTTP status, for kind == "http_status"
    turn: int | None = None
    attempts: int = 1

    @field_validator("message")
    @classmethod
    def _no_secret(cls, v: str) -> str:
        """A URL in the message loses its key (:func:`harness.redaction.redact_text`)."""
        return redact_text(v)


class RetryRecord(_Model):
    """One failed attempt that was retried, and the wait before the next one.

    ``waited_s``: seconds slept before retrying (the backoff, or the answer's
    ``Retry-After`` when longer, capped at ``harness.client.target.MAX_RETRY_AFTER_S``);
    ``retry_after_s``: the ``Retry-After`` the server asked for, if any.
    """

    attempt: int
    kind: InfraErrorKind
    message: str
    status: int | None = None
    waited_s: float
    retry_after_s: float | None = None


class ToolCallRecord(_Model):
    """One entry of ``tool_calls`` as received (``arguments`` raw, normally a string)."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: Any = None
    #: streamed only: ``{"id", "name"}`` as a client keeping each field's first fragment
    #: reads them, where that differs from ``id``/``name`` (assembled as the OpenAI SDK's
    #: accumulator does: fragments concatenated); None when both readings agree
    first_fragments: dict[str, str | None] | None = None
    #: the entry's other fields as received (an opaque signature, ``extra_content``, ...),
    #: beside ``id``, ``type`` and ``function``; sent back with the call (``index`` not
    #: kept); None when there were none
    extra: dict[str, Any] | None = None
    #: ``function``'s other fields as received, beside ``name`` and ``arguments``
    function_extra: dict[str, Any] | None = None

    def name_among(self, names: Any) -> str | None:
        """The name a client dispatches on: ``name``, or the first-fragment reading where
        only that one is in ``names`` (a wire quirk is not the model's unknown tool)."""
        first = (self.first_fragments or {}).get("name")
        if self.name not in names and first is not None and first in names:
            return first
        return self.name


class ResponseRecord(_Model):
    """The assistant's response to one request, as received.

    ``raw`` is the response body (non-streaming) or the list of SSE chunk objects
    (streaming); ``notes`` what the stream assembly tolerated. ``latency_s`` is wall time from sending to the last byte (s).
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    function_call: dict[str, Any] | None = None  # legacy field some servers still send
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    latency_s: float = 0.0
    stream: bool = False
    raw: Any = None
    #: what the client tolerated while assembling a stream (a later delta repeating a
    #: call's ``name: ""``, ...), one line each, for a reviewer; empty when nothing was
    notes: list[str] = Field(default_factory=list)
    #: how many choices the response carried (``n``; streamed: distinct choice indices);
    #: None in records written before it was kept
    choices: int | None = None
    #: the message's other fields as received (beside ``role``, ``content``, the reasoning,
    #: ``tool_calls``): ``refusal``, ``annotations``, a server's own; streamed: accumulated
    #: from the deltas as the SDK's ``accumulate_delta`` does. Sent back in the history
    #: (``RunRecord.history_fields``); None when there were none
    extra: dict[str, Any] | None = None


class ToolResultRecord(_Model):
    """A ``tool`` message fed back for one call."""

    tool_call_id: str | None
    name: str | None
    content: str
    error: bool = False  # the simulator answered with a tool error


class TurnRecord(_Model):
    """One request/response round trip and the tool results that followed it."""

    index: int
    segment: int = 0  # 0 = opening, n = n-th follow-up
    new_messages: list[dict[str, Any]] = Field(default_factory=list)
    request_params: dict[str, Any] = Field(default_factory=dict)  # everything but messages/tools
    response: ResponseRecord | None = None
    tool_results: list[ToolResultRecord] = Field(default_factory=list)
    error: InfraError | None = None
    retries: list[RetryRecord] = Field(default_factory=list)  # failed attempts before


class StateCheck(_Model):
    """BFCL's per-turn check of one segment of a run with stateful tool backends.

    Made by the runner when the segment ends (:mod:`harness.bfcl.backends`), against the
    ground truth's calls executed on a second copy of the backends; the check of
    ``bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker``:
    ``state_ok``: every public attribute of every backend equals the ground truth's
    (``state_checker``); ``missing_results``: ground-truth results of this segment not
    found among the run's tool results so far, as a multiset (``response_checker``);
    ``differences``: ``"Class.attribute"`` names that differ. Excerpts, not whole states.
    """

    segment: int
    state_ok: bool
    differences: list[str] = Field(default_factory=list)
    missing_results: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """The BFCL segment passed: the state matches and no expected result is missing."""
        return self.state_ok and not self.missing_results


class TargetInfo(_Model):
    """The server a run talked to."""

    label: str  # human label, e.g. "fused"
    side: Literal["baseline", "candidate"] | None = None
    base_url: str
    model: str | None = None
    models: Any = None  # what GET /v1/models answered
    server_info: dict[str, Any] | None = None

    @field_validator("base_url")
    @classmethod
    def _no_secret(cls, v: str) -> str:
        """Recorded without a key in it (:func:`harness.redaction.redact_url`)."""
        return redact_url(v)

    @property
    def key(self) -> str:
        """The column this target's runs belong to: ``baseline``/``candidate`` in a
        comparison, else its label (the first part of their ``run_key``)."""
        return self.side or self.label


class RunRecord(_Model):
    """One run of one scenario against one target (one line of transcripts.jsonl)."""

    schema_version: int = TRANSCRIPT_SCHEMA_VERSION
    run_key: str  # unique within a run folder: f"{side or label}/{scenario_id}/{repeat}/{mode}"
    scenario_id: str
    scenario_hash: str
    scenario: dict[str, Any]  # the parsed scenario (model_dump, mode="json"): scoring needs no file
    repeat: int
    stream: bool
    target: TargetInfo
    sampling: dict[str, Any] = Field(default_factory=dict)
    #: what later requests carried of earlier turns' reasoning: ``keep``, ``drop`` or ``auto``
    #: (:data:`harness.runner.REASONING_HISTORY`); None in records from before the setting
    reasoning_history: str | None = None
    #: what earlier assistant messages carried back of their fields: ``as-received`` or
    #: ``known`` (:data:`harness.runner.HISTORY_FIELDS`); None in records from before it
    history_fields: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)  # the tools request field
    turns: list[TurnRecord] = Field(default_factory=list)
    stop_reason: StopReason
    final_content: str | None = None
    error: InfraError | None = None
    state_checks: list[StateCheck] = Field(default_factory=list)  # BFCL tasks only
    started_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    duration_s: float = 0.0

    @property
    def is_infra_error(self) -> bool:
        """Whether the run ended on an infrastructure error."""
        return self.stop_reason == "error"

    @property
    def side(self) -> str:
        """The column this run belongs to (:attr:`TargetInfo.key`)."""
        return self.target.key

    def request_messages(self, turn: int) -> list[dict[str, Any]]:
        """The full ``messages`` list sent at ``turn`` (rebuilt from ``new_messages``)."""
        out: list[dict[str, Any]] = []
        for t in self.turns[: turn + 1]:
            out.extend(t.new_messages)
        return out

    def all_tool_calls(self) -> Iterator[tuple[int, ToolCallRecord]]:
        """``(turn index, call)`` for every tool call in order."""
        for t in self.turns:
            if t.response is not None:
                for c in t.response.tool_calls:
                    yield t.index, c


class RunManifest(_Model):
    """``manifest.json``: what was run, by what, against what."""

    schema_version: int = TRANSCRIPT_SCHEMA_VERSION
    run_id: str
    command: str
    #: the harness command that made the folder (``compare``, ``run``, ``gsm8k``, ``boot``,
    #: ``matrix``, ``pytest``); None in folders written before it was recorded
    kind: str | None = None
    harness_version: str
    git_revision: str | None = None
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    targets: list[TargetInfo] = Field(default_factory=list)
    args: dict[str, Any] = Field(default_factory=dict)  # secrets removed
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("command")
    @classmethod
    def _no_secret(cls, v: str) -> str:
        """The command line without a key in its URLs (:func:`harness.redaction.redact_text`)."""
        return redact_text(v)
