"""Streaming ``tool_calls`` delta rules: assembly (:class:`StreamAssembler`) and scoring.

The OpenAI format (openai-python ``types/chat/chat_completion_chunk.py``,
``ChoiceDeltaToolCall.index: int`` required; ``lib/streaming/_deltas.py`` raises on an entry
without ``index``): every delta has an ``index``; ``id``, ``type`` and ``function.name``
come in the first delta of that index; ``arguments`` fragments concatenate.
"""

from __future__ import annotations

import json
from typing import Any

from harness.client.completions import StreamAssembler
from harness.scoring.score import score_run
from harness.transcript import ResponseRecord, RunRecord, TargetInfo, TurnRecord

SCENARIO = {
    "id": "order",
    "description": "one order lookup, then an answer",
    "messages": [{"role": "user", "content": "Where is order A-17?"}],
    "tools": [
        {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            "simulator": {"result": {"status": "shipped"}},
        }
    ],
    "expect": {"calls": [{"tool": "lookup_order", "arguments": {"order_id": "A-17"}}],
               "final_answer": {"required": False}},
}  # fmt: skip
ARGS = '{"order_id": "A-17"}'


def chunk(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def assembled(*deltas: dict[str, Any], finish: str = "tool_calls") -> ResponseRecord:
    state = StreamAssembler()
    for d in deltas:
        state.add(chunk(d))
    state.add(chunk({}, finish))
    return state.record()


def scored(resp: ResponseRecord) -> list[str]:
    rec = RunRecord(
        run_key="x/order/0/stream", scenario_id="order", scenario_hash="deltas",
        scenario=SCENARIO, repeat=0, stream=True,
        target=TargetInfo(label="x", base_url="http://127.0.0.1:1"),
        turns=[TurnRecord(index=0, response=resp)], stop_reason="final_answer",
    )  # fmt: skip
    return score_run(rec).failures


def call(index: int | None, cid: str | None, name: str | None, args: str) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args} if name is None else {"name": name, "arguments": args}
    entry: dict[str, Any] = {"function": fn}
    if index is not None:
        entry["index"] = index
    if cid is not None:
        entry |= {"id": cid, "type": "function"}
    return {"tool_calls": [entry]}


def test_one_chunk_without_index_is_a_protocol_failure() -> None:
    resp = assembled(call(None, "call_x", "lookup_order", ARGS))  # one chunk, no index
    (c,) = resp.tool_calls
    assert (c.index, c.id, c.name, c.arguments) == (None, "call_x", "lookup_order", ARGS)
    assert "missing_call_index" in scored(resp)


def test_healthy_deltas_pass() -> None:
    resp = assembled(call(0, "call_x", "lookup_order", ""), call(0, None, None, ARGS[:9]),
                     call(0, None, None, ARGS[9:]))  # fmt: skip
    assert resp.tool_calls[0].arguments == ARGS and resp.notes == []
    assert scored(resp) == []


def test_second_id_on_an_open_index_is_two_calls_sharing_it() -> None:
    resp = assembled(
        call(0, "call_a", "lookup_order", '{"order_id": '),
        call(0, None, None, '"A-17"}'),
        call(0, "call_b", "lookup_order", '{"order_id": '),
        call(0, None, None, '"B-2"}'),
    )
    got = [(c.index, c.id, c.arguments) for c in resp.tool_calls]
    assert got == [(0, "call_a", ARGS), (0, "call_b", '{"order_id": "B-2"}')]
    failures = scored(resp)
    assert "shared_call_index" in failures and "malformed_json" not in failures


def test_indices_from_one_or_skipping_are_flagged() -> None:
    one = assembled(call(1, "call_a", "lookup_order", ARGS))
    skip = assembled(call(0, "a", "lookup_order", ARGS), call(2, "b", "lookup_order", ARGS))
    assert "index_offset" in scored(one) and "index_offset" in scored(skip)
    assert [c.index for c in skip.tool_calls] == [0, 2]


def test_length_with_tool_calls_is_its_own_finding() -> None:
    resp = assembled(call(0, "call_a", "lookup_order", '{"order_id": "A-'), finish="length")
    failures = scored(resp)
    assert "length_with_tool_calls" in failures and "finish_reason_mismatch" not in failures


def test_repeated_empty_name_is_tolerated_and_noted() -> None:
    resp = assembled(
        call(0, "call_a", "lookup_order", ""),
        {"tool_calls": [{"index": 0, "function": {"name": "", "arguments": ARGS[:9]}}]},
        {"tool_calls": [{"index": 0, "function": {"name": "", "arguments": ARGS[9:]}}]},
    )
    (c,) = resp.tool_calls
    assert (c.name, c.arguments) == ("lookup_order", ARGS)
    assert resp.notes == ["tool_calls index 0: a later delta repeats name '' (tolerated)"]
    assert scored(resp) == []
    dumped = json.loads(resp.model_dump_json())
    assert dumped["notes"] == resp.notes  # kept in the transcript


def test_a_fresh_id_per_chunk_without_a_name_continues_the_call() -> None:
    """One call; but the SDK's accumulator concatenates the ids (``call_acall_b``) where a
    first-fragment client keeps ``call_a``: two readings."""
    resp = assembled(
        call(0, "call_a", "lookup_order", ARGS[:9]),
        call(0, "call_b", None, ARGS[9:]),
    )
    (c,) = resp.tool_calls
    assert (c.id, c.arguments) == ("call_acall_b", ARGS)
    assert c.first_fragments == {"id": "call_a", "name": "lookup_order"}
    assert resp.notes == [
        "tool_calls index 0: a later delta brings another id 'call_b' without a name "
        "(kept 'call_a') (tolerated)"
    ]
    assert scored(resp) == ["ambiguous_call_deltas"]
