"""Protocol findings of a run's responses. Pure.

Each response's ``finish_reason`` against its tool calls (and ``length`` with tool
calls), markup or reasoning in ``content``, a call to a declared tool written into
``content`` (:mod:`harness.scoring.leaks`, any dialect, any turn), tool_call ids
(missing, repeated in the run), streamed indices (missing, shared by two calls, not
0..n-1) and a stream's chunks (a choice's ``finish_reason`` sent twice, ``usage`` beside
choices); and :mod:`harness.scoring.contract` (the reasoning channel, argument markup,
streamed calls two clients read differently, the request's constraints). Beside them, the
information family (:func:`information`: content beside a call that only restates it).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from harness.kinds import FailureKind
from harness.scoring.calls import THINK_TAG
from harness.scoring.contract import contract_checks
from harness.scoring.drift import excerpt
from harness.scoring.leaks import ToolParams, find_leaks, markup_tokens
from harness.scoring.models import LeakedCall, Observation, ProtocolViolation
from harness.transcript import ResponseRecord, RunRecord

__all__ = [
    "finish_reason_agrees", "information", "leak_violations", "leaked_calls",
    "protocol_violations", "restated_arguments",
]  # fmt: skip


def _named_choice(request_params: dict[str, Any]) -> bool:
    """Whether the request named one function in ``tool_choice`` (``extra_body`` merged)."""
    extra = request_params.get("extra_body")
    choice = (extra if isinstance(extra, dict) else {}).get(
        "tool_choice", request_params.get("tool_choice")
    )
    return isinstance(choice, dict) and isinstance(choice.get("function"), dict)


def finish_reason_agrees(r: ResponseRecord, request_params: dict[str, Any]) -> bool:
    """Whether ``r.finish_reason`` agrees with its tool calls under the request that asked.

    ``"tool_calls"`` iff the message carries tool calls (``tool_choice`` ``auto``,
    ``required`` or absent), and ``"length"`` either way (cut: ``length_with_tool_calls``
    judges it). A request naming one function (``{"type": "function", "function": {"name":
    ...}}``) may also end its forced call with ``"stop"``: the OpenAI API does (a forced
    function is answered with the call and ``finish_reason: "stop"``), and so does vLLM
    (``vllm/entrypoints/openai/serving_chat.py`` sets ``"tool_calls"`` only for calls
    parsed under ``auto``/``required``; a named choice keeps the engine's ``"stop"``; vLLM
    PR #49496 made its Rust frontend match: "Named calls now return stop, while auto and
    required calls continue to return tool_calls").
    """
    if r.finish_reason == "length":
        return True
    if r.finish_reason == "stop" and r.tool_calls and _named_choice(request_params):
        return True
    return (r.finish_reason == "tool_calls") == bool(r.tool_calls)


def _message_checks(
    r: ResponseRecord, request_params: dict[str, Any]
) -> list[tuple[FailureKind, str]]:
    """``(kind, message)`` for one response's finish_reason (under its request), markup and
    reasoning leaks."""
    out = []
    if not finish_reason_agrees(r, request_params):
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
    if THINK_TAG.search(content) or (len(reasoning) > 20 and reasoning in content):
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


def _stream_checks(
    r: ResponseRecord, request_params: dict[str, Any]
) -> list[tuple[FailureKind, str]]:
    """A stream's chunks (``r.raw``): one ``finish_reason`` per choice, and ``usage`` only on
    a chunk with ``"choices": []`` or on the stream's last chunk.

    The OpenAI API reference (``chat.completion.chunk``): ``usage`` "appears only in the
    last chunk" when ``stream_options.include_usage`` is set, a chunk whose ``choices`` is
    always empty, and every other chunk has ``usage: null``; a choice's ``finish_reason``
    is null until its last delta. vLLM and SGLang send the usage chunk the same way (vLLM
    puts usage on every chunk only when ``stream_options.continuous_usage_stats`` is
    asked: then not flagged). A second ``finish_reason`` for one choice
    (``finish_reason_repeated``) makes a client end the choice twice; usage beside
    choices (``usage_with_choices``) is counted twice or crashes a client that reads usage
    only off the empty-choices chunk. ``usage: null`` and an empty-choices usage chunk are
    clean.
    """
    if not r.stream or not isinstance(r.raw, list):
        return []
    chunks = [c for c in r.raw if isinstance(c, dict)]
    ends: dict[str, list[str]] = {}
    with_usage = []
    for n, chunk in enumerate(chunks):
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                ends.setdefault(str(choice.get("index", 0)), []).append(
                    str(choice["finish_reason"])
                )
        if isinstance(chunk.get("usage"), dict) and choices and n != len(chunks) - 1:
            with_usage.append(n)
    out = [
        (FailureKind.FINISH_REASON_REPEATED, f"choice {i}: finish_reason in {len(v)} chunks {v}")
        for i, v in ends.items()
        if len(v) > 1
    ]
    options = request_params.get("stream_options")
    if with_usage and not (isinstance(options, dict) and options.get("continuous_usage_stats")):
        msg = f"usage on {len(with_usage)} chunks with choices (chunk {with_usage[0]} first)"
        out.append((FailureKind.USAGE_WITH_CHOICES, msg))
    return out


#: the words of a sentence announcing a call ("Let me call get_weather for Oslo now."),
#: beside the call's own names and values
_NARRATION = frozenset({
    "i", "ll", "will", "let", "me", "now", "going", "to", "call", "calling", "check",
    "checking", "look", "looking", "up", "get", "getting", "fetch", "fetching", "use", "using",
    "run", "running", "with", "for", "the", "a", "an", "of", "and", "in", "on", "at", "by",
    "from", "is", "are", "this", "that", "tool", "function", "arguments", "argument", "args",
    "parameters", "params", "first", "next",
})  # fmt: skip
_WORD = re.compile(r"\w+")


def _words(value: Any) -> set[str]:
    """The lower-case words of every string, number and key inside ``value``."""
    if isinstance(value, dict):
        return {w for k, v in value.items() for w in _words(k) | _words(v)}
    if isinstance(value, list):
        return {w for v in value for w in _words(v)}
    if isinstance(value, bool) or value is None:
        return {str(value).lower()}
    return {w.lower() for w in _WORD.findall(str(value))}


def restated_arguments(r: ResponseRecord) -> str | None:
    """``content`` beside tool calls that only restates them, or None.

    Restating: every word of ``content`` is a word of the calls' argument values or keys,
    of their tool names (whole or split at ``_``), or of a sentence announcing a call
    (:data:`_NARRATION`: "let me call ... for ..."), and at least one is a value's
    ("Let me check the weather in Oslo." beside ``get_weather(city="Oslo")``; the arguments'
    JSON again). Text with a word of its own ("...; it is often rainy there") is not.

    Why information and not a failure: agent clients (the OpenAI Agents SDK, LangChain,
    Claude Code, Cursor) show content beside calls to the user as the assistant's text and
    run the calls; a preamble that narrates the call is what the OpenAI API's reasoning
    models and Anthropic's models send by design, and the call is still right. What it
    costs is tokens and noise, which a reviewer weighs; a product that shows no text
    beside calls says so with ``targets: [content_restates_arguments]``.
    """
    content = (r.content or "").strip()
    if not r.tool_calls or not content:
        return None
    values: set[str] = set()
    names: set[str] = set()
    for c in r.tool_calls:
        args = c.arguments
        if isinstance(args, str):
            with contextlib.suppress(ValueError, RecursionError):
                args = json.loads(args)
        values |= _words(args)
        names |= {(c.name or "").lower(), *(c.name or "").lower().split("_")}
    words = {w.lower() for w in _WORD.findall(content)}
    if not words & values or words - values - names - _NARRATION:
        return None
    return excerpt(content, 120)


def information(record: RunRecord) -> list[Observation]:
    """The information-family findings of every response, in turn order
    (``content_restates_arguments``: :func:`restated_arguments`)."""
    return [
        Observation(kind=FailureKind.CONTENT_RESTATES_ARGUMENTS, turn=t.index,
                    message=f"content beside the calls only restates them: {found}")
        for t in record.turns
        if t.response is not None and (found := restated_arguments(t.response)) is not None
    ]  # fmt: skip


def leaked_calls(record: RunRecord, tools: ToolParams) -> list[LeakedCall]:
    """Every call to a declared tool (``tools``) written into a response's ``content``, in
    turn order (:mod:`harness.scoring.leaks`: any dialect, any turn)."""
    return [
        LeakedCall(
            turn=t.index, tool=leak.tool, dialect=leak.dialect,
            arguments=excerpt(json.dumps(leak.arguments, ensure_ascii=False), 300),
        )
        for t in record.turns
        if t.response is not None
        for leak in find_leaks(t.response.content, tools)
    ]  # fmt: skip


def leak_violations(leaked: list[LeakedCall]) -> list[ProtocolViolation]:
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


def protocol_violations(record: RunRecord, tools: ToolParams) -> list[ProtocolViolation]:
    """Protocol invariants of every response (:mod:`harness.scoring.contract` too: what
    the request asked for), and tool_call ids unique in the run; ``tools``: the declared
    tools.

    Returns:
        One :class:`ProtocolViolation` per finding, in turn order.
    """
    out: list[ProtocolViolation] = []
    ids: dict[str, int] = {}
    for t in record.turns:
        if t.response is None:
            continue
        found = _message_checks(t.response, t.request_params) + _index_checks(t.response)
        found += _stream_checks(t.response, t.request_params)
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
