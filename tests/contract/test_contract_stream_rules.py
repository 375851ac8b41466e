"""Stream rules read off the chunks: one ``finish_reason`` per choice
(``finish_reason_repeated``), ``usage`` only on a chunk with ``"choices": []`` or on the
last chunk (``usage_with_choices``). The clean shapes pass: the OpenAI API's
empty-choices usage chunk, usage on the last chunk, ``continuous_usage_stats`` asked,
``n`` choices each ending once, ``"name": null`` in continuation deltas."""

from __future__ import annotations

from typing import Any

import pytest

from harness.kinds import FailureKind as K
from harness.transcript import ResponseRecord
from tests.contract_driver import run, scenario, score_one, tool

PLANTS = [tool("water_plant", plant="string")]
SC = scenario(
    "water", "Water the fern.", PLANTS,
    expect={"calls": [{"tool": "water_plant", "arguments": {"plant": "fern"}}],
            "final_answer": {"contains": ["watered"], "example": "The fern is watered."}},
)  # fmt: skip
STREAM_KINDS = {K.FINISH_REASON_REPEATED.value, K.USAGE_WITH_CHOICES.value}


@pytest.mark.parametrize("profile", ["finish-reason-repeated", "usage-with-choices"])
def test_reference_server_breaking_a_stream_rule_is_named(
    sim_url, write_scenarios, tmp_path, profile
) -> None:
    kind = profile.replace("-", "_")
    _, score = run(sim_url, write_scenarios, tmp_path, profile, SC, stream=True)
    assert kind in score.failures, score.failures
    assert {p.kind for p in score.protocol_violations} & STREAM_KINDS == {kind}
    # the same server, not streaming, has nothing to break
    _, plain = run(sim_url, write_scenarios, tmp_path, profile, SC, stream=False)
    assert plain.passed, plain.failures


def test_healthy_stream_with_an_empty_choices_usage_chunk_passes(
    sim_url, write_scenarios, tmp_path
) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "healthy", SC, stream=True)
    chunks = rec.turns[0].response.raw  # type: ignore[union-attr]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]  # the OpenAI API's shape
    assert score.passed, score.failures


def test_null_name_in_continuation_deltas_is_clean(sim_url, write_scenarios, tmp_path) -> None:
    rec, score = run(sim_url, write_scenarios, tmp_path, "null-name-continuation", SC,
                     stream=True)  # fmt: skip
    first = rec.turns[0].response
    assert first is not None
    deltas = [tc for c in first.raw for ch in c["choices"]
              for tc in (ch.get("delta") or {}).get("tool_calls") or []]  # fmt: skip
    assert any("name" in tc["function"] and tc["function"]["name"] is None for tc in deltas)
    assert [c.name for c in first.tool_calls] == ["water_plant"]
    assert first.notes == []
    assert score.passed, score.failures


def _chunk(choices: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": choices, "usage": usage}


def _choice(i: int = 0, finish: str | None = None, text: str = "") -> dict[str, Any]:
    return {"index": i, "delta": {"content": text}, "finish_reason": finish}


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


@pytest.mark.parametrize(
    ("chunks", "params", "kinds"),
    [
        ([_chunk([_choice(text="Watered.")]), _chunk([_choice(finish="stop")]),
          _chunk([], USAGE)], {}, set()),
        ([_chunk([_choice(text="Watered.")]), _chunk([_choice(finish="stop")], USAGE)], {},
         set()),
        ([_chunk([_choice(text="Watered.")], USAGE), _chunk([_choice(finish="stop")], USAGE)],
         {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}, set()),
        ([_chunk([_choice(0, text="Watered.")]), _chunk([_choice(1, text="Watered.")]),
          _chunk([_choice(0, "stop")]), _chunk([_choice(1, "stop")])], {"n": 2}, set()),
        ([_chunk([_choice(text="Watered.")]), _chunk([_choice(finish="stop")]),
          _chunk([_choice(finish="stop")])], {}, {K.FINISH_REASON_REPEATED}),
        ([_chunk([_choice(text="Watered.", finish="stop")]), _chunk([_choice(finish="length")])],
         {}, {K.FINISH_REASON_REPEATED}),
        ([_chunk([_choice(text="Watered.")], USAGE), _chunk([_choice(finish="stop")]),
          _chunk([], USAGE)], {}, {K.USAGE_WITH_CHOICES}),
    ],
)  # fmt: skip
def test_stream_rules_on_recorded_chunks(chunks, params, kinds) -> None:
    resp = ResponseRecord(content="Watered.", finish_reason="stop", stream=True, raw=chunks,
                          choices=params.get("n", 1))  # fmt: skip
    sc = dict(SC, expect={"final_answer": {"required": False}})
    failures = set(score_one(sc, resp, params).failures)
    assert failures & STREAM_KINDS == {k.value for k in kinds}, failures
