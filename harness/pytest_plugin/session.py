"""State of one pytest session of the plugin: targets, the run folder, results, the verdict.

One :class:`HarnessState` lives in ``config.stash`` (as pytest's junitxml keeps its
``LogXML``). It creates the run folder on first use (``<results>/pytest-<stamp>-<pid>/``,
exactly as ``harness run`` creates its folders, with ``manifest.json``), runs scenarios
through :func:`harness.runner.run_many_sync` (records appended to ``transcripts.jsonl``),
scores them (:func:`harness.scoring.score.score_run`), compares the sides when a baseline is
given (:mod:`harness.pipeline`), and at the end of the session writes ``summary.json`` and
the HTML report (:mod:`harness.present.report`) from the folder, as the CLI does.
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from harness.pytest_plugin.options import HarnessSettings

if TYPE_CHECKING:  # imported lazily: `pytest` starts fast when no harness test runs
    from harness.client.target import TargetConfig
    from harness.scenario.model import Scenario
    from harness.summary import RunScore, ScenarioComparison, Summary
    from harness.summary import Settings as SummarySettings
    from harness.transcript import RunRecord

__all__ = ["HarnessState", "ItemResult", "NO_TARGET", "ScenarioRun", "state_key"]

#: the one reason every harness test is skipped with when no server is configured
NO_TARGET = "no --target given (or HARNESS_TARGET, ini harness_target): harness tests skipped"


@dataclass
class ScenarioRun:
    """The runs of one scenario test: records, their scores, the comparison (with a baseline)."""

    records: list[RunRecord]
    scores: list[RunScore]
    comparison: ScenarioComparison | None = None


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
    summary: Summary | None = None  # summary.json, once written
    planned: list[tuple[Scenario, bool]] = field(default_factory=list)  # selected tests
    _batched: bool = False
    _run_dir: Path | None = None

    # ------------------------------------------------------------ targets

    def target(self) -> TargetConfig | None:
        """The server under test (side ``candidate`` when a baseline is given)."""
        from harness.client.target import TargetConfig

        s = self.settings
        if not s.target:
            return None
        side: Literal["candidate"] | None = "candidate" if s.baseline else None
        label = "candidate" if s.baseline else "target"
        return TargetConfig(
            base_url=s.target, model=s.model, label=label, side=side,
            api_key_env=s.api_key_env, timeout_s=s.request_timeout, max_retries=s.max_retries,
        )  # fmt: skip

    def baseline(self) -> TargetConfig | None:
        """The baseline server, or ``None``."""
        from harness.client.target import TargetConfig

        s = self.settings
        if not s.baseline:
            return None
        return TargetConfig(
            base_url=s.baseline, model=s.baseline_model or s.model, label="baseline",
            side="baseline", api_key_env=s.api_key_env, timeout_s=s.request_timeout,
            max_retries=s.max_retries,
        )  # fmt: skip

    def targets(self) -> list[TargetConfig]:
        """``[target]`` or ``[baseline, candidate]``; skips the test if there is no target."""
        target = self.target()
        if target is None:
            pytest.skip(NO_TARGET)
        base = self.baseline()
        return [base, target] if base is not None else [target]

    # ------------------------------------------------------------ run folder

    @property
    def has_run_dir(self) -> bool:
        return self._run_dir is not None

    def run_dir(self) -> Path:
        """The session's run folder, created (with ``manifest.json``) on first use."""
        if self._run_dir is None:
            from harness.runfolder import DEFAULT_RESULTS, new_run_id, prepare_run_dir

            root = Path(self.settings.results) if self.settings.results else DEFAULT_RESULTS
            run_id = base = new_run_id("pytest")
            for n in range(2, 1000):  # two sessions of one process in one second
                if not (root / run_id).exists():
                    break
                run_id = f"{base}-{n}"
            self._run_dir = prepare_run_dir(
                "pytest", results=root, run_id=run_id, args=self.settings.public(),
                extra={"runner": "pytest plugin"},
            )  # fmt: skip
        return self._run_dir

    # ------------------------------------------------------------ running

    def run_planned(self) -> None:
        """Batching (``--harness-batch on``, the default): on the first call, run every
        selected scenario test's runs in one :func:`harness.runner.run_many_sync` per stream
        mode, so ``--concurrency`` runs are in flight across scenarios, as with
        ``harness run``. Each test then reads its runs back from the folder."""
        if self._batched or not self.settings.batch or not self.planned:
            return
        from harness.runner import run_many_sync

        self._batched = True
        targets, folder = self.targets(), self.run_dir()
        for stream in (False, True):
            scenarios = list({sc.id: sc for sc, mode in self.planned if mode == stream}.values())
            if scenarios:
                run_many_sync(
                    scenarios, targets, repeats=self.settings.repeats, stream=stream,
                    concurrency=self.settings.concurrency, out_dir=folder, progress=False,
                )  # fmt: skip

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
        from harness.pipeline import summarize
        from harness.runner import run_many_sync
        from harness.transcript import read_records

        targets = targets if targets is not None else self.targets()
        folder = out_dir if out_dir is not None else self.run_dir()
        run_many_sync(
            [scenario], targets, repeats=repeats or self.settings.repeats, stream=stream,
            concurrency=self.settings.concurrency, out_dir=folder, resume=True, progress=False,
        )  # fmt: skip
        wanted = {t.name for t in targets}
        records = [
            r for r in read_records(folder / "transcripts.jsonl")
            if r.scenario_id == scenario.id and r.stream == stream
            and r.run_key.split("/", 1)[0] in wanted
        ]  # fmt: skip
        summary = summarize(records, run_id=folder.name, settings=self.summary_settings())
        by_key = {s.run_key: s for s in summary.runs}
        scores = [by_key[r.run_key] for r in records if r.run_key in by_key]
        return ScenarioRun(records, scores, summary.comparison(scenario.id))

    def summary_settings(self) -> SummarySettings:
        """The ``settings`` block of ``summary.json`` for this session."""
        from harness.summary import Settings

        s = self.settings
        return Settings(
            repeats=s.repeats, stream="both" if len(s.stream_modes) > 1 else s.stream_modes[0],
            model=s.model, concurrency=s.concurrency, scenarios=sorted(self.scenario_ids),
        )  # fmt: skip

    # ------------------------------------------------------------ end of session

    def finish(self) -> None:
        """Write ``summary.json`` and the HTML report into the run folder (if one was made)."""
        if self._run_dir is None:
            return
        try:
            self.summary = self._write_summary(self._run_dir)
        except Exception as exc:  # a summary problem must not hide the test results
            self.notes.append(f"summary: not written ({type(exc).__name__}: {exc})")
        if self.summary is not None:
            self.notes += [f"warning: {w}" for w in self.summary.warnings]
            self.notes.append(f"summary: {self._run_dir / 'summary.json'}")
        if any((self._run_dir / f).exists() for f in _REPORTABLE):
            self.notes.append(write_html(self._run_dir, self.settings.html))

    def _write_summary(self, run_dir: Path) -> Summary | None:
        """Score the folder's transcripts into ``summary.json`` as ``harness compare`` does,
        with both sides' fusion engagement when there is a baseline."""
        from harness.pipeline import engagement, score_dir

        if not (run_dir / "transcripts.jsonl").exists():
            return None  # only GSM8K / boot checks ran
        base, cand = self.baseline(), self.target()
        if base is None or cand is None:
            return score_dir(run_dir, settings=self.summary_settings())
        sides, warnings, diff = engagement(base, cand)
        return score_dir(
            run_dir, settings=self.summary_settings(), sides=sides, warnings=warnings,
            server_args_diff=diff,
        )  # fmt: skip


# ---------------------------------------------------------------- seams to other modules


#: files of a run folder the HTML report renders (any one is enough)
_REPORTABLE = ("transcripts.jsonl", "summary.json", "gsm8k.json", "boot.json")


def _optional(module: str) -> Any:
    """``module`` if importable, else ``None`` (modules built in other issues)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def write_html(run_dir: Path, html: str | None) -> str:
    """Render ``report.html`` in the run folder (:func:`harness.present.report.write_report`) and
    copy it to ``html`` if given (the file is self-contained); returns a summary line."""
    report = _optional("harness.present.report")
    fn = getattr(report, "write_report", None)
    if fn is None:
        return "report: not written (harness.present.report is not available)"
    try:
        path = Path(fn(run_dir))
        if html:
            Path(html).parent.mkdir(parents=True, exist_ok=True)
            path = Path(shutil.copyfile(path, html))
    except Exception as exc:  # the report must never turn a test result into a crash
        return f"report: not written ({type(exc).__name__}: {exc})"
    return f"report: {path}"


def state_key() -> pytest.StashKey[HarnessState]:
    """The ``config.stash`` key of the session's :class:`HarnessState`."""
    return _STATE_KEY


_STATE_KEY = pytest.StashKey[HarnessState]()
