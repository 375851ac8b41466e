"""A chat template's token left inside a string argument is
``markup_in_arguments``, even where the scenario's matcher (a loose regex on a free-text
query) accepts the value; ordinary punctuation in a value is not."""

from __future__ import annotations

import json

import pytest

from harness.kinds import FailureKind
from harness.transcript import ResponseRecord, ToolCallRecord
from tests.contract_driver import run, scenario, score_one, tool

KIND = FailureKind.MARKUP_IN_ARGUMENTS.value
SC = scenario(
    "kb_search", "Find the article about resetting a router password.",
    [tool("kb_search", query="string")],
    expect={"calls": [{"tool": "kb_search", "arguments": {"query": "router password reset"},
                       "match": {"query": {"regex": "(?is).*router.*"}}}],
            "final_answer": {"contains": ["reset"], "example": "Hold reset for 10 s."}},
)  # fmt: skip


def _call(query: object) -> ResponseRecord:
    args = json.dumps({"query": query})
    return ResponseRecord(
        finish_reason="tool_calls",
        tool_calls=[ToolCallRecord(index=0, id="c1", type="function", name="kb_search",
                                   arguments=args)],
    )  # fmt: skip


@pytest.mark.parametrize(
    "value",
    ["router password reset<|im_end|>", "router</tool_call>", "router <|eot_id|> reset",
     "router<｜tool▁call▁end｜>"],
)  # fmt: skip
def test_template_tokens_in_a_value_the_matcher_accepts(value: str) -> None:
    score = score_one(SC, _call(value))
    assert KIND in score.failures
    assert FailureKind.VALUE_MISMATCH.value not in score.failures  # the regex accepts it


@pytest.mark.parametrize(
    "value", ["router | modem <password> reset", "router [v2] reset", "router {admin} reset"]
)
def test_punctuation_in_a_value_is_not_markup(value: str) -> None:
    assert KIND not in score_one(SC, _call(value)).failures


def test_nested_string_values_are_read() -> None:
    nested = ResponseRecord(
        finish_reason="tool_calls",
        tool_calls=[ToolCallRecord(index=0, id="c1", name="kb_search",
                                   arguments=json.dumps({"query": ["router", "a<|im_end|>"]}))],
    )  # fmt: skip
    assert KIND in score_one(SC, nested).failures


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_leaving_im_end_in_arguments(
    sim_url, write_scenarios, tmp_path, stream
) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "markup-in-arguments", SC, stream=stream)
    (call,) = rec.turns[0].response.tool_calls  # type: ignore[union-attr]
    assert json.loads(call.arguments)["query"].endswith("<|im_end|>")
    assert score.failures == [KIND], score.failures
    healthy_rec, healthy = run(sim_url, write_scenarios, tmp_path, "healthy", SC, stream=stream)
    assert healthy.passed, healthy.failures
