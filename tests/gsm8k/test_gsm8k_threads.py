"""``harness gsm8k``'s thread pool (SGLang's benchmark client) against a slow reference
server on 127.0.0.1: ``parallel`` requests really are in flight at once, no more; records
reach ``gsm8k.jsonl`` as they finish; an unexpected exception propagates instead of
hanging. The server's ``GET /sim/stats`` says what it received and how many at once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harness.gsm8k.run as gsm8k
from harness.gsm8k.run import read_gsm8k_records, run_gsm8k
from harness.sim.app import MODEL_NAME
from harness.sim.profiles import get_profile
from harness.sim.stats import fetch_stats
from tests.conftest import GSM8K_TEST

Sim = Callable[..., str]


def _opts(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {"data": GSM8K_TEST, "results": tmp_path, **kw}


def test_parallel_requests_in_flight_and_records_as_they_finish(
    tmp_path: Path, gsm8k_sim: Sim
) -> None:
    # every answer after 0.15 s; question 0 ("slow") 0.35 s more: 0.5 s
    profile = dataclasses.replace(get_profile("healthy"), delay_s=0.35)
    url = gsm8k_sim(profile, latency_ms=150, gsm8k_faults={0: "slow"})
    t0 = time.perf_counter()
    summary = run_gsm8k(url, **_opts(tmp_path, num_questions=24, parallel=8, run_id="p"))
    wall = time.perf_counter() - t0
    stats = fetch_stats(url)
    assert 2 <= stats.max_in_flight <= 8 and stats.requests == 24  # parallel, never more than 8
    assert stats.in_flight == 0 and stats.faults_served == 0  # "slow" only delays
    assert wall < 23 * 0.15 + 0.5  # not one request after another
    assert summary.sides[0].n == 24 and summary.sides[0].model == MODEL_NAME
    records = read_gsm8k_records(tmp_path / "p")
    assert sorted(r.index for r in records) == list(range(24))
    # one line per answer as it finished: question 0 (answered slowest) is not first
    assert [r.index for r in records].index(0) > 0


def test_progress_bar_from_worker_threads(tmp_path: Path, gsm8k_sim: Sim) -> None:
    url = gsm8k_sim("healthy")
    summary = run_gsm8k(url, **_opts(tmp_path, num_questions=12, parallel=4, progress=True))
    assert summary.sides[0].n == 12 and fetch_stats(url).requests == 12


def test_unexpected_exception_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gsm8k_sim: Sim
) -> None:
    def broken(q: Any, output: str) -> dict[str, Any]:
        raise RuntimeError("scoring bug")

    monkeypatch.setattr(gsm8k, "_score", broken)
    url = gsm8k_sim("healthy", latency_ms=50)
    with pytest.raises(RuntimeError, match="scoring bug"):
        run_gsm8k(url, **_opts(tmp_path, num_questions=40, parallel=4, run_id="bug"))
    assert fetch_stats(url).requests < 40  # the questions not yet started were cancelled
