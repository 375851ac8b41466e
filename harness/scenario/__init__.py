"""Scenarios: the conversation, the tools (and their simulators), what a correct model does.

- :mod:`harness.scenario.model`: the scenario file format (pydantic, strict) and loading.
- :mod:`harness.scenario.tools`: the deterministic tool simulators a run answers with.
"""

from harness.scenario.model import (
    SCENARIO_SUFFIXES,
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenarios,
    scenario_from_data,
    scenario_json_schema,
)

__all__ = [
    "SCENARIO_SUFFIXES",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "load_scenarios",
    "scenario_from_data",
    "scenario_json_schema",
]
