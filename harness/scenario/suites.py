"""Scenario suites: libraries of tasks with stateful tools, registered, never imported here.

A suite (BFCL's multi-turn tasks: :mod:`harness.bfcl`) is one object implementing
:class:`Suite`, registered under its name in the ``harness.suites`` entry-point group
(``pyproject.toml``: ``bfcl = "harness.bfcl.suite:SUITE"``), the way pytest finds its
plugins; :func:`register_suite` adds one at run time (a plugin, a test). The name is the
suite's prefix everywhere:

- ``<name>:<spec>`` given as a scenario path loads the suite's tasks
  (:func:`harness.scenario.model.load_scenarios`, the reference server's index);
- ``<name>: {...}`` in a scenario file (or a recorded run's scenario) is one of its tasks
  (:attr:`harness.scenario.model.Scenario.task`), validated by :attr:`Suite.task_model`;
- the runner asks :meth:`Suite.referee` for the tool results of a task's run and for the
  check of each segment as it ends (:class:`Referee`), and offers the tools
  :meth:`Suite.held_out` holds back until a later segment;
- scoring asks :meth:`Suite.score` for the task's sequence match (the suite's own pass
  criteria, from the run's :class:`harness.transcript.StateCheck` list).

A second suite is therefore a new package plus one registration; no module of the harness
names it. Lookups raise :class:`harness.errors.ScenarioError` naming the unknown suite and
the registered ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from harness.errors import ScenarioError
from harness.kinds import FailureKind
from harness.transcript import StateCheck

if TYPE_CHECKING:
    from harness.scenario.model import Scenario
    from harness.scenario.tools import ToolOutcome

__all__ = [
    "ENTRY_POINT_GROUP",
    "Referee",
    "Suite",
    "SuiteListing",
    "get_suite",
    "register_suite",
    "registered_suites",
    "suite_of_spec",
    "unregister_suite",
    "unregistered_message",
    "unregistered_spec",
]

#: the entry-point group a suite registers in (``[project.entry-points."harness.suites"]``)
ENTRY_POINT_GROUP = "harness.suites"


@runtime_checkable
class Referee(Protocol):
    """The tool backends of one run of one task: answers calls, checks ended segments."""

    async def answer(self, name: str | None, arguments_raw: Any) -> ToolOutcome:
        """The result of one call (``arguments_raw``: as the model sent them, a JSON
        string or already parsed); never raises on bad arguments (an error result)."""
        ...

    def check(self, segment: int) -> StateCheck:
        """The suite's check of ``segment`` (0 = the opening), called once as it ends."""
        ...


@dataclass(frozen=True)
class SuiteListing:
    """What ``harness list`` shows of a suite: a table's title, column names, rows (text
    cells, one per column) and an optional caption (e.g. the install command)."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    caption: str | None = None


@runtime_checkable
class Suite(Protocol):
    """A library of tasks with stateful tools (see the module docstring).

    ``name``: the prefix (``bfcl``), a Python identifier. ``task_model``: the pydantic
    model of a task as written under ``<name>:`` in a scenario file. ``field_docs``:
    ``"Model.field" -> (meaning, example)`` for the scenario reference
    (:mod:`harness.scenario.reference`), one row per field of ``task_model``.
    """

    name: str
    task_model: type[BaseModel]
    field_docs: Mapping[str, tuple[str, str]]

    def load(self, spec: str) -> list[Scenario]:
        """The tasks ``spec`` (``"<name>:..."``) names, as scenarios with :attr:`Scenario.task` set.

        Raises:
            ScenarioError: an unknown spec, or the suite's data missing (naming the fix).
        """
        ...

    def require(self, where: str | Path | None) -> None:
        """Check that a task can run here (its backends importable).

        Raises:
            ScenarioError: naming ``where`` and the install command.
        """
        ...

    def held_out(self, scenario: Scenario) -> Mapping[str, list[str]]:
        """Segment index (a string) -> tools first offered at that segment."""
        ...

    def listing(self, specs: Sequence[str]) -> SuiteListing:
        """``harness list``'s table: of the suite's specs given (``specs``), or, when none
        is, of what the suite offers. Never raises for a missing optional dependency
        (the caption says how to install it)."""
        ...

    def referee(self, scenario: Scenario) -> Referee:
        """Fresh backends for one run of ``scenario``."""
        ...

    def score(
        self, scenario: Scenario, calls: Sequence[Any], state_checks: Sequence[StateCheck]
    ) -> tuple[Any, set[FailureKind]]:
        """The run's sequence match and failure kinds by the suite's own criteria.

        ``calls``: the run's parsed calls (:class:`harness.scoring.calls.ParsedCall`);
        returns ``(harness.scoring.models.SequenceMatch, kinds)``. Pure.
        """
        ...


_added: dict[str, Suite] = {}
_found: dict[str, Suite] | None = None


def _discovered() -> dict[str, Suite]:
    """The entry points' suites, once per process; one that cannot be loaded, or is not a
    :class:`Suite` of its name, is left out with a warning (the others still load)."""
    global _found
    if _found is None:
        found: dict[str, Suite] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                suite = ep.load()
            except Exception as exc:  # a broken suite package must not break every scenario
                warnings.warn(f"scenario suite {ep.name} = {ep.value!r} not loaded: "
                              f"{type(exc).__name__}: {exc}", stacklevel=2)  # fmt: skip
                continue
            if not isinstance(suite, Suite) or suite.name != ep.name:
                warnings.warn(f"scenario suite {ep.name} = {ep.value!r} ({ENTRY_POINT_GROUP}) "
                              f"is not a Suite named {ep.name!r}: not loaded", stacklevel=2)  # fmt: skip
                continue
            found[ep.name] = suite
        _found = found
    return _found


def registered_suites() -> dict[str, Suite]:
    """Every suite by name: the entry points', then those :func:`register_suite` added."""
    return {**_discovered(), **_added}


def register_suite(suite: Suite) -> None:
    """Register ``suite`` under ``suite.name`` for this process (a plugin, a test).

    Raises:
        TypeError: ``suite`` does not implement :class:`Suite`.
        ValueError: the name is not an identifier.
    """
    if not isinstance(suite, Suite):
        raise TypeError(f"{suite!r} does not implement harness.scenario.suites.Suite")
    if not suite.name.isidentifier():
        raise ValueError(f"suite name {suite.name!r} must be an identifier")
    _added[suite.name] = suite


def unregister_suite(name: str) -> None:
    """Forget a suite :func:`register_suite` added (no error if it was not)."""
    _added.pop(name, None)


def get_suite(name: str) -> Suite:
    """The suite registered as ``name``.

    Raises:
        ScenarioError: no suite of that name (the registered ones are named).
    """
    suites = registered_suites()
    if name not in suites:
        known = ", ".join(sorted(suites)) or "none"
        raise ScenarioError(
            name, "", f"no scenario suite named {name!r} is installed (registered: {known})"
        )
    return suites[name]


def suite_of_spec(text: str) -> Suite | None:
    """The suite a scenario path names (``"bfcl:multi_turn_base"`` -> BFCL's), else ``None``
    (a file or directory)."""
    name, colon, _ = str(text).partition(":")
    if not colon or not name.isidentifier():
        return None
    return registered_suites().get(name)


def unregistered_spec(text: str) -> str | None:
    """The suite name ``text`` is written for (``"bfcl:multi_turn_base"`` -> ``"bfcl"``)
    when no suite of that name is registered, else ``None`` (a registered suite, or not
    the ``<name>:<spec>`` form)."""
    name, colon, _ = str(text).partition(":")
    if not colon or not name.isidentifier() or name in registered_suites():
        return None
    return name


def unregistered_message(name: str) -> str:
    """One clause: no suite ``name`` is registered, the registered ones, and the fix."""
    known = ", ".join(sorted(registered_suites())) or "none"
    return (
        f"no scenario suite named {name!r} is registered (registered: {known}; a suite "
        "registers in the `harness.suites` entry points: reinstall with `pip install -e .`)"
    )
