"""State of one pytest session of the plugin: targets, the run folder, results, the verdict.

One :class:`HarnessState` lives in ``config.stash`` (as pytest's junitxml keeps its
``LogXML``). It creates the run folder on first use (``<results>/pytest-<stamp>-<pid>/``,
exactly as ``harness run`` creates its folders, with ``manifest.json``), runs scenarios
through :func:`harness.runner.run_many_sync` (records appended to ``transcripts.jsonl``),
scores them (:func:`harness.scoring.score.score_run`), compares the sides when a baseline is
given (:mod:`harness.pipeline`), and at the end of the session writes ``summary.json`` and
the HTML report (:mod:`harness.present.report`) from the folder, as the CLI does.

With a baseline (a server URL, or a recording's folder) the runs come in the sequential
rounds of ``harness compare`` (:mod:`harness.pytest_plugin.baseline`): batched, one
:func:`harness.pipeline.compare` over every selected scenario (a recorded baseline's runs
copied into the run folder round by round, only the target live), whose final comparison
judges every test; with ``--harness-batch off``, rounds of each test's own.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from harness.pytest_plugin.options import HarnessSettings

if TYPE_CHECKING:  # imported lazily: `pytest` starts fast when no harness test runs
    from harness.client.target import TargetConfig
    from harness.pytest_plugin.baseline import SelectedRecording
    from harness.recording import RecordedSide
    from harness.runfolder import RunFolder
    from harness.runner import SamplingPolicy
    from harness.scenario.model import Scenario
    from harness.scoring.models import RunScore
    from harness.summary import Settings as SummarySettings
    from harness.summary import Summary
    from harness.transcript import RunRecord

__all__ = ["HarnessState", "ItemResult", "NO_TARGET", "ScenarioRun", "state_key"]

#: the one reason every harness test is skipped with when no server is configured
NO_TARGET = (
    "no --harness-target given (or HARNESS_TARGET, ini harness_target): harness tests skipped"
)


@dataclass
class ScenarioRun:
    """The runs of one scenario test: records, their scores, and with a baseline the
    summary comparing the two sides on them."""

    records: list[RunRecord]
    scores: list[RunScore]
    summary: Summary | None = None


@dataclass
class ItemResult:
    """One finished harness test, for the terminal summary."""

    nodeid: str
    outcome: str  # passed | failed | infra
    headline: str
    verdict: str | None = None


@dataclass
class HarnessState:
    """Everything the plugin keeps for one session (see the module docstring)."""

    settings: HarnessSettings
    results: list[ItemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # lines for the terminal summary
    scenario_ids: set[str] = field(default_factory=set)  # collected scenarios
    #: scenario files asked for by name but not collected: no target (the plugin inert)
    not_collected: int = 0
    summary: Summary | None = None  # summary.json, once written
    planned: list[tuple[Scenario, bool]] = field(default_factory=list)  # selected tests
    #: with a baseline and batching: the session's comparison (its last look)
    compared: Summary | None = None
    _batched: bool = False
    _batch_error: str | None = None
    _run_dir: Path | None = None
    _recording: SelectedRecording | None = None
    _compared_runs: dict[tuple[str, bool], ScenarioRun] | None = None
    #: the numerics section's line, told by its hook (shown after the summary's)
    _numerics_notes: list[str] = field(default_factory=list)
    _numerics_ran: bool = False  # once per session, batched (in compare) or not

    # ------------------------------------------------------------ targets

    def target(self) -> TargetConfig | None:
        """The server under test (side ``candidate`` when a baseline is given)."""
        from harness.client.target import target_from_options

        s = self.settings
        if not s.target:
            return None
        side: Literal["candidate"] | None = "candidate" if s.baseline else None
        label = "candidate" if s.baseline else "target"
        return target_from_options(s.target, label=label, side=side, options=s)

    def baseline(self) -> TargetConfig | RecordedSide | None:
        """The baseline: a server (:class:`~harness.client.target.TargetConfig`), a
        recording (:class:`~harness.recording.RecordedSide`, opened and checked by
        :meth:`check_baseline`), or ``None``."""
        from harness.client.target import target_from_options
        from harness.recording import is_recording_ref

        s = self.settings
        if not s.baseline:
            return None
        if is_recording_ref(s.baseline):
            from harness.pytest_plugin.baseline import recorded_side

            return recorded_side(self.recording())
        return target_from_options(
            s.baseline, label="baseline", side="baseline", options=s,
            model=s.baseline_model or s.model,
        )  # fmt: skip

    def recording(self) -> SelectedRecording:
        """The recorded baseline, opened and checked on first use (:meth:`check_baseline`,
        at collection; here, in a test, a recording that cannot serve fails it in one
        line)."""
        if self._recording is None:
            try:
                self.check_baseline(list({sc.id: sc for sc, _ in self.planned}.values()))
            except pytest.UsageError as exc:
                pytest.fail(str(exc), pytrace=False)
        assert self._recording is not None
        return self._recording

    def check_baseline(self, scenarios: list[Scenario]) -> None:
        """Open a recorded ``--harness-baseline`` and check it against ``scenarios`` (the selected
        ones) and the session's settings (:func:`~harness.pytest_plugin.baseline.open_recording`).

        Raises:
            pytest.UsageError: it cannot serve, in one line (``--harness-baseline: ...``).
        """
        from harness.errors import RecordingError
        from harness.pytest_plugin.baseline import open_recording

        try:
            self._recording = open_recording(self.settings, scenarios)
        except RecordingError as exc:
            raise pytest.UsageError(f"--harness-baseline: {exc}") from None

    def _check_one(self, scenario: Scenario) -> None:
        """Check the recording against one more scenario; a recording that cannot serve
        it fails the test in one line."""
        from harness.errors import RecordingError
        from harness.pytest_plugin.baseline import open_recording

        assert self._recording is not None
        try:
            open_recording(self.settings, [scenario], self._recording.whole)
        except RecordingError as exc:
            pytest.fail(f"--harness-baseline: {exc}", pytrace=False)

    def targets(self) -> list[TargetConfig]:
        """The live servers: ``[target]`` or ``[baseline, candidate]`` (a recorded baseline
        is not one); skips the test if there is no target."""
        from harness.client.target import TargetConfig

        target = self.target()
        if target is None:
            pytest.skip(NO_TARGET)
        base = self.baseline()
        return [base, target] if isinstance(base, TargetConfig) else [target]

    # ------------------------------------------------------------ run folder

    @property
    def has_run_dir(self) -> bool:
        """Whether the session's run folder was created yet."""
        return self._run_dir is not None

    def run_dir(self) -> Path:
        """The session's run folder, created (with ``manifest.json``) on first use."""
        if self._run_dir is None:
            from harness.runfolder import DEFAULT_RESULTS, RunFolder, new_run_id

            root = Path(self.settings.results) if self.settings.results else DEFAULT_RESULTS
            run_id = base = new_run_id("pytest")
            for n in range(2, 1000):  # two sessions of one process in one second
                if not (root / run_id).exists():
                    break
                run_id = f"{base}-{n}"
            self._run_dir = RunFolder.create(
                "pytest", results=root, run_id=run_id, args=self.settings.public(),
                extra={"runner": "pytest plugin"},
            ).path  # fmt: skip
        return self._run_dir

    # ------------------------------------------------------------ running

    def run_planned(self) -> None:
        """Batching (``--harness-batch on``, the default): on the first call, run every
        selected scenario test's runs in one :func:`harness.runner.run_many_sync` per stream
        mode, so ``--harness-concurrency`` runs are in flight across scenarios, as with
        ``harness run``. Each test then reads its runs back from the folder."""
        if self._batched or not self.settings.batch or not self.planned:
            return
        from harness.runner import run_many_sync

        self._batched = True
        targets, folder = self.targets(), self.run_dir()
        if self.settings.baseline:
            self._compare_planned()
            return
        for stream in (False, True):
            scenarios = list({sc.id: sc for sc, mode in self.planned if mode == stream}.values())
            if scenarios:
                run_many_sync(
                    scenarios, targets, repeats=self.settings.repeats, stream=stream,
                    concurrency=self.settings.concurrency, out_dir=folder, progress=False,
                    sampling=self.sampling(),
                )  # fmt: skip

    def _compare_planned(self) -> None:
        """Batched with a baseline: :func:`harness.pipeline.compare` over every selected
        scenario, in compare's sequential rounds, into the run folder."""
        from harness.pipeline import compare
        from harness.pytest_plugin.baseline import compare_settings
        from harness.runfolder import RunFolder

        scenarios = list({sc.id: sc for sc, _ in self.planned}.values())
        base, cand = self.baseline(), self.target()
        assert base is not None and cand is not None
        settings = compare_settings(self.settings, [sc.id for sc in scenarios])
        try:
            self.compared = compare(
                scenarios, base, cand, settings=settings, folder=RunFolder(self.run_dir()),
                progress=False, after_runs=self._numerics_hook(),
            )  # fmt: skip
        except Exception as exc:
            self._batch_error = f"{type(exc).__name__}: {exc}"
            raise

    def scenario_run(self, scenario: Scenario, stream: bool) -> ScenarioRun:
        """The runs a scenario test judges: with a baseline, from the session's comparison
        (batched) or rounds of its own (``--harness-batch off``); else
        :meth:`run_scenario`."""
        if self._batch_error is not None:
            pytest.fail(f"the session's comparison failed: {self._batch_error}", pytrace=False)
        if not self.settings.baseline:
            return self.run_scenario(scenario, stream)
        if self.compared is not None:
            runs = self._compared_scenario_runs()
            found = runs.get((scenario.id, stream))
            return found or ScenarioRun([], [], self.compared)
        from harness.pytest_plugin.baseline import scenario_rounds
        from harness.runfolder import RunFolder

        base, cand = self.baseline(), self.target()
        assert base is not None and cand is not None
        if self._recording is not None and scenario.id not in self._recording.selected:
            self._check_one(scenario)  # not among the collected (an xdist worker's share)
        records, scores, summary = scenario_rounds(
            scenario, stream, (base, cand), RunFolder(self.run_dir()), self.settings
        )
        return ScenarioRun(records, scores, summary)

    def _compared_scenario_runs(self) -> dict[tuple[str, bool], ScenarioRun]:
        """The session comparison's records and scores by (scenario, stream mode), read
        once from the run folder (``scores.jsonl`` holds the last record of each run)."""
        if self._compared_runs is None:
            from harness.runfolder import RunFolder

            folder = RunFolder(self.run_dir())
            offsets = {key: offset for offset, key in folder.run_keys_with_offsets()}
            out: dict[tuple[str, bool], ScenarioRun] = {}
            scores = {s.run_key: s for _, s in folder.scores_with_offsets()}
            for _, rec in folder.records_at(offsets.values()):
                run = out.setdefault(
                    (rec.scenario_id, rec.stream), ScenarioRun([], [], self.compared)
                )
                run.records.append(rec)
                if rec.run_key in scores:
                    run.scores.append(scores[rec.run_key])
            self._compared_runs = out
        return self._compared_runs

    def run_scenario(
        self,
        scenario: Scenario,
        stream: bool,
        *,
        out_dir: Path | None = None,
        repeats: int | None = None,
        targets: list[TargetConfig] | None = None,
    ) -> ScenarioRun:
        """Run ``scenario`` on every target, score every run, compare the sides.

        Records go to ``out_dir`` (default: the session's run folder). Runs already
        recorded there under the same ``run_key`` are read back instead of re-run.
        """
        from harness.pipeline import FolderContext, summarize
        from harness.runfolder import RunFolder
        from harness.runner import run_many_sync

        targets = targets if targets is not None else self.targets()
        folder = RunFolder(out_dir if out_dir is not None else self.run_dir())
        run_many_sync(
            [scenario], targets, repeats=repeats or self.settings.repeats, stream=stream,
            concurrency=self.settings.concurrency, out_dir=folder, resume=True, progress=False,
            sampling=self.sampling(),
        )  # fmt: skip
        wanted = {t.name for t in targets}
        latest = {
            r.run_key: r for r in folder.records()
            if r.scenario_id == scenario.id and r.stream == stream and r.side in wanted
        }  # fmt: skip
        records = list(latest.values())
        context = FolderContext(settings=self.summary_settings())
        summary, scores = summarize(records, run_id=folder.path.name, context=context)
        return ScenarioRun(records, scores, summary if summary.kind == "compare" else None)

    def sampling(self) -> SamplingPolicy:
        """``--harness-temperature``, ``--harness-sampling-seed``,
        ``--harness-reasoning-history`` and ``--harness-history-fields`` as the runner takes
        them."""
        from harness.runner import SamplingPolicy

        s = self.settings
        return SamplingPolicy(
            s.temperature, s.sampling_seed, s.reasoning_history,  # type: ignore[arg-type]
            s.history_fields,  # type: ignore[arg-type]
        )  # fmt: skip

    def summary_settings(self) -> SummarySettings:
        """The ``settings`` block of ``summary.json`` for this session."""
        from harness.summary import Settings

        s = self.settings
        return Settings(
            repeats=s.repeats, stream="both" if len(s.stream_modes) > 1 else s.stream_modes[0],
            model=s.model, concurrency=s.concurrency, scenarios=sorted(self.scenario_ids),
            infra_error_limit=s.max_infra_error_rate, min_pass_rate=s.min_pass_rate,
            temperature=s.temperature, seed=s.sampling_seed,
            reasoning_history=s.reasoning_history, history_fields=s.history_fields,
        )  # fmt: skip

    # ------------------------------------------------------------ end of session

    def finish(self) -> None:
        """Write ``summary.json`` and the HTML report into the run folder (if one was made)."""
        from harness.runfolder import RunFolder

        if self._run_dir is None:
            return
        folder = RunFolder(self._run_dir)
        if not self._numerics_ran and folder.transcripts.exists():
            self._logprobs(folder)  # before the summary: the verdict is decided with it
        try:
            self.summary = self._write_summary(self._run_dir)
        except Exception as exc:  # a summary problem must not hide the test results
            self.notes.append(f"summary: not written ({type(exc).__name__}: {exc})")
        if self.summary is not None:
            self.notes += [f"warning: {w}" for w in self.summary.warnings]
            self.notes.append(f"summary: {folder.summary_path}")
            self.notes += self._numerics_notes
        reportable = (
            RunFolder.TRANSCRIPTS,
            RunFolder.SUMMARY,
            RunFolder.GSM8K_SUMMARY,
            RunFolder.BOOT,
        )
        if any(folder.has(name) for name in reportable):
            self.notes.append(write_html(self._run_dir, self.settings.html))

    def _numerics_hook(self) -> Callable[[RunFolder], None] | None:
        """The numerics section (:func:`harness.numerics.section.numerics_hook`) when there
        is a baseline and it is on (a recorded baseline gives its recorded numerics); its
        line goes to the terminal summary. Batched, :func:`harness.pipeline.compare` calls
        it after the first round; else :meth:`finish`, before the summary is scored."""
        from harness.numerics.run import LogprobsOptions
        from harness.numerics.section import numerics_hook
        from harness.present.logprobs import section_line
        from harness.recording import is_recording_ref

        if is_recording_ref(self.settings.baseline) and self._recording is None:
            return None  # the recording could not be opened: its tests said why
        base, cand = self.baseline(), self.target()
        if base is None or cand is None or not self.settings.logprobs:
            return None

        def done(res: Any, why: str | None) -> None:
            self._numerics_ran = True
            self._numerics_notes.append(section_line(res, why))

        return numerics_hook(base, cand, LogprobsOptions(model=self.settings.model), done)

    def _logprobs(self, folder: RunFolder) -> None:
        """The numerics section now (unbatched: the session's runs are all in)."""
        hook = self._numerics_hook()
        if hook is not None:
            hook(folder)

    def _write_summary(self, run_dir: Path) -> Summary | None:
        """Score the folder's transcripts into ``summary.json`` as ``harness compare`` does,
        with both sides' fusion engagement when there is a baseline. The batched
        comparison's summary is kept as its last look decided it (re-scored only to add
        the candidate's own tests when ``--harness-min-pass-rate`` was given)."""
        from dataclasses import replace

        from harness.pipeline import FolderContext, engagement, score_folder
        from harness.runfolder import RunFolder

        folder = RunFolder(run_dir)
        if not folder.transcripts.exists():
            return None  # only GSM8K / boot checks ran
        base, cand = self.baseline(), self.target()
        if base is None or cand is None:
            return score_folder(folder, FolderContext(settings=self.summary_settings()))
        judged = self.settings.applies("min_pass_rate")
        done = self.compared
        if done is not None:
            if not judged:
                return done
            context = FolderContext(
                done.settings, {s.side: s for s in done.sides}, done.warnings,
                done.server_args_diff, kind="compare", judge_candidate=True,
            )  # fmt: skip
            return score_folder(folder, context)
        sides, warnings, diff = engagement(base, cand)
        context = FolderContext(self.summary_settings(), sides, warnings, diff)
        return score_folder(folder, replace(context, kind="compare", judge_candidate=judged))


# ---------------------------------------------------------------- seams to other modules


def write_html(run_dir: Path, html: str | None) -> str:
    """Render ``report.html`` in the run folder
    (:func:`harness.present.report.write_report_or_warning`) and copy it to ``html`` if
    given (the file is self-contained); returns the line for the terminal summary. A
    report that cannot be drawn or copied never turns a test result into a crash: the
    line names the exception."""
    from harness.present.report import write_report_or_warning  # lazy: see the imports

    path, warning = write_report_or_warning(run_dir)
    if path is None:
        return f"warning: {warning}"
    if not html:
        return f"report: {path}"
    try:
        Path(html).parent.mkdir(parents=True, exist_ok=True)
        return f"report: {shutil.copyfile(path, html)}"
    except OSError as exc:
        return f"report: {path} (not copied to {html}: {type(exc).__name__}: {exc})"


def state_key() -> pytest.StashKey[HarnessState]:
    """The ``config.stash`` key of the session's :class:`HarnessState`."""
    return _STATE_KEY


_STATE_KEY = pytest.StashKey[HarnessState]()
