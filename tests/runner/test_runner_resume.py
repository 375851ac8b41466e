"""`harness run` killed part-way (SIGKILL) and resumed: every run once, nothing finished lost.

The server is the reference server (``sim_url``) with 100 ms of latency per request, so
the kill lands while runs are in flight."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.runfolder import RunFolder
from harness.scenario.model import load_scenarios
from harness.sim.stats import fetch_stats

REPO = Path(__file__).resolve().parents[2]


STARTERS = ["sensor_entropy_pipeline", "entropy_followups", "no_params_tool", "numeric_string_ids"]


def starter_dir(tmp_path: Path) -> Path:
    """The four starter scenarios alone (the library grows; this test should not)."""
    d = tmp_path / "scenarios"
    d.mkdir()
    for name in STARTERS:
        shutil.copy(REPO / "scenarios" / f"{name}.yaml", d)
    return d


def harness_run(url: str, results: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "harness", "run", "--target", url, "--label", "slow",
           "--results", str(results), "--repeats", "2", "--concurrency", "3",
           "--stream", "both", "--no-progress", "--request-timeout", "10", *extra,
           str(results / "scenarios")]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"harness run ended early: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail(f"fewer than {n} runs recorded after {timeout}s")


def settled_requests(url: str, timeout: float = 10) -> int:
    """Requests the server received, once none is in flight (the killed run's last ones
    end when their latency has passed)."""
    deadline = time.monotonic() + timeout
    while (stats := fetch_stats(url)).in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    return stats.requests


@pytest.mark.timeout(120)
def test_killed_run_resumes_without_losing_or_repeating_runs(
    tmp_path: Path, sim_url: Callable[..., str]
) -> None:
    folder = starter_dir(tmp_path)
    scenarios = load_scenarios([folder])
    expected = {
        f"slow/{sc.id}/{r}/{mode}"
        for sc in scenarios
        for r in range(2)
        for mode in ("stream", "nostream")
    }
    url = sim_url("healthy", scenarios_dir=folder, latency_ms=100)
    first = harness_run(url, tmp_path, "--run-id", "killed")
    path = tmp_path / "killed" / "transcripts.jsonl"
    wait_for_lines(path, 3, first, timeout=60)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    before = {r.run_key: r.started_at for r in RunFolder(path.parent).records()}
    assert 3 <= len(before) < len(expected)
    with open(path, "a") as fh:  # as if killed while writing the next record
        fh.write('{"schema_version": 1, "run_key": "slow/trunc')
    sent_before = settled_requests(url)

    second = harness_run(url, tmp_path, "--resume", "killed")
    out, err = second.communicate(timeout=90)
    assert second.returncode == 0, err
    records = list(RunFolder(path.parent).records())
    keys = [r.run_key for r in records]
    assert sorted(keys) == sorted(expected)  # every run exactly once
    assert all(r.stop_reason == "final_answer" for r in records)
    after = {r.run_key: r.started_at for r in records}
    assert all(after[k] == v for k, v in before.items())  # finished runs kept, not redone
    resumed = [r for r in records if r.run_key not in before]
    assert fetch_stats(url).requests - sent_before == sum(len(r.turns) for r in resumed)
    lines = path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # the truncated tail was cut off
    assert "killed" in out and "final answer" in out
    manifest = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    assert manifest["run_id"] == "killed" and manifest["targets"][0]["label"] == "slow"
