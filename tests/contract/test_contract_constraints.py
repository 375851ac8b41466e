"""A reply that breaks what its request asked for is a protocol failure
named as such: calls under ``tool_choice: "none"``, several calls under
``parallel_tool_calls: false``, a named ``tool_choice`` answered with another tool,
``"required"`` answered with text, ``max_tokens`` exceeded, ``n`` not honoured, a ``stop``
string in the output. Each against the reference server streamed and not, with the
look-alikes that must pass (parallel calls where allowed, ``n`` identical choices)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.kinds import FailureKind as K
from harness.transcript import ResponseRecord, ToolCallRecord
from tests.contract_driver import run, scenario, score_one, tool

PLANTS = [tool("water_plant", plant="string"), tool("plant_info", plant="string")]


def _calls(*names: str) -> ResponseRecord:
    return ResponseRecord(
        finish_reason="tool_calls",
        tool_calls=[ToolCallRecord(index=i, id=f"c{i}", type="function", name=n,
                                   arguments=json.dumps({"plant": "fern"}))
                    for i, n in enumerate(names)],
    )  # fmt: skip


def _text(text: str, **kw: Any) -> ResponseRecord:
    return ResponseRecord(content=text, finish_reason="stop", **kw)


UNIT_SC = scenario("plants", "Water the fern.", PLANTS,
                   expect={"final_answer": {"required": False}})  # fmt: skip
NAMED = {"type": "function", "function": {"name": "water_plant"}}

FLAGGED = [
    (K.CALLS_UNDER_TOOL_CHOICE_NONE, {"tool_choice": "none"}, _calls("water_plant")),
    (K.PARALLEL_CALLS_WHEN_DISABLED, {"parallel_tool_calls": False},
     _calls("water_plant", "plant_info")),
    (K.NAMED_TOOL_CHOICE_IGNORED, {"tool_choice": NAMED}, _calls("plant_info")),
    (K.NAMED_TOOL_CHOICE_IGNORED, {"tool_choice": NAMED}, _text("Done.")),
    (K.REQUIRED_TOOL_CHOICE_IGNORED, {"tool_choice": "required"}, _text("Watered.")),
    (K.MAX_TOKENS_EXCEEDED, {"max_tokens": 10}, _text("ok", usage={"completion_tokens": 11})),
    (K.MAX_TOKENS_EXCEEDED, {"max_completion_tokens": 5, "max_tokens": 50},
     _text("ok", usage={"completion_tokens": 6})),
    (K.N_NOT_HONOURED, {"extra_body": {"n": 3}}, _text("ok", choices=1)),
    (K.N_NOT_HONOURED, {}, _text("ok", choices=2)),
    (K.STOP_STRING_IN_OUTPUT, {"extra_body": {"stop": ["END"]}}, _text("Watered. END")),
    (K.STOP_STRING_IN_OUTPUT, {"stop": "\n\n"}, _text("Watered.\n\nMore")),
]  # fmt: skip
LOOK_ALIKES = [
    ({"tool_choice": "none"}, _text("I watered nothing.")),
    ({"tool_choice": "auto"}, _calls("water_plant", "plant_info")),
    ({"parallel_tool_calls": True}, _calls("water_plant", "plant_info")),
    ({"parallel_tool_calls": False}, _calls("water_plant")),
    ({"tool_choice": NAMED}, _calls("water_plant")),
    ({"tool_choice": "required"}, _calls("plant_info")),
    ({"tool_choice": "required"}, ResponseRecord(content="Wat", finish_reason="length")),
    ({"max_tokens": 10}, _text("ok", usage={"completion_tokens": 10})),
    ({"extra_body": {"n": 2}}, _text("ok", choices=2)),
    ({}, _text("ok", choices=1)),
    ({}, _text("ok")),  # a record from before choices were kept
    ({"stop": ["END"]}, _text("Watered.")),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "params", "resp"), FLAGGED)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_each_constraint_broken_is_named(kind, params, resp, stream) -> None:
    resp = resp.model_copy(update={"stream": stream})
    failures = score_one(UNIT_SC, resp, params).failures
    assert kind.value in failures, failures
    assert kind.family.value == "protocol"


@pytest.mark.parametrize(("params", "resp"), LOOK_ALIKES)
def test_each_constraint_honoured_is_not_flagged(params, resp) -> None:
    constraint_kinds = {k.value for k, _, _ in FLAGGED}
    assert not constraint_kinds & set(score_one(UNIT_SC, resp, params).failures)


# ------------------------------------------------------------ the reference server

ANSWER = {"contains": ["watered"], "example": "The fern is watered."}
ONE_CALL = [{"tool": "water_plant", "arguments": {"plant": "fern"}}]
SCENARIOS = {
    "calls-under-tool-choice-none": scenario(
        "none_choice", "Just say hello; no tools.", PLANTS, tool_choice="none", max_turns=2,
        expect={"max_calls": 0, "final_answer": {"contains": ["hello"], "example": "hello"}}),
    "parallel-calls-when-disabled": scenario(
        "serial_only", "Water the fern and the palm.", PLANTS, parallel_tool_calls=False,
        expect={"order": "free", "final_answer": ANSWER, "calls": [
            {"tool": "water_plant", "arguments": {"plant": "fern"}},
            {"tool": "water_plant", "arguments": {"plant": "palm"}, "parallel": True}]}),
    "named-tool-choice-ignored": scenario(
        "named_choice", "Water the fern.", PLANTS, tool_choice=NAMED, max_turns=1,
        expect={"calls": ONE_CALL, "final_answer": {"required": False}}),
    "required-tool-choice-ignored": scenario(
        "required_choice", "Water the fern.", PLANTS, tool_choice="required", max_turns=1,
        expect={"calls": ONE_CALL, "final_answer": {"required": False}}),
    "max-tokens-exceeded": scenario(
        "small_budget", "Water the fern.", PLANTS, sampling={"max_tokens": 14},
        expect={"calls": ONE_CALL, "final_answer": ANSWER}),
    "n-not-honoured": scenario(
        "two_choices", "Water the fern.", PLANTS, extra_body={"n": 2},
        expect={"calls": ONE_CALL, "final_answer": ANSWER}),
    "stop-string-in-output": scenario(
        "stop_at_notes", "Water the fern.", PLANTS, extra_body={"stop": ["\nNotes:"]},
        expect={"calls": ONE_CALL, "final_answer": {
            "contains": ["watered"], "example": "The fern is watered.\nNotes: soil was dry."}}),
}  # fmt: skip


@pytest.mark.parametrize("profile", list(SCENARIOS))
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_breaking_the_request(
    sim_url, write_scenarios, tmp_path, profile, stream
) -> None:
    kind = profile.replace("-", "_")
    sc = SCENARIOS[profile]
    _, healthy = run(sim_url, write_scenarios, tmp_path, "healthy", sc, stream=stream)
    assert healthy.passed, healthy.failures
    _, score = run(sim_url, write_scenarios, tmp_path, profile, sc, stream=stream)
    assert kind in score.failures, score.failures


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_parallel_calls_when_allowed_pass(sim_url, write_scenarios, tmp_path, stream) -> None:
    """The fault ignores parallel_tool_calls false; where the request allows parallel
    calls, the same two calls in one message are what it asked for."""
    sc = dict(SCENARIOS["parallel-calls-when-disabled"], id="parallel_ok",
              parallel_tool_calls=True)  # fmt: skip
    rec, score = run(sim_url, write_scenarios, tmp_path, "parallel-calls-when-disabled", sc,
                     stream=stream)  # fmt: skip
    assert len(rec.turns[0].response.tool_calls) == 2  # type: ignore[union-attr]
    assert score.passed, score.failures


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_identical_choices_under_n_are_a_legitimate_repeat(
    sim_url, write_scenarios, tmp_path, stream
) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "healthy", SCENARIOS["n-not-honoured"],
                     stream=stream)  # fmt: skip
    first = rec.turns[0].response
    assert first is not None and first.choices == 2
    if not stream:
        a, b = first.raw["choices"]
        assert a["message"] == b["message"]
    assert len(first.tool_calls) == 1  # choice 1 is not merged into choice 0
    assert score.passed, score.failures
