"""Which runs the report shows turn by turn, and the compact facts of all the others.

A results folder may hold thousands of transcripts; a report that renders them all
cannot be opened (10,000 transcripts made 519 MB of HTML). The report reads
``transcripts.jsonl`` twice, streaming: the first pass keeps a :class:`RunFacts` of a
few hundred bytes per run (and the byte offset of its line); :func:`choose` then picks
the runs to render; the second pass parses only their lines.

The choice, per scenario: at most ``per_scenario`` (repeat, stream mode) keys, each
rendered with the run of every side: first a failing run of each side, then a passing
run of each side, then the lowest other repeats. Failing/passing is ``RunScore.passed``
from ``scores.jsonl``; in a folder never scored, a run that did not stop with a final
answer counts as failing (a raw fact, not a score). Over the whole report at most
``max_runs`` runs are rendered; scenarios are served in order of need (REGRESSION,
INCONCLUSIVE, other verdicts, then scenarios with a failing run, then the rest, each
by id), so a reviewer always sees the evidence of a regression first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.transcript import RunRecord, TargetInfo

__all__ = ["LIST_LIMIT", "MAX_RUNS", "PER_SCENARIO", "RunFacts", "choose"]

#: (repeat, mode) keys rendered turn by turn per scenario (each with every side's run)
PER_SCENARIO = 3
#: runs rendered turn by turn in the whole report
MAX_RUNS = 200
#: runs listed compactly per scenario and side (beyond them: "N more runs")
LIST_LIMIT = 20

_URGENCY = {"REGRESSION": 0, "INCONCLUSIVE": 1, "IMPROVEMENT": 2, "NO CHANGE": 3}


@dataclass(frozen=True)
class RunFacts:
    """Raw facts of one run, kept for every run of a folder (the record is not).

    ``calls_per_turn``: tool calls the model made at each turn; ``offset``: byte offset
    of the run's line in ``transcripts.jsonl``; ``target``: the first target seen for
    the run's side (shared between runs); ``passed``: from its score (None: not scored,
    or an infrastructure error); ``score_offset``: byte offset of its line in
    ``scores.jsonl`` (None: not scored).
    """

    run_key: str
    scenario_id: str
    side: str
    label: str
    repeat: int
    stream: bool
    stop_reason: str
    n_calls: int
    calls_per_turn: tuple[int, ...]
    target: TargetInfo
    offset: int
    passed: bool | None = None
    score_offset: int | None = None

    @property
    def is_infra_error(self) -> bool:
        """Whether the run ended on an infrastructure error."""
        return self.stop_reason == "error"

    @property
    def key(self) -> tuple[int, bool]:
        """The (repeat, stream) key that pairs this run with the other sides' runs."""
        return (self.repeat, self.stream)

    @classmethod
    def of(
        cls,
        rec: RunRecord,
        target: TargetInfo,
        offset: int,
        passed: bool | None = None,
        score_offset: int | None = None,
    ) -> RunFacts:
        """The facts of ``rec``, whose line starts at byte ``offset`` of ``transcripts.jsonl``."""
        calls = tuple(len(t.response.tool_calls) if t.response else 0 for t in rec.turns)
        return cls(
            rec.run_key, rec.scenario_id, rec.side, rec.target.label, rec.repeat, rec.stream,
            rec.stop_reason, sum(calls), calls, target, offset, passed, score_offset,
        )  # fmt: skip


def _passed(run: RunFacts) -> bool | None:
    """Passed (True), failed (False) or not judged (None: infrastructure error); for a
    run never scored, whether it stopped with a final answer."""
    if run.is_infra_error:
        return None
    if run.score_offset is not None:
        return run.passed
    return run.stop_reason == "final_answer"


def _keys(runs: list[RunFacts], sides: list[str], n: int) -> list[Any]:
    """Up to ``n`` (repeat, stream) keys: a failing run per side, a passing one, the rest."""
    ordered = sorted(runs, key=lambda r: r.key)
    picks: list[tuple[int, bool]] = []
    for want in (False, True):
        for side in sides:
            hit = next((r for r in ordered if r.side == side and _passed(r) is want), None)
            if hit is not None and hit.key not in picks:
                picks.append(hit.key)
    picks += [k for k in dict.fromkeys(r.key for r in ordered) if k not in picks]
    return picks[:n]


def _urgency(sid: str, runs: list[RunFacts], verdicts: Mapping[str, str]) -> tuple[int, str]:
    if sid in verdicts:
        return (_URGENCY.get(verdicts[sid], 3), sid)
    failing = any(_passed(r) is False for r in runs)
    return (3 if failing else 4, sid)


def choose(
    runs: Iterable[RunFacts],
    sides: list[str],
    *,
    verdicts: Mapping[str, str] | None = None,
    per_scenario: int = PER_SCENARIO,
    max_runs: int = MAX_RUNS,
) -> dict[str, list[tuple[int, bool]]]:
    """Scenario id -> the (repeat, stream) keys rendered turn by turn, in display order.

    ``verdicts``: scenario id -> the comparison's verdict. A scenario whose keys do not fit in ``max_runs`` gets
    none (its runs are still listed compactly).
    """
    verdicts = verdicts or {}
    by_sid: dict[str, list[RunFacts]] = {}
    for r in runs:
        by_sid.setdefault(r.scenario_id, []).append(r)
    out: dict[str, list[tuple[int, bool]]] = {sid: [] for sid in by_sid}
    budget = max_runs
    for sid in sorted(by_sid, key=lambda s: _urgency(s, by_sid[s], verdicts)):
        keys = _keys(by_sid[sid], sides, per_scenario)
        cost = [sum(1 for r in by_sid[sid] if r.key == k) for k in keys]
        while keys and sum(cost) > budget:
            keys, cost = keys[:-1], cost[:-1]
        out[sid] = sorted(keys)
        budget -= sum(cost)
    return out
