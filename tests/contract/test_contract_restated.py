"""Content beside a call that only restates the call's argument values: the
``content_restates_arguments`` kind of the information family. Agent clients show such text
to the user and still run the call, so it is kept for a reviewer (``RunScore.information``)
and fails a run only where the scenario targets it."""

from __future__ import annotations

import json

import pytest

from harness.kinds import FailureKind as K
from harness.kinds import Family
from harness.present.evidence import format_run
from harness.transcript import ResponseRecord, ToolCallRecord
from tests.contract_driver import run, scenario, score_one, tool

WEATHER = [tool("get_weather", city="string", days="integer")]
CALL = {"tool": "get_weather", "arguments": {"city": "Oslo", "days": 3}}
SC = scenario(
    "oslo", "Weather in Oslo for the next 3 days?", WEATHER,
    expect={"calls": [CALL], "final_answer": {"contains": ["Oslo"], "example": "Oslo: sun."}},
)  # fmt: skip
KIND = K.CONTENT_RESTATES_ARGUMENTS.value


def _reply(content: str | None) -> ResponseRecord:
    return ResponseRecord(content=content, finish_reason="tool_calls", tool_calls=[
        ToolCallRecord(index=0, id="c0", type="function", name="get_weather",
                       arguments=json.dumps({"city": "Oslo", "days": 3}))])  # fmt: skip


@pytest.mark.parametrize(
    ("content", "restates"),
    [
        ("Let me check the weather in Oslo for 3 days.", True),
        ('{"city": "Oslo", "days": 3}', True),
        ("Oslo", True),
        ("I'll call get_weather with city=Oslo, days=3.", True),
        ("Oslo is often rainy in spring; let me check.", False),
        ("Let me check the weather.", False),  # no value restated
        ("", False),
        (None, False),
    ],
)
def test_which_text_only_restates_the_call(content: str | None, restates: bool) -> None:
    sc = dict(SC, expect={"final_answer": {"required": False}})
    score = score_one(sc, _reply(content))
    assert ([o.kind for o in score.information] == [KIND]) == restates, score.information
    assert KIND not in score.failures  # information: not a failure
    targeted = score_one(dict(sc, id="oslo_t", targets=[KIND]), _reply(content))
    assert (KIND in targeted.failures) == restates


def test_the_kind_is_information_and_a_final_answer_restating_values_is_not_it() -> None:
    assert K.CONTENT_RESTATES_ARGUMENTS.family is Family.INFORMATION
    sc = dict(SC, expect={"final_answer": {"required": False}})
    answer = ResponseRecord(content="Oslo, 3 days: sun.", finish_reason="stop")
    assert score_one(sc, answer).information == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reference_server_narrating_its_calls(sim_url, write_scenarios, tmp_path, stream) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "content-restates-arguments", SC,
                     stream=stream)  # fmt: skip
    first = rec.turns[0].response
    assert first is not None and first.tool_calls and "Oslo" in (first.content or "")
    assert [(o.kind, o.turn) for o in score.information] == [(KIND, 0)]
    assert score.passed, score.failures  # shown, not failed
    assert any(line.startswith(f"  information: turn 0 {KIND}") for line in format_run(score))
    targeted = dict(SC, id="oslo_targeted", targets=[KIND])
    _, strict = run(sim_url, write_scenarios, tmp_path, "content-restates-arguments", targeted,
                    stream=stream)  # fmt: skip
    assert KIND in strict.failures and not strict.passed
    _, healthy = run(sim_url, write_scenarios, tmp_path, "healthy", targeted, stream=stream)
    assert healthy.passed and healthy.information == []
