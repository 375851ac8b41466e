"""The scenario reference page is generated from the model and cannot drift from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from harness.scenario.model import (
    ArgMatcher,
    Message,
    MessageToolCall,
    Scenario,
    SimMatchRule,
    scenario_from_data,
)
from harness.scenario.reference import (
    BEGIN,
    END,
    FIELD_DOCS,
    MODELS,
    SIMULATOR_EXAMPLE,
    reference_markdown,
)
from harness.scenario.suites import registered_suites
from harness.scenario.tools import simulate

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "scenario.md"

#: the required keys of each model, merged under every example of its fields
MINIMAL: dict[str, dict[str, Any]] = {
    "Scenario": {"id": "x", "description": "d", "messages": [{"role": "user", "content": "hi"}],
                 "tools": [{"name": "add"}, {"name": "entropy"}]},
    "Message": {"role": "user"},
    "MessageToolCall": {"id": "call_1", "function": {"name": "add"}},
    "FunctionCall": {"name": "add"},
    "Tool": {"name": "add"},
    "SimMatchRule": {"when": {}},
    "ExpectedCall": {"tool": "add"},
    "Followup": {"user": "hi"},
    "BfclTask": {"category": "multi_turn_base", "task_id": "t", "version": "1", "classes": []},
}  # fmt: skip


def test_page_holds_the_generated_reference() -> None:
    text = PAGE.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) : text.index(END) + len(END) + 1]
    assert block == reference_markdown(), (
        "docs/reference/scenario.md is stale: run `python -m harness.docgen`"
    )


def test_every_field_is_documented_and_nothing_else() -> None:
    fields = {
        f"{model.__name__}.{name}"
        for model, _ in MODELS
        for name, info in model.model_fields.items()
        if not info.exclude
    }
    assert fields == set(FIELD_DOCS)


def _models() -> dict[str, type[BaseModel]]:
    return {m.__name__: m for m, _ in MODELS}


@pytest.mark.parametrize("key", sorted(FIELD_DOCS))
def test_every_example_is_valid(key: str) -> None:
    model_name, field = key.split(".")
    example = yaml.safe_load(FIELD_DOCS[key][1])
    assert isinstance(example, dict)
    if key == "Scenario.task":  # written under a registered suite's name, never as `task`
        assert set(example) <= set(registered_suites()) and len(example) == 1
    else:
        assert field in example
    data = {**MINIMAL.get(model_name, {}), **example}
    if model_name == "Scenario":
        scenario_from_data(data)  # with the loader's checks (tools, targets, schemas)
    else:
        _models()[model_name].model_validate(data)


def test_models_cover_the_whole_format() -> None:
    """Every model reachable from Scenario has a table."""
    listed = set(_models().values())
    for model in (Message, MessageToolCall, ArgMatcher, SimMatchRule):
        assert model in listed
    assert Scenario in listed


def test_simulator_example_loads_and_answers_as_documented() -> None:
    sc = scenario_from_data(yaml.safe_load(SIMULATOR_EXAMPLE))
    tool = sc.tool("get_weather")
    assert tool is not None
    metric = simulate(tool, '{"city": "Paris", "units": "metric"}', 0)
    assert metric.content == '{"sky":"clear","temperature_c":21}' and not metric.error
    assert "temperature_f" in simulate(tool, '{"city": "Paris", "units": "imperial"}', 0).content
    assert simulate(tool, '{"city": "Atlantis"}', 0).content == "Error: no such city"
    rome = simulate(tool, '{"city": "Rome"}', 0)
    assert rome.error and rome.content == "Error: unknown city"
