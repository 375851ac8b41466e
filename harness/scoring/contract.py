"""What the request asked for and what a client reads, honoured: per-response protocol checks.

Pure functions of one :class:`~harness.transcript.ResponseRecord` and the request that
produced it (``TurnRecord.request_params``, ``extra_body`` merged as the SDK merges it);
:func:`contract_checks` returns ``(FailureKind, message)`` pairs for
:func:`harness.scoring.score.score_run`. What each finds:

- ``tool_call_in_reasoning``: a message with no ``tool_calls`` whose reasoning channel
  (``reasoning_content`` / ``reasoning``) holds a call to a declared tool, in any dialect
  of :mod:`harness.scoring.leaks` (a reasoning parser that swallowed a ``<tool_call>``
  emitted before the end of thinking). Reasoning next to real ``tool_calls`` is not read:
  a model thinks about the call it then makes;
- ``markup_in_arguments``: a chat-template token (:func:`harness.scoring.leaks.markup_tokens`)
  inside a string value of a call's arguments, whatever the scenario's matcher accepts;
- ``ambiguous_call_deltas``: a streamed call that the SDK's accumulator and a client
  keeping each field's first fragment assemble differently
  (``ToolCallRecord.first_fragments``, :class:`harness.client.wire.StreamAssembler`);
- the request's constraints: ``calls_under_tool_choice_none``,
  ``parallel_calls_when_disabled`` (more than one call under ``parallel_tool_calls:
  false``), ``named_tool_choice_ignored`` (another tool, or no call, for a named function),
  ``required_tool_choice_ignored`` (no call under ``"required"``), ``max_tokens_exceeded``
  (``usage.completion_tokens`` above ``max_completion_tokens`` or ``max_tokens``),
  ``n_not_honoured`` (``ResponseRecord.choices`` other than ``n``, 1 when not sent; identical
  choices are a legitimate repeat), ``stop_string_in_output`` (a ``stop`` string in
  ``content``). A response cut by ``finish_reason: "length"`` is not held to
  ``required`` or a named choice (it may have been cut before the call).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from harness.kinds import FailureKind
from harness.scoring.drift import excerpt
from harness.scoring.leaks import ToolParams, find_leaks, markup_tokens
from harness.transcript import ResponseRecord

__all__ = ["contract_checks", "reasoning_calls"]

Finding = tuple[FailureKind, str]


def reasoning_calls(r: ResponseRecord, tools: ToolParams) -> list[str]:
    """``"tool {arguments} (dialect)"`` of each call written into the reasoning of a
    message without ``tool_calls``; empty otherwise."""
    if r.tool_calls or not r.reasoning_content:
        return []
    return [
        f"{leak.tool} {excerpt(json.dumps(leak.arguments, ensure_ascii=False), 120)} "
        f"({leak.dialect})"
        for leak in find_leaks(r.reasoning_content, tools)
    ]


def contract_checks(
    request_params: dict[str, Any], r: ResponseRecord, tools: ToolParams
) -> list[Finding]:
    """Every finding of the module docstring for one response to the request of
    ``request_params`` (a turn's, ``extra_body`` merged over the others as sent)."""
    params = {k: v for k, v in request_params.items() if k != "extra_body"}
    extra = request_params.get("extra_body")
    params.update(extra if isinstance(extra, dict) else {})
    found = reasoning_calls(r, tools)
    out = [(FailureKind.TOOL_CALL_IN_REASONING, "call written into reasoning: " + "; ".join(found))]
    return (out if found else []) + [
        *_argument_markup(r), *_ambiguous_deltas(r), *_tool_choice(params, r),
        *_limits(params, r),
    ]  # fmt: skip


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _argument_markup(r: ResponseRecord) -> list[Finding]:
    out = []
    for c in r.tool_calls:
        args = c.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                continue
        tokens = sorted({t for s in _strings(args) for t in markup_tokens(s)})
        if tokens:
            msg = f"{', '.join(map(repr, tokens))} inside the arguments of {c.name}"
            out.append((FailureKind.MARKUP_IN_ARGUMENTS, msg))
    return out


def _ambiguous_deltas(r: ResponseRecord) -> list[Finding]:
    return [
        (
            FailureKind.AMBIGUOUS_CALL_DELTAS,
            f"tool_calls index {c.index}: the SDK assembles id {c.id!r} name {c.name!r}, a "
            f"first-fragment client id {c.first_fragments['id']!r} name "
            f"{c.first_fragments['name']!r}",
        )
        for c in r.tool_calls
        if r.stream and c.first_fragments
    ]


def _named(choice: Any) -> str | None:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        return name if isinstance(name, str) else None
    return None


def _tool_choice(params: dict[str, Any], r: ResponseRecord) -> list[Finding]:
    choice, calls = params.get("tool_choice"), r.tool_calls
    names = [c.name for c in calls]
    cut = r.finish_reason == "length"
    out: list[Finding] = []
    if choice == "none" and calls:
        out.append((FailureKind.CALLS_UNDER_TOOL_CHOICE_NONE, f'calls {names} under "none"'))
    if params.get("parallel_tool_calls") is False and len(calls) > 1:
        msg = f"{len(calls)} calls in one message under parallel_tool_calls false: {names}"
        out.append((FailureKind.PARALLEL_CALLS_WHEN_DISABLED, msg))
    named = _named(choice)
    if named is not None and (any(n != named for n in names) or not (calls or cut)):
        msg = f"tool_choice names {named!r}; the reply calls {names or 'no tool'}"
        out.append((FailureKind.NAMED_TOOL_CHOICE_IGNORED, msg))
    if choice == "required" and not calls and not cut:
        msg = f'tool_choice "required" answered with text: {excerpt(r.content or "", 80)}'
        out.append((FailureKind.REQUIRED_TOOL_CHOICE_IGNORED, msg))
    return out


def _stops(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [s for s in value if isinstance(s, str) and s] if isinstance(value, list) else []


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _limits(params: dict[str, Any], r: ResponseRecord) -> list[Finding]:
    out: list[Finding] = []
    limit = params.get("max_completion_tokens", params.get("max_tokens"))
    used = (r.usage or {}).get("completion_tokens")
    limit, used = _count(limit), _count(used)
    if limit is not None and used is not None and used > limit:
        msg = f"usage.completion_tokens {used} > max_tokens {limit}"
        out.append((FailureKind.MAX_TOKENS_EXCEEDED, msg))
    n = params.get("n") or 1
    if isinstance(n, int) and r.choices is not None and r.choices != n:
        out.append((FailureKind.N_NOT_HONOURED, f"{r.choices} choices for n={n}"))
    found = [s for s in _stops(params.get("stop")) if s in (r.content or "")]
    if found:
        msg = f"stop {found[0]!r} in content: {excerpt(r.content or '', 80)}"
        out.append((FailureKind.STOP_STRING_IN_OUTPUT, msg))
    return out
