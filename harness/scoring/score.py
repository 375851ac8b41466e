"""Per-run scores: a pure function of one :class:`~harness.transcript.RunRecord`.

:func:`score_run` reads only the record (its embedded scenario included), never the
network or the scenario files, so any old run can be re-scored. The result is a
:class:`harness.scoring.models.RunScore`.

``RunScore.failures`` holds :class:`harness.kinds.FailureKind` values (the vocabulary,
with each kind's family, label and meaning, lives there; the reference server's faults,
:mod:`harness.sim.faults`, carry the same names). What this module finds, by family:

- calls: each call's arguments parsed (:func:`parse_call`: not JSON, cut short, reasoning
  before the JSON, an object where the wire wants a string, not an object, ``""`` for
  ``"{}"``, a tool the request did not offer), checked against the tool's JSON Schema,
  and a repeat loop: more identical calls than the scenario's own expected calls repeat;
- drift: each usable call against its reference, by :mod:`harness.scoring.drift`;
- sequence: calls matched to each segment's expected calls (missing, spurious or more
  than ``max_calls``, out of a strict order);
- answer: each segment's final answer (missing, or not what ``final_answer`` expects);
- protocol: each response's ``finish_reason`` against its tool calls (and ``length`` with
  tool calls), markup or reasoning in ``content``, a call to a declared tool written into
  ``content`` (:mod:`harness.scoring.leaks`, any dialect, any turn), tool_call ids
  (missing, repeated in the run) and streamed indices (missing, shared by two calls, not
  0..n-1); and :mod:`harness.scoring.contract` (the reasoning channel, argument markup,
  streamed calls two clients read differently, the request's constraints).

A response whose ``content`` holds a leaked call or template markup is never a final
answer, whatever else it says.

A run *passes* when it has no failure kind at all. Infrastructure errors are scored as
termination ``error`` with no failure kinds and are excluded from every rate.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from harness.kinds import FailureKind, failure_kind
from harness.scenario.model import ArgMatcher, Expectation, ExpectedCall, Scenario
from harness.scenario.schemas import validator
from harness.scenario.suites import get_suite
from harness.scoring.contract import contract_checks, reasoning_calls
from harness.scoring.drift import canonical_json, excerpt, find_drift, matcher_accepts
from harness.scoring.leaks import (
    MARKUP_PATTERNS,
    ToolParams,
    find_leaks,
    markup_tokens,
    tool_params,
)
from harness.scoring.models import (
    CallScore,
    DriftFinding,
    LeakedCall,
    MalformedCall,
    ProtocolViolation,
    RunScore,
    SchemaViolation,
    SequenceMatch,
    Termination,
)
from harness.transcript import ResponseRecord, RunRecord, ToolCallRecord, TurnRecord

__all__ = ["MARKUP_PATTERNS", "ParsedCall", "parse_call", "score_run"]

_THINK = re.compile(r"</?think>")


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
        if _THINK.search(text[:200]):
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


def _parse_all(record: RunRecord, sc: Scenario) -> list[ParsedCall]:
    out: list[ParsedCall] = []
    for t in record.turns:
        if t.response is None:
            continue
        for c in t.response.tool_calls:
            name = c.name_among({tool.name for tool in sc.tools})  # a wire quirk, not the model's
            c = c if name == c.name else c.model_copy(update={"name": name})
            out.append(parse_call(c, t.index, t.segment, len(out), stream=record.stream, sc=sc))
    return out


# ------------------------------------------------------------------ repeats


def _repeats(calls: list[ParsedCall]) -> tuple[dict[int, int], int]:
    """``{call_index: call_index of the earlier identical call}`` and the longest streak."""
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


# ------------------------------------------------------------------ sequence


def _satisfies(call: ParsedCall, exp: ExpectedCall) -> bool:
    """Same tool, and every checked key present and accepted (ArgMatcher semantics)."""
    if call.args is None or call.raw.name != exp.tool:
        return False
    checks = {k: ArgMatcher(equals=v) for k, v in exp.arguments.items()} | exp.match
    return all(k in call.args and matcher_accepts(m, call.args[k]) for k, m in checks.items())


def _closest(call: ParsedCall, options: list[ExpectedCall]) -> ExpectedCall | None:
    """The expected call sharing most argument values with ``call`` (first on ties)."""
    args = call.args or {}

    def same_values(e: ExpectedCall) -> int:
        return sum(
            k in args and canonical_json(args[k]) == canonical_json(v)
            for k, v in e.arguments.items()
        )

    return max(options, key=same_values) if options else None


def _match_segment(
    seg: Expectation, si: int, calls: list[ParsedCall], seq: SequenceMatch
) -> list[FailureKind]:
    """Assign calls to expected calls; fill ``seq``; return failure kinds."""
    matched: dict[int, ParsedCall] = {}
    leftovers: list[ParsedCall] = []
    unexpected = 0
    for c in calls:
        j = next(
            (j for j, e in enumerate(seg.calls) if j not in matched and _satisfies(c, e)), None
        )
        if j is None:
            leftovers.append(c)
        else:
            matched[j], c.reference = c, seg.calls[j]
    for c in leftovers:
        same = [e for j, e in enumerate(seg.calls) if e.tool == c.raw.name and j not in matched]
        again = [e for e in seg.calls if e.tool == c.raw.name]
        c.reference = _closest(c, same or again)
        if not same and (seg.calls or seg.max_calls is not None):
            seq.unexpected.append(f"turn{c.turn}:{c.raw.name}")
            unexpected += 1
    seq.matched += len(matched)
    required = [j for j, e in enumerate(seg.calls) if not e.optional]
    seq.expected += len(required)
    seq.missing += [f"seg{si}:{seg.calls[j].tool}" for j in required if j not in matched]
    turns = [matched[j].turn for j in sorted(matched)]
    in_order = seg.order == "free" or turns == sorted(turns)
    seq.order_kept = seq.order_kept and in_order
    kinds = []
    if any(j not in matched for j in required):
        kinds.append(FailureKind.MISSING_CALLS)
    if unexpected or (seg.max_calls is not None and len(calls) > seg.max_calls):
        kinds.append(FailureKind.SPURIOUS_CALLS)
    if not in_order:
        kinds.append(FailureKind.ORDER_VIOLATION)
    return kinds


def _sequence(sc: Scenario, calls: list[ParsedCall]) -> tuple[SequenceMatch, set[FailureKind]]:
    seq, kinds = SequenceMatch(), set[FailureKind]()
    for si, seg in enumerate(sc.segments()):
        kinds.update(_match_segment(seg, si, [c for c in calls if c.segment == si], seq))
    return seq, kinds


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


# ------------------------------------------------------------------ answers and protocol


def _segment_turns(record: RunRecord) -> dict[int, list[TurnRecord]]:
    out: dict[int, list[TurnRecord]] = {}
    for t in record.turns:
        out.setdefault(t.segment, []).append(t)
    return out


def _leaked(content: str | None, tools: ToolParams) -> bool:
    """Whether ``content`` holds template markup or a call to a declared tool."""
    return bool(content and (markup_tokens(content) or find_leaks(content, tools)))


def _final_text(turns: list[TurnRecord], tools: ToolParams) -> str | None:
    """The segment's final answer: the last response, if it has no calls and real content
    (neither a leaked call nor template markup)."""
    last = turns[-1].response if turns else None
    if last is None or last.tool_calls or last.finish_reason == "length":
        return None
    text = (last.content or "").strip()
    if not text or _leaked(text, tools) or reasoning_calls(last, tools):
        return None
    return text


def _answers(
    record: RunRecord, sc: Scenario, tools: ToolParams
) -> tuple[bool, bool, str | None, set[FailureKind]]:
    """(every required answer reached, all meet expectations, last answer, failure kinds);
    ``tools``: the declared tools (a leaked call to one is not an answer)."""
    by_seg = _segment_turns(record)
    reached = ok = True
    kinds: set[FailureKind] = set()
    last: str | None = None
    for si, seg in enumerate(sc.segments()):
        text = _final_text(by_seg.get(si, []), tools)
        fa = seg.final_answer
        if text is None:
            if fa.required:
                reached = ok = False
                kinds.add(FailureKind.MISSING_FINAL_ANSWER)
            continue
        last = text
        good = all(s.lower() in text.lower() for s in fa.contains) and (
            fa.regex is None or re.search(fa.regex, text, re.IGNORECASE | re.DOTALL) is not None
        )
        if not good:
            ok = False
            kinds.add(FailureKind.WRONG_FINAL_ANSWER)
    return reached, ok and reached, last, kinds


def _message_checks(r: ResponseRecord) -> list[tuple[FailureKind, str]]:
    """``(kind, message)`` for one response's finish_reason, markup and reasoning leaks."""
    out = []
    if (r.finish_reason == "tool_calls") != bool(r.tool_calls) and r.finish_reason != "length":
        msg = f"finish_reason {r.finish_reason!r} with {len(r.tool_calls)} tool calls"
        out.append((FailureKind.FINISH_REASON_MISMATCH, msg))
    if r.finish_reason == "length" and r.tool_calls:
        msg = f'finish_reason "length" with {len(r.tool_calls)} tool calls (cut by max_tokens)'
        out.append((FailureKind.LENGTH_WITH_TOOL_CALLS, msg))
    content = r.content or ""
    tokens = markup_tokens(content)
    if tokens:
        msg = f"{tokens[0]!r} in content: {excerpt(content, 80)}"
        out.append((FailureKind.MARKUP_IN_CONTENT, msg))
    reasoning = (r.reasoning_content or "").strip()
    if _THINK.search(content) or (len(reasoning) > 20 and reasoning in content):
        msg = f"reasoning text in content: {excerpt(content, 80)}"
        out.append((FailureKind.REASONING_LEAK, msg))
    return out


def _index_checks(r: ResponseRecord) -> list[tuple[FailureKind, str]]:
    """Streamed tool_call indices: missing, shared by two calls (two ids), not 0..n-1."""
    if not r.stream or not r.tool_calls:
        return []
    out = []
    indices = [c.index for c in r.tool_calls]
    if None in indices:
        n = indices.count(None)
        out.append((FailureKind.MISSING_CALL_INDEX, f"{n} tool_calls deltas without an index"))
    given = sorted(i for i in indices if i is not None)
    shared = sorted({i for i in given if given.count(i) > 1})
    if shared:
        ids = [c.id for c in r.tool_calls if c.index in shared]
        out.append((FailureKind.SHARED_CALL_INDEX, f"index {shared} carries ids {ids}"))
    distinct = sorted(set(given))
    if distinct and distinct != list(range(len(distinct))):
        msg = f"tool_call indices {given}, not 0..{len(distinct) - 1}"
        out.append((FailureKind.INDEX_OFFSET, msg))
    return out


def _leaks(record: RunRecord, tools: ToolParams) -> list[LeakedCall]:
    """Every call to a declared tool written into a response's ``content``, in turn order."""
    return [
        LeakedCall(
            turn=t.index, tool=leak.tool, dialect=leak.dialect,
            arguments=excerpt(json.dumps(leak.arguments, ensure_ascii=False), 300),
        )
        for t in record.turns
        if t.response is not None
        for leak in find_leaks(t.response.content, tools)
    ]  # fmt: skip


def _leak_violations(leaked: list[LeakedCall]) -> list[ProtocolViolation]:
    """One ``tool_call_in_content`` violation per turn with leaked calls."""
    by_turn: dict[int, list[LeakedCall]] = {}
    for leak in leaked:
        by_turn.setdefault(leak.turn, []).append(leak)
    kind = FailureKind.TOOL_CALL_IN_CONTENT
    return [
        ProtocolViolation(
            kind=kind, turn=turn,
            message="call written into content: "
            + "; ".join(f"{x.tool} {x.arguments} ({x.dialect})" for x in leaks),
        )
        for turn, leaks in by_turn.items()
    ]  # fmt: skip


def _protocol(record: RunRecord, tools: ToolParams) -> list[ProtocolViolation]:
    """Protocol invariants of every response (:mod:`harness.scoring.contract` too: what
    the request asked for), and tool_call ids unique in the run."""
    out: list[ProtocolViolation] = []
    ids: dict[str, int] = {}
    for t in record.turns:
        if t.response is None:
            continue
        found = _message_checks(t.response) + _index_checks(t.response)
        found += contract_checks(t.request_params, t.response, tools)
        for c in t.response.tool_calls:
            if not c.id:
                found.append((FailureKind.MISSING_CALL_ID, "tool call without an id"))
            elif c.id in ids:
                msg = f"tool_call id {c.id!r} already used at turn {ids[c.id]}"
                found.append((FailureKind.REPEATED_IDS, msg))
            else:
                ids[c.id] = t.index
        out += [ProtocolViolation(kind=k, turn=t.index, message=m) for k, m in found]
    return out


def _termination(record: RunRecord, calls: list[ParsedCall], tools: ToolParams) -> Termination:
    if record.is_infra_error:
        return "error"
    last = next((t.response for t in reversed(record.turns) if t.response is not None), None)
    if (
        last is not None
        and not last.tool_calls
        and (_leaked(last.content, tools) or reasoning_calls(last, tools))
    ):
        return "malformed"
    last_turn = record.turns[-1].index if record.turns else -1
    tail = [c for c in calls if c.turn == last_turn]
    if (
        record.stop_reason != "final_answer"
        and tail
        and all(c.malformed and c.args is None for c in tail)
    ):
        return "malformed"
    return record.stop_reason


# ------------------------------------------------------------------ the score


#: parsed scenarios by content hash, most recent last (a few hundred at most: records of
#: one scenario come together, and a suite of thousands must not stay in memory)
_SCENARIOS: OrderedDict[str, Scenario] = OrderedDict()
_SCENARIO_CACHE = 256


def _scenario(record: RunRecord) -> Scenario:
    key = record.scenario_hash
    sc = _SCENARIOS.get(key)
    if sc is None:
        sc = _SCENARIOS[key] = Scenario.model_validate(record.scenario)
        if len(_SCENARIOS) > _SCENARIO_CACHE:
            _SCENARIOS.popitem(last=False)
    else:
        _SCENARIOS.move_to_end(key)
    return sc


def _shown(c: ParsedCall) -> str:
    """The call's arguments as a reviewer reads them: parsed JSON in the order sent, or raw."""
    if c.args is not None:
        return excerpt(json.dumps(c.args, ensure_ascii=False), 500)
    raw = c.raw.arguments
    return excerpt(raw if isinstance(raw, str) else repr(raw), 500)


def _infra_score(record: RunRecord) -> RunScore:
    return RunScore(
        run_key=record.run_key,
        scenario_id=record.scenario_id,
        side=record.side,
        label=record.target.label,
        repeat=record.repeat,
        stream=record.stream,
        infra_error=record.error,
        termination="error",
        turns=len(record.turns),
    )


def _score_arguments(
    calls: list[ParsedCall], sc: Scenario
) -> tuple[list[DriftFinding], list[SchemaViolation]]:
    """Drift and schema violations of every call; sets each call's ``kinds``."""
    drift: list[DriftFinding] = []
    schema: list[SchemaViolation] = []
    for c in calls:
        f, v = _check_arguments(c, sc)
        drift += f
        schema += v
        found = {failure_kind(d.kind) for d in f} | ({FailureKind.SCHEMA_VIOLATION} if v else set())
        c.kinds = sorted(found | ({failure_kind(c.malformed.kind)} if c.malformed else set()))
    return drift, schema


def _call_scores(calls: list[ParsedCall], reps: dict[int, int], looping: bool) -> list[CallScore]:
    loop = [FailureKind.REPEAT_LOOP]
    return [
        CallScore(
            turn=c.turn, call_index=c.call_index, tool=c.raw.name, arguments=_shown(c),
            repeat_of=reps.get(c.call_index),
            kinds=[*c.kinds, *(loop if looping and c.call_index in reps else [])],
        )
        for c in calls
    ]  # fmt: skip


def score_run(record: RunRecord) -> RunScore:
    """Score one run (pure; no network, no files).

    Returns:
        The :class:`~harness.scoring.models.RunScore`; ``passed`` is True iff ``failures`` is empty.
        A run with an infrastructure error gets termination ``error``, ``passed=False``
        and no failures (callers exclude it from rates).
    """
    if record.is_infra_error:
        return _infra_score(record)
    sc = _scenario(record)
    calls = _parse_all(record, sc)
    reps, streak = _repeats(calls)
    if sc.task is not None:  # a suite's own criteria (BFCL's: harness.scoring.bfcl)
        seq, kinds = get_suite(sc.task.suite).score(sc, calls, record.state_checks)
    else:
        seq, kinds = _sequence(sc, calls)
    drift, schema = _score_arguments(calls, sc)
    allowed = allowed_repeats(sc)
    looping = len(reps) > allowed
    tools = tool_params(t.model_dump() for t in sc.tools)
    reached, ok, final, answer_kinds = _answers(record, sc, tools)
    leaked = _leaks(record, tools)
    protocol = _protocol(record, tools) + _leak_violations(leaked)
    kinds |= {k for c in calls for k in c.kinds} | answer_kinds
    kinds |= {failure_kind(p.kind) for p in protocol}
    kinds |= {FailureKind.REPEAT_LOOP} if looping else set()
    malformed = [c.malformed for c in calls if c.malformed]
    bad_args = [m for m in malformed if m.kind != FailureKind.UNKNOWN_TOOL]
    return RunScore(
        run_key=record.run_key, scenario_id=record.scenario_id, side=record.side,
        label=record.target.label, repeat=record.repeat, stream=record.stream,
        termination=_termination(record, calls, tools), turns=len(record.turns), tool_calls=len(calls),
        repeated_calls=len(reps), longest_repeat_streak=streak, allowed_repeats=allowed,
        malformed_args=len(bad_args), malformed=malformed,
        schema_violations=schema, drift=drift, protocol_violations=protocol, leaked_calls=leaked,
        final_answer=reached, final_answer_ok=ok,
        final_excerpt=excerpt(final, 300) if final else None, sequence=seq,
        calls=_call_scores(calls, reps, looping), failures=sorted(kinds), passed=not kinds,
    )  # fmt: skip
