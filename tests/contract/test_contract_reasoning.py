"""Calls written into the reasoning channel (``reasoning_content`` /
``reasoning``) with ``tool_calls: []`` are ``tool_call_in_reasoning``, in every dialect the
content leak check reads; prose in the reasoning about a call that is sent right is not."""

from __future__ import annotations

import json

import pytest

from harness.kinds import FailureKind
from harness.transcript import ResponseRecord, ToolCallRecord
from tests.contract_driver import run, scenario, score_one, tool

KIND = FailureKind.TOOL_CALL_IN_REASONING.value
BOOK = tool("book_table", restaurant="string", guests="integer")
SC = scenario(
    "table_booking", "Book a table for 4 at Chez Lune.", [BOOK],
    expect={"calls": [{"tool": "book_table", "arguments": {"restaurant": "Chez Lune",
                                                            "guests": 4}}],
            "final_answer": {"contains": ["booked"], "example": "Your table is booked."}},
)  # fmt: skip
ARGS = {"restaurant": "Chez Lune", "guests": 4}

SWALLOWED = [
    '<tool_call>\n{"name": "book_table", "arguments": ' + json.dumps(ARGS) + "}\n</tool_call>",
    "The user wants a table.\n" + json.dumps({"name": "book_table", "parameters": ARGS}),
    "[book_table(restaurant='Chez Lune', guests=4)]",
    "<function=book_table><parameter=restaurant>Chez Lune</parameter>"
    "<parameter=guests>4</parameter></function>",
]


@pytest.mark.parametrize("reasoning", SWALLOWED)
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_swallowed_into_reasoning_is_flagged(reasoning: str, stream: bool) -> None:
    resp = ResponseRecord(content="", reasoning_content=reasoning, finish_reason="stop",
                          stream=stream)  # fmt: skip
    score = score_one(SC, resp)
    assert KIND in score.failures
    assert score.termination == "malformed"
    (v,) = [p for p in score.protocol_violations if p.kind == KIND]
    assert "book_table" in v.message


def test_a_swallowed_call_beside_written_text_is_not_an_answer() -> None:
    resp = ResponseRecord(content="Your table is booked.", reasoning_content=SWALLOWED[0],
                          finish_reason="stop")  # fmt: skip
    score = score_one(SC, resp)
    assert KIND in score.failures and not score.final_answer


def test_prose_about_call_syntax_next_to_a_real_call_is_not_flagged() -> None:
    """The model thinks about the call (syntax and all) and then sends it in tool_calls."""
    thinking = (
        'I should emit <tool_call>{"name": "book_table", "arguments": '
        '{"restaurant": "Chez Lune", "guests": 4}}</tool_call> as a real call.'
    )
    resp = ResponseRecord(
        reasoning_content=thinking, finish_reason="tool_calls",
        tool_calls=[ToolCallRecord(index=0, id="c1", type="function", name="book_table",
                                   arguments=json.dumps(ARGS))],
    )  # fmt: skip
    assert KIND not in score_one(SC, resp).failures


def test_reasoning_that_names_a_tool_in_prose_is_an_answer() -> None:
    resp = ResponseRecord(
        content="Your table is booked.",
        finish_reason="stop",
        reasoning_content="I used book_table earlier; now I answer.",
    )
    score = score_one(SC, resp)
    assert KIND not in score.failures and score.final_answer


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_swallowing_calls_into_reasoning(
    sim_url, write_scenarios, tmp_path, stream
) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "tool-call-in-reasoning", SC,
                     stream=stream)  # fmt: skip
    first = rec.turns[0].response
    assert (
        first is not None
        and first.tool_calls == []
        and "<tool_call>" in (first.reasoning_content or "")
    )
    assert KIND in score.failures
    assert FailureKind.TOOL_CALL_IN_CONTENT.value not in score.failures


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_look_alike_passes(sim_url, write_scenarios, tmp_path, stream) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "call-syntax-in-reasoning", SC,
                     stream=stream)  # fmt: skip
    first = rec.turns[0].response
    assert (
        first is not None and first.tool_calls and "<tool_call>" in (first.reasoning_content or "")
    )
    assert score.passed, score.failures
