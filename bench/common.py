"""Shared pieces of the benchmarks: the reference server in its own process, CPU clocks,
and the result row every benchmark returns.

The server runs as a ``harness sim`` subprocess (not :func:`harness.sim.server.serve_in_thread`)
so that its CPU time is not counted as the client's: ``time.process_time()`` in the
benchmark process then measures the client alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
#: the scenario every multi-turn benchmark plays (3 tools; 12 turns under repeat-loop)
SCENARIO = SCENARIOS / "sensor_entropy_pipeline.yaml"
#: GSM8K test split beside the clone (as tests/gsm8k/test_gsm8k_sim.py); override $BENCH_GSM8K
GSM8K = Path(os.environ.get("BENCH_GSM8K", ROOT.parent / "shared/data/gsm8k/test.jsonl"))

_SERVING = re.compile(r"Serving on (http://\S+)")


@dataclass
class Row:
    """One line of the bench table.

    ``measured`` and ``target`` are in ``unit``; ``ratio`` is measured / target (or the
    harness / baseline ratio), ``passed`` is ``None`` for a figure without a target.
    ``details`` holds every raw figure (JSON-serialisable) for results/bench/*.json.
    """

    benchmark: str
    measured: float
    target: float | None
    unit: str
    ratio: float | None
    passed: bool | None
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    target_text: str = ""  # shown instead of ``target`` when the target is not one number

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux ``/proc``; else 0)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sim(str):
    """The base URL of a ``harness sim`` subprocess (a ``str``), with its ``pid``."""

    pid: int

    def cpu_s(self) -> float:
        return process_cpu_s(self.pid)


@contextmanager
def sim_process(
    profile: str = "healthy",
    *,
    latency_ms: float = 0,
    scenarios: Path | None = SCENARIOS,
    gsm8k: Path | None = None,
) -> Iterator[Sim]:
    """Start ``harness sim`` in a subprocess; yields its base URL (a :class:`Sim`, with the
    server's pid and CPU clock); terminates it on exit.

    Raises:
        RuntimeError: the server exited or did not print ``Serving on URL`` within 30 s.
    """
    cmd = [sys.executable, "-m", "harness", "sim", "--profile", profile, "--port", "0"]
    cmd += ["--latency-ms", str(latency_ms)]
    cmd += ["--scenarios", str(scenarios or SCENARIOS)]
    if gsm8k is not None:
        cmd += ["--gsm8k", str(gsm8k)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT
    )
    try:
        url = Sim(_wait_url(proc))
        url.pid = proc.pid
        # keep draining stdout so a chatty server never blocks on a full pipe
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_url(proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    for line in proc.stdout:
        m = _SERVING.search(line)
        if m:
            return m.group(1)
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"harness sim did not start (exit code {proc.poll()})")


@contextmanager
def clocks() -> Iterator[dict[str, float]]:
    """Measure wall time and this process's CPU time (user + system, all threads), in s."""
    out: dict[str, float] = {}
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        yield out
    finally:
        out["wall_s"] = time.perf_counter() - w0
        out["cpu_s"] = time.process_time() - c0


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (other users share the machine)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
