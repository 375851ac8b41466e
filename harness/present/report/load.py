"""Read a run folder for the report: every input is optional but the folder itself.

Inputs, all read through :class:`harness.runfolder.RunFolder` (the report recomputes no
score):

- ``manifest.json``, ``summary.json`` (small: aggregates, comparisons, verdict);
- ``scores.jsonl``, streamed: per run only whether it passed and where its score is,
  plus the first drifting run per (side, scenario) whose trace the report shows;
- ``transcripts.jsonl``, streamed: per run a :class:`~harness.present.report.select.RunFacts`
  of a few hundred bytes; then only the runs :func:`~harness.present.report.select.choose`
  picks are parsed whole, with their scores;
- ``gsm8k.json`` (:class:`harness.gsm8k.models.GSM8KSummary`), ``boot.json``
  (:class:`harness.server.boot.BootReport`), ``matrix.json``
  (:class:`harness.matrix.result.MatrixResult`).

A file that is present but unreadable raises :class:`harness.errors.ReportInputError`
naming the file and the fix; a missing optional file is simply ``None``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ReportInputError, RunFolderError
from harness.gsm8k.models import GSM8KSummary
from harness.matrix.result import MatrixResult
from harness.numerics.models import LogprobsResult
from harness.present.report.select import MAX_RUNS, PER_SCENARIO, RunFacts, choose
from harness.present.views import Trace, first_drift
from harness.runfolder import RunFolder
from harness.scoring.models import RunScore
from harness.server.boot import BootReport
from harness.summary import Summary
from harness.transcript import RunManifest, RunRecord, TargetInfo

__all__ = ["ReportInput", "load_run_folder"]


@dataclass
class ReportInput:
    """Everything the report reads from ``results/<run-id>/``.

    ``runs``: the facts of every run; ``records``/``scores``: only the runs rendered turn
    by turn (scores by ``run_key``); ``shown``: scenario id -> their (repeat, stream)
    keys; ``traces``: (side, scenario) -> the first drifting run's trace; ``headers``:
    scenario id -> description, targets, opening messages.
    """

    folder: RunFolder
    manifest: RunManifest | None
    summary: Summary | None = None
    runs: list[RunFacts] = field(default_factory=list)
    records: list[RunRecord] = field(default_factory=list)
    scores: dict[str, RunScore] = field(default_factory=dict)
    traces: dict[tuple[str, str], Trace] = field(default_factory=dict)
    shown: dict[str, list[tuple[int, bool]]] = field(default_factory=dict)
    headers: dict[str, dict[str, Any]] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    gsm8k: GSM8KSummary | None = None
    boot: BootReport | None = None
    logprobs: LogprobsResult | None = None
    matrix: MatrixResult | None = None

    @property
    def path(self) -> Path:
        """The run folder's path."""
        return self.folder.path


def _scan_scores(ri: ReportInput) -> dict[str, tuple[bool | None, int]]:
    """run_key -> (passed, or None for an infrastructure error; byte offset in
    ``scores.jsonl``); fills ``ri.traces`` with the first drifting run's trace per side x
    scenario (:func:`harness.present.views.first_drift`, in the same pass)."""
    heads: dict[str, tuple[bool | None, int]] = {}

    def scores() -> Iterator[RunScore]:
        for offset, score in ri.folder.scores_with_offsets():
            heads[score.run_key] = (None if score.infra_error else score.passed, offset)
            yield score

    ri.traces = first_drift(scores())
    return heads


def _scan_transcripts(ri: ReportInput, heads: dict[str, tuple[bool | None, int]]) -> None:
    """Every run's facts (a later line with the same ``run_key`` replaces an earlier one),
    each scenario's header and the first run's sampling settings."""
    runs: dict[str, RunFacts] = {}
    targets: dict[str, TargetInfo] = {}
    for offset, rec in ri.folder.records_with_offsets():
        target = targets.setdefault(rec.side, rec.target)
        passed, score_at = heads.get(rec.run_key, (None, None))
        runs[rec.run_key] = RunFacts.of(rec, target, offset, passed, score_at)
        if rec.scenario_id not in ri.headers:
            ri.headers[rec.scenario_id] = {
                k: rec.scenario.get(k) for k in ("description", "targets", "messages", "tags")
            }
        ri.sampling = ri.sampling or dict(rec.sampling)
    ri.runs = list(runs.values())


def _load_rendered(ri: ReportInput, per_scenario: int, max_runs: int) -> None:
    verdicts = {c.scenario_id: c.verdict for c in ri.summary.comparisons} if ri.summary else {}
    sides = list(dict.fromkeys(r.side for r in ri.runs))
    ri.shown = choose(
        ri.runs, sides, verdicts=verdicts, per_scenario=per_scenario, max_runs=max_runs
    )
    chosen = [r for r in ri.runs if r.key in ri.shown.get(r.scenario_id, ())]
    ri.records = [rec for _, rec in ri.folder.records_at(r.offset for r in chosen)]
    offsets = [r.score_offset for r in chosen if r.score_offset is not None]
    ri.scores = {s.run_key: s for _, s in ri.folder.scores_at(offsets)}


def load_run_folder(
    path: str | Path, *, per_scenario: int = PER_SCENARIO, max_runs: int = MAX_RUNS
) -> ReportInput:
    """Load a run folder (streaming; see the module docstring).

    Raises:
        ReportInputError: the folder is missing, holds nothing to report, or a file in it
            cannot be read.
    """
    try:
        folder = RunFolder.open(path)
        ri = ReportInput(folder=folder, manifest=folder.manifest(), summary=folder.read_summary())
        ri.gsm8k = folder.read_model(RunFolder.GSM8K_SUMMARY, GSM8KSummary)
        ri.boot = folder.read_model(RunFolder.BOOT, BootReport)
        ri.logprobs = folder.read_model(RunFolder.LOGPROBS, LogprobsResult)
        ri.matrix = folder.read_model(RunFolder.MATRIX, MatrixResult)
        _scan_transcripts(ri, _scan_scores(ri))
        _load_rendered(ri, per_scenario, max_runs)
    except ReportInputError:
        raise
    except RunFolderError as exc:
        raise ReportInputError(str(exc)) from None
    if (
        not ri.runs
        and ri.summary is None
        and ri.gsm8k is None
        and ri.boot is None
        and not ri.logprobs
    ):
        raise ReportInputError(
            f"{folder.path}: nothing to report (no transcripts.jsonl, summary.json, gsm8k.json "
            "or boot.json); run `harness run`, `compare`, `gsm8k` or `boot` first"
        )
    return ri
