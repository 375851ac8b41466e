r"""BFCL's stateful tool backends for one run, and BFCL's per-turn state check.

A :class:`World` holds one instance of each backend class a task involves (from the
installed ``bfcl-eval``), each loaded from the task's initial state as BFCL does
(``_load_scenario(deepcopy(initial_config[cls]), long_context=...)``; ``MathAPI`` is
stateless). Both sides of a comparison start from the same state and the backends
are seeded, so identical calls give identical results.

A call's arguments are parsed with :func:`json.loads` (model output is never
evaluated as code, unlike BFCL's executor, which ``eval``\ s a call string) and the
method is called with them as keyword arguments; only public methods of the task's
backends can be called. Results are rendered as
``bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils.execute_multi_turn_func_call``
renders them: a string as is, a dict as ``json.dumps`` (``str`` if that fails), anything
else ``str``; an exception becomes ``"Error during execution: <message>"``.

:class:`Referee` runs the ground truth on a second world, turn by turn, and checks each
turn as ``multi_turn_checker`` does (``state_checker`` then ``response_checker``).

The runner asks for a call's result with :meth:`Referee.answer`: the backend method runs
in a thread of its own, off the event loop, within :data:`CALL_TIME_LIMIT` seconds (a
backend is arbitrary Python: ``logarithm(precision=300000)`` takes half a minute, and
on the loop it would stall every other run into a server timeout). A call past the
limit is the tool's error (``"Error during execution: the call did not finish within
10 s"``); its thread is left to end on its own, and the run's later calls wait for it
within their own limit (a world's calls run one at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

from harness.bfcl.data import backend_class
from harness.bfcl.task import BfclTask, task_of
from harness.scenario.model import ExpectedCall, Scenario
from harness.scenario.tools import ToolOutcome
from harness.transcript import StateCheck

__all__ = ["CALL_TIME_LIMIT", "Referee", "World", "compare_states"]

_STATELESS = {"MathAPI"}
_ERROR = "Error during execution: "
#: the longest one backend call may take, in seconds; past it the call is the tool's error
CALL_TIME_LIMIT = 10.0


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
        self.lock = threading.Lock()  # one call at a time (an overrun one may still run)
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


def _in_thread(fn: Callable[..., ToolOutcome], *args: Any) -> asyncio.Future[ToolOutcome]:
    """``fn(*args)`` in a daemon thread of its own, as a future of the running loop (a
    thread that never ends neither holds a pool's worker nor keeps the process alive)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[ToolOutcome] = loop.create_future()

    def settle(outcome: ToolOutcome | None, exc: BaseException | None) -> None:
        if fut.done():  # given up on (the time limit)
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(outcome)  # type: ignore[arg-type]

    def work() -> None:
        try:
            res, err = fn(*args), None
        except BaseException as exc:  # World.call never raises; kept for the future
            res, err = None, exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(settle, res, err)

    threading.Thread(target=work, name="bfcl-backend-call", daemon=True).start()
    return fut


class Referee:
    """The run's world, the ground truth's world, and BFCL's check of each ended turn."""

    def __init__(self, scenario: Scenario) -> None:
        task = task_of(scenario)
        if task is None:
            raise ValueError(f"scenario {scenario.id!r} is not a BFCL task")
        self.segments = scenario.segments()
        self.world = World(task)
        self.truth = World(task)
        self.results: list[str] = []  # every tool result of the run so far

    def call(self, name: str | None, arguments_raw: Any) -> ToolOutcome:
        """Answer a call of the run on the run's world (and remember its result)."""
        with self.world.lock:
            outcome = self.world.call(name, arguments_raw)
        self.results.append(outcome.content)
        return outcome

    async def answer(
        self, name: str | None, arguments_raw: Any, limit: float | None = None
    ) -> ToolOutcome:
        """:meth:`call` off the event loop, within ``limit`` seconds
        (:data:`CALL_TIME_LIMIT` by default); past it, the tool's error result."""
        limit = CALL_TIME_LIMIT if limit is None else limit
        try:
            outcome = await asyncio.wait_for(_in_thread(self._call, name, arguments_raw), limit)
        except asyncio.TimeoutError:
            outcome = ToolOutcome(f"{_ERROR}the call did not finish within {limit:g} s", True)
        self.results.append(outcome.content)
        return outcome

    def _call(self, name: str | None, arguments_raw: Any) -> ToolOutcome:
        with self.world.lock:
            return self.world.call(name, arguments_raw)

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
