"""Shared fixtures: the reference server (``harness.sim``) on 127.0.0.1.

- ``sim_url``: factory ``sim_url(profile="healthy", *, scenarios_dir=None, **kw) -> str``
  starting :func:`harness.sim.server.serve_in_thread` on a free port and returning its
  base URL ``http://127.0.0.1:PORT`` (add ``/v1`` for an OpenAI client). ``kw`` are
  serve_in_thread's (``gsm8k_path``, ``gsm8k_faults``, ``latency_ms``, ``seed``,
  ``capture``). Every server started is stopped at the end of the test.
  ``scenarios_dir=None`` = no scenarios. What a server received (requests per path, most
  in flight, faults served, requests per GSM8K question, recent bodies):
  ``harness.sim.stats.fetch_stats(url)``.
- ``gsm8k_sim``: the same factory with ``gsm8k_path=GSM8K_TEST`` (the official test split
  in ``../shared/data/gsm8k/test.jsonl``); the test is skipped when that file is missing.
- ``write_scenarios``: factory ``write_scenarios(*scenarios: dict) -> Path`` writing each
  dict as ``<id>.yaml`` into a fresh directory under ``tmp_path`` and returning it.
- ``harness_cli``: :class:`HarnessCli`, ``harness.cli.main`` in this process as the
  command-line tests call it: ``harness_cli("compare", scenarios, "--baseline", url, ...,
  run_id="x") -> exit code`` runs ``harness compare ... --results RESULTS --run-id x
  --no-progress`` (``RESULTS``: ``tmp_path / "results"``, ``harness_cli.results``);
  ``harness_cli.folder("x")`` is that run's :class:`~harness.runfolder.RunFolder`.

Example::

    def test_x(sim_url, write_scenarios):
        url = sim_url("repeat-loop", scenarios_dir=write_scenarios({"id": "a", ...}))

    def test_y(sim_url, write_scenarios, harness_cli):
        scenarios = write_scenarios({"id": "a", ...})
        url = sim_url("healthy", scenarios_dir=scenarios)
        assert harness_cli("run", scenarios, "--target", url, run_id="r") == 0
        summary = harness_cli.folder("r").read_summary()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.runfolder import RunFolder
from harness.sim.server import serve_in_thread


@pytest.fixture
def sim_url() -> Iterator[Callable[..., str]]:
    """Factory fixture: start a reference server, get its base URL (stopped at teardown)."""
    with contextlib.ExitStack() as stack:

        def start(profile: Any = "healthy", *, scenarios_dir: Any = None, **kw: Any) -> str:
            return stack.enter_context(serve_in_thread(profile, scenarios_dir=scenarios_dir, **kw))

        yield start


#: the official GSM8K test split, beside the clone (``../shared``)
GSM8K_TEST = Path(__file__).parents[2] / "shared/data/gsm8k/test.jsonl"


@pytest.fixture
def gsm8k_sim(sim_url: Callable[..., str]) -> Callable[..., str]:
    """Factory fixture: a reference server answering GSM8K from :data:`GSM8K_TEST`."""
    if not GSM8K_TEST.exists():
        pytest.skip(f"GSM8K test split not found at {GSM8K_TEST} (../shared beside the clone)")

    def start(profile: Any = "healthy", **kw: Any) -> str:
        return sim_url(profile, gsm8k_path=GSM8K_TEST, **kw)

    return start


@pytest.fixture
def write_scenarios(tmp_path: Path) -> Callable[..., Path]:
    """Factory fixture: write scenario dicts as YAML files into a new directory."""
    counter = iter(range(1_000_000))

    def write(*scenarios: dict[str, Any]) -> Path:
        folder = tmp_path / f"scenarios{next(counter)}"
        folder.mkdir()
        for sc in scenarios:
            (folder / f"{sc['id']}.yaml").write_text(
                yaml.safe_dump(sc, sort_keys=False), encoding="utf-8"
            )
        return folder

    return write


class HarnessCli:
    """``harness.cli.main`` in this process with the arguments every command-line test
    repeats: the command and its own arguments, then ``--results`` (:attr:`results`),
    ``--run-id`` when given and ``--no-progress``."""

    def __init__(self, results: Path) -> None:
        self.results = results

    def __call__(self, command: str, *args: str | Path, run_id: str | None = None) -> int:
        from harness.cli import main

        argv = [command, *map(str, args), "--results", str(self.results)]
        if run_id is not None:
            argv += ["--run-id", run_id]
        return main([*argv, "--no-progress"])

    def folder(self, run_id: str) -> RunFolder:
        """The run folder ``run_id`` under :attr:`results`."""
        return RunFolder(self.results / run_id)


@pytest.fixture
def harness_cli(tmp_path: Path) -> HarnessCli:
    """The command line in this process, its run folders under ``tmp_path / "results"``."""
    return HarnessCli(tmp_path / "results")
