"""Tool simulators: deterministic answers, schema errors as tool errors, built-ins."""

from __future__ import annotations

import json
import math

import pytest

from harness.scenario.model import SimulatorSpec, Tool
from harness.scenario.tools import BUILTINS, ToolOutcome, render, simulate

ENTROPY_PARAMS = {
    "type": "object",
    "properties": {
        "values": {"type": "array", "items": {"type": "number"}},
        "base": {"type": "number"},
    },
    "required": ["values"],
    "additionalProperties": False,
}


def tool(sim: dict, params: dict | None = None, name: str = "t") -> Tool:
    return Tool(
        name=name,
        parameters=params or {"type": "object", "properties": {}},
        simulator=SimulatorSpec(**sim),
    )


def test_static_result_is_compact_sorted_json() -> None:
    t = tool({"result": {"b": 1, "a": [1, 2], "c": "é"}})
    out = simulate(t, "{}", 0)
    assert out == ToolOutcome('{"a":[1,2],"b":1,"c":"é"}', error=False)


def test_string_result_is_sent_unchanged() -> None:
    assert simulate(tool({"result": "  plain text\n"}), "{}", 0).content == "  plain text\n"


def test_array_sent_as_string_gets_the_schema_error_a_real_tool_would_give() -> None:
    t = tool({"builtin": "entropy"}, ENTROPY_PARAMS)
    out = simulate(t, json.dumps({"values": "[0.5, 0.25, 0.25]", "base": 2}), 0)
    assert out.error
    assert out.content == (
        "Error: invalid arguments: values: '[0.5, 0.25, 0.25]' is not of type 'array'"
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "not valid JSON (Expecting value at char 0)"),
        ("[1, 2]", "expected a JSON object, got array"),
        ('"{}"', "expected a JSON object, got string"),
        ("null", "expected a JSON object, got null"),
        ('{"base": 2}', "'values' is a required property"),
        ('{"values": [0.5, 0.5], "bas": 2}', "Additional properties are not allowed"),
    ],
)
def test_bad_arguments_get_a_tool_error_and_never_reach_the_simulator(
    raw: str, reason: str
) -> None:
    out = simulate(tool({"builtin": "entropy"}, ENTROPY_PARAMS), raw, 0)
    assert out.error
    assert out.content.startswith("Error: invalid arguments: " + reason)


def test_arguments_are_never_evaluated_as_code(tmp_path) -> None:
    marker = tmp_path / "pwned"
    raw = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    out = simulate(tool({"builtin": "echo"}), raw, 0)
    assert out.error and "not valid JSON" in out.content
    assert not marker.exists()


def test_object_arguments_from_a_server_are_accepted_as_received() -> None:
    out = simulate(tool({"builtin": "entropy"}, ENTROPY_PARAMS), {"values": [0.5, 0.5]}, 0)
    assert not out.error
    assert json.loads(out.content)["entropy"] == pytest.approx(math.log(2))


def test_match_picks_first_matching_rule_else_default() -> None:
    params = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    t = tool(
        {
            "match": [
                {"when": {"order_id": "123_456"}, "result": {"status": "shipped"}},
                {"when": {"order_id": "007"}, "error": "Error: order is locked"},
            ],
            "default_error": "Error: order not found",
        },
        params,
    )
    assert simulate(t, '{"order_id": "123_456"}', 0) == ToolOutcome('{"status":"shipped"}')
    assert simulate(t, '{"order_id": "007"}', 0) == ToolOutcome("Error: order is locked", True)
    # a numeric-looking string turned into a number no longer matches
    assert simulate(t, '{"order_id": "123456"}', 0).content == "Error: order not found"
    assert simulate(t, '{"order_id": "7"}', 0).error


def test_match_never_confuses_booleans_and_numbers() -> None:
    t = tool({"match": [{"when": {"x": 1}, "result": "one"}], "default": "other"})
    assert simulate(t, '{"x": 1}', 0).content == "one"
    assert simulate(t, '{"x": 1.0}', 0).content == "one"
    assert simulate(t, '{"x": true}', 0).content == "other"
    assert simulate(t, '{"x": "1"}', 0).content == "other"


def test_match_without_default_is_a_tool_error_naming_the_arguments() -> None:
    t = tool({"match": [{"when": {"x": 1}, "result": "one"}]})
    out = simulate(t, '{"x": 2}', 0)
    assert out == ToolOutcome('Error: no result for arguments {"x":2}', True)


def test_sequence_by_call_index_repeats_last_and_supports_errors() -> None:
    t = tool({"sequence": [{"error": "Error: busy"}, "second", {"n": 3}]})
    got = [simulate(t, "{}", i) for i in range(5)]
    assert got[0] == ToolOutcome("Error: busy", True)
    assert [g.content for g in got[1:]] == ["second", '{"n":3}', '{"n":3}', '{"n":3}']


def test_error_simulator() -> None:
    assert simulate(tool({"error": "Error: 503 upstream"}), "{}", 0) == ToolOutcome(
        "Error: 503 upstream", True
    )


def test_pad_tokens_appends_about_four_chars_per_token() -> None:
    t = tool({"result": "ok", "pad_tokens": 250})
    out = simulate(t, "{}", 0).content
    assert out.startswith("ok\n")
    assert len(out) == len("ok\n") + 1000
    assert out == simulate(t, "{}", 7).content  # deterministic


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"values": [0.5, 0.25, 0.25], "base": 2}, {"base": 2, "entropy": 1.5}),
        ({"values": [0.25, 0.25, 0.25, 0.25], "base": 2}, {"base": 2, "entropy": 2}),
        ({"values": [1.0, 0.0]}, {"base": "e", "entropy": 0}),
    ],
)
def test_entropy_builtin(args: dict, expected: dict) -> None:
    out = simulate(tool({"builtin": "entropy"}, ENTROPY_PARAMS), json.dumps(args), 0)
    assert json.loads(out.content) == expected


def test_entropy_in_nats_matches_the_formula() -> None:
    out = simulate(tool({"builtin": "entropy"}, ENTROPY_PARAMS), '{"values": [0.9, 0.1]}', 0)
    h = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    assert json.loads(out.content)["entropy"] == pytest.approx(h, abs=1e-12)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"values": [0, 0, 0], "base": 2}', "Error: values must sum to 1, got sum 0"),
        ('{"values": [0.5, 0.5], "base": 1}', "Error: base must be positive and not 1, got 1"),
        ('{"values": [1.5, -0.5]}', "Error: values must be non-negative probabilities"),
    ],
)
def test_entropy_rejects_collapsed_or_invalid_vectors(raw: str, message: str) -> None:
    out = simulate(tool({"builtin": "entropy"}, ENTROPY_PARAMS), raw, 0)
    assert out == ToolOutcome(message, True)


def test_entropy_rejects_strings_even_without_a_schema() -> None:
    out = simulate(tool({"builtin": "entropy"}), '{"values": ["", "", ""]}', 0)
    assert out == ToolOutcome('Error: values must be an array of numbers, found ""', True)


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("add", {"a": 2, "b": 3.5}, {"result": 5.5}),
        ("subtract", {"a": 2, "b": 3}, {"result": -1}),
        ("multiply", {"a": 0.1, "b": 3}, {"result": 0.3}),
        ("divide", {"a": 1, "b": 4}, {"result": 0.25}),
        ("mean", {"values": [1, 2, 3, 4]}, {"mean": 2.5}),
        ("sum", {"values": [1, 2, 3]}, {"sum": 6}),
        ("sort", {"values": [3, 1, 2]}, {"values": [1, 2, 3]}),
        ("sort", {"values": [3, 1, 2], "descending": True}, {"values": [3, 2, 1]}),
        ("normalize", {"values": [2, 1, 1]}, {"values": [0.5, 0.25, 0.25]}),
        ("echo", {"z": [1], "a": "007"}, {"a": "007", "z": [1]}),
    ],
)
def test_builtins(name: str, args: dict, expected: dict) -> None:
    out = simulate(tool({"builtin": name}), json.dumps(args), 0)
    assert not out.error
    assert json.loads(out.content) == expected


def test_builtin_errors_are_tool_errors() -> None:
    assert simulate(tool({"builtin": "divide"}), '{"a": 1, "b": 0}', 0) == ToolOutcome(
        "Error: division by zero", True
    )
    assert simulate(tool({"builtin": "add"}), '{"a": "1", "b": 2}', 0) == ToolOutcome(
        'Error: a must be a finite number, got "1"', True
    )
    assert simulate(tool({"builtin": "multiply"}), '{"a": 1e308, "b": 10}', 0) == ToolOutcome(
        "Error: result is not a finite number (inf)", True
    )
    assert simulate(tool({"builtin": "add"}), '{"a": NaN, "b": 1}', 0) == ToolOutcome(
        "Error: a must be a finite number, got NaN", True
    )
    with pytest.raises(ValueError, match="unknown builtin 'nope'"):  # refused at load time
        tool({"builtin": "nope"})


def test_identical_inputs_give_byte_identical_outputs() -> None:
    t = tool({"builtin": "echo"})
    raw = '{"b": {"y": 1, "x": [0.1, 0.2]}, "a": "é"}'
    outs = {simulate(t, raw, i).content for i in range(3)}
    assert outs == {render({"a": "é", "b": {"x": [0.1, 0.2], "y": 1}})}


def test_builtins_table_lists_the_documented_functions() -> None:
    assert {"add", "subtract", "multiply", "divide", "entropy", "mean", "sort", "echo"} <= set(
        BUILTINS
    )


def test_the_same_arguments_are_checked_against_each_tools_own_schema() -> None:
    # schema verdicts are kept per (schema, argument text): a second tool with another
    # schema must not get the first one's verdict for the same string
    strict = tool({"builtin": "echo"}, ENTROPY_PARAMS)
    loose = tool({"builtin": "echo"}, {"type": "object", "properties": {}})
    raw = '{"values": "[0.5, 0.5]"}'
    for _ in range(2):
        assert simulate(strict, raw, 0) == ToolOutcome(
            "Error: invalid arguments: values: '[0.5, 0.5]' is not of type 'array'", True
        )
        assert simulate(loose, raw, 0) == ToolOutcome('{"values":"[0.5, 0.5]"}')
