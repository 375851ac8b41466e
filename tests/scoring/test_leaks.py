"""The leak detector (:mod:`harness.scoring.leaks`) on leak forms and look-alikes, and the
scoring of a leak in any turn (pure: hand-made records, no server)."""

from __future__ import annotations

import pytest

from harness.scoring.leaks import find_leaks, markup_tokens, tool_params
from harness.scoring.score import score_run
from harness.transcript import ResponseRecord, RunRecord, TargetInfo, ToolCallRecord, TurnRecord

LOOKUP = {
    "name": "lookup_order",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
}
CLOCK = {"name": "get_time", "parameters": {"type": "object", "properties": {}}}
TOOLS = tool_params([{"type": "function", "function": LOOKUP}, CLOCK])
A17 = {"order_id": "A-17"}

#: (content, dialect): each must give lookup_order({"order_id": "A-17"}) first
LEAKS = [
    ('{"name": "lookup_order", "arguments": {"order_id": "A-17"}}', "json"),
    ('[{"name": "lookup_order", "parameters": {"order_id": "A-17"}}]', "json"),
    (
        '{"tool_calls": [{"type": "function", "function": {"name": "lookup_order", '
        '"arguments": "{\\"order_id\\": \\"A-17\\"}"}}]}',
        "openai",
    ),
    ('[lookup_order(order_id="A-17")]', "pythonic"),
    ("lookup_order(order_id='A-17')", "pythonic"),
    ('Sure. [lookup_order(order_id="A-17"), get_time()]', "pythonic"),
    ('<|tool_call_start|>lookup_order{"order_id": "A-17"}<|tool_call_end|>', "name_json"),
    ('<|never_seen_token|>lookup_order{"order_id": "A-17"}<|another_one|>', "name_json"),
    ('```json\n{"name": "lookup_order", "arguments": {"order_id": "A-17"}}\n```', "json"),
    ('Let me check. {"name": "lookup_order", "arguments": {"order_id": "A-17"}}', "json"),
    (
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "A-17"}}\n</tool_call>',
        "json",
    ),
    ('[TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_id": "A-17"}}]', "json"),
    ('<function=lookup_order>{"order_id": "A-17"}</function>', "name_json"),
    (
        "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nA-17\n</parameter>\n"
        "</function>\n</tool_call>",
        "xml",
    ),
    (
        "<|channel|>commentary to=functions.lookup_order <|constrain|>json<|message|>"
        '{"order_id":"A-17"}<|call|>',
        "name_json",
    ),
    (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup_order:0"
        '<|tool_call_argument_begin|>{"order_id": "A-17"}<|tool_call_end|>',
        "name_json",
    ),
    (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup_order\n"
        '```json\n{"order_id": "A-17"}\n```<｜tool▁call▁end｜>',
        "name_json",
    ),
    ('{"name": "lookup_order", "arguments": "{\\"order_id\\": \\"A-17\\"}"}', "json"),
]
#: a drifted call is still a leak when the shape says so (the keys are not the tool's)
DRIFTED = [
    '<|tool_call_start|>lookup_order{"order": "A-17"}<|tool_call_end|>',
    '{"name": "lookup_order", "arguments": {"order": "A-17"}}',
    "[lookup_order(order='A-17')]",
]

#: normal answers that mention the tool, or JSON that is not a call shape
LOOK_ALIKES = [
    "I looked up order A-17 with lookup_order, and it shipped yesterday.",
    '{"order_id": "A-17", "status": "shipped", "tool": "lookup_order"}',
    'Here is the JSON you asked for: {"name": "Alice", "arguments": {"order_id": "A-17"}}',
    '{"name": "lookup_order", "description": "Look up an order", "parameters": '
    '{"type": "object", "properties": {"order_id": {"type": "string"}}}}',
    'You can call lookup_order(order_id="A-17") yourself from the console.',
    'The result of lookup_order: {"status": "shipped"}',
    'I used lookup_order {"status": "shipped", "eta": "2 days"}',
    '[{"order_id": "A-17"}, {"order_id": "B-2"}]',
    "Call lookup_order with order_id set to A-17.",
    '`lookup_order` returned {"order_id": "A-17", "status": "shipped"}',
    "The function lookup_order(order_id) takes one argument.",
    '{"name": "lookup_order"}',
    '{"name": "refund_order", "arguments": {"order_id": "A-17"}}',
    "Order A-17 shipped.\n\n```python\nprint(lookup_order)\n```",
    "",
]


@pytest.mark.parametrize(("content", "dialect"), LEAKS)
def test_leak_forms_are_found_with_tool_and_arguments(content: str, dialect: str) -> None:
    leaks = find_leaks(content, TOOLS)
    assert leaks, content
    assert (leaks[0].tool, leaks[0].arguments, leaks[0].dialect) == ("lookup_order", A17, dialect)


@pytest.mark.parametrize("content", DRIFTED)
def test_drifted_arguments_still_leak(content: str) -> None:
    (leak,) = find_leaks(content, TOOLS)
    assert (leak.tool, leak.arguments) == ("lookup_order", {"order": "A-17"})


@pytest.mark.parametrize("content", LOOK_ALIKES)
def test_look_alikes_are_not_leaks(content: str) -> None:
    assert find_leaks(content, TOOLS) == []


def test_counts_and_limits() -> None:
    assert len(LEAKS) >= 10 and len(LOOK_ALIKES) >= 10
    two = '[{"name": "lookup_order", "arguments": {"order_id": "A-17"}}, ' + (
        '{"name": "get_time", "arguments": {}}]'
    )
    assert [x.tool for x in find_leaks(two, TOOLS)] == ["lookup_order", "get_time"]
    assert find_leaks(LEAKS[0][0], {}) == []  # no declared tools: nothing to call
    assert find_leaks("[" * 50_000 + '{"name": "lookup_order"', TOOLS) == []  # no crash
    assert find_leaks("__import__('os').system('x')", TOOLS) == []  # never evaluated


def test_markup_tokens_known_and_unknown() -> None:
    assert markup_tokens("a <|im_end|> b <|foo|> c <|im_end|>") == ["<|im_end|>", "<|foo|>"]
    assert markup_tokens("x [TOOL_CALLS] y") == ["[TOOL_CALLS]"]
    assert markup_tokens("a < b and c | d > e, [NOTE] f") == []


# ------------------------------------------------------------------ scoring a leak


SCENARIO = {
    "id": "order",
    "description": "one order lookup, then an answer",
    "messages": [{"role": "user", "content": "Where is order A-17?"}],
    "tools": [{**LOOKUP, "simulator": {"result": {"status": "shipped"}}}],
    "expect": {
        "calls": [{"tool": "lookup_order", "arguments": A17}],
        "final_answer": {"required": True},
    },
}


def _record(contents: list[str | None], *, stream: bool = False) -> RunRecord:
    turns = []
    for i, content in enumerate(contents):
        calls = []
        if content is None:
            calls = [ToolCallRecord(index=0, id=f"c{i}", name="lookup_order",
                                    arguments='{"order_id": "A-17"}')]  # fmt: skip
        finish = "tool_calls" if calls else "stop"
        resp = ResponseRecord(content=content, tool_calls=calls, finish_reason=finish)
        resp.stream = stream
        turns.append(TurnRecord(index=i, response=resp))
    return RunRecord(
        run_key=f"x/order/0/{'stream' if stream else 'nostream'}", scenario_id="order",
        scenario_hash="h", scenario=SCENARIO, repeat=0, stream=stream,
        target=TargetInfo(label="x", base_url="http://127.0.0.1:1"), turns=turns,
        stop_reason="final_answer", final_content=contents[-1],
    )  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("content", [c for c, _ in LEAKS[:10]])
def test_a_leak_is_never_a_final_answer_in_any_turn(content: str, stream: bool) -> None:
    first = score_run(_record([content], stream=stream))
    assert {"tool_call_in_content", "missing_final_answer"} <= set(first.failures)
    later = score_run(_record([None, content], stream=stream))  # after every expected call
    assert later.sequence.missing == [] and not later.final_answer and not later.passed
    assert "tool_call_in_content" in later.failures and later.termination == "malformed"
    assert later.leaked_calls[0].turn == 1 and later.leaked_calls[0].tool == "lookup_order"


@pytest.mark.parametrize("content", LOOK_ALIKES[:-1])
def test_a_look_alike_is_a_final_answer(content: str) -> None:
    score = score_run(_record([None, content]))
    assert score.passed and score.final_answer and score.leaked_calls == [], score.failures


# ------------------------------------------------------------------ parity of content


def test_parity_compares_written_answer_and_leaks() -> None:
    from harness.scoring.parity import pair_diffs

    answer, leak = "Order A-17 has shipped.", LEAKS[3][0]
    same = pair_diffs(_record([None, answer], stream=True), _record([None, answer]))
    assert same == []
    quiet = pair_diffs(_record([None, answer], stream=True), _record([None, " "]))
    assert [(d.field, d.stream, d.nostream) for d in quiet] == [
        ("content", "written answer", "no written answer")
    ]
    leaky = pair_diffs(_record([None, leak], stream=True), _record([None, answer]))
    fields = {d.field: (d.stream, d.nostream) for d in leaky}
    assert fields["leak"] == ("lookup_order (pythonic)", "none")
    assert fields["content"] == ("no written answer", "written answer")


def test_first_divergence_tells_a_leak_from_an_answer() -> None:
    from harness.scoring.divergence import first_divergence

    answer, leak = "Order A-17 has shipped.", LEAKS[0][0]
    d = first_divergence(_record([None, answer]), _record([None, leak]))
    assert d is not None and d.turn == 1
    assert d.baseline == ["final answer: Order A-17 has shipped."]
    assert d.candidate == ['written into content: lookup_order {"order_id": "A-17"}']
    assert first_divergence(_record([None, leak]), _record([None, LEAKS[3][0]])) is None
