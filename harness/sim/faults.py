"""Faults the reference server injects, mirroring bugs seen in real inference servers.

A :class:`Fault` is a kind, a rate and a window of turns. ``rate`` is the
probability that a run (one conversation) shows the fault; the draw is a pure
function of the conversation's nonce (see :mod:`harness.sim.model`), so it is
deterministic under the server seed. ``start_turn``/``end_turn`` give the window
of turns (0-based request index within the conversation = number of assistant
messages already in it; ``end_turn`` exclusive, ``None`` = no end).

Kinds (``Fault.kind``, :data:`FAULT_KINDS`) are named like the
:class:`harness.kinds.FailureKind` each one exercises (what the kind means is there); a
fault that is not a failure kind is listed in :data:`SIM_ONLY_FAULTS` (``empty_stop``).
What each does to a turn:

=========================  =================================================================
``repeat_loop``            where the model would answer, it re-issues the segment's calls again
                           (cycling through the steps) and never answers
``container_as_string``    top-level array/object arguments sent as JSON text:
                           ``{"values": "[0.5, 0.25, 0.25]"}``
``scalar_as_string``       top-level numbers/booleans/null sent as strings (``"42"``, ``"true"``,
                           ``"null"``)
``collapse``               progressive collapse: from ``start_turn`` every number leaf is ``0``
                           (``[0, 0, 0]``), from the next turn every scalar leaf is ``""``
                           (``["", "", ""]``, ``"base": ""``)
``dropped_keys``           the first required key (per the tool schema; else the first key) is
                           left out
``unexpected_keys``        an extra key ``"unexpected_option": true`` is added
``malformed_json``         ``arguments`` loses its final ``}``
``markup_in_content``      the calls are written into ``content`` as
                           ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``,
                           ``tool_calls`` empty, finish_reason ``stop``
``finish_reason_mismatch`` finish_reason ``stop`` with tool calls, ``tool_calls`` without them
``repeated_ids``           every turn reuses the tool_call ids of the conversation's first turn
``stream_truncated_args``  streaming only: the last ``arguments`` delta of each call is lost
``reasoning_leak``         the reasoning text goes into ``content`` (as ``<think>...</think>``)
                           instead of ``reasoning_content``
``reasoning_leak_args``    the reasoning text is prefixed to each call's ``arguments``
``string_as_scalar``       top-level strings that read as numbers/booleans/null decoded as a
                           lenient parser would: ``"007"`` -> ``7``, ``"123_456"`` -> ``123456``,
                           ``"1e5"`` -> ``100000.0``, ``"true"`` -> ``true``
``enum_violation``         top-level strings capitalised (``"celsius"`` -> ``"Celsius"``), so
                           lower-case enum values fall outside the enum
``int_as_float``           top-level integers sent as floats (``4`` -> ``4.0``)
``spurious_calls``         where the model would answer right after its planned calls, it
                           first calls the first offered tool with ``{}`` (one extra call)
``empty_arguments``        streaming only: a call whose arguments are ``{}`` gets no
                           ``arguments`` delta, so it assembles to ``""``
``index_offset``           streaming only: tool_call delta indices start at 1, not 0
``missing_call_id``        tool calls carry no ``id`` (streaming: no delta has one)
``object_not_string``      ``arguments`` sent as a JSON object, not as a string holding one
                           (streaming: the whole object in the call's first delta)
``tool_call_in_content``   the calls are written into ``content`` in ``Fault.dialect``
                           (:data:`LEAK_DIALECTS`), ``tool_calls`` empty, finish_reason
                           ``stop``
``missing_call_index``     streaming only: ``tool_calls`` deltas carry no ``index``
``shared_call_index``      streaming only: every call of a message is streamed on index 0
                           (two ids on one index)
``length_with_tool_calls`` each call's ``arguments`` cut in half, finish_reason ``length``
``repeated_empty_name``    streaming only: every arguments delta repeats ``"name": ""``
                           (tolerated by strict clients: a note in the transcript, no failure)
``empty_stop``             the model stops with nothing: ``content: ""``, no tool calls,
                           finish_reason ``stop`` (a run ends with stop reason
                           ``empty_stop`` and shows ``missing_final_answer``)
``tool_call_in_reasoning`` the calls are written into the reasoning as ``<tool_call>{...}
                           </tool_call>`` (a reasoning parser that swallowed them),
                           ``tool_calls`` empty, ``content`` empty, finish_reason ``stop``
``call_syntax_in_reasoning`` look-alike: the reasoning spells the call's syntax, the call is
                           sent right in ``tool_calls`` (not a failure)
``markup_in_arguments``    ``<|im_end|>`` appended to every top-level string argument, or
                           (``Fault.markup``) a parser format's left-over (its closing
                           delimiters, :data:`harness.scoring.markup.CALL_MARKUP`)
``ambiguous_call_deltas``  streaming only: every arguments delta repeats the call's ``id``
                           and ``name`` (SDK clients read ``get_weatherget_weather``)
``split_call_name``        streaming only: the name sent in two deltas (``get_wea``,
                           ``ther``); a first-fragment client reads ``get_wea``
``calls_under_tool_choice_none``  under ``tool_choice: "none"`` the model calls a tool
``parallel_calls_when_disabled``  ``parallel_tool_calls: false`` ignored (parallel steps
                           sent in one message)
``named_tool_choice_ignored``  a named ``tool_choice`` answered with another offered tool
``required_tool_choice_ignored``  ``tool_choice: "required"`` answered with text
``max_tokens_exceeded``    ``max_tokens`` applied without the reasoning, which ``usage``
                           still counts (``completion_tokens`` above the limit)
``n_not_honoured``         one choice whatever ``n`` asks (healthy: ``n`` identical choices)
``stop_string_in_output``  ``stop`` strings not cut from ``content``
``finish_reason_repeated`` streaming only: the chunk carrying the finish_reason is sent twice
``usage_with_choices``     streaming only: ``usage`` on every chunk with choices (as vLLM's
                           ``continuous_usage_stats``, unasked), besides the usage chunk
``content_restates_arguments``  beside its calls the model narrates them in ``content``:
                           ``Let me call get_weather for Oslo.`` (information, not a failure)
``null_name_continuation`` look-alike, streaming only: every arguments delta after a call's
                           first carries ``"name": null`` (not a failure)
=========================  =================================================================

Leak dialects (``Fault.dialect``, :data:`LEAK_DIALECTS`), ``lookup_order(order_id="A-17")``
written as: ``json`` ``{"name": "lookup_order", "arguments": {"order_id": "A-17"}}``;
``json_list`` ``[{"name": ..., "parameters": {...}}]``; ``openai`` ``{"tool_calls":
[{"type": "function", "function": {"name": ..., "arguments": "<JSON text>"}}]}``;
``pythonic`` ``[lookup_order(order_id='A-17')]``; ``tokens``
``<|tool_call_start|>lookup_order{"order_id": "A-17"}<|tool_call_end|>`` (tokens no
parser list knows); ``fenced`` a ```` ```json ```` block of the ``json`` form; ``prose``
a sentence, then the ``json`` form. ``Fault.stream`` limits a fault to streamed
(``True``) or non-streamed (``False``) requests (a parser that fails only when streaming).

Every kind but ``empty_stop`` is the name of the
:class:`~harness.kinds.FailureKind` the fault shows; ``empty_stop`` is named after the
termination it causes. Without ids (``missing_call_id``) later turns cannot recover the
run's nonce from them: an unseeded sampled run draws a new one each turn.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.kinds import FailureKind, failure_kind
from harness.scoring.markup import call_markup
from harness.sim.model import Decision, PlannedCall, RequestOptions
from harness.sim.wire import Reply, WireCall

if TYPE_CHECKING:
    from harness.sim.profiles import SimProfile

__all__ = [
    "FAULT_KINDS",
    "LEAK_DIALECTS",
    "SIM_ONLY_FAULTS",
    "Fault",
    "active_fault",
    "call_ids",
    "corrupt_arguments",
    "leak_text",
    "misread_request",
    "render",
    "should_loop",
    "spurious_call",
    "unit_draw",
]

#: the failure kinds the reference server can inject, each as the fault of the same name
FAULT_KINDS: tuple[FailureKind, ...] = (
    FailureKind.REPEAT_LOOP,
    FailureKind.CONTAINER_AS_STRING,
    FailureKind.SCALAR_AS_STRING,
    FailureKind.COLLAPSE,
    FailureKind.DROPPED_KEYS,
    FailureKind.UNEXPECTED_KEYS,
    FailureKind.MALFORMED_JSON,
    FailureKind.MARKUP_IN_CONTENT,
    FailureKind.FINISH_REASON_MISMATCH,
    FailureKind.REPEATED_IDS,
    FailureKind.STREAM_TRUNCATED_ARGS,
    FailureKind.REASONING_LEAK,
    FailureKind.REASONING_LEAK_ARGS,
    FailureKind.EMPTY_ARGUMENTS,
    FailureKind.INDEX_OFFSET,
    FailureKind.STRING_AS_SCALAR,
    FailureKind.ENUM_VIOLATION,
    FailureKind.INT_AS_FLOAT,
    FailureKind.SPURIOUS_CALLS,
    FailureKind.MISSING_CALL_ID,
    FailureKind.OBJECT_NOT_STRING,
    FailureKind.TOOL_CALL_IN_CONTENT,
    FailureKind.MISSING_CALL_INDEX,
    FailureKind.SHARED_CALL_INDEX,
    FailureKind.LENGTH_WITH_TOOL_CALLS,
    FailureKind.TOOL_CALL_IN_REASONING,
    FailureKind.MARKUP_IN_ARGUMENTS,
    FailureKind.AMBIGUOUS_CALL_DELTAS,
    FailureKind.CALLS_UNDER_TOOL_CHOICE_NONE,
    FailureKind.PARALLEL_CALLS_WHEN_DISABLED,
    FailureKind.NAMED_TOOL_CHOICE_IGNORED,
    FailureKind.REQUIRED_TOOL_CHOICE_IGNORED,
    FailureKind.MAX_TOKENS_EXCEEDED,
    FailureKind.N_NOT_HONOURED,
    FailureKind.STOP_STRING_IN_OUTPUT,
    FailureKind.FINISH_REASON_REPEATED,
    FailureKind.USAGE_WITH_CHOICES,
    FailureKind.CONTENT_RESTATES_ARGUMENTS,
)
#: faults that are not failure kinds: model behaviours that scoring names by their
#: consequence (``empty_stop``, an empty reply, is scored ``missing_final_answer``).
#: Infrastructure faults are :attr:`harness.sim.profiles.SimProfile.infra`, not faults.
SIM_ONLY_FAULTS: tuple[str, ...] = (
    "empty_stop", "repeated_empty_name", "call_syntax_in_reasoning", "split_call_name",
    "null_name_continuation",
)  # fmt: skip
#: the template token ``markup_in_arguments`` leaves in string arguments (ChatML's end)
ARGUMENT_MARKUP = "<|im_end|>"
#: the dialects ``tool_call_in_content`` writes calls in (see the module docstring)
LEAK_DIALECTS: tuple[str, ...] = (
    "json", "json_list", "openai", "pythonic", "tokens", "fenced", "prose"
)  # fmt: skip

UNEXPECTED_KEY = "unexpected_option"


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind`` shown by a ``rate`` share of runs in turns
    ``[start_turn, end_turn)``, in the scenarios ``scenarios`` (empty: all).

    ``kind``: one of :data:`FAULT_KINDS` (a name given as a string becomes its
    :class:`~harness.kinds.FailureKind` member) or of :data:`SIM_ONLY_FAULTS`.
    ``dialect``: how ``tool_call_in_content`` writes the calls (:data:`LEAK_DIALECTS`);
    ``stream``: ``None`` in both modes, ``True`` on streamed requests only, ``False`` on
    non-streamed ones only.

    Raises:
        ValueError: an unknown kind or dialect, or a rate outside [0, 1].
    """

    kind: FailureKind | str
    rate: float = 1.0
    start_turn: int = 0
    end_turn: int | None = None
    dialect: str = "json"
    stream: bool | None = None
    #: the scenario ids it shows in (empty: every scenario; see ``SimProfile.for_scenario``)
    scenarios: tuple[str, ...] = ()
    #: ``markup_in_arguments``: the parser format whose left-over ends each string value
    #: (a name of :data:`harness.scoring.markup.CALL_MARKUP`; empty: ChatML's ``<|im_end|>``)
    markup: str = ""

    def __post_init__(self) -> None:
        if self.kind in FAULT_KINDS:
            object.__setattr__(self, "kind", failure_kind(self.kind))
        elif self.kind not in SIM_ONLY_FAULTS:
            known = ", ".join(map(str, FAULT_KINDS + SIM_ONLY_FAULTS))
            raise ValueError(f"unknown fault kind {str(self.kind)!r}; known: {known}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be in [0, 1], got {self.rate}")
        if self.markup:
            call_markup(self.markup)  # ValueError naming the formats
        if self.dialect not in LEAK_DIALECTS:
            known = ", ".join(LEAK_DIALECTS)
            raise ValueError(f"unknown leak dialect {self.dialect!r}; known: {known}")

    def active(self, nonce: str, turn: int, stream: bool | None = None) -> bool:
        """Whether this fault shows at ``turn`` of the run identified by ``nonce`` (in a
        request that streams, ``stream``; ``None`` = either)."""
        if turn < self.start_turn or (self.end_turn is not None and turn >= self.end_turn):
            return False
        if self.stream is not None and stream is not None and stream != self.stream:
            return False
        return self.rate >= 1.0 or unit_draw(nonce, self.kind) < self.rate


def unit_draw(*parts: object) -> float:
    """A uniform number in [0, 1) that is a pure function of ``parts`` (sha256)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:13], 16) / float(1 << 52)


def active_fault(
    profile: SimProfile, kind: str, nonce: str, turn: int, stream: bool | None = None
) -> Fault | None:
    """The fault of ``kind`` in ``profile`` that shows at ``turn`` of run ``nonce`` (in a
    request that streams, ``stream``; ``None`` = either), if any."""
    return next(
        (f for f in profile.faults if f.kind == kind and f.active(nonce, turn, stream)), None
    )


def should_loop(profile: SimProfile, nonce: str, turn: int) -> bool:
    """Whether the repeat loop replaces a final answer at this turn."""
    return active_fault(profile, FailureKind.REPEAT_LOOP, nonce, turn) is not None


def spurious_call(
    profile: SimProfile,
    decision: Decision,
    *,
    tools: list[str],
    first_answer: bool,
    nonce: str,
    turn: int,
) -> Decision:
    """``decision``, or a call of the first offered tool (``{}``) where the model would
    give the segment's answer right after its planned calls (``first_answer``; the
    ``spurious_calls`` fault). The next request answers as planned."""
    if decision.calls or not first_answer or not tools:
        return decision
    if active_fault(profile, FailureKind.SPURIOUS_CALLS, nonce, turn) is None:
        return decision
    return Decision(calls=[PlannedCall(tools[0], {})], reasoning="Let me check with a tool.")


# ------------------------------------------------------------- argument values


def _zeros(value: Any) -> Any:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return 0
    if isinstance(value, list):
        return [_zeros(v) for v in value]
    if isinstance(value, dict):
        return {k: _zeros(v) for k, v in value.items()}
    return value


def _empties(value: Any) -> Any:
    if isinstance(value, list):
        return [_empties(v) for v in value]
    if isinstance(value, dict):
        return {k: _empties(v) for k, v in value.items()}
    return ""


def _decoded(text: str) -> Any:
    """``text`` as a lenient parser reads it: JSON scalar, else ``int()``, else ``float()``."""
    try:
        value = json.loads(text)
        if value is None or isinstance(value, (bool, int, float)):
            return value
    except ValueError:
        pass
    for conv in (int, float):
        try:
            num = conv(text)
            return num if math.isfinite(num) else text
        except ValueError:
            pass
    return text


def corrupt_arguments(
    profile: SimProfile, args: dict[str, Any], *, required: list[str], nonce: str, turn: int
) -> dict[str, Any]:
    """The arguments after the value faults active at ``turn`` (input is not modified)."""
    out = copy.deepcopy(args)
    collapse = active_fault(profile, FailureKind.COLLAPSE, nonce, turn)
    if collapse is not None:
        out = _zeros(out) if turn == collapse.start_turn else _empties(out)
    if active_fault(profile, FailureKind.CONTAINER_AS_STRING, nonce, turn):
        out = {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in out.items()}
    if active_fault(profile, FailureKind.SCALAR_AS_STRING, nonce, turn):
        out = {k: v if isinstance(v, (str, list, dict)) else json.dumps(v) for k, v in out.items()}
    if active_fault(profile, FailureKind.DROPPED_KEYS, nonce, turn) and out:
        victim = next((k for k in required if k in out), next(iter(out)))
        del out[victim]
    if active_fault(profile, FailureKind.STRING_AS_SCALAR, nonce, turn):
        out = {k: _decoded(v) if isinstance(v, str) else v for k, v in out.items()}
    if active_fault(profile, FailureKind.INT_AS_FLOAT, nonce, turn):
        out = {k: float(v) if type(v) is int else v for k, v in out.items()}
    if active_fault(profile, FailureKind.ENUM_VIOLATION, nonce, turn):
        out = {k: v.capitalize() if isinstance(v, str) else v for k, v in out.items()}
    if active_fault(profile, FailureKind.UNEXPECTED_KEYS, nonce, turn):
        out[UNEXPECTED_KEY] = True
    markup = active_fault(profile, FailureKind.MARKUP_IN_ARGUMENTS, nonce, turn)
    if markup is not None:
        tail = call_markup(markup.markup).left_over if markup.markup else ARGUMENT_MARKUP
        out = {k: v + tail if isinstance(v, str) else v for k, v in out.items()}
    return out


def misread_request(
    profile: SimProfile, req: RequestOptions, *, nonce: str, turn: int
) -> RequestOptions:
    """The request as a server with the request-constraint faults active reads it: ``"none"``
    as ``"required"``, ``parallel_tool_calls: false`` as true, a named function as another
    offered tool, ``"required"`` as ``"none"`` (the input is not modified)."""

    def on(kind: FailureKind) -> bool:
        return active_fault(profile, kind, nonce, turn) is not None

    choice = req.tool_choice
    if choice == "none" and on(FailureKind.CALLS_UNDER_TOOL_CHOICE_NONE):
        req = dataclasses.replace(req, tool_choice="required")
    elif choice == "required" and on(FailureKind.REQUIRED_TOOL_CHOICE_IGNORED):
        req = dataclasses.replace(req, tool_choice="none")
    elif isinstance(choice, dict) and on(FailureKind.NAMED_TOOL_CHOICE_IGNORED):
        named = (choice.get("function") or {}).get("name")
        other = next((t for t in req.tools if t != named), named)
        req = dataclasses.replace(
            req, tool_choice={"type": "function", "function": {"name": other}}
        )
    if not req.parallel_tool_calls and on(FailureKind.PARALLEL_CALLS_WHEN_DISABLED):
        req = dataclasses.replace(req, parallel_tool_calls=True)
    return req


# ------------------------------------------------------------------ rendering


def _markup(calls: list[PlannedCall]) -> str:
    parts = [
        "<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": c.arguments}, separators=(", ", ": "))
        + "\n</tool_call>"
        for c in calls
    ]
    return "\n".join(parts)


def _json_form(c: PlannedCall, key: str = "arguments") -> str:
    return json.dumps({"name": c.name, key: c.arguments}, separators=(", ", ": "))


def _openai_form(calls: list[PlannedCall]) -> str:
    entries = [
        {"type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in calls
    ]
    return json.dumps({"tool_calls": entries})


def _pythonic_form(c: PlannedCall) -> str:
    return f"{c.name}({', '.join(f'{k}={v!r}' for k, v in c.arguments.items())})"


def leak_text(calls: list[PlannedCall], dialect: str) -> str:
    """``calls`` written as text in ``dialect`` (:data:`LEAK_DIALECTS`)."""
    if dialect == "json_list":
        return "[" + ", ".join(_json_form(c, "parameters") for c in calls) + "]"
    if dialect == "openai":
        return _openai_form(calls)
    if dialect == "pythonic":
        return "[" + ", ".join(_pythonic_form(c) for c in calls) + "]"
    if dialect == "tokens":
        return "".join(
            f"<|tool_call_start|>{c.name}{json.dumps(c.arguments)}<|tool_call_end|>" for c in calls
        )
    text = "\n".join(_json_form(c) for c in calls)
    if dialect == "fenced":
        return f"```json\n{text}\n```"
    if dialect == "prose":
        return f"Let me look that up for you.\n{text}"
    return text


def _narration(calls: list[PlannedCall]) -> str:
    """A sentence announcing ``calls`` with their argument values and nothing else."""
    said = [f"{c.name} for {' and '.join(_said(v) for v in c.arguments.values())}" for c in calls]
    return f"Let me call {', then '.join(said)}."


def _said(value: Any) -> str:
    """A value as a sentence says it: strings bare, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def call_ids(profile: SimProfile, ids: list[str], *, nonce: str, turn: int) -> list[str | None]:
    """The tool_call ids sent: ``ids``, or none at all under ``missing_call_id``."""
    if active_fault(profile, FailureKind.MISSING_CALL_ID, nonce, turn):
        return [None] * len(ids)
    return list(ids)


def render(
    profile: SimProfile,
    decision: Decision,
    *,
    nonce: str,
    turn: int,
    ids: list[str | None],
    stream: bool | None = None,
) -> Reply:
    """The assistant message on the wire: ``decision`` after the message-level faults.

    ``ids`` are the tool_call ids to use (one per call, already chosen by the caller with
    ``repeated_ids`` and :func:`call_ids` applied); ``stream``: whether the request streams
    (``None``: faults limited to one mode show in both). Arguments are serialised as
    compact JSON (``separators=(",", ":")``).
    """

    def on(kind: FailureKind | str) -> bool:
        return active_fault(profile, kind, nonce, turn, stream) is not None

    reasoning, content = decision.reasoning, decision.content
    calls = [
        WireCall(id=i, name=c.name, arguments=json.dumps(c.arguments, separators=(",", ":")))
        for i, c in zip(ids, decision.calls, strict=True)
    ]
    if on(FailureKind.MALFORMED_JSON):
        calls = [WireCall(c.id, c.name, c.arguments[:-1]) for c in calls]
    if on(FailureKind.REASONING_LEAK_ARGS) and reasoning:
        calls = [WireCall(c.id, c.name, f"<think>{reasoning}</think>{c.arguments}") for c in calls]
    finish = "tool_calls" if calls else "stop"
    swallowed = on(FailureKind.TOOL_CALL_IN_REASONING) and bool(calls)
    if swallowed:
        reasoning = f"{reasoning or ''}\n{_markup(decision.calls)}".lstrip()
        content, calls, finish = "", [], "stop"
    if on("call_syntax_in_reasoning") and calls:
        reasoning = f"{reasoning or ''} I send it as {_markup(decision.calls[:1])}".lstrip()
    if on(FailureKind.MARKUP_IN_CONTENT) and calls:
        content, calls, finish = _markup(decision.calls), [], "stop"
    leak = active_fault(profile, FailureKind.TOOL_CALL_IN_CONTENT, nonce, turn, stream)
    if leak is not None and calls:
        content, calls, finish = leak_text(decision.calls, leak.dialect), [], "stop"
    if on(FailureKind.LENGTH_WITH_TOOL_CALLS) and calls:
        calls = [WireCall(c.id, c.name, c.arguments[: len(c.arguments) // 2]) for c in calls]
        finish = "length"
    if on(FailureKind.FINISH_REASON_MISMATCH):
        finish = "stop" if calls else "tool_calls"
    if on(FailureKind.CONTENT_RESTATES_ARGUMENTS) and calls:
        content = _narration(decision.calls)
    if on(FailureKind.REASONING_LEAK) and reasoning:
        content = f"<think>{reasoning}</think>\n\n{content or ''}".rstrip()
        reasoning = None
    if on("empty_stop"):
        content, calls, finish = "", [], "stop"
    return Reply(
        content=content,
        reasoning=reasoning if profile.reasoning or swallowed else None,
        tool_calls=calls,
        finish_reason=finish,
        drop_last_arg_piece=on(FailureKind.STREAM_TRUNCATED_ARGS),
        drop_empty_args=on(FailureKind.EMPTY_ARGUMENTS),
        index_base=1 if on(FailureKind.INDEX_OFFSET) else 0,
        object_arguments=on(FailureKind.OBJECT_NOT_STRING),
        omit_index=on(FailureKind.MISSING_CALL_INDEX),
        shared_index=on(FailureKind.SHARED_CALL_INDEX),
        repeat_empty_name=on("repeated_empty_name"),
        repeat_call_head=on(FailureKind.AMBIGUOUS_CALL_DELTAS),
        split_name=on("split_call_name"),
        repeat_finish=on(FailureKind.FINISH_REASON_REPEATED),
        usage_every_chunk=on(FailureKind.USAGE_WITH_CHOICES),
        null_name=on("null_name_continuation"),
    )
