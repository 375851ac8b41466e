"""Parsing chat-completion bodies and SSE streams as received (harness.client.completions)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from harness.client.completions import (
    ConversationBody,
    RequestFailed,
    StreamAssembler,
    parse_completion,
    read_sse,
    request_body,
)
from harness.runfolder import RunFolder


def body(message: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps(
        {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], **extra}
    ).encode()


def test_non_streaming_keeps_raw_arguments_reasoning_and_legacy_function_call() -> None:
    rec = parse_completion(
        body(
            {
                "role": "assistant",
                "content": None,
                "reasoning": "think",
                "tool_calls": [
                    {"id": "a", "type": "function",
                     "function": {"name": "f", "arguments": '{"values": "[0.5, 0.25]"}'}},
                    {"function": {"name": "g", "arguments": {"x": 1}}},
                ],
                "function_call": {"name": "f", "arguments": "{}"},
            },
            model="m",
            usage={"total_tokens": 3},
        )
    )  # fmt: skip
    assert rec.reasoning_content == "think"
    assert [(c.index, c.id, c.name, c.arguments) for c in rec.tool_calls] == [
        (0, "a", "f", '{"values": "[0.5, 0.25]"}'),
        (1, None, "g", {"x": 1}),
    ]
    assert rec.function_call == {"name": "f", "arguments": "{}"}
    assert (rec.model, rec.usage, rec.finish_reason) == ("m", {"total_tokens": 3}, "stop")
    assert rec.raw["choices"][0]["message"]["reasoning"] == "think"


def test_content_parts_are_joined() -> None:
    rec = parse_completion(body({"content": [{"type": "text", "text": "a"}, {"text": "b"}]}))
    assert rec.content == "ab"


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"<html>502</html>", "invalid_body"),
        (b'{"object": "chat.completion"}', "invalid_body"),
        (b'{"choices": []}', "invalid_body"),
        (b'{"choices": [{"index": 0}]}', "invalid_body"),
        (b"[1, 2]", "invalid_body"),
        (b'{"error": {"message": "out of memory"}}', "other"),
    ],
)
def test_unusable_bodies_are_infra_errors(raw: bytes, kind: str) -> None:
    with pytest.raises(RequestFailed) as exc:
        parse_completion(raw)
    assert exc.value.kind == kind and exc.value.transient  # retried (docs/misbehaving-servers.md)


async def _lines(text: str) -> AsyncIterator[str]:
    for line in text.split("\n"):
        yield line


def assemble(events: list[Any]) -> StreamAssembler:
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    state = StreamAssembler()
    asyncio.run(read_sse(_lines(text), state))
    return state


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def test_stream_tool_call_deltas_are_assembled_by_index() -> None:
    state = assemble([
        delta({"role": "assistant", "reasoning_content": "hm"}),
        delta({"tool_calls": [{"index": 0, "id": "c0", "type": "function",
                               "function": {"name": "entropy", "arguments": '{"values": '}}]}),
        delta({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "clock",
                                                                    "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": '"[0.5, 0.25, 0.25]"}'}}]}),
        delta({"tool_calls": [{"index": 1, "id": "", "function": {"arguments": "{}"}}]}),
        delta({}, "tool_calls"),
        {"choices": [], "usage": {"total_tokens": 9}},
    ])  # fmt: skip
    rec = state.record()
    assert [(c.index, c.id, c.name, c.arguments) for c in rec.tool_calls] == [
        (0, "c0", "entropy", '{"values": "[0.5, 0.25, 0.25]"}'),
        (1, "c1", "clock", "{}"),
    ]
    assert (rec.reasoning_content, rec.finish_reason) == ("hm", "tool_calls")
    assert rec.usage == {"total_tokens": 9} and rec.stream and len(rec.raw) == 7


def test_stream_without_index_starts_a_new_call_at_each_new_id() -> None:
    state = assemble([
        delta({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x"'}}]}),
        delta({"tool_calls": [{"function": {"arguments": ": 1}"}}]}),
        delta({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
    ])  # fmt: skip
    calls = state.record().tool_calls
    assert [(c.id, c.arguments) for c in calls] == [("a", '{"x": 1}'), ("b", "{}")]


def test_stream_content_and_legacy_function_call() -> None:
    state = assemble([
        delta({"content": "Hel"}),
        delta({"content": "lo", "function_call": {"name": "f", "arguments": "{"}}),
        delta({"function_call": {"arguments": "}"}}, "stop"),
    ])  # fmt: skip
    rec = state.record()
    assert rec.content == "Hello" and rec.function_call == {"name": "f", "arguments": "{}"}


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("data: {oops\n\n", "invalid_body"),
        ('data: {"id": 1}\n\n', "invalid_body"),
        ('data: {"error": {"message": "cuda oom"}}\n\n', "other"),
        ("data: [DONE]\n\n", "invalid_body"),
        ('{"choices": [{"message": {"content": "not SSE"}}]}', "invalid_body"),
    ],
)
def test_broken_streams_are_infra_errors(text: str, kind: str) -> None:
    state = StreamAssembler()
    with pytest.raises(RequestFailed) as exc:
        asyncio.run(read_sse(_lines(text), state))
        state.record()
    assert exc.value.kind == kind


def test_finished_keys_cuts_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "transcripts.jsonl"
    assert RunFolder(tmp_path).finished_keys() == set()
    good = {
        "run_key": "a/s/0/nostream", "scenario_id": "s", "scenario_hash": "h", "scenario": {},
        "repeat": 0, "stream": False, "stop_reason": "final_answer",
        "target": {"label": "a", "base_url": "http://x"},
    }  # fmt: skip
    path.write_text(json.dumps(good) + "\n" + '{"run_key": "a/s/1/nos')
    assert RunFolder(tmp_path).finished_keys() == {"a/s/0/nostream"}
    assert path.read_text() == json.dumps(good) + "\n"


def _sdk_bytes(params: dict[str, Any], messages: list[dict[str, Any]]) -> bytes:
    """The body as the SDK encodes ``body=`` (``openapi_dumps``: compact, UTF-8, no NaN)."""
    body = request_body({**params, "messages": messages})
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def test_conversation_body_is_the_sdk_encoding_of_each_request() -> None:
    params = {
        "model": "m", "temperature": 0.5, "stream": False,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "extra_body": {"top_k": 3, "temperature": 0.1},  # overrides in place, adds at the end
    }  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": 'é "q" \\ \n \u2028 😀'}]
    body = ConversationBody(params, messages)
    for i in range(3):
        assert body.content() == _sdk_bytes(params, messages)
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}"}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": str(i)})
    assert body.content() == _sdk_bytes(params, messages)
    assert json.loads(body.content() or b"")["messages"] == messages


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"model": "m", "extra_body": {"messages": []}}, {}),  # extra_body sets messages
        ({"model": "m", "temperature": float("nan")}, {}),  # the SDK refuses NaN itself
        ({"model": "m"}, {"content": b"bytes"}),  # not JSON: the SDK's encoder decides
    ],
)
def test_conversation_body_leaves_what_it_cannot_encode_to_the_sdk(
    params: dict[str, Any], message: dict[str, Any]
) -> None:
    assert ConversationBody(params, [{"role": "user", **message}]).content() is None
