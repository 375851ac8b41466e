r"""pytest plugin: harness scenarios as tests in CI against a live server.

Registered through the ``pytest11`` entry point (``harness = "harness.pytest_plugin.plugin"``), so it
is active wherever the package is installed; ``-p no:harness`` turns it off.

Usage::

    pytest scenarios/ --harness-target http://gpu-box:30000 [--harness-model NAME] [--harness-repeats 3]
    pytest scenarios/ --harness-target http://gpu-box:30001 --harness-baseline http://gpu-box:30000
    pytest scenarios/ --harness-target http://gpu-box:30000 --harness-baseline results/<id>   # recorded
    pytest scenarios/ --harness-target URL --harness-gsm8k --harness-gsm8k-min-accuracy 0.85 -m gsm8k
    pytest --harness-boot-cmd "python -m sglang.launch_server ..." -m boot

- Options (group ``harness`` in ``pytest --help``) also read ``HARNESS_<NAME>`` from
  the environment and ``harness_<name>`` from the ini file; CLI > env > ini
  (:mod:`harness.pytest_plugin.options`).
- Scenario files become test items (:mod:`harness.pytest_plugin.items`); the pass/fail rule
  is :mod:`harness.pytest_plugin.judge` (with a baseline: the comparison finds the scenario
  worse, in compare's sequential rounds, :mod:`harness.pytest_plugin.baseline`; a recorded
  baseline, ``harness record``, is checked against the selected scenarios and settings when
  they are collected, a mismatch one ``ERROR:`` line); a failure prints the evidence
  (:mod:`harness.present.evidence`). Infrastructure errors are test *errors* prefixed
  ``infrastructure error``, never failures.
- GSM8K and boot checks are opt-in items with markers ``gsm8k`` and ``boot``
  (:mod:`harness.pytest_plugin.checks`).
- Inert unless asked: with no target no scenario file is collected (one line in the
  terminal summary when some were named on the command line), so a plain ``pytest`` in
  a repository, or another suite in the same environment, runs as without the plugin:
  every flag is under ``--harness-`` (none can clash with a conftest's ``--model``) and
  nothing heavy is imported until a harness test runs (:mod:`harness.pytest_plugin.places`).
- All selected scenarios' runs are made together at the first scenario test
  (``--harness-batch``, default on; ``--harness-concurrency`` runs in flight), then each
  test judges its own. Harness tests bound their own time (``--harness-request-timeout`` per
  request, ``max_turns``, ``--harness-boot-timeout``), so pytest-timeout's limit is off for them.
- Results go to one run folder per session, ``<results>/pytest-<stamp>-<pid>/``, as the
  CLI writes them: ``manifest.json``, ``transcripts.jsonl``, ``summary.json``,
  ``report.html`` (or ``--harness-html PATH``). JUnit XML comes from pytest's own
  ``--junitxml``; each item adds ``user_properties`` (runs, tool calls, verdict, ...).

Fixtures for your own tests: ``harness_settings``, ``harness_target``
(:class:`harness.client.target.TargetConfig`), ``harness_baseline``, ``harness_client``
(a configured synchronous ``openai.OpenAI``) and ``run_scenario`` (runs a scenario or
a scenario file and returns its :class:`ScoredRun`\ s).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.pytest_plugin.options import HarnessSettings, add_options, resolve_settings
from harness.pytest_plugin.places import (
    SUFFIXES,
    add_default_places,
    enabled,
    is_scenario_file,
    named,
)
from harness.pytest_plugin.session import NO_TARGET, HarnessState, state_key
from harness.redaction import redact_text

if TYPE_CHECKING:
    from openai import OpenAI

    from harness.client.target import TargetConfig
    from harness.recording import RecordedSide
    from harness.scenario.model import Scenario
    from harness.scoring.models import RunScore
    from harness.transcript import RunRecord

__all__ = ["ScoredRun"]

_MARKERS = (
    "harness: a harness scenario test (added by the harness plugin)",
    "gsm8k: GSM8K accuracy checks (opt-in with --harness-gsm8k; select with -m gsm8k)",
    "boot: boot checks (opt-in with --harness-boot-cmd or --harness-boot; select with -m boot)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    config.stash[state_key()] = HarnessState(resolve_settings(config))
    add_default_places(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    s = _state(config).settings
    if not s.target:
        return None
    base = f", baseline {s.baseline}" if s.baseline else ""
    return redact_text(f"harness: target {s.target}{base}")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in SUFFIXES or not is_scenario_file(file_path, parent):
        return None
    if not enabled(parent.config):  # inert: another suite's YAML, or no target asked for
        if named(file_path, parent):
            _state(parent.config).not_collected += 1
        return None
    from harness.pytest_plugin.items import ScenarioFile

    return ScenarioFile.from_parent(parent, path=file_path)


@pytest.hookimpl(tryfirst=True)  # before -m / -k deselect
def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    from harness.pytest_plugin.checks import make_check_items

    items.extend(make_check_items(session))
    if session.config.pluginmanager.hasplugin("timeout"):
        # pytest-timeout's per-test limit (e.g. ini `timeout = 300`) would kill a boot wait
        # or a batch of runs; harness tests bound themselves (--harness-request-timeout per
        # request, max_turns, --harness-boot-timeout), so it is off for them (timeout 0).
        for item in items:
            if item.get_closest_marker("harness") and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(0))


def pytest_collection_finish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker (it runs only a share)
    state = _state(session.config)
    if "harness.pytest_plugin.items" in sys.modules:  # a scenario file was collected
        _plan(session, state)
    if session.config.option.collectonly:
        return
    if (state.settings.target and state.planned) or _has_check_items(session):
        _make_run_dir(state)


def _plan(session: pytest.Session, state: HarnessState) -> None:
    from harness.pytest_plugin.items import ScenarioItem

    state.planned = [
        (item.scenario, item.stream) for item in session.items if isinstance(item, ScenarioItem)
    ]
    if state.settings.target and state.settings.baseline and not session.config.option.collectonly:
        # a recorded baseline that cannot serve the selected scenarios stops the session
        # in one line (pytest.UsageError), before any run
        state.check_baseline(list({sc.id: sc for sc, _ in state.planned}.values()))


def _has_check_items(session: pytest.Session) -> bool:
    if "harness.pytest_plugin.checks" not in sys.modules:
        return False
    from harness.pytest_plugin.checks import _CheckItem

    return any(isinstance(item, _CheckItem) for item in session.items)


def _make_run_dir(state: HarnessState) -> None:
    """The session's run folder made before any test runs: one that cannot be made
    (``--harness-results=/proc/nope``) stops the session in one line, not an error per test."""
    from harness.errors import RunFolderError

    try:
        state.run_dir()
    except RunFolderError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_sessionfinish(session: pytest.Session) -> None:
    _state(session.config).finish()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = _state(config)
    if state.not_collected:
        terminalreporter.write_line(
            f"harness: {state.not_collected} scenario file(s) not collected: no "
            "--harness-target given (or HARNESS_TARGET, ini harness_target)"
        )
    if not state.has_run_dir and not state.results:
        return
    tr = terminalreporter
    tr.write_sep("-", "harness")
    for line in summary_lines(state):
        tr.write_line(redact_text(line))  # a key in a target URL is never shown


def summary_lines(state: HarnessState) -> list[str]:
    """The terminal summary: counts, the verdict, where the results and report went."""
    s = state.settings
    counts = {k: sum(r.outcome == k for r in state.results) for k in ("passed", "failed", "infra")}
    base = f" against baseline {s.baseline}" if s.baseline else ""
    what = f"target {s.target}{base}" if s.target else "harness checks"
    lines = [
        f"{what}: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['infra']} infrastructure errors",
        f"verdict: {session_verdict(state)}",
    ]
    if state.has_run_dir:
        lines.append(f"results: {state.run_dir()}")
    return lines + state.notes


def session_verdict(state: HarnessState) -> str:
    """``PASSED``/``FAILED``/``ERROR (infrastructure)`` of the tests, and with a baseline the
    overall compare verdict of ``summary.json`` (all scenarios pooled)."""
    outcomes = {r.outcome for r in state.results}
    verdict = (
        "FAILED"
        if "failed" in outcomes
        else "ERROR (infrastructure)"
        if "infra" in outcomes
        else "PASSED"
    )
    compared = state.summary.verdict if state.summary is not None else None
    if compared is not None:
        verdict += f"; compare: {compared.message or compared.verdict}"
    return verdict


def _state(config: pytest.Config) -> HarnessState:
    return config.stash[state_key()]


# ---------------------------------------------------------------- fixtures


@dataclass
class ScoredRun:
    """One run of a scenario and its scores (what the ``run_scenario`` fixture returns)."""

    record: RunRecord
    score: RunScore

    @property
    def passed(self) -> bool:
        """Whether the run passed its scenario's checks."""
        return self.score.passed


@pytest.fixture(scope="session")
def harness_settings(pytestconfig: pytest.Config) -> HarnessSettings:
    """The plugin's resolved settings (:class:`harness.pytest_plugin.options.HarnessSettings`)."""
    return _state(pytestconfig).settings


@pytest.fixture(scope="session")
def harness_target(pytestconfig: pytest.Config) -> TargetConfig:
    """The server under test as a :class:`harness.client.target.TargetConfig`; skips without one."""
    target = _state(pytestconfig).target()
    if target is None:
        pytest.skip(NO_TARGET)
    return target


@pytest.fixture(scope="session")
def harness_baseline(pytestconfig: pytest.Config) -> TargetConfig | RecordedSide | None:
    """The baseline (``--harness-baseline``): a server, a recording
    (:class:`harness.recording.RecordedSide`), or ``None``."""
    return _state(pytestconfig).baseline()


@pytest.fixture(scope="session")
def harness_client(harness_target: TargetConfig) -> Iterator[OpenAI]:
    """A synchronous ``openai.OpenAI`` for the target (base URL with ``/v1``, API key, timeout)."""
    from openai import OpenAI

    from harness.client.target import openai_base_url

    client = OpenAI(
        base_url=openai_base_url(harness_target.base_url),
        api_key=harness_target.api_key(),
        timeout=harness_target.timeout_s,
        max_retries=harness_target.max_retries,
    )
    yield client
    client.close()


@pytest.fixture
def run_scenario(
    request: pytest.FixtureRequest, harness_target: TargetConfig
) -> Callable[..., list[ScoredRun]]:
    """``run_scenario(scenario_or_path, *, repeats=None, stream=False, target=None)``.

    Runs a :class:`harness.scenario.model.Scenario` (or loads a scenario file) against the
    target (or ``target``) ``repeats`` times (default: the scenario's) and returns one
    :class:`ScoredRun` per run. Records go to
    ``<run folder>/tests/<test name>/<n>/transcripts.jsonl``. Blocking: call it from a
    synchronous test (inside a running event loop use :func:`harness.runner.run_many`).
    """
    state = _state(request.config)
    calls = iter(range(1_000_000))
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-120:]

    def run(
        scenario: Scenario | str | Path,
        *,
        repeats: int | None = None,
        stream: bool = False,
        target: TargetConfig | None = None,
    ) -> list[ScoredRun]:
        from harness.scenario.model import load_scenario

        sc = load_scenario(scenario) if isinstance(scenario, (str, Path)) else scenario
        out = state.run_dir() / "tests" / slug / str(next(calls))
        done = state.run_scenario(
            sc, stream, out_dir=out, repeats=repeats, targets=[target or harness_target]
        )
        return [ScoredRun(r, s) for r, s in zip(done.records, done.scores, strict=True)]

    return run
