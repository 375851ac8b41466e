"""Benchmark 1: client CPU per turn of the runner against a minimal httpx agent loop.

Both clients play the same 12-turn conversations (scenario ``sensor_entropy_pipeline``
against the ``repeat-loop`` profile: every run re-issues its calls up to the turn cap)
against one ``harness sim`` subprocess with no added latency, one request in flight.

- harness: :func:`harness.runner.run_many` (openai SDK, transcripts written and fsynced,
  scenario tools simulated), ``concurrency=1``.
- plain: ``httpx.AsyncClient`` posting ``{params, tools, messages}``, reading
  ``choices[0].message``, appending the assistant message and one ``tool`` message per
  call. The tool results are those the harness recorded, so the requests carry the same
  messages.

CPU is ``time.process_time()`` of this process (the server's CPU is in another process).
Rounds alternate harness / plain; the median round is reported.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.common import SCENARIO, Row, clocks, median, sim_process
from harness.client.target import TargetConfig
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import Scenario, load_scenario
from harness.transcript import RunRecord

TARGET_RATIO = 1.5


def harness_round(url: str, sc: Scenario, runs: int, out: Path) -> tuple[dict[str, float], int]:
    """``runs`` runs through the runner; returns (clocks, turns made)."""
    target = TargetConfig(url, label="bench")
    with clocks() as c:
        recs = run_many_sync(
            [sc], [target], repeats=runs, concurrency=1, out_dir=out, resume=False, progress=False
        )
    return c, sum(len(r.turns) for r in recs)


def _plain_inputs(rec: RunRecord) -> tuple[dict[str, Any], list[dict[str, Any]], list[list[str]]]:
    """Request params (with tools), the opening messages, and the tool results per turn."""
    params = {k: v for k, v in rec.turns[0].request_params.items() if k != "extra_body"}
    params.update(rec.turns[0].request_params.get("extra_body") or {})
    params["tools"] = rec.tools
    results = [[r.content for r in t.tool_results] for t in rec.turns]
    return params, list(rec.turns[0].new_messages), results


async def _plain_run(client: httpx.AsyncClient, url: str, inputs: Any, max_turns: int) -> int:
    params, opening, results = inputs
    messages = list(opening)
    for turn in range(max_turns):
        resp = await client.post(url, json={**params, "messages": messages})
        msg = resp.json()["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        if not calls:
            return turn + 1
        messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": calls})
        for call, content in zip(calls, results[turn], strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return max_turns


async def _plain_all(url: str, inputs: list[Any], max_turns: int) -> int:
    async with httpx.AsyncClient(timeout=120) as client:
        turns = 0
        for inp in inputs:
            turns += await _plain_run(client, url + "/v1/chat/completions", inp, max_turns)
        return turns


def plain_round(url: str, inputs: list[Any], max_turns: int) -> tuple[dict[str, float], int]:
    with clocks() as c:
        turns = asyncio.run(_plain_all(url, inputs, max_turns))
    return c, turns


def run(runs: int = 30, rounds: int = 3) -> list[Row]:
    """Measure ``rounds`` x (harness, plain) with ``runs`` 12-turn runs each."""
    sc = load_scenario(SCENARIO)
    m: dict[str, list[float]] = {k: [] for k in ("h_cpu", "p_cpu", "h_tps", "p_tps", "h0", "p0")}
    with sim_process("repeat-loop") as url, tempfile.TemporaryDirectory() as tmp:
        harness_round(url, sc, 2, Path(tmp) / "warm")  # imports, first connection
        recs = list(RunFolder(Path(tmp) / "warm").records())
        inputs = [_plain_inputs(recs[i % len(recs)]) for i in range(runs)]
        plain_round(url, inputs[:2], sc.max_turns)
        for i in range(rounds):
            # fixed cost per invocation (clients, TLS contexts, server facts): zero runs
            m["h0"].append(harness_round(url, sc, 0, Path(tmp) / f"z{i}")[0]["cpu_s"])
            m["p0"].append(plain_round(url, [], sc.max_turns)[0]["cpu_s"])
            hc, ht = harness_round(url, sc, runs, Path(tmp) / f"r{i}")
            pc, pt = plain_round(url, inputs, sc.max_turns)
            if ht != pt:
                raise RuntimeError(f"harness made {ht} turns, plain loop {pt}: not the same work")
            m["h_cpu"].append((hc["cpu_s"] - m["h0"][-1]) / ht)
            m["p_cpu"].append((pc["cpu_s"] - m["p0"][-1]) / pt)
            m["h_tps"].append(ht / hc["wall_s"])
            m["p_tps"].append(pt / pc["wall_s"])
    return _rows(m, runs * sc.max_turns, rounds)


def _rows(m: dict[str, list[float]], turns: int, rounds: int) -> list[Row]:
    h, p = median(m["h_cpu"]) * 1000, median(m["p_cpu"]) * 1000
    ratio = h / p
    ms = {k: [round(x * 1000, 3) for x in v] for k, v in m.items() if k not in ("h_tps", "p_tps")}
    per_turn = Row(
        benchmark="1. client CPU per turn, harness vs plain httpx loop",
        measured=round(h, 3),
        target=round(p * TARGET_RATIO, 3),
        unit="ms CPU/turn",
        ratio=round(ratio, 2),
        passed=ratio <= TARGET_RATIO,
        note=(
            f"plain loop {p:.2f} ms/turn; turns/s at 1 in flight: harness "
            f"{median(m['h_tps']):.0f}, plain {median(m['p_tps']):.0f}"
        ),
        details={"turns_per_round": turns, "rounds": rounds, "ms": ms,
                 "harness_turns_per_s": [round(x, 1) for x in m["h_tps"]],
                 "plain_turns_per_s": [round(x, 1) for x in m["p_tps"]]},
    )  # fmt: skip
    h0, p0 = median(m["h0"]) * 1000, median(m["p0"]) * 1000
    fixed = Row(
        benchmark="1b. client CPU per invocation (fixed, not per turn)",
        measured=round(h0, 1),
        target=None,
        unit="ms CPU",
        ratio=round(h0 / p0, 2) if p0 else None,
        passed=None,
        note=f"plain loop {p0:.0f} ms: clients, TLS contexts, GET /v1/models + /server_info",
        details={"harness_ms": ms["h0"], "plain_ms": ms["p0"]},
    )
    return [per_turn, fixed]
