"""Correctness regression harness for agentic multi-turn tool calling.

Drives any OpenAI-compatible server through scenario loops, records transcripts,
scores them, and compares a candidate build against a baseline.

The public API is what this module exports; the engine lives in the sub-packages named
for the field's concepts (``scenario``, ``client``, ``runner``, ``scoring``, ``stats``,
``gsm8k``, ``server``, ``matrix``, ``present``, ``pytest_plugin``, ``cli``, ``sim``;
ARCHITECTURE.md is the map). Heavy modules (scipy, the openai SDK) are imported on first
use of their names.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness._version import __version__
from harness.errors import HarnessError
from harness.scenario.model import Scenario, ScenarioError, load_scenario, load_scenarios
from harness.transcript import RunRecord

_LAZY = {
    "RunFolder": "harness.runfolder",
    "RunScore": "harness.scoring.models",
    "Summary": "harness.summary",
    "TargetConfig": "harness.client.target",
    "compare": "harness.pipeline",
    "score_folder": "harness.pipeline",
    "run_many": "harness.runner",
    "run_many_sync": "harness.runner",
    "run_scenario": "harness.runner",
    "score_run": "harness.scoring.score",
    "write_report": "harness.present.report",
}

__all__ = [
    "HarnessError",
    "RunFolder",
    "RunRecord",
    "RunScore",
    "Scenario",
    "ScenarioError",
    "Summary",
    "TargetConfig",
    "__version__",
    "compare",
    "load_scenario",
    "load_scenarios",
    "run_many",
    "run_many_sync",
    "run_scenario",
    "score_folder",
    "score_run",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
