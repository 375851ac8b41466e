"""BFCL's stateful tool backends for one run, and BFCL's per-turn state check.

A :class:`World` holds one instance of each backend class a task involves (from the
installed ``bfcl-eval``), each loaded from the task's initial state as BFCL does
(``_load_scenario(deepcopy(initial_config[cls]), long_context=...)``; ``MathAPI`` is
stateless). Both sides of a comparison start from the same state and the backends
are seeded, so identical calls give identical results.

A call's arguments are parsed with :func:`json.loads` (model output is never
evaluated as code, unlike BFCL's executor, which ``eval``\\ s a call string) and the
method is called with them as keyword arguments; only public methods of the task's
backends can be called. Results are rendered as
``bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils.execute_multi_turn_func_call``
renders them: a string as is, a dict as ``json.dumps`` (``str`` if that fails), anything
else ``str``; an exception becomes ``"Error during execution: <message>"``.

:class:`Referee` runs the ground truth on a second world, turn by turn, and checks each
turn as ``multi_turn_checker`` does (``state_checker`` then ``response_checker``).
"""

from __future__ import annotations

import copy
import inspect
import json
from typing import Any

from harness.bfcl.data import backend_class
from harness.scenario.model import BfclTask, ExpectedCall, Scenario
from harness.scenario.tools import ToolOutcome
from harness.transcript import StateCheck

__all__ = ["Referee", "World", "compare_states"]

_STATELESS = {"MathAPI"}
_ERROR = "Error during execution: "


def _render(result: Any) -> str:
    """A backend's return value as BFCL's executor renders it (see the module docstring)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class World:
    """The backends of one run of one BFCL task (fresh instances, the task's initial state)."""

    def __init__(self, task: BfclTask) -> None:
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        for name in task.classes:
            inst = backend_class(name)()
            if name not in _STATELESS:
                state = copy.deepcopy(task.initial_config.get(name, {}))
                inst._load_scenario(state, long_context=task.long_context)
            self.instances[name] = inst
            for meth, fn in inspect.getmembers(inst, inspect.ismethod):
                if not meth.startswith("_"):
                    self.methods[meth] = fn

    def execute(self, name: str, arguments: dict[str, Any]) -> str:
        """Call one backend method; the result as BFCL's executor renders it (never raises)."""
        fn = self.methods.get(name)
        if fn is None:
            return f"{_ERROR}name '{name}' is not defined"
        try:
            return _render(fn(**arguments))
        except Exception as exc:  # BFCL records any exception as the tool's result
            return f"{_ERROR}{exc}"

    def call(self, name: str | None, arguments_raw: Any) -> ToolOutcome:
        """Answer one tool call as received (``arguments`` a JSON object string, or an object).

        Returns:
            The tool message: the method's rendered result; ``error`` is True for an
            exception, a result holding an ``"error"`` key, or unusable arguments.
        """
        try:
            args = json.loads(arguments_raw) if isinstance(arguments_raw, str) else arguments_raw
        except json.JSONDecodeError as exc:
            return ToolOutcome(f"{_ERROR}arguments are not valid JSON ({exc.msg})", error=True)
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return ToolOutcome(f"{_ERROR}arguments are not a JSON object", error=True)
        text = self.execute(name or "", args)
        return ToolOutcome(text, error=text.startswith(_ERROR) or text.startswith('{"error"'))

    def state(self) -> dict[str, dict[str, Any]]:
        """Every backend's public attributes (what BFCL's state check compares)."""
        return {
            c: {k: v for k, v in vars(inst).items() if not k.startswith("_")}
            for c, inst in self.instances.items()
        }


def compare_states(model: World, truth: World) -> list[str]:
    """``"Class.attribute"`` of every public attribute of ``truth``'s backends that differs
    in ``model`` (``multi_turn_checker._compare_instances``: ``!=`` per attribute)."""
    out = []
    for cls, gt in truth.instances.items():
        mine = model.instances[cls]
        for attr in vars(gt):
            if not attr.startswith("_") and getattr(mine, attr, None) != getattr(gt, attr):
                out.append(f"{cls}.{attr}")
    return out


def _missing(expected: list[str], seen: list[str]) -> list[str]:
    """Items of ``expected`` not in ``seen``, as multisets (``_is_subsequence_unordered``)."""
    pool = list(seen)
    out = []
    for item in expected:
        if item in pool:
            pool.remove(item)
        else:
            out.append(item[:200])
    return out


class Referee:
    """The run's world, the ground truth's world, and BFCL's check of each ended turn."""

    def __init__(self, scenario: Scenario) -> None:
        assert scenario.bfcl is not None
        self.segments = scenario.segments()
        self.world = World(scenario.bfcl)
        self.truth = World(scenario.bfcl)
        self.results: list[str] = []  # every tool result of the run so far

    def call(self, name: str | None, arguments_raw: Any) -> ToolOutcome:
        """Answer a call of the run on the run's world (and remember its result)."""
        outcome = self.world.call(name, arguments_raw)
        self.results.append(outcome.content)
        return outcome

    def check(self, segment: int) -> StateCheck:
        """Execute ``segment``'s ground truth on the ground truth's world, then check.

        A segment with no ground-truth calls (a turn BFCL expects no call in) is
        checked for state only, and always passes BFCL's response check.
        """
        calls: list[ExpectedCall] = self.segments[segment].calls
        # a deep copy: a backend may keep (and later change) a list it was given
        expected = [self.truth.execute(c.tool, copy.deepcopy(c.arguments)) for c in calls]
        diff = compare_states(self.world, self.truth) if calls else []
        missing = _missing(expected, self.results)
        return StateCheck(
            segment=segment, state_ok=not diff, differences=diff, missing_results=missing
        )
