"""A BFCL task as written in a scenario file, under ``bfcl:`` (:class:`BfclTask`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.scenario.model import Scenario

__all__ = ["BfclTask", "task_of"]


class BfclTask(BaseModel):
    """A BFCL multi-turn task's stateful tools: in a file, the mapping under ``bfcl:``
    (written by :mod:`harness.bfcl`'s loader).

    ``classes``: the backend class names (``involved_classes``); ``initial_config``: each
    class's initial state, loaded per run with ``_load_scenario``; ``long_context``: the
    ``long_context`` flag BFCL passes for that category; ``held_out``: segment index (as
    a string, JSON keys) -> tools first offered at that segment (``missed_function``);
    ``version``: the bfcl-eval release the task came from.
    """

    model_config = ConfigDict(extra="forbid")

    category: str
    task_id: str
    version: str
    classes: list[str]
    initial_config: dict[str, Any] = Field(default_factory=dict)
    long_context: bool = False
    held_out: dict[str, list[str]] = Field(default_factory=dict)


def task_of(scenario: Scenario) -> BfclTask | None:
    """The scenario's BFCL task (``None``: not a BFCL task)."""
    if scenario.task is None or scenario.task.suite != "bfcl":
        return None
    return BfclTask.model_validate(scenario.task.data)
