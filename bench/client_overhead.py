"""Benchmark 1: client CPU per turn of the runner against a minimal httpx agent loop,
and how much of the difference is the openai SDK's request path.

Three clients play the same 12-turn conversations (scenario ``sensor_entropy_pipeline``
against the ``repeat-loop`` profile: every run re-issues its calls up to the turn cap)
against one ``harness sim`` subprocess with no added latency, one request in flight, and
send the same request bodies (same keys and values; checked by tests/bench/test_bench.py):

- plain: ``httpx.AsyncClient`` posting ``{params, tools, messages}``, reading
  ``choices[0].message``, appending the assistant message (``content`` ``""`` for null,
  as the runner sends it) and one ``tool`` message per call. The tool results are those
  the harness recorded, so the requests carry the same messages.
- sdk: the same loop, posting through the openai SDK's documented generic request
  with the runner's client (:func:`harness.client.target.make_client`,
  ``client.post("/chat/completions", body=..., cast_to=<raw HTTP response>,
  stream=True)``, the body read and parsed with ``json.loads``): the SDK's request path
  alone, no harness code. The SDK encodes the whole body each turn, as the plain loop's
  httpx does; the runner sends its own bytes, each message encoded once
  (:class:`harness.client.completions.ConversationBody`, ``content=``), so "ours" below
  is net of that saving.
- harness: :func:`harness.runner.run_many` (openai SDK, transcripts written and fsynced,
  scenario tools simulated), ``concurrency=1``.

CPU is ``time.process_time()`` of this process (the server's CPU is in another process).
Each round runs the three clients once each, in an order rotated from round to round.
The fixed cost of one invocation (clients, TLS contexts, server facts) is measured by
invocations with zero runs and its median, per client, is subtracted. The machine may be
shared, so the reported ratio is the median over rounds of the ratio harness / plain
measured within the same round (a change of load moves both), with its interquartile
range. The harness's CPU per turn splits into: transport (the plain loop: httpx, h11,
anyio, JSON, asyncio), the SDK's request path (sdk - plain) and ours (harness - sdk:
the runner loop, records, tool simulation, the transcript append and fsync).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import SCENARIO, Row, clocks, median, sim_process
from harness.client.completions import _RAW_RESPONSE
from harness.client.target import TargetConfig, make_client
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import Scenario, load_scenario
from harness.transcript import RunRecord

TARGET_RATIO = 1.5
#: the clients, in the order of the first round
CLIENTS = ("harness", "plain", "sdk")

#: request params (with tools), the opening messages, the tool results per turn
Inputs = tuple[dict[str, Any], list[dict[str, Any]], list[list[str]]]
#: one request: the JSON body -> the parsed response body
Post = Callable[[dict[str, Any]], Awaitable[Any]]


def harness_round(url: str, sc: Scenario, runs: int, out: Path) -> tuple[dict[str, float], int]:
    """``runs`` runs through the runner; returns (clocks, turns made)."""
    target = TargetConfig(url, label="bench")
    with clocks() as c:
        recs = run_many_sync(
            [sc], [target], repeats=runs, concurrency=1, out_dir=out, resume=False, progress=False
        )
    return c, sum(len(r.turns) for r in recs)


def _plain_inputs(rec: RunRecord) -> Inputs:
    """Request params (with tools), the opening messages, and the tool results per turn."""
    params = {k: v for k, v in rec.turns[0].request_params.items() if k != "extra_body"}
    params.update(rec.turns[0].request_params.get("extra_body") or {})
    params["tools"] = rec.tools
    results = [[r.content for r in t.tool_results] for t in rec.turns]
    return params, list(rec.turns[0].new_messages), results


async def _conversation(post: Post, inputs: Inputs, max_turns: int) -> int:
    """One run of the minimal agent loop through ``post``; returns the turns made."""
    params, opening, results = inputs
    messages = list(opening)
    for turn in range(max_turns):
        msg = (await post({**params, "messages": messages}))["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        if not calls:
            return turn + 1
        content = msg.get("content")
        content = "" if content is None else content  # as the runner sends it
        messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        for call, text in zip(calls, results[turn], strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    return max_turns


def plain_post(client: httpx.AsyncClient, url: str) -> Post:
    """``post`` of the plain loop: ``httpx`` with ``json=``, ``Response.json()``."""

    async def post(body: dict[str, Any]) -> Any:
        return (await client.post(url, json=body)).json()

    return post


def sdk_post(client: Any) -> Post:
    """``post`` through the openai SDK, as :func:`harness.client.completions.post_completion`
    makes it (no retries, body sent as given, response read raw)."""

    async def post(body: dict[str, Any]) -> Any:
        resp = await client.post("/chat/completions", body=body, cast_to=_RAW_RESPONSE, stream=True)
        try:
            return json.loads(await resp.aread())
        finally:
            await resp.aclose()

    return post


async def _plain_run(client: httpx.AsyncClient, url: str, inputs: Inputs, max_turns: int) -> int:
    return await _conversation(plain_post(client, url), inputs, max_turns)


async def _plain_all(url: str, inputs: list[Inputs], max_turns: int) -> int:
    async with httpx.AsyncClient(timeout=120) as client:
        post = plain_post(client, url + "/v1/chat/completions")
        return sum([await _conversation(post, inp, max_turns) for inp in inputs])


async def _sdk_all(url: str, inputs: list[Inputs], max_turns: int) -> int:
    client = make_client(TargetConfig(url, label="bench"))
    try:
        post = sdk_post(client)
        return sum([await _conversation(post, inp, max_turns) for inp in inputs])
    finally:
        await client.close()


def plain_round(url: str, inputs: list[Inputs], max_turns: int) -> tuple[dict[str, float], int]:
    with clocks() as c:
        turns = asyncio.run(_plain_all(url, inputs, max_turns))
    return c, turns


def sdk_round(url: str, inputs: list[Inputs], max_turns: int) -> tuple[dict[str, float], int]:
    with clocks() as c:
        turns = asyncio.run(_sdk_all(url, inputs, max_turns))
    return c, turns


class _Bench:
    """The three clients against one server; ``measure`` runs one of them once."""

    def __init__(self, url: str, sc: Scenario, runs: int, tmp: Path) -> None:
        self.url, self.sc, self.tmp, self.n = url, sc, tmp, 0
        harness_round(url, sc, 2, tmp / "warm")  # imports, first connection
        recs = list(RunFolder(tmp / "warm").records())
        self.inputs = [_plain_inputs(recs[i % len(recs)]) for i in range(runs)]
        plain_round(url, self.inputs[:2], sc.max_turns)
        sdk_round(url, self.inputs[:2], sc.max_turns)

    def measure(self, client: str, runs: int) -> tuple[dict[str, float], int]:
        self.n += 1
        if client == "harness":
            return harness_round(self.url, self.sc, runs, self.tmp / f"r{self.n}")
        rnd = plain_round if client == "plain" else sdk_round
        return rnd(self.url, self.inputs[:runs], self.sc.max_turns)


def run(runs: int = 20, rounds: int = 21) -> list[Row]:
    """Measure ``rounds`` x (harness, plain, sdk) with ``runs`` 12-turn runs each."""
    sc = load_scenario(SCENARIO)
    cpu: dict[str, list[float]] = {c: [] for c in CLIENTS}
    fixed: dict[str, list[float]] = {c: [] for c in CLIENTS}
    tps: dict[str, list[float]] = {c: [] for c in CLIENTS}
    with sim_process("repeat-loop") as url, tempfile.TemporaryDirectory() as tmp:
        bench = _Bench(url, sc, runs, Path(tmp))
        for i in range(rounds):
            order = CLIENTS[i % 3 :] + CLIENTS[: i % 3]
            turns = set()
            for client in order:
                fixed[client].append(bench.measure(client, 0)[0]["cpu_s"])
                c, t = bench.measure(client, runs)
                cpu[client].append(c["cpu_s"])
                tps[client].append(t / c["wall_s"])
                turns.add(t)
            if len(turns) != 1:
                raise RuntimeError(f"the clients made {sorted(turns)} turns: not the same work")
    n_turns = runs * sc.max_turns
    per_turn = {c: [(x - median(fixed[c])) / n_turns for x in cpu[c]] for c in CLIENTS}
    return _rows(per_turn, fixed, tps, n_turns)


def _quartiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def _rows(
    per_turn: dict[str, list[float]],
    fixed: dict[str, list[float]],
    tps: dict[str, list[float]],
    turns: int,
) -> list[Row]:
    """The rows of benchmark 1; shares are medians of ratios within rounds, in plain loops."""
    ms = {c: median(v) * 1000 for c, v in per_turn.items()}
    ratios = {
        c: [x / p for x, p in zip(per_turn[c], per_turn["plain"], strict=True)]
        for c in ("harness", "sdk")
    }
    r_h, r_s = median(ratios["harness"]), median(ratios["sdk"])
    q1, q3 = _quartiles(ratios["harness"])
    rounds, p = len(per_turn["plain"]), ms["plain"]
    details = {
        "turns_per_round": turns,
        "rounds": rounds,
        "ms_per_turn": {c: [round(x * 1000, 3) for x in v] for c, v in per_turn.items()},
        "fixed_ms": {c: [round(x * 1000, 1) for x in v] for c, v in fixed.items()},
        "turns_per_s": {c: [round(x, 1) for x in v] for c, v in tps.items()},
        "ratio_to_plain": {c: [round(x, 3) for x in v] for c, v in ratios.items()},
        "shares_x_plain": {"transport": 1.0, "sdk": round(r_s - 1, 3), "ours": round(r_h - r_s, 3)},
    }  # fmt: skip
    per_turn_row = Row(
        benchmark="1. client CPU per turn, harness vs plain httpx loop",
        measured=round(ms["harness"], 3),
        target=round(p * TARGET_RATIO, 3),
        unit="ms CPU/turn",
        ratio=round(r_h, 2),
        passed=r_h <= TARGET_RATIO,
        note=(
            f"{r_h:.2f}x = 1 transport (the plain loop, {p:.2f} ms) + {r_s - 1:.2f} openai SDK "
            f"request path ({(r_s - 1) * p:.2f} ms) + {r_h - r_s:.2f} ours ({(r_h - r_s) * p:.2f} "
            f"ms); ratio IQR {q1:.2f}-{q3:.2f} over {rounds} rounds"
        ),
        details=details,
    )
    sdk_row = Row(
        benchmark="1a. the openai SDK's request path alone (same bodies, no harness code)",
        measured=round(ms["sdk"], 3),
        target=None,
        unit="ms CPU/turn",
        ratio=round(r_s, 2),
        passed=None,
        note=(
            f"of the {TARGET_RATIO - 1:.2f}x over the plain loop the target allows, the SDK "
            f"takes {r_s - 1:.2f}x; turns/s at 1 in flight: harness "
            f"{median(tps['harness']):.0f}, sdk {median(tps['sdk']):.0f}, "
            f"plain {median(tps['plain']):.0f}"
        ),
    )
    return [per_turn_row, sdk_row, _fixed_row(fixed)]


def _fixed_row(fixed: dict[str, list[float]]) -> Row:
    h0, p0 = median(fixed["harness"]) * 1000, median(fixed["plain"]) * 1000
    return Row(
        benchmark="1b. client CPU per invocation (fixed, not per turn)",
        measured=round(h0, 1),
        target=None,
        unit="ms CPU",
        ratio=round(h0 / p0, 2) if p0 else None,
        passed=None,
        note=f"plain loop {p0:.0f} ms: clients, TLS contexts, GET /v1/models + /server_info",
        details={c: [round(x * 1000, 1) for x in v] for c, v in fixed.items()},
    )
