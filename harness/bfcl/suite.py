"""BFCL's multi-turn tasks as a registered scenario suite (:data:`SUITE`, entry point
``bfcl`` of ``harness.suites``: :mod:`harness.scenario.suites`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bfcl.task import BfclTask, task_of
from harness.kinds import FailureKind
from harness.scenario.model import Scenario
from harness.scenario.suites import SuiteListing
from harness.transcript import StateCheck

if TYPE_CHECKING:
    from harness.bfcl.backends import Referee

__all__ = ["SUITE", "BfclSuite"]


class BfclSuite:
    """``bfcl:<category>[:N]``: BFCL's tasks from the installed ``bfcl-eval``
    (:func:`harness.bfcl.data.load_suite`), answered by BFCL's backends
    (:class:`harness.bfcl.backends.Referee`) and scored by BFCL's multi-turn criteria
    (:func:`harness.scoring.bfcl.bfcl_sequence`)."""

    name = "bfcl"
    task_model = BfclTask
    field_docs: Mapping[str, tuple[str, str]] = {
        "BfclTask.category": ("the BFCL category", "{category: multi_turn_base}"),
        "BfclTask.task_id": ("the task's BFCL id", "{task_id: multi_turn_base_0}"),
        "BfclTask.version": ("the bfcl-eval release it came from", "{version: 2026.3.23}"),
        "BfclTask.classes": ("the backend classes (`involved_classes`)", "{classes: [GorillaFileSystem]}"),
        "BfclTask.initial_config": ("each class's initial state", "{initial_config: {MathAPI: {}}}"),
        "BfclTask.long_context": ("BFCL's long-context flag", "{long_context: true}"),
        "BfclTask.held_out": ("segment -> tools first offered there (`miss_func`)", "{held_out: {'2': [sort]}}"),
    }  # fmt: skip

    def load(self, spec: str) -> list[Scenario]:
        """:func:`harness.bfcl.data.load_suite`."""
        from harness.bfcl.data import load_suite

        return load_suite(spec)

    def require(self, where: str | Path | None) -> None:
        """:func:`harness.bfcl.data.require_bfcl`."""
        from harness.bfcl.data import require_bfcl

        require_bfcl(where)

    def held_out(self, scenario: Scenario) -> Mapping[str, list[str]]:
        """``BfclTask.held_out`` (the ``miss_func`` categories' tools offered later)."""
        task = task_of(scenario)
        return task.held_out if task is not None else {}

    def listing(self, specs: Sequence[str]) -> SuiteListing:
        """Tasks per backend in the named suites, or every category with its task count
        (``-`` and the install command when bfcl-eval is missing)."""
        from harness.bfcl.data import INSTALL_HINT, available_suites, backend_counts, load_suite

        if specs:
            counts = backend_counts([sc for p in specs for sc in load_suite(p)])
            return SuiteListing(f"BFCL tasks per backend in {', '.join(specs)}",
                                ("backend", "tasks"),
                                [(b, str(n)) for b, n in counts.items()])  # fmt: skip
        suites = available_suites()
        return SuiteListing(
            "BFCL suites (harness run/compare bfcl:<suite>[:N])", ("suite", "tasks"),
            [(name, "-" if n is None else str(n)) for name, n in suites],
            INSTALL_HINT if any(n is None for _, n in suites) else None,
        )  # fmt: skip

    def referee(self, scenario: Scenario) -> Referee:
        """A :class:`harness.bfcl.backends.Referee` (needs bfcl-eval, there if the task loaded)."""
        from harness.bfcl.backends import Referee

        return Referee(scenario)

    def score(
        self, scenario: Scenario, calls: Sequence[Any], state_checks: Sequence[StateCheck]
    ) -> tuple[Any, set[FailureKind]]:
        """:func:`harness.scoring.bfcl.bfcl_sequence`."""
        from harness.scoring.bfcl import bfcl_sequence

        return bfcl_sequence(scenario, calls, state_checks)


#: the registered suite (``pyproject.toml``: ``[project.entry-points."harness.suites"]``)
SUITE = BfclSuite()
