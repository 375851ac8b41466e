r"""OpenAI chat-completions wire format of the reference server.

Shapes follow the OpenAI API reference (``chat.completion`` and
``chat.completion.chunk`` objects) as served by vLLM and SGLang:

- non-streaming: ``{"id", "object": "chat.completion", "created", "model",
  "choices": [{"index": 0, "message": {"role": "assistant", "content",
  "tool_calls"?, "reasoning_content"?}, "finish_reason", "logprobs": null}], "usage"}``;
- streaming (SSE, ``data: <json>\n\n`` then ``data: [DONE]``): a first delta with
  the role, reasoning and content pieces, then per tool call a first delta carrying
  ``index``, ``id``, ``type`` and ``function.name`` (with ``arguments: ""``) followed
  by the arguments in several pieces, a last chunk with an empty delta and the
  finish_reason, and, when ``stream_options.include_usage`` is set, a chunk with
  ``choices: []`` and the usage.

Faults change the shapes only where a real server did: a call without ``id``
(``missing_call_id``), ``arguments`` as an object (``object_not_string``: streamed whole
in the call's first delta), deltas without ``index`` (``missing_call_index``), every call
on one index (``shared_call_index``), ``"name": ""`` repeated in every arguments delta
(``repeated_empty_name``), ``id`` and ``name`` repeated in every arguments delta
(``ambiguous_call_deltas``), the name in two deltas (``split_call_name``), the finish
chunk twice (``finish_reason_repeated``), ``usage`` on every chunk
(``usage_with_choices``), ``"name": null`` in continuation deltas
(``null_name_continuation``), see
:mod:`harness.sim.faults`. ``n`` identical choices are sent (streamed: each delta once per
choice index).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Reply",
    "WireCall",
    "completion_body",
    "split_pieces",
    "sse",
    "stream_events",
    "wire_arguments",
]


@dataclass
class WireCall:
    """One tool call as sent: ``arguments`` is the raw string (may be invalid JSON);
    ``id`` ``None`` = the call is sent without one."""

    id: str | None
    name: str
    arguments: str
    #: the server's own fields on the entry (an opaque signature: :mod:`harness.sim.history`)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Reply:
    """One assistant message on the wire, after faults."""

    content: str | None
    reasoning: str | None = None
    tool_calls: list[WireCall] = field(default_factory=list)
    finish_reason: str = "stop"
    drop_last_arg_piece: bool = False  # stream_truncated_args (streaming only)
    drop_empty_args: bool = False  # empty_arguments (streaming only): no "{}" delta
    index_base: int = 0  # index_offset (streaming only): first tool_call delta index
    object_arguments: bool = False  # object_not_string: arguments as a JSON object
    omit_index: bool = False  # missing_call_index (streaming only): deltas without index
    shared_index: bool = False  # shared_call_index (streaming only): every call on one index
    repeat_empty_name: bool = False  # repeated_empty_name (streaming): "name": "" again
    repeat_call_head: bool = False  # ambiguous_call_deltas (streaming): id and name again
    split_name: bool = False  # split_call_name (streaming): the name over two deltas
    repeat_finish: bool = False  # finish_reason_repeated (streaming): finish chunk sent twice
    usage_every_chunk: bool = False  # usage_with_choices (streaming): usage on every chunk
    null_name: bool = False  # null_name_continuation (streaming): "name": null continuing
    choices: int = 1  # n: identical choices sent


def wire_arguments(reply: Reply, call: WireCall) -> str | Any:
    """``call.arguments`` as sent: the string, or (``object_arguments``) the object it
    holds; a string that does not parse is sent as is."""
    if not reply.object_arguments:
        return call.arguments
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments


def _wire_call(call: WireCall, arguments: str | Any) -> dict[str, Any]:
    """A ``tool_calls`` entry: ``id`` (when the call has one), ``type``, ``function``."""
    head = {} if call.id is None else {"id": call.id}
    fn = {"name": call.name, "arguments": arguments}
    return {**head, "type": "function", "function": fn, **call.extra}


def _message(reply: Reply) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        msg["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        msg["tool_calls"] = [_wire_call(c, wire_arguments(reply, c)) for c in reply.tool_calls]
    return msg


def completion_body(
    reply: Reply, *, req_id: str, model: str, created: int, usage: dict[str, int], n: int = 1
) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object (``n`` identical choices)."""
    return {
        "id": req_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": i,
                "message": _message(reply),
                "finish_reason": reply.finish_reason,
                "logprobs": None,
            }
            for i in range(n)
        ],
        "usage": usage,
    }


def split_pieces(text: str, n: int = 3) -> list[str]:
    """``text`` cut into ``n`` roughly equal non-empty pieces (fewer if it is short)."""
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(obj: dict[str, Any] | str) -> str:
    """One server-sent event: ``data: <json>`` and a blank line."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n"


def _deltas(reply: Reply) -> Iterator[dict[str, Any]]:
    yield {"role": "assistant", "content": ""}
    for piece in split_pieces(reply.reasoning or ""):
        yield {"reasoning_content": piece}
    for piece in split_pieces(reply.content or "", 4):
        yield {"content": piece}
    for n, call in enumerate(reply.tool_calls):
        head = _index(reply, n)
        args = wire_arguments(reply, call)
        whole = not isinstance(args, str)  # an object goes whole in the first delta
        first = _wire_call(call, args if whole else "")
        if reply.split_name and len(call.name) > 1:
            cut = len(call.name) // 2
            yield {
                "tool_calls": [
                    {**head, **first, "function": {"name": call.name[:cut], "arguments": ""}}
                ]
            }
            first = {"function": {"name": call.name[cut:], "arguments": ""}}
        yield {"tool_calls": [{**head, **first}]}
        if whole:
            continue
        pieces = split_pieces(call.arguments, 3)
        if reply.drop_last_arg_piece and len(pieces) > 1:
            pieces = pieces[:-1]
        if reply.drop_empty_args and call.arguments == "{}":
            pieces = []
        name: dict[str, Any] = {"name": ""} if reply.repeat_empty_name else {}
        name = {"name": None} if reply.null_name else name
        again = _wire_call(call, "") if reply.repeat_call_head else {}
        for piece in pieces:
            fn = {**name, **again.get("function", {}), "arguments": piece}
            yield {"tool_calls": [{**head, **again, "function": fn}]}


def _index(reply: Reply, n: int) -> dict[str, int]:
    """The ``index`` field of call ``n``'s deltas: ``{}`` (omit_index), ``index_base`` for
    every call (shared_index), else ``index_base + n``."""
    if reply.omit_index:
        return {}
    return {"index": reply.index_base + (0 if reply.shared_index else n)}


def stream_events(
    reply: Reply,
    *,
    req_id: str,
    model: str,
    created: int,
    usage: dict[str, int] | None,
    n: int = 1,
) -> Iterator[str]:
    """The SSE events of a streamed reply (``usage`` given = include_usage was asked;
    ``n`` identical choices, each delta sent once per choice index)."""
    base = {"id": req_id, "object": "chat.completion.chunk", "created": created, "model": model}

    extra = {"usage": usage} if reply.usage_every_chunk and usage is not None else {}

    def chunk(delta: dict[str, Any], finish: str | None = None, i: int = 0) -> str:
        choice = {"index": i, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse({**base, "choices": [choice], **extra})

    for delta in _deltas(reply):
        for i in range(n):
            yield chunk(delta, i=i)
    for _ in range(2 if reply.repeat_finish else 1):
        for i in range(n):
            yield chunk({}, reply.finish_reason, i)
    if usage is not None:
        yield sse({**base, "choices": [], "usage": usage})
    yield sse("[DONE]")
