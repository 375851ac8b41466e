r"""Collection: scenario files become :class:`ScenarioFile` collectors of :class:`ScenarioItem`\ s.

Which files are scenarios: :mod:`harness.pytest_plugin.places`.

Each scenario is one test item per stream mode (``scenarios/x.yaml::x``, or
``::x[nostream]`` and ``::x[stream]`` with ``--harness-stream-both``), carrying the marker
``harness`` and the scenario's tags as ``-k`` keywords. A file that does not parse is
a collection error whose whole message is the one-line :class:`ScenarioError`.

An item runs its scenario in ``setup`` and judges in ``runtest``, so that an
infrastructure error (server down, HTTP 500 after retries, garbage body) is reported
by pytest as an **error** (``E``, ``<error>`` in JUnit XML) with the prefix
``infrastructure error:``, while a model misbehaving is a **failure** (``F``,
``<failure>``) with its evidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.pytest_plugin.judge import Judgement, judge
from harness.pytest_plugin.places import _under
from harness.pytest_plugin.session import HarnessState, ItemResult, ScenarioRun, state_key
from harness.scenario.model import Scenario, ScenarioError, load_scenario

__all__ = ["ScenarioFailure", "ScenarioFile", "ScenarioItem"]

_IDS_KEY = pytest.StashKey[dict[str, Path]]()


class ScenarioFailure(HarnessError, AssertionError):
    """A scenario test failed: ``str`` is the whole evidence text."""


class ScenarioFile(pytest.File):
    """A scenario file: one :class:`ScenarioItem` per stream mode."""

    def collect(self) -> Iterator[pytest.Item]:
        """One item per stream mode of the file's scenario; a collection error naming the file when
        it does not load or its id is taken."""
        where = self._shown_path()
        try:
            scenario = load_scenario(self.path)
        except ScenarioError as exc:
            raise self.CollectError(str(ScenarioError(where, exc.field, exc.reason))) from None
        seen = self.config.stash.setdefault(_IDS_KEY, {})
        other = seen.setdefault(scenario.id, where)
        if other != where:
            raise self.CollectError(
                f"{where}: id: {scenario.id!r} is already used by {other}; ids must be unique"
            )
        state = self.config.stash[state_key()]
        modes = state.settings.stream_modes
        for stream in modes:
            name = scenario.id
            if len(modes) > 1:
                name += "[stream]" if stream else "[nostream]"
            yield ScenarioItem.from_parent(self, name=name, scenario=scenario, stream=stream)

    def _shown_path(self) -> Path:
        """The file's path relative to the rootdir (as pytest shows it), else absolute."""
        root = self.config.rootpath
        return self.path.relative_to(root) if _under(self.path, root) else self.path


class ScenarioItem(pytest.Item):
    """One scenario in one stream mode, run ``repeats`` times against the target(s)."""

    def __init__(self, *, scenario: Scenario, stream: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.stream = stream
        self.scenario_run: ScenarioRun | None = None
        self.judgement: Judgement | None = None
        self.add_marker("harness")
        self.extra_keyword_matches.update(scenario.tags)

    @property
    def state(self) -> HarnessState:
        """The session's harness state (targets, settings, run folder)."""
        return self.config.stash[state_key()]

    def setup(self) -> None:
        """The scenario's runs (the session runs the planned scenarios together) judged; an
        infrastructure error fails here, not as a model failure."""
        state = self.state
        state.targets()  # skips with the one NO_TARGET reason when no target is set
        state.run_planned()
        run = self.scenario_run = state.scenario_run(self.scenario, self.stream)
        state.scenario_ids.add(self.scenario.id)
        j = self.judgement = judge(self.scenario, run.scores, state.settings, summary=run.summary)
        self.user_properties.extend(j.properties)
        self.user_properties.append(("run_dir", str(state.run_dir())))
        if j.outcome == "infra":
            self._record(j)
            msg = "infrastructure error (not a model failure): " + j.headline
            pytest.fail(f"{msg}\n{j.evidence}", pytrace=False)

    def runtest(self) -> None:
        """Record the judgement; :class:`ScenarioFailure` with its reasons and evidence when it
        failed."""
        j = self.judgement
        assert j is not None, "setup did not run"
        self._record(j)
        if j.outcome == "failed":
            # one reason per line, the first is what pytest's short summary shows
            raise ScenarioFailure("\n".join([*j.reasons, j.evidence]))

    def _record(self, j: Judgement) -> None:
        self.state.results.append(ItemResult(self.nodeid, j.outcome, j.headline, j.verdict))

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        """The evidence text for a scenario failure; pytest's usual report otherwise."""
        if isinstance(excinfo.value, ScenarioFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """The scenario file, no line, and ``scenario <id>`` (with the stream mode)."""
        mode = " (stream)" if self.stream else ""
        return self.path, None, f"scenario {self.scenario.id}{mode}"
