"""Shared fixtures: the reference server (``harness.sim``) on 127.0.0.1.

- ``sim_url``: factory ``sim_url(profile="healthy", *, scenarios_dir=None, **kw) -> str``
  starting :func:`harness.sim.server.serve_in_thread` on a free port and returning its
  base URL ``http://127.0.0.1:PORT`` (add ``/v1`` for an OpenAI client). ``kw`` are
  serve_in_thread's (``gsm8k_path``, ``latency_ms``, ``seed``, ``capture``). Every
  server started is stopped at the end of the test. ``scenarios_dir=None`` = no scenarios.
  What a server received (requests, most in flight, faults served, recent bodies):
  ``harness.sim.stats.fetch_stats(url)``.
- ``write_scenarios``: factory ``write_scenarios(*scenarios: dict) -> Path`` writing each
  dict as ``<id>.yaml`` into a fresh directory under ``tmp_path`` and returning it.

Example::

    def test_x(sim_url, write_scenarios):
        url = sim_url("repeat-loop", scenarios_dir=write_scenarios({"id": "a", ...}))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.sim.server import serve_in_thread


@pytest.fixture
def sim_url() -> Iterator[Callable[..., str]]:
    """Factory fixture: start a reference server, get its base URL (stopped at teardown)."""
    with contextlib.ExitStack() as stack:

        def start(profile: Any = "healthy", *, scenarios_dir: Any = None, **kw: Any) -> str:
            return stack.enter_context(serve_in_thread(profile, scenarios_dir=scenarios_dir, **kw))

        yield start


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
