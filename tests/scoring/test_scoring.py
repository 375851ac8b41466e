"""Scoring of hand-made transcripts: every drift class, termination, sequence, protocol."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.scenario.model import scenario_from_data
from harness.scoring.drift import find_drift, is_collapsed
from harness.scoring.score import score_run
from harness.transcript import (
    InfraError,
    ResponseRecord,
    RunRecord,
    TargetInfo,
    ToolCallRecord,
    TurnRecord,
)

ENTROPY = {
    "id": "entropy_array",
    "description": "entropy of a probability vector",
    "messages": [{"role": "user", "content": "Entropy of [0.5, 0.25, 0.25] in bits?"}],
    "tools": [
        {
            "name": "entropy",
            "parameters": {
                "type": "object",
                "properties": {
                    "values": {"type": "array", "items": {"type": "number"}},
                    "base": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["bits", "nats"]},
                },
                "required": ["values"],
            },
            "simulator": {"builtin": "entropy"},
        }
    ],
    "expect": {
        "calls": [
            {
                "tool": "entropy",
                "arguments": {"values": [0.5, 0.25, 0.25], "base": 2},
                "match": {"values": {"approx": [0.5, 0.25, 0.25], "tol": 1e-6}},
            }
        ],
        "final_answer": {"contains": ["1.5"]},
    },
}


def _call(args: Any, i: int, name: str = "entropy") -> ToolCallRecord:
    raw = args if isinstance(args, str) or args is None else json.dumps(args)
    return ToolCallRecord(index=0, id=f"call_{i}", type="function", name=name, arguments=raw)


def make_record(
    turns: list[list[Any] | str],
    *,
    scenario: dict[str, Any] = ENTROPY,
    stop: str | None = None,
    raw_objects: bool = False,
    finish: dict[int, str] | None = None,
) -> RunRecord:
    """A record whose turn i holds calls (a list of argument objects/strings) or an answer."""
    sc = scenario_from_data(scenario)
    recs, n = [], 0
    for i, t in enumerate(turns):
        if isinstance(t, str):
            resp = ResponseRecord(content=t, finish_reason="stop")
        else:
            calls = []
            for pos, a in enumerate(t):
                name, a = a if isinstance(a, tuple) else ("entropy", a)
                c = _call(a, n, name)
                c.index = pos
                if raw_objects:
                    c.arguments = a
                calls.append(c)
                n += 1
            resp = ResponseRecord(content=None, tool_calls=calls, finish_reason="tool_calls")
        if finish and i in finish:
            resp.finish_reason = finish[i]
        recs.append(TurnRecord(index=i, response=resp))
    final = turns[-1] if turns and isinstance(turns[-1], str) else None
    return RunRecord(
        run_key=f"candidate/{sc.id}/0/nonstream",
        scenario_id=sc.id,
        scenario_hash=sc.content_hash(),
        scenario=sc.model_dump(mode="json"),
        repeat=0,
        stream=False,
        target=TargetInfo(label="fused", side="candidate", base_url="http://127.0.0.1:1"),
        turns=recs,
        stop_reason=stop or ("final_answer" if final else "turn_cap"),  # type: ignore[arg-type]
        final_content=final,
    )


GOOD = {"values": [0.5, 0.25, 0.25], "base": 2}


def test_clean_run_passes() -> None:
    s = score_run(make_record([[GOOD], "The entropy is 1.5 bits."]))
    assert s.passed, s.failures
    assert s.termination == "final_answer" and s.final_answer_ok
    assert s.sequence.matched == 1 and s.sequence.missing == []
    assert s.tool_calls == 1 and s.repeated_calls == 0


def test_reference_trace_names_each_drift() -> None:
    """The motivating trace: array as string, then zeros, then empty strings."""
    rec = make_record(
        [
            [{"values": "[0.5, 0.25, 0.25]", "base": 2}],
            [{"values": [0, 0, 0], "base": 2}],
            [{"values": ["", "", ""], "base": ""}],
        ]
    )
    s = score_run(rec)
    by_turn = {(d.turn, d.path): d for d in s.drift}
    assert by_turn[(0, "values")].kind == "container_as_string"
    assert by_turn[(0, "values")].phrase == "array sent as a string"
    assert by_turn[(1, "values")].kind == "collapse"
    assert by_turn[(1, "values")].phrase == "values collapsed to zeros"
    assert by_turn[(2, "values")].kind == "collapse"
    assert by_turn[(2, "values")].phrase == "values collapsed to empty strings"
    assert by_turn[(2, "base")].kind == "collapse"
    assert by_turn[(1, "values")].expected == "[0.5, 0.25, 0.25]"
    assert {"container_as_string", "collapse", "missing_final_answer", "missing_calls"} <= set(
        s.failures
    )
    assert any(v.path == "values" for v in s.schema_violations if v.turn == 0)
    assert any(v.path == "values[0]" for v in s.schema_violations if v.turn == 2)
    assert s.termination == "turn_cap" and not s.passed


@pytest.mark.parametrize(
    ("args", "kind", "path"),
    [
        ({"values": [0.5, 0.25, 0.25], "base": "2"}, "scalar_as_string", "base"),
        ({"values": [0.5, 0.25, 0.25], "base": 2.0}, "int_as_float", "base"),
        ({"values": [0.5, 0.25, 0.25], "base": 0}, "collapse", "base"),
        ({"values": [], "base": 2}, "collapse", "values"),
        ({"values": None, "base": 2}, "collapse", "values"),
        ({"base": 2}, "dropped_keys", "values"),
        ({"values": [0.5, 0.25, 0.25]}, "dropped_keys", "base"),
        (
            {"values": [0.5, 0.25, 0.25], "base": 2, "unexpected_option": True},
            "unexpected_keys",
            "unexpected_option",
        ),
        ({"values": [0.5, 0.25, 0.25], "base": 2, "unit": "bytes"}, "enum_violation", "unit"),
        ({"values": [0.5, 0.5], "base": 2}, "value_mismatch", "values"),
        ({"values": [0.5, 0.25, 0.25], "base": 10}, "value_mismatch", "base"),
        ({"values": ["0.5", "0.25", "0.25"], "base": 2}, "scalar_as_string", "values[0]"),
    ],
)
def test_each_drift_class(args: dict[str, Any], kind: str, path: str) -> None:
    s = score_run(make_record([[args], "The entropy is 1.5 bits."]))
    assert (kind, path) in {(d.kind, d.path) for d in s.drift}, s.drift
    assert kind in s.failures and not s.passed


def test_object_as_string_in_nested_schema() -> None:
    drifts = find_drift(
        {"cfg": '{"a": 1}'},
        {"type": "object", "properties": {"cfg": {"type": "object"}}},
    )
    assert [(d.kind, d.phrase) for d in drifts] == [
        ("container_as_string", "object sent as a string")
    ]


def test_collapse_needs_a_non_collapsed_reference() -> None:
    assert is_collapsed([0, 0.0, 0]) and is_collapsed(["", ""]) and not is_collapsed([0, 1])
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert find_drift({"n": 0}, schema, {"n": 0}) == []
    assert find_drift({"n": 0}, schema, None) == []


def test_repeat_loop_counts_and_streak() -> None:
    rec = make_record([[GOOD]] * 12)
    s = score_run(rec)
    assert s.tool_calls == 12 and s.repeated_calls == 11 and s.longest_repeat_streak == 11
    assert {"repeat_loop", "missing_final_answer", "spurious_calls"} <= set(s.failures)
    assert s.calls[3].repeat_of == 0 and "repeat_loop" in s.calls[3].kinds


def test_malformed_arguments() -> None:
    s = score_run(make_record([['{"values": [0.5, 0.25, 0.25], "base": 2'], "1.5 bits"]))
    assert s.malformed_args == 1 and s.malformed[0].kind == "malformed_json"
    assert "malformed_json" in s.failures
    s = score_run(make_record([[GOOD], "1.5 bits"], raw_objects=True))
    assert s.malformed[0].kind == "object_not_string" and s.drift == []
    s = score_run(make_record([["[1, 2]"], "1.5 bits"]))
    assert s.malformed[0].kind == "not_an_object"
    s = score_run(make_record([['<think>hmm</think>{"values": [0.5]}'], "1.5 bits"]))
    assert s.malformed[0].kind == "reasoning_leak_args"
    s = score_run(make_record([[("no_such_tool", GOOD)], "1.5 bits"]))
    assert "unknown_tool" in s.failures


def test_markup_in_content_is_malformed_termination() -> None:
    text = (
        '<tool_call>\n{"name": "entropy", "arguments": {"values": [0.5, 0.25, 0.25]}}\n</tool_call>'
    )
    s = score_run(make_record([text]))
    assert s.termination == "malformed"
    assert {"markup_in_content", "missing_final_answer", "missing_calls"} <= set(s.failures)


def test_protocol_invariants() -> None:
    s = score_run(make_record([[GOOD], "1.5 bits"], finish={0: "stop"}))
    assert "finish_reason_mismatch" in s.failures
    rec = make_record([[GOOD], [{"values": [1.0], "base": 2}], "1.5 bits"])
    rec.turns[1].response.tool_calls[0].id = "call_0"  # type: ignore[union-attr]
    assert "repeated_ids" in score_run(rec).failures
    s = score_run(make_record([[GOOD], "<think>let me think</think> 1.5 bits"]))
    assert "reasoning_leak" in s.failures
    s = score_run(make_record([[GOOD], "1.5 bits <|im_end|>"]))
    assert "markup_in_content" in s.failures and s.termination == "malformed"


def test_final_answer_expectations() -> None:
    s = score_run(make_record([[GOOD], "The entropy is 2 bits."]))
    assert s.final_answer and not s.final_answer_ok and s.failures == ["wrong_final_answer"]


def test_order_and_missing_and_spurious_calls() -> None:
    sc = json.loads(json.dumps(ENTROPY))
    sc["id"] = "two"
    sc["expect"]["calls"].append({"tool": "entropy", "arguments": {"values": [1.0], "base": 2}})
    second = {"values": [1.0], "base": 2}
    s = score_run(make_record([[second], [GOOD], "1.5"], scenario=sc))
    assert s.failures == ["order_violation"] and not s.sequence.order_kept
    sc["expect"]["order"] = "free"
    assert score_run(make_record([[second], [GOOD], "1.5"], scenario=sc)).passed
    s = score_run(make_record([[GOOD], "1.5"], scenario=sc))
    assert s.sequence.missing == ["seg0:entropy"] and "missing_calls" in s.failures
    s = score_run(make_record([[GOOD, second, GOOD], "1.5"], scenario=sc))
    assert "spurious_calls" in s.failures and s.sequence.unexpected == ["turn0:entropy"]


def test_lenient_parser_and_streaming_kinds() -> None:
    sc = json.loads(json.dumps(ENTROPY))
    sc["id"] = "ids"
    sc["tools"][0]["parameters"]["properties"]["label"] = {"type": "string"}
    sc["expect"]["calls"][0]["arguments"]["label"] = "007"
    s = score_run(make_record([[{**GOOD, "label": 7}], "1.5 bits"], scenario=sc))
    d = next(x for x in s.drift if x.path == "label")
    assert d.kind == "string_as_scalar" and d.expected == "007"
    s = score_run(make_record([[""], "1.5 bits"]))
    assert s.malformed[0].kind == "empty_arguments" and "dropped_keys" in s.failures
    rec = make_record([[GOOD, GOOD], "1.5 bits"])
    rec.stream = True
    for i, c in enumerate(rec.turns[0].response.tool_calls):  # type: ignore[union-attr]
        c.index = i + 1
    rec.turns[0].response.stream = True  # type: ignore[union-attr]
    assert "index_offset" in score_run(rec).failures
    rec.turns[0].response.stream = False  # type: ignore[union-attr]
    assert "index_offset" not in score_run(rec).failures


def test_infra_error_is_not_a_model_failure() -> None:
    rec = make_record([[GOOD]], stop="error")
    rec.error = InfraError(kind="timeout", message="read timeout", turn=1)
    s = score_run(rec)
    assert s.termination == "error" and s.failures == [] and s.infra_error is not None
