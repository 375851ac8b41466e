"""Call markup from each supported parser format's own delimiters
(:data:`harness.scoring.markup.CALL_MARKUP`): any of them inside an argument value is
``markup_in_arguments``, in content ``markup_in_content``; against the reference server,
each format's left-over (a parser that missed the call's end) is found."""

from __future__ import annotations

import json
import re

import pytest

from harness.kinds import FailureKind as K
from harness.scoring.leaks import markup_tokens
from harness.scoring.markup import CALL_MARKUP
from harness.transcript import ResponseRecord, ToolCallRecord
from tests.contract_driver import run, scenario, score_one, tool

NOTE = [tool("save_note", text="string")]
SC = scenario(
    "note", "Save a note that says: buy milk.", NOTE,
    expect={"calls": [{"tool": "save_note", "arguments": {"text": "buy milk"},
                       "match": {"text": {"type": "string"}}}],
            "final_answer": {"contains": ["saved"], "example": "Your note is saved."}},
)  # fmt: skip
ROWS = {m.name: m for m in CALL_MARKUP}
DELIMITERS = [(m.name, d) for m in CALL_MARKUP for d in m.delimiters]


def test_the_table_covers_the_supported_formats_each_cited() -> None:
    assert set(ROWS) == {"hermes", "qwen3_xml", "glm45", "minimax_m2", "kimi_k2",
                         "deepseek_v3", "gpt_oss", "mistral", "llama3_json"}  # fmt: skip
    for m in CALL_MARKUP:
        assert re.match(r"vllm/tool_parsers/\w+\.py", m.vllm), m
        assert m.sglang.startswith("python/sglang/srt/function_call/"), m
        assert m.delimiters and markup_tokens(m.left_over), m


@pytest.mark.parametrize(("fmt", "delimiter"), DELIMITERS)
def test_every_delimiter_in_a_value_or_in_content_is_flagged(fmt: str, delimiter: str) -> None:
    sc = dict(SC, expect={"final_answer": {"required": False}})
    call = ResponseRecord(finish_reason="tool_calls", tool_calls=[ToolCallRecord(
        index=0, id="c0", type="function", name="save_note",
        arguments=json.dumps({"text": f"buy milk{delimiter}"}))])  # fmt: skip
    score = score_one(sc, call)
    assert K.MARKUP_IN_ARGUMENTS in score.failures, (fmt, score.failures)
    text = ResponseRecord(content=f"Saved. {delimiter}", finish_reason="stop")
    assert K.MARKUP_IN_CONTENT in score_one(sc, text).failures, fmt


@pytest.mark.parametrize(
    "text",
    ["Use the parameter= flag and a <p>paragraph</p>.", "f(a) < g(b) and [NOTE] here",
     "the invoke name is x", "<function> is a tag I made up"],
)  # fmt: skip
def test_prose_that_merely_resembles_markup_is_not_flagged(text: str) -> None:
    assert markup_tokens(text) == []


@pytest.mark.parametrize("fmt", list(ROWS))
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_leaving_each_formats_markup_in_values(
    sim_url, write_scenarios, tmp_path, fmt, stream
) -> None:
    profile = f"markup-in-arguments-{fmt.replace('_', '-')}"
    _, score = run(sim_url, write_scenarios, tmp_path, profile, SC, stream=stream)
    assert K.MARKUP_IN_ARGUMENTS in score.failures, score.failures
    (found,) = [p for p in score.protocol_violations if p.kind == K.MARKUP_IN_ARGUMENTS]
    assert any(repr(d) in found.message for d in ROWS[fmt].delimiters), found.message
