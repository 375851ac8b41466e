"""Streamed tool calls assembled as the OpenAI Python SDK assembles them.

The reference is the SDK's own accumulator, ``openai.lib.streaming.chat
.ChatCompletionStreamState`` (``lib/streaming/_deltas.py`` ``accumulate_delta``: the string
fields of one index concatenate), fed the very chunks the harness assembles. Where a
client keeping each field's first fragment reads another call, the run shows
``ambiguous_call_deltas`` and the model is not blamed (no ``unknown_tool``); ``""``
repeats add nothing and stay harmless.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from harness.client.completions import StreamAssembler
from harness.kinds import FailureKind
from harness.transcript import ResponseRecord
from tests.contract_driver import run, scenario, score_one, tool

KIND = FailureKind.AMBIGUOUS_CALL_DELTAS.value
FORECAST = tool("get_forecast", city="string", days="integer")
SC = scenario(
    "forecast", "Three-day forecast for Lyon, please.", [FORECAST],
    expect={"calls": [{"tool": "get_forecast", "arguments": {"city": "Lyon", "days": 3}}],
            "final_answer": {"contains": ["Lyon"], "example": "Lyon: sunny for 3 days."}},
)  # fmt: skip
ARGS = json.dumps({"city": "Lyon", "days": 3})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def _tc(**fields: Any) -> dict[str, Any]:
    fn = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    return {"tool_calls": [{"index": 0, **fields, **({"function": fn} if fn else {})}]}


def _both(deltas: list[dict[str, Any]]) -> tuple[ResponseRecord, list[tuple[Any, ...]]]:
    """The harness's record and the SDK's ``(id, name, arguments)`` of the same chunks."""
    chunks = [_chunk({"role": "assistant", "content": None}), *map(_chunk, deltas),
              _chunk({}, "tool_calls")]  # fmt: skip
    ours, sdk = StreamAssembler(), ChatCompletionStreamState()
    for c in chunks:
        ours.add(c)
        sdk.handle_chunk(ChatCompletionChunk.model_validate(c))
    message = sdk.current_completion_snapshot.choices[0].message
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    return ours.record(), calls


def _call_failures(rec: ResponseRecord) -> list[str]:
    """The failures of a run made of this one call (its missing answer left out)."""
    return [f for f in score_one(SC, rec).failures if f != "missing_final_answer"]


CASES = {
    "split name": [
        _tc(id="call_7", type="function", name="get_fo", arguments=""),
        _tc(name="recast", arguments=ARGS[:10]), _tc(arguments=ARGS[10:]),
    ],
    "id and name repeated": [
        _tc(id="call_7", type="function", name="get_forecast", arguments=ARGS[:10]),
        _tc(id="call_7", type="function", name="get_forecast", arguments=ARGS[10:]),
    ],
    "id in two pieces": [
        _tc(id="call_", type="function", name="get_forecast", arguments=""),
        _tc(id="7", arguments=ARGS),
    ],
    "empty-string repeats": [
        _tc(id="call_7", type="function", name="get_forecast", arguments=""),
        _tc(id="", name="", arguments=ARGS[:5]), _tc(id="", name="", arguments=ARGS[5:]),
    ],
    "plain": [
        _tc(id="call_7", type="function", name="get_forecast", arguments=""),
        _tc(arguments=ARGS[:7]), _tc(arguments=ARGS[7:]),
    ],
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_calls_are_assembled_as_the_sdk_assembles_them(case: str) -> None:
    rec, sdk = _both(CASES[case])
    assert [(c.id, c.name, c.arguments) for c in rec.tool_calls] == sdk


@pytest.mark.parametrize(
    ("case", "first"),
    [("split name", {"id": "call_7", "name": "get_fo"}),
     ("id and name repeated", {"id": "call_7", "name": "get_forecast"}),
     ("id in two pieces", {"id": "call_", "name": "get_forecast"})],
)  # fmt: skip
def test_two_readings_are_a_stream_fault_not_the_models(case: str, first: dict) -> None:
    rec, _ = _both(CASES[case])
    (call,) = rec.tool_calls
    assert call.first_fragments == first
    failures = _call_failures(rec)
    assert failures == [KIND], failures  # no unknown_tool: the wire, not the model


@pytest.mark.parametrize("case", ["empty-string repeats", "plain"])
def test_one_reading_is_harmless(case: str) -> None:
    rec, _ = _both(CASES[case])
    assert rec.tool_calls[0].first_fragments is None
    assert _call_failures(rec) == []


@pytest.mark.parametrize("profile", ["ambiguous-call-deltas", "split-call-name"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_deltas(sim_url, write_scenarios, tmp_path, profile, stream) -> None:
    """Streamed: the fault, the same calls as the SDK reads from the recorded chunks, and
    the run otherwise sound; not streamed, nothing to assemble: the run passes."""
    rec, score = run(sim_url, write_scenarios, tmp_path, profile, SC, stream=stream)
    if not stream:
        assert score.passed, score.failures
        return
    assert score.failures == [KIND], score.failures
    first = rec.turns[0].response
    assert first is not None
    sdk = ChatCompletionStreamState()
    for c in first.raw:
        sdk.handle_chunk(ChatCompletionChunk.model_validate(c))
    msg = sdk.current_completion_snapshot.choices[0].message
    assert [(c.function.name, c.id) for c in msg.tool_calls or []] == [
        (c.name, c.id) for c in first.tool_calls
    ]
    doubled = profile == "ambiguous-call-deltas"
    assert (first.tool_calls[0].name == "get_forecast" * 4) is doubled  # head + 3 pieces
