"""Correctness regression harness for agentic multi-turn tool calling.

Drives any OpenAI-compatible server through scenario loops, records transcripts,
scores them, and compares a candidate build against a baseline.
"""

from harness._version import __version__
from harness.scenario import Scenario, ScenarioError, load_scenario, load_scenarios
from harness.transcript import RunRecord, read_records

__all__ = sorted(
    [
        "RunRecord",
        "Scenario",
        "ScenarioError",
        "__version__",
        "load_scenario",
        "load_scenarios",
        "read_records",
    ]
)
