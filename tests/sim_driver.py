"""Test helpers for the reference server: scenarios and a plain-openai-SDK agent loop.

Deliberately independent of ``harness.runner``: the sim is checked with the
openai SDK alone, so a runner bug cannot hide a sim bug (or the reverse).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import openai

SYSTEM = "You are a careful assistant."
ENTROPY_USER = "Compute the entropy of [0.5, 0.25, 0.25] in bits."
ENTROPY_ARGS = {"values": [0.5, 0.25, 0.25], "base": 2}

ENTROPY_TOOL = {
    "name": "entropy",
    "description": "Shannon entropy of a probability vector.",
    "parameters": {
        "type": "object",
        "properties": {
            "values": {"type": "array", "items": {"type": "number"}},
            "base": {"type": "number"},
        },
        "required": ["values"],
    },
}
ADD_TOOL = {
    "name": "add",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
}


def entropy_scenario(**overrides: Any) -> dict[str, Any]:
    """One entropy call, then a final answer containing "1.5"."""
    sc: dict[str, Any] = {
        "id": "entropy_array",
        "description": "entropy of a probability vector",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": ENTROPY_USER},
        ],
        "tools": [ENTROPY_TOOL, ADD_TOOL],
        "expect": {
            "calls": [{"tool": "entropy", "arguments": ENTROPY_ARGS}],
            "final_answer": {"contains": ["1.5"]},
        },
    }
    sc.update(overrides)
    return sc


def triple_scenario() -> dict[str, Any]:
    """The motivating shape: 3 parallel calls in one turn, then a summary."""
    calls = [
        {"tool": "entropy", "arguments": ENTROPY_ARGS},
        {"tool": "add", "arguments": {"a": 1, "b": 2}, "parallel": True},
        {"tool": "add", "arguments": {"a": 3, "b": 4}, "parallel": True},
    ]
    return entropy_scenario(
        id="triple",
        messages=[{"role": "user", "content": "Entropy of [0.5, 0.25, 0.25], 1+2 and 3+4?"}],
        expect={"calls": calls, "final_answer": {"example": "Entropy 1.5 bits; sums 3 and 7."}},
    )


def chain_scenario() -> dict[str, Any]:
    """Three sequential entropy calls (one per turn), for turn-by-turn faults."""
    calls = [{"tool": "entropy", "arguments": ENTROPY_ARGS} for _ in range(3)]
    return entropy_scenario(
        id="chain",
        messages=[{"role": "user", "content": "Check the entropy of [0.5, 0.25, 0.25] 3 times."}],
        expect={"calls": calls, "final_answer": {"contains": ["1.5"]}},
    )


def opening(sc: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(m) for m in sc["messages"]]


def openai_tools(sc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": t} for t in sc["tools"]]


@dataclass
class Turn:
    """One assistant reply as the SDK saw it (arguments raw strings)."""

    finish_reason: str | None
    content: str | None
    reasoning: str | None
    calls: list[tuple[str, str, str]]  # (id, name, arguments)
    first_deltas: list[dict[str, Any]] = field(default_factory=list)  # streaming only
    arg_pieces: dict[int, int] = field(default_factory=dict)  # streaming: pieces per index
    usage: Any = None

    def args(self, i: int = 0) -> Any:
        return json.loads(self.calls[i][2])


@functools.lru_cache(maxsize=32)
def client_for(url: str, max_retries: int = 0, timeout: float = 30.0) -> openai.OpenAI:
    """An openai SDK client for a sim base URL (cached: creating one costs ~0.1 s)."""
    return openai.OpenAI(
        base_url=url + "/v1", api_key="sk-test", max_retries=max_retries, timeout=timeout
    )


def ask(
    client: openai.OpenAI, messages: list[dict[str, Any]], *, stream: bool = False, **kw: Any
) -> Turn:
    """One chat request; streamed replies are reassembled from their deltas."""
    if not stream:
        r = client.chat.completions.create(model="sim", messages=messages, **kw)  # type: ignore[arg-type]
        m = r.choices[0].message
        calls = [(t.id, t.function.name, t.function.arguments) for t in m.tool_calls or []]
        reasoning = (m.model_extra or {}).get("reasoning_content")
        return Turn(r.choices[0].finish_reason, m.content, reasoning, calls, usage=r.usage)
    return _ask_stream(client, messages, **kw)


def _ask_stream(client: openai.OpenAI, messages: list[dict[str, Any]], **kw: Any) -> Turn:
    turn = Turn(None, None, None, [])
    content, reasoning, calls = "", "", {}
    chunks = client.chat.completions.create(
        model="sim", messages=messages, stream=True, stream_options={"include_usage": True}, **kw
    )  # type: ignore[call-overload]
    for chunk in chunks:
        if chunk.usage is not None:
            turn.usage = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                if tc.index not in calls:
                    turn.first_deltas.append(tc.model_dump())
                    calls[tc.index] = [tc.id, tc.function.name, ""]
                    turn.arg_pieces[tc.index] = 0
                if tc.function and tc.function.arguments:
                    calls[tc.index][2] += tc.function.arguments
                    turn.arg_pieces[tc.index] += 1
            if choice.finish_reason:
                turn.finish_reason = choice.finish_reason
    turn.content, turn.reasoning = content or None, reasoning or None
    turn.calls = [tuple(calls[i]) for i in sorted(calls)]  # type: ignore[misc]
    return turn


def play(
    url: str, sc: dict[str, Any], *, stream: bool = False, max_turns: int = 12, **kw: Any
) -> list[Turn]:
    """Run the agent loop: answer every tool call with "ok" until a reply has no calls."""
    client = client_for(url)
    messages, turns = opening(sc), []
    for _ in range(max_turns):
        turn = ask(client, messages, stream=stream, tools=openai_tools(sc), **kw)
        turns.append(turn)
        if not turn.calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": turn.content,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in turn.calls
                ],
            }
        )
        messages += [{"role": "tool", "tool_call_id": i, "content": "ok"} for i, _, _ in turn.calls]
    return turns
