"""The report's "BFCL tasks by backend" table: the tasks of a BFCL suite grouped by the
stateful backend they use (a scenario tag ``backend:<class>``, set by :mod:`harness.bfcl`).

A view only (pure): it arranges what the run folder holds (each scenario's tags, each
run's pass/fail, each scenario's verdict) and scores nothing. A task using two backends
is counted under both.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness.present.report.load import ReportInput
from harness.present.report.view import SideView

__all__ = ["BackendRow", "backend_rows"]

_TAG = "backend:"


@dataclass
class BackendRow:
    """One backend: its tasks, runs passed per side (``"k/n"``), verdicts of its tasks."""

    backend: str
    tasks: int
    passed: list[str]
    verdicts: str  # e.g. "3 REGRESSION, 47 NO CHANGE" ("" outside a comparison)


def _tasks_by_backend(rf: ReportInput) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for sid, header in rf.headers.items():
        for tag in header.get("tags") or []:
            if isinstance(tag, str) and tag.startswith(_TAG):
                out.setdefault(tag[len(_TAG) :], set()).add(sid)
    return dict(sorted(out.items()))


def backend_rows(rf: ReportInput, sides: list[SideView]) -> list[BackendRow]:
    """One row per backend, sorted by name; ``[]`` when no scenario is a BFCL task."""
    verdicts = {c.scenario_id: c.verdict for c in rf.summary.comparisons} if rf.summary else {}
    rows = []
    for name, sids in _tasks_by_backend(rf).items():
        passed = []
        for side in sides:
            runs = [r for r in rf.runs if r.side == side.key and r.scenario_id in sids]
            scored = [r for r in runs if r.passed is not None]
            passed.append(f"{sum(1 for r in scored if r.passed)}/{len(scored)}")
        count = Counter(verdicts[s] for s in sids if s in verdicts)
        text = ", ".join(f"{n} {v}" for v, n in sorted(count.items()))
        rows.append(BackendRow(name, len(sids), passed, text))
    return rows
