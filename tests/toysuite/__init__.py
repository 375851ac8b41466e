"""A toy second suite of stateful tasks, built only on the harness's public pieces.

``counter:N``: N tasks on one stateful backend, a counter. The opening asks for two
``add`` calls and the total; a follow-up asks for ``reset``, a tool held back until
then. The :class:`Referee` answers from the run's counter and checks each ended segment
against the ground truth's counter; :meth:`CounterSuite.score` passes a run whose every
segment left the counter as the ground truth did (``state_mismatch`` otherwise).

Registered as ``tests/scenario/test_suites.py`` does it: one entry point, ``counter =
tests.toysuite:SUITE`` in the ``harness.suites`` group. No module of ``harness/`` names it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import ScenarioError
from harness.kinds import FailureKind
from harness.scenario.model import (
    Expectation,
    ExpectedCall,
    FinalAnswerExpectation,
    Followup,
    Message,
    Scenario,
    SuiteTask,
    Tool,
)
from harness.scenario.suites import SuiteListing
from harness.scenario.tools import ToolOutcome
from harness.scoring.models import SequenceMatch
from harness.transcript import StateCheck

__all__ = ["SUITE", "CounterSuite", "CounterTask"]

_INT = {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}
_NONE: dict[str, Any] = {"type": "object", "properties": {}}


class CounterTask(BaseModel):
    """One task: the counter's starting value, and the tools held back per segment."""

    model_config = ConfigDict(extra="forbid")

    start: int
    held_out: dict[str, list[str]] = Field(default_factory=dict)


def _apply(value: int, name: str | None, args: Mapping[str, Any]) -> int:
    if name == "add":
        return value + int(args["amount"])
    if name == "reset":
        return 0
    return value


class Referee:
    """The run's counter and the ground truth's, segment by segment."""

    def __init__(self, scenario: Scenario) -> None:
        assert scenario.task is not None
        self.value = self.truth = CounterTask.model_validate(scenario.task.data).start
        self.segments = scenario.segments()

    async def answer(self, name: str | None, arguments_raw: Any) -> ToolOutcome:
        try:
            args = json.loads(arguments_raw) if isinstance(arguments_raw, str) else arguments_raw
            self.value = _apply(self.value, name, args or {})
        except (ValueError, TypeError, KeyError) as exc:
            return ToolOutcome(f"Error: {exc}", True)
        if name not in ("add", "reset", "total"):
            return ToolOutcome(f"Error: unknown tool {name!r}", True)
        return ToolOutcome(json.dumps({"total": self.value}))

    def check(self, segment: int) -> StateCheck:
        for call in self.segments[segment].calls:
            self.truth = _apply(self.truth, call.tool, call.arguments or {})
        ok = self.value == self.truth
        return StateCheck(segment=segment, state_ok=ok, differences=[] if ok else ["Counter.value"])


class CounterSuite:
    """``counter:N``: see the module docstring."""

    name = "counter"
    task_model = CounterTask
    field_docs: Mapping[str, tuple[str, str]] = {
        "CounterTask.start": ("the counter's first value", "{start: 3}"),
        "CounterTask.held_out": ("segment -> tools first offered there", "{held_out: {'1': [reset]}}"),
    }  # fmt: skip

    def load(self, spec: str) -> list[Scenario]:
        count = spec.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            raise ScenarioError(spec, "", "write counter:N with N a positive number of tasks")
        return [self._task(i) for i in range(int(count))]

    def _task(self, i: int) -> Scenario:
        start, a, b = 10 * i, i + 2, 2 * i + 5
        return Scenario(
            id=f"counter_{i}",
            description=f"Counter task {i}: two additions, the total, then a reset.",
            messages=[
                Message(
                    role="user",
                    content=(
                        f"The counter starts at {start}. Add {a} to it, then add {b}, "
                        "then tell me the total."
                    ),
                )
            ],  # fmt: skip
            tools=[
                Tool(name="add", description="Add an amount to the counter.", parameters=_INT),
                Tool(name="total", description="The counter's value.", parameters=_NONE),
                Tool(name="reset", description="Set the counter to zero.", parameters=_NONE),
            ],
            expect=Expectation(
                calls=[
                    ExpectedCall(tool="add", arguments={"amount": a}),
                    ExpectedCall(tool="add", arguments={"amount": b}),
                ],
                final_answer=FinalAnswerExpectation(contains=[str(start + a + b)]),
            ),  # fmt: skip
            followups=[
                Followup(
                    user="Now reset the counter.",
                    expect=Expectation(calls=[ExpectedCall(tool="reset")]),
                )
            ],  # fmt: skip
            task=SuiteTask(
                suite=self.name,
                data=CounterTask(start=start, held_out={"1": ["reset"]}).model_dump(mode="json"),
            ),
            source=f"counter:{i}",
        )

    def require(self, where: str | Path | None) -> None:
        return None

    def held_out(self, scenario: Scenario) -> Mapping[str, list[str]]:
        assert scenario.task is not None
        return CounterTask.model_validate(scenario.task.data).held_out

    def referee(self, scenario: Scenario) -> Referee:
        return Referee(scenario)

    def listing(self, specs: Sequence[str]) -> SuiteListing:
        tasks = [t for s in specs for t in self.load(s)]
        if not specs:
            return SuiteListing(
                "counter suite (counter:N)", ("suite", "tasks"), [("counter:N", "any")]
            )
        return SuiteListing(f"counter tasks in {', '.join(specs)}", ("task", "start"),
                            [(t.id, str((t.task.data if t.task else {}).get("start"))) for t in tasks])  # fmt: skip

    def score(
        self, scenario: Scenario, calls: Sequence[Any], state_checks: Sequence[StateCheck]
    ) -> tuple[SequenceMatch, set[FailureKind]]:
        segments = len(scenario.segments())
        bad = [f"seg{c.segment}:state" for c in state_checks if not c.state_ok]
        bad += [f"seg{i}:unchecked" for i in range(len(state_checks), segments)]
        match = SequenceMatch(matched=segments - len(bad), expected=segments, missing=bad)
        return match, {FailureKind.STATE_MISMATCH} if bad else set()


SUITE = CounterSuite()
