"""Detection power of ``harness compare``, measured against the reference server.

Run: ``python -m bench.power [--aa 200] [--regression 100] [--faults 20] [--repeats 5]``.

Each comparison runs every scenario ``--repeats`` times per side with sampling noise on
(temperature 0.7, no request seed; the server's seed differs per side and comparison, so
every comparison sees fresh noise) and decides with the same :func:`harness.pipeline.summarize`
as ``harness compare``. It reports:

- the false-alarm rate: REGRESSION verdicts among ``--aa`` A/A comparisons of ``healthy``;
- the detection rate: REGRESSION verdicts among ``--regression`` comparisons of ``healthy``
  against ``fused-regression``;
- per single-fault profile: detections among ``--faults`` comparisons, how often the
  fault's own kind is among the significant ones (``kind_significant``: in
  ``regressed_kinds``) and how often a REGRESSION verdict names it (``kind_named``: in
  ``regressed_kinds`` or ``candidate_only_kinds``).

Fast path: the runner's real loop (:func:`harness.runner.run_scenario`) talks to the sim's
request handler (:func:`harness.sim.app.chat_reply`) through an in-process stand-in for the
openai client, skipping sockets and the SDK's request building; the wire bodies are the
sim's own (``completion_body`` / ``stream_events``). ``harness compare`` itself goes over
HTTP; tests/test_compare.py checks that path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.client.target import TargetConfig
from harness.kinds import FailureKind
from harness.pipeline import FolderContext, summarize
from harness.runner import run_scenario
from harness.scenario.model import Scenario, load_scenarios
from harness.sim.app import SimState, chat_reply
from harness.sim.model import ScenarioIndex
from harness.sim.profiles import PROFILES, get_profile
from harness.sim.wire import completion_body, stream_events
from harness.summary import Settings, Summary
from harness.transcript import RunRecord

__all__ = ["InProcessClient", "compare_in_process", "main"]

#: single-fault profiles and the failure kind each must be named with (its fault's kind)
FAULT_PROFILES: dict[str, FailureKind | str] = {
    p.name: p.faults[0].kind for p in PROFILES.values() if len(p.faults) == 1
}
STREAM_ONLY = {"stream-truncated-args", "empty-arguments", "index-offset"}


class _Response:
    def __init__(self, body: dict[str, Any] | None, events: list[str] | None) -> None:
        self.body, self.events = body, events

    async def read(self) -> bytes:
        return json.dumps(self.body).encode()

    async def iter_lines(self) -> AsyncIterator[str]:
        for event in self.events or []:
            for line in event.split("\n"):
                yield line

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        if self.events is None:
            yield await self.read()
        for event in self.events or []:
            yield event.encode()

    aread, aiter_lines, aiter_bytes = read, iter_lines, iter_bytes  # the raw response's names
    headers: dict[str, str] = {}  # noqa: RUF012 - read only

    async def aclose(self) -> None:
        return None


class _Call:
    def __init__(self, state: SimState, params: dict[str, Any]) -> None:
        body = {k: v for k, v in params.items() if k != "extra_body"}
        body.update(params.get("extra_body") or {})
        self.state, self.body = state, body

    async def __aenter__(self) -> _Response:
        reply = chat_reply(self.state, self.body)
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        meta: dict[str, Any] = {"req_id": "chatcmpl-local", "model": "sim", "created": 0}
        if self.body.get("stream"):
            return _Response(None, list(stream_events(reply, usage=usage, **meta)))
        return _Response(completion_body(reply, usage=usage, **meta), None)

    async def __aexit__(self, *exc: object) -> None:
        return None


@dataclass
class InProcessClient:
    """Stands in for ``openai.AsyncOpenAI`` where the runner uses it:
    ``client.post("/chat/completions", content=... or body=..., cast_to=..., stream=True)`` (and
    ``client.chat.completions.with_streaming_response.create(**params)``)."""

    state: SimState
    chat: Any = field(init=False)

    def __post_init__(self) -> None:
        outer = self

        class _Streaming:
            def create(self, **params: Any) -> _Call:
                return _Call(outer.state, params)

        class _Completions:
            with_streaming_response = _Streaming()

        class _Chat:
            completions = _Completions()

        self.chat = _Chat()

    async def post(
        self, path: str, *, body: dict[str, Any] | None = None, content: bytes = b"", **_: Any
    ) -> _Response:
        # the runner sends its encoded body as ``content`` (harness.client.completions)
        return await _Call(self.state, body or json.loads(content)).__aenter__()

    async def close(self) -> None:
        return None


def _state(profile: str, seed: int, index: ScenarioIndex) -> SimState:
    return SimState(profile=get_profile(profile), index=index, seed=seed, rng=random.Random(seed))


async def _run_side(
    scenarios: Sequence[Scenario], target: TargetConfig, state: SimState, repeats: int, stream: bool
) -> list[RunRecord]:
    client: Any = InProcessClient(state)
    return [
        await run_scenario(sc, target, repeat=r, stream=stream, client=client)
        for sc in scenarios
        for r in range(repeats)
    ]


def compare_in_process(
    scenarios: Sequence[Scenario],
    index: ScenarioIndex,
    baseline: str,
    candidate: str,
    *,
    seed: int,
    repeats: int,
    stream: bool = False,
) -> Summary:
    """One comparison of two sim profiles (fresh noise per ``seed``); returns its summary."""
    b = TargetConfig("http://in-process/baseline", label=baseline, side="baseline")
    c = TargetConfig("http://in-process/candidate", label=candidate, side="candidate")
    recs = asyncio.run(_run_side(scenarios, b, _state(baseline, 2 * seed, index), repeats, stream))
    recs += asyncio.run(
        _run_side(scenarios, c, _state(candidate, 2 * seed + 1, index), repeats, stream)
    )
    context = FolderContext(settings=Settings(repeats=repeats, stream=stream))
    return summarize(recs, run_id=f"power-{seed}", context=context)[0]


def _noisy(scenarios: Sequence[Scenario]) -> list[Scenario]:
    out = []
    for sc in scenarios:
        copy = sc.model_copy(deep=True)
        copy.sampling.temperature, copy.sampling.seed = 0.7, None
        out.append(copy)
    return out


def _batch(name: str, n: int, fn: Any) -> list[Summary]:
    t0 = time.perf_counter()
    out = [fn(i) for i in range(n)]
    print(f"  {name}: {n} comparisons in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.power", description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", default="scenarios")
    p.add_argument("--aa", type=int, default=200)
    p.add_argument("--regression", type=int, default=100)
    p.add_argument("--faults", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profiles", default=None, help="comma-separated fault profiles (default all)")
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    scenarios = _noisy(load_scenarios([args.scenarios]))
    index = ScenarioIndex.from_dir(args.scenarios)
    r = args.repeats

    def run(base: str, cand: str, offset: int, stream: bool = False) -> Any:
        return lambda i: compare_in_process(
            scenarios, index, base, cand, seed=offset + i, repeats=r, stream=stream
        )

    aa = _batch("A/A healthy", args.aa, run("healthy", "healthy", 0))
    reg = _batch(
        "healthy vs fused-regression", args.regression, run("healthy", "fused-regression", 10_000)
    )
    figures: dict[str, Any] = {
        "repeats": r,
        "scenarios": [s.id for s in scenarios],
        "aa": _tally(aa),
        "fused_regression": _tally(reg),
        "faults": {},
    }
    chosen = args.profiles.split(",") if args.profiles else list(FAULT_PROFILES)
    for k, (prof, kind) in enumerate(FAULT_PROFILES.items()):
        if prof not in chosen:
            continue
        res = _batch(
            prof, args.faults, run("healthy", prof, 20_000 + 1000 * k, prof in STREAM_ONLY)
        )
        t = _tally(res)
        t["kind_significant"] = sum(kind in s.verdict.regressed_kinds for s in res if s.verdict)
        t["kind_named"] = sum(
            kind in s.verdict.regressed_kinds + s.verdict.candidate_only_kinds
            for s in res
            if s.verdict and s.verdict.verdict == "REGRESSION"
        )
        figures["faults"][prof] = t
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(figures, fh, indent=2)
    return 0


def _tally(summaries: Sequence[Summary]) -> dict[str, Any]:
    verdicts = Counter(s.verdict.verdict if s.verdict else "none" for s in summaries)
    kinds = Counter(k for s in summaries if s.verdict for k in s.verdict.regressed_kinds)
    return {
        "n": len(summaries),
        "regression": verdicts.get("REGRESSION", 0),
        "verdicts": dict(verdicts),
        "regressed_kinds": dict(kinds.most_common()),
    }


if __name__ == "__main__":
    sys.exit(main())
