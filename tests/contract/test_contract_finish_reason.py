"""finish_reason rules read the request: a call forced by a named ``tool_choice`` may end
with ``"stop"`` (the OpenAI API and vLLM answer it so); under ``auto``, ``required`` or no
``tool_choice`` a call still needs ``"tool_calls"``."""

from __future__ import annotations

import json

import pytest

from harness.kinds import FailureKind as K
from harness.transcript import ResponseRecord, ToolCallRecord
from tests.contract_driver import run, scenario, score_one, tool

PLANTS = [tool("water_plant", plant="string"), tool("plant_info", plant="string")]
NAMED = {"type": "function", "function": {"name": "water_plant"}}
UNIT_SC = scenario("plants", "Water the fern.", PLANTS,
                   expect={"final_answer": {"required": False}})  # fmt: skip


def _reply(finish: str, calls: int = 1) -> ResponseRecord:
    return ResponseRecord(
        finish_reason=finish,
        tool_calls=[ToolCallRecord(index=i, id=f"c{i}", type="function", name="water_plant",
                                   arguments=json.dumps({"plant": "fern"}))
                    for i in range(calls)],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("params", "resp", "flagged"),
    [
        ({"tool_choice": NAMED}, _reply("stop"), False),
        ({"extra_body": {"tool_choice": NAMED}}, _reply("stop"), False),
        ({"tool_choice": NAMED}, _reply("tool_calls"), False),
        ({"tool_choice": "auto"}, _reply("stop"), True),
        ({"tool_choice": "required"}, _reply("stop"), True),
        ({}, _reply("stop"), True),
        ({"tool_choice": NAMED}, _reply("tool_calls", calls=0), True),
        ({"tool_choice": "auto"}, _reply("tool_calls", calls=0), True),
    ],
)
def test_finish_reason_is_judged_under_the_requests_tool_choice(params, resp, flagged) -> None:
    failures = score_one(UNIT_SC, resp, params).failures
    assert (K.FINISH_REASON_MISMATCH in failures) == flagged, failures


NAMED_SC = scenario(
    "named_choice", "Water the fern.", PLANTS, tool_choice=NAMED, max_turns=1,
    expect={"calls": [{"tool": "water_plant", "arguments": {"plant": "fern"}}],
            "final_answer": {"required": False}},
)  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_named_function_ending_with_stop_on_the_reference_server_passes(
    sim_url, write_scenarios, tmp_path, stream
) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "named-choice-stop", NAMED_SC,
                     stream=stream)  # fmt: skip
    first = rec.turns[0].response
    assert first is not None and first.finish_reason == "stop" and len(first.tool_calls) == 1
    assert score.passed, score.failures


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_auto_ending_a_call_with_stop_is_still_flagged(
    sim_url, write_scenarios, tmp_path, stream
) -> None:
    sc = dict(NAMED_SC, id="auto_choice", tool_choice="auto")
    rec, score = run(sim_url, write_scenarios, tmp_path, "finish-reason-mismatch", sc,
                     stream=stream)  # fmt: skip
    assert rec.turns[0].response is not None and rec.turns[0].response.finish_reason == "stop"
    assert K.FINISH_REASON_MISMATCH in score.failures, score.failures
