"""A run's tool calls: arguments parsed, checked against the tool's schema and their
reference (drift), and repeats counted. Pure, of one record.

Each call's arguments are parsed (:func:`parse_call`: not JSON, cut short, reasoning
before the JSON, an object where the wire wants a string, not an object, ``""`` for
``"{}"``, a tool the request did not offer), checked against the tool's JSON Schema and,
by :mod:`harness.scoring.drift`, against its reference (:func:`score_arguments`); a
repeat loop is more identical calls (:func:`repeats`) than the scenario's own expected
calls repeat (:func:`allowed_repeats`). A server's refusal of a later request over a
call the model wrote (:func:`history_refusal`) is that call's failure, not the server's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from harness.errors import TRANSIENT_STATUS
from harness.kinds import FailureKind, failure_kind
from harness.scenario.model import ExpectedCall, Scenario
from harness.scenario.schemas import validator
from harness.scoring.drift import canonical_json, excerpt, find_drift
from harness.scoring.models import (
    CallScore,
    DriftFinding,
    HistoryRefusal,
    MalformedCall,
    SchemaViolation,
)
from harness.transcript import RunRecord, ToolCallRecord

__all__ = [
    "THINK_TAG",
    "ParsedCall",
    "allowed_repeats",
    "call_scores",
    "history_refusal",
    "parse_call",
    "parse_calls",
    "repeats",
    "score_arguments",
]

#: a ``<think>`` or ``</think>`` tag (reasoning text where it does not belong)
THINK_TAG = re.compile(r"</?think>")


@dataclass
class ParsedCall:
    """One tool call of a run with its arguments parsed (``args`` None if unusable)."""

    turn: int
    segment: int
    call_index: int
    raw: ToolCallRecord
    args: dict[str, Any] | None
    canonical: str
    malformed: MalformedCall | None = None
    reference: ExpectedCall | None = None
    kinds: list[FailureKind] = field(default_factory=list)


def _malformed(
    kind: FailureKind, call: ToolCallRecord, turn: int, idx: int, reason: str
) -> MalformedCall:
    return MalformedCall(
        kind=kind,
        tool=call.name,
        turn=turn,
        call_index=idx,
        reason=reason,
        raw=excerpt(
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        ),
    )


def _cut_short(exc: Exception, text: str) -> bool:
    """Whether a JSON error means the text ended early (an unfinished value or string)."""
    msg = getattr(exc, "msg", "")
    return getattr(exc, "pos", -1) >= len(text) - 1 or msg.startswith("Unterminated string")


def _decode_json(text: str, stream: bool) -> tuple[Any, FailureKind | None, str]:
    """``(arguments, failure kind or None, reason)`` of non-blank argument text.

    JSON ``null`` decodes to None without a failure kind (scored as unusable, not malformed).
    """
    try:
        args = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        kind = FailureKind.MALFORMED_JSON
        if THINK_TAG.search(text[:200]):
            kind = FailureKind.REASONING_LEAK_ARGS
        elif stream and _cut_short(exc, text):
            kind = FailureKind.STREAM_TRUNCATED_ARGS
        return None, kind, f"arguments are not valid JSON: {exc}"
    if args is not None and not isinstance(args, dict):
        return None, FailureKind.NOT_AN_OBJECT, "arguments are not a JSON object"
    return args, None, ""


def _decode(raw: Any, stream: bool) -> tuple[Any, FailureKind | None, str]:
    """``(arguments, failure kind or None, reason)`` of a call's ``arguments`` as received."""
    if isinstance(raw, dict):
        return raw, FailureKind.OBJECT_NOT_STRING, "arguments sent as an object, not a JSON string"
    if isinstance(raw, str) and not raw.strip():
        return {}, FailureKind.EMPTY_ARGUMENTS, 'arguments "" instead of "{}" (scored as {})'
    if isinstance(raw, str):
        return _decode_json(raw.strip(), stream)
    return None, FailureKind.MALFORMED_JSON, f"arguments of type {type(raw).__name__}"


def parse_call(
    call: ToolCallRecord, turn: int, segment: int, idx: int, *, stream: bool, sc: Scenario
) -> ParsedCall:
    """Parse one call's ``arguments`` (a JSON object string on the wire).

    ``malformed`` is set with one of the call-family kinds: ``object_not_string`` (an
    object where the wire wants a string; still scored for drift), ``empty_arguments``
    (``""`` for ``"{}"``; scored as ``{}``), ``malformed_json``, ``stream_truncated_args``
    (streaming, cut at the end), ``reasoning_leak_args`` (``<think>`` text before the
    JSON), ``not_an_object``, ``unknown_tool``.
    """
    raw = call.arguments
    args, kind, reason = _decode(raw, stream)
    bad = _malformed(kind, call, turn, idx, reason) if kind is not None else None
    if bad is None and (call.name is None or sc.tool(call.name) is None):
        reason = f"no tool named {call.name!r} in the scenario"
        bad = _malformed(FailureKind.UNKNOWN_TOOL, call, turn, idx, reason)
    canon = (
        canonical_json([call.name, args])
        if args is not None
        else canonical_json([call.name, str(raw)])
    )
    return ParsedCall(turn, segment, idx, call, args, canon, bad)


def parse_calls(record: RunRecord, sc: Scenario) -> list[ParsedCall]:
    """Every tool call of ``record`` parsed (:func:`parse_call`), in turn order; a call's
    name is read as the scenario's tool when the wire split or doubled it
    (:meth:`~harness.transcript.ToolCallRecord.name_among`).

    Returns:
        One :class:`ParsedCall` per call, ``call_index`` 0..n-1 over the whole run.
    """
    out: list[ParsedCall] = []
    for t in record.turns:
        if t.response is None:
            continue
        for c in t.response.tool_calls:
            name = c.name_among({tool.name for tool in sc.tools})  # a wire quirk, not the model's
            c = c if name == c.name else c.model_copy(update={"name": name})
            out.append(parse_call(c, t.index, t.segment, len(out), stream=record.stream, sc=sc))
    return out


# ------------------------------------------------------------------ refused history

#: the calls whose arguments, sent back as received, a server re-parsing the history cannot
#: read (JSON that does not parse; an object is sent back as JSON text, ``""`` as is)
_UNREADABLE = frozenset({
    FailureKind.MALFORMED_JSON, FailureKind.STREAM_TRUNCATED_ARGS, FailureKind.REASONING_LEAK_ARGS
})  # fmt: skip
#: what a refusal over an unreadable call says: a JSON decoder's error (Python's ``json``,
#: which vLLM's ``chat_utils`` and SGLang's chat serving run on each earlier call's
#: ``arguments``; serde_json; Go's and JavaScript's), or the call's fields by name
_NAMES_THE_CALL = re.compile(
    r"Expecting (?:value|property name|',' delimiter|':' delimiter)|Unterminated string|"
    r"Extra data|Invalid (?:control character|\\escape)|JSONDecodeError|EOF while parsing|"
    r"unexpected end of (?:JSON )?input|(?:not|invalid) (?:valid )?JSON|tool_calls?|arguments",
    re.IGNORECASE,
)


def history_refusal(record: RunRecord, calls: list[ParsedCall]) -> HistoryRefusal | None:
    """The model's call that explains a server's refusal of a later request, or None.

    A run that ended on an infrastructure error is the model's failure instead when the
    history the model wrote explains it: the error is an HTTP 4xx that is not transient
    (not 408/429), answering a request after turn 0, whose message reads like a JSON
    decoder's error or names the calls (:data:`_NAMES_THE_CALL`), and an earlier turn holds
    a call whose arguments do not parse (``malformed_json``, ``stream_truncated_args``,
    ``reasoning_leak_args``): the agent sends every call back as it came, and a server that
    re-parses earlier calls (vLLM's ``chat_utils._postprocess_messages`` runs
    ``json.loads`` on each assistant call's ``arguments`` for the chat template; SGLang
    does the same) answers HTTP 400 with the decoder's message to every later request.
    The first such call is the cause (``calls``: :func:`parse_calls` of ``record``).
    Anything else (a 5xx, a timeout, a 400 at turn 0, a message about something else, no
    unreadable call) stays an infrastructure error.
    """
    err = record.error
    if err is None or err.kind != "http_status" or err.status is None:
        return None
    if not 400 <= err.status < 500 or err.status in TRANSIENT_STATUS or not err.turn:
        return None
    if not _NAMES_THE_CALL.search(err.message):
        return None
    cause = next(
        (
            c
            for c in calls
            if c.turn < err.turn and c.malformed is not None and c.malformed.kind in _UNREADABLE
        ),
        None,
    )
    if cause is None:
        return None
    return HistoryRefusal(
        turn=cause.turn, call_index=cause.call_index, tool=cause.raw.name,
        refused_turn=err.turn, status=err.status, message=excerpt(err.message, 500),
    )  # fmt: skip


# ------------------------------------------------------------------ repeats


def repeats(calls: list[ParsedCall]) -> tuple[dict[int, int], int]:
    """Identical calls (same tool, same canonical arguments) of one run.

    Returns:
        ``({call_index: call_index of the earlier identical call}, longest streak)``:
        the streak counts consecutive repeats.
    """
    seen: dict[str, int] = {}
    rep: dict[int, int] = {}
    streak = longest = 0
    for c in calls:
        if c.canonical in seen:
            rep[c.call_index] = seen[c.canonical]
            streak += 1
            longest = max(longest, streak)
        else:
            seen[c.canonical] = c.call_index
            streak = 0
    return rep, longest


def allowed_repeats(sc: Scenario) -> int:
    """Identical calls the scenario itself expects (e.g. polling with a ``sequence`` tool)."""
    seen: set[str] = set()
    n = 0
    for seg in sc.segments():
        for e in seg.calls:
            key = canonical_json([e.tool, e.arguments])
            n += key in seen
            seen.add(key)
    return n


# ------------------------------------------------------------------ arguments


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    return validator(schema)  # type: ignore[no-any-return]


def _json_path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out


def _check_arguments(
    c: ParsedCall, sc: Scenario
) -> tuple[list[DriftFinding], list[SchemaViolation]]:
    tool = sc.tool(c.raw.name or "")
    if c.args is None or tool is None:
        return [], []
    name = tool.name
    violations = [
        SchemaViolation(
            tool=name,
            turn=c.turn,
            call_index=c.call_index,
            path=_json_path(e.absolute_path),
            message=e.message[:300],
            validator=str(e.validator),
        )
        for e in _validator(tool.parameters).iter_errors(c.args)
    ]
    ref = c.reference
    drifts = find_drift(
        c.args, tool.parameters, ref.arguments if ref else None, ref.match if ref else None
    )
    findings = [
        DriftFinding(
            kind=d.kind,
            phrase=d.phrase,
            tool=name,
            path=d.path,
            turn=c.turn,
            call_index=c.call_index,
            value=excerpt(d.value),
            expected=excerpt(d.expected) if d.has_expected else None,
        )
        for d in drifts
    ]
    return findings, violations


def score_arguments(
    calls: list[ParsedCall], sc: Scenario
) -> tuple[list[DriftFinding], list[SchemaViolation]]:
    """Drift and schema violations of every call; sets each call's ``kinds``.

    Returns:
        ``(drift findings, schema violations)`` of all calls, in call order.
    """
    drift: list[DriftFinding] = []
    schema: list[SchemaViolation] = []
    for c in calls:
        f, v = _check_arguments(c, sc)
        drift += f
        schema += v
        found = {failure_kind(d.kind) for d in f} | ({FailureKind.SCHEMA_VIOLATION} if v else set())
        c.kinds = sorted(found | ({failure_kind(c.malformed.kind)} if c.malformed else set()))
    return drift, schema


def _shown(c: ParsedCall) -> str:
    """The call's arguments as a reviewer reads them: parsed JSON in the order sent, or raw."""
    if c.args is not None:
        return excerpt(json.dumps(c.args, ensure_ascii=False), 500)
    raw = c.raw.arguments
    return excerpt(raw if isinstance(raw, str) else repr(raw), 500)


def call_scores(calls: list[ParsedCall], reps: dict[int, int], looping: bool) -> list[CallScore]:
    """One :class:`CallScore` per call; ``reps``: :func:`repeats`' map; ``looping``: the run
    repeats more than its scenario allows (each repeat then carries ``repeat_loop``)."""
    loop = [FailureKind.REPEAT_LOOP]
    return [
        CallScore(
            turn=c.turn, call_index=c.call_index, tool=c.raw.name, arguments=_shown(c),
            repeat_of=reps.get(c.call_index),
            kinds=[*c.kinds, *(loop if looping and c.call_index in reps else [])],
        )
        for c in calls
    ]  # fmt: skip
