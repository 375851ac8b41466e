"""Benchmark 2: 100 runs of a 12-turn scenario at concurrency 32 against 200 ms per request.

``sensor_entropy_pipeline`` against the ``repeat-loop`` profile takes exactly 12 turns
per run (the model re-issues its calls until the turn cap), so the ideal wall time is
``ceil(runs / concurrency) * 12 * latency``: 4 waves x 12 x 0.2 s = 9.6 s. The server
(``harness sim --latency-ms 200``) runs in its own process. For scale, the same runs
are also made by the minimal httpx loop of benchmark 1 at the same concurrency: what
is lost there is lost to the machine and the server, not to the harness.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.client_overhead import _plain_inputs, _plain_run
from bench.common import SCENARIO, Row, clocks, sim_process
from harness.client.target import TargetConfig
from harness.runner import run_many_sync
from harness.scenario.model import load_scenario
from harness.transcript import RunRecord

TARGET_RATIO = 1.1


async def _plain_concurrent(url: str, inputs: list[Any], max_turns: int, concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(inp: Any) -> int:
            async with sem:
                return await _plain_run(client, url + "/v1/chat/completions", inp, max_turns)

        return sum(await asyncio.gather(*(one(i) for i in inputs)))


def _check(recs: list[RunRecord], runs: int) -> None:
    if len(recs) != runs or any(r.stop_reason != "turn_cap" for r in recs):
        stops = sorted({r.stop_reason for r in recs})
        raise RuntimeError(f"expected {runs} runs ending at the turn cap, got {len(recs)}: {stops}")


def run(runs: int = 100, concurrency: int = 32, latency_ms: float = 200) -> list[Row]:
    """Time ``runs`` runs of the 12-turn scenario through :func:`run_many`, then plain."""
    sc = load_scenario(SCENARIO)
    with (
        sim_process("repeat-loop", latency_ms=latency_ms) as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        target = TargetConfig(url, label="bench")
        warm = run_many_sync([sc], [target], repeats=1, out_dir=Path(tmp) / "w", progress=False)
        s0 = url.cpu_s()
        with clocks() as c:
            recs = run_many_sync(
                [sc], [target], repeats=runs, concurrency=concurrency,
                out_dir=Path(tmp) / "run", resume=False, progress=False,
            )  # fmt: skip
        server_cpu = url.cpu_s() - s0
        inputs = [_plain_inputs(warm[0])] * runs
        with clocks() as p:
            plain_turns = asyncio.run(_plain_concurrent(url, inputs, sc.max_turns, concurrency))
    _check(recs, runs)
    turns = sum(len(r.turns) for r in recs)
    ideal = math.ceil(runs / concurrency) * sc.max_turns * latency_ms / 1000
    ratio = c["wall_s"] / ideal
    return [
        Row(
            benchmark=f"2. {runs} runs x {sc.max_turns} turns, concurrency {concurrency}, "
            f"{latency_ms:.0f} ms/request",
            measured=round(c["wall_s"], 2),
            target=round(ideal * TARGET_RATIO, 2),
            unit="s wall",
            ratio=round(ratio, 3),
            passed=ratio <= TARGET_RATIO,
            note=(
                f"ideal {ideal:.1f} s; plain httpx loop {p['wall_s']:.2f} s "
                f"({p['wall_s'] / ideal:.2f}x); CPU client {c['cpu_s']:.1f} s, "
                f"server {server_cpu:.1f} s"
            ),
            details={
                "ideal_s": ideal,
                "turns": turns,
                "client_cpu_s": round(c["cpu_s"], 2),
                "server_cpu_s": round(server_cpu, 2),
                "plain_wall_s": round(p["wall_s"], 2),
                "plain_cpu_s": round(p["cpu_s"], 2),
                "plain_turns": plain_turns,
            },
        )  # fmt: skip
    ]
