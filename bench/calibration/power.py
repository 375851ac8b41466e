"""Detection power and false alarms of ``harness compare`` at its shipped defaults.

Run: ``python -m bench.calibration.power [--parts aa,one,curve,drift,fused,gsm8k,recorded] [--json
FILE]`` (``make calibrate`` runs every part and writes ``bench/calibration/power.json``);
sizes are options (``--aa 1000 --aa-sequential 200 --one 150 --curve 40 --drift 60 --fused
60 --gsm8k 1000 --recorded-aa 500 --recorded-baselines 20 --recorded-candidates 50
--recorded-detect 25``, the defaults); ``--workers N`` runs comparisons in N processes (the figures do not
depend on it: every comparison is a pure function of its seeds).

Every comparison runs the shipped scenarios at the shipped defaults: temperature 0.7
(a scenario's own temperature wins: ``long_context_logs`` is greedy and counts once per
side), a request seed per run derived from the comparison's seed, 5 repeats per round,
alpha 0.01, 10,000 Westfall-Young permutations; each side has its own server seed, so
every comparison sees fresh, independent noise. Each is decided by the same
:func:`harness.pipeline.summarize` as ``harness compare``, fixed (5 repeats) and
sequential (``--sequential``: rounds of 5 repeats, at most 4, each look at its spent
level, :mod:`harness.stats.sequential`). Runs are made lazily and nested: the 10-repeat
decision uses the 5-repeat runs and 5 more, as a sequential comparison would.

Parts:

- ``aa``: healthy against healthy: REGRESSION and INCONCLUSIVE rates (fixed on all,
  sequential on the first ``--aa-sequential``), runs spent;
- ``aa-both``: healthy against healthy at ``--stream both`` (every repeat streamed and
  not, on one request seed: the sim, like llama-server, gives both the same draw), fixed
  on ``--aa-both`` comparisons and sequential on the first ``--aa-sequential``, each
  decided twice from the same runs: a repeat as the unit of the tests (shipped) and each
  run as a unit (the rule before, figures suffixed ``_runs_as_units``); and fixed against a
  healthy candidate whose streamed runs are independent draws (``fixed_independent_twins``);
- ``one``: one scenario (``enum_units``) looping in every candidate run, the rest healthy
  (sim profile ``repeat-loop@enum_units``);
- ``curve``: a loop in 5/10/20/30% of all candidate runs (``repeat-loop@RATE``) at 5, 10
  and 20 repeats fixed, and sequential; the baseline runs are shared by the rates;
- ``drift``: argument drift in 10% and 20% of all candidate runs, one profile
  per kind of :data:`DRIFT` (``KIND@RATE``; only the scenarios whose arguments the fault
  can change can show it: ``drift_scenarios`` counts them), sequential; every sequential
  figure (here and in ``aa``) is also decided by the earlier futility rule
  (:func:`stop_earlier_rule`: futility also while the candidate shows a kind no baseline run
  shows), paired, from the same looks (:func:`decide_both`); the early-stop case
  (:data:`EARLY_STOP_CASE`) is also decided fixed at 20 repeats. Each figure
  counts ``flags`` (:data:`Outcome`): NO CHANGE verdicts naming a candidate-only kind,
  loop headlines, A/A verdicts the fixed INCONCLUSIVE band (0.1) would have made
  INCONCLUSIVE;
- ``early``: the early-stop case alone (:data:`EARLY_STOP_CASE`, the same seeds as
  ``drift``), for another library (``--scenarios``: the 19-scenario library it was found on);
- ``fused``: the ``fused-regression`` profile (the seed case), fixed and sequential;
- ``gsm8k``: GSM8K-500, 0.88 against 0.81 and 0.88 against 0.88, correctness drawn per
  question and side as the sim's GSM8K model draws it (a hash of server seed and
  question; independent sides), decided by :func:`harness.gsm8k.stats.paired_verdict`;
- ``recorded``: recorded baselines (``harness record``, then ``harness compare --baseline
  results/<id>``), sequential. A recording is a healthy baseline side of 20 repeats per
  scenario (4 rounds of 5), read at look k up to repeat 5k; a candidate sends the
  recording's request seeds to a fresh server (its own server seed, :func:`_server`).
  Figures: ``aa``, each healthy candidate against its own fresh recording (the false-alarm
  rate averaged over recordings; ``--recorded-aa``); ``spread``, ``--recorded-baselines``
  recordings each judging ``--recorded-candidates`` healthy candidates: the false-alarm
  rate given the recording, its Clopper-Pearson interval and the recording's luck (its
  share of failed runs), how many exceed alpha, the dispersion across recordings;
  ``detection``, per profile of ``--recorded-cases`` the same recordings each judging
  ``--recorded-detect`` broken candidates, every candidate also judged against a fresh
  live baseline (paired: the same candidate runs). ``--recorded-schedule`` gives the
  baseline's repeats at each look (default ``5,10,15,20``, the candidate's); any other
  measures an uneven design that ``harness compare`` does not accept today (its
  ``_unfinished`` refuses unequal runs per scenario; bypassed here for that measurement).

Fast path: the runner's real loop (:func:`harness.runner.run_scenario`) talks to the sim's
request handler (:func:`harness.sim.app.chat_reply`) through an in-process stand-in for the
openai client, skipping sockets and the SDK's request building; the wire bodies are the
sim's own (``completion_body`` / ``stream_events``). ``harness compare`` itself goes over
HTTP; tests/compare/test_compare.py checks that path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scipy import stats as sps

from harness import pipeline
from harness.client.target import TargetConfig
from harness.gsm8k.stats import paired_verdict
from harness.options import OPTIONS
from harness.pipeline import FolderContext, summarize
from harness.runner import SamplingPolicy, run_scenario
from harness.scenario.model import Scenario, load_scenarios
from harness.scoring.models import RunScore
from harness.scoring.score import score_run
from harness.sim.app import SimState, chat_reply
from harness.sim.gsm8k_model import _unit
from harness.sim.model import ScenarioIndex
from harness.sim.profiles import get_profile
from harness.sim.wire import completion_body, stream_events
from harness.stats.aggregate import AggregateBuilder
from harness.stats.sequential import ROUNDS, look_alpha, should_stop, suggestive_p
from harness.stats.verdict import ALPHA
from harness.summary import Settings, Summary
from harness.transcript import RunRecord

__all__ = ["InProcessClient", "Side", "compare_in_process", "main"]

ROOT = Path(__file__).resolve().parents[2]
#: the shipped defaults every figure is measured at
REPEATS = 5
TEMPERATURE: float = OPTIONS["temperature"].default
ONE_SCENARIO = "enum_units"
RATES = (0.05, 0.1, 0.2, 0.3)
BUDGETS = (5, 10, 20)
#: INCONCLUSIVE bands whose A/A rate the flags measure (adjusted p at most each)
BANDS = (0.1, 0.044, 0.03, 0.02)
#: the drift faults measured (each a kind only the scenarios whose arguments it can
#: change can show) and their shares of candidate runs
DRIFT = ("container-as-string", "string-as-scalar", "scalar-as-string")
DRIFT_RATES = (0.1, 0.2)
#: the early-stop case: a drift the earlier futility rule stopped at NO CHANGE while the
#: candidate showed a kind no baseline run showed; also decided fixed at 20 repeats
EARLY_STOP_CASE = ("container-as-string", 0.2)


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


@dataclass
class Side:
    """One side of a comparison against an in-process sim; runs are made on demand
    (:meth:`upto`) and kept, so a larger budget extends a smaller one."""

    scenarios: Sequence[Scenario]
    index: ScenarioIndex
    profile: str
    side: str
    seed: int
    #: ``True``/``False``, or ``"both"``: every repeat streamed and not, on one request
    #: seed (``--stream both``)
    stream: bool | str = False
    #: with ``stream="both"``: the streamed run of a repeat sent another request seed, an
    #: independent draw (a server that does not reproduce a seeded sample across modes)
    independent_twins: bool = False
    #: the sim's seed (its noise); None: ``2 * seed`` (+1 for the candidate). The request
    #: seeds always come from ``seed``, so a side with its own ``server_seed`` sends the
    #: requests of ``seed``'s comparison to a server with fresh noise
    server_seed: int | None = None
    records: list[RunRecord] = field(default_factory=list)
    made: int = 0
    #: id(record) -> its score (records stay alive in ``records``: ids are stable)
    scores: dict[int, RunScore] = field(default_factory=dict)

    def upto(self, repeats: int) -> list[RunRecord]:
        """The runs of repeats ``0 .. repeats - 1`` of every scenario."""
        if repeats > self.made:
            self.records += asyncio.run(self._run(range(self.made, repeats)))
            self.made = repeats
        return [r for r in self.records if r.repeat < repeats]

    async def _run(self, repeats: range) -> list[RunRecord]:
        server = self.server_seed
        if server is None:
            server = 2 * self.seed + (self.side == "candidate")
        state = SimState(
            profile=get_profile(self.profile),
            index=self.index,
            seed=server,
            rng=random.Random(server),
        )
        client: Any = InProcessClient(state)
        target = TargetConfig(
            f"http://in-process/{self.side}",
            label=self.profile,
            side="candidate" if self.side == "candidate" else "baseline",
        )
        policy = SamplingPolicy(TEMPERATURE, self.seed)
        twin = (
            SamplingPolicy(TEMPERATURE, self.seed + 1_000_003) if self.independent_twins else policy
        )
        modes = (False, True) if self.stream == "both" else (bool(self.stream),)
        return [
            await run_scenario(
                sc, target, repeat=r, stream=m, client=client, sampling=twin if m else policy
            )
            for sc in self.scenarios
            for r in repeats
            for m in modes
        ]


def _score(side: Side, rec: RunRecord) -> RunScore:
    """``score_run(rec)``, once per record of ``side``."""
    found = side.scores.get(id(rec))
    if found is None:
        found = side.scores[id(rec)] = score_run(rec)
    return found


def _both_sides(base: dict[str, Any], cand: dict[str, Any], planned: Sequence[str]) -> str | None:
    """:func:`harness.pipeline._unfinished` without its equal-runs rule (the uneven design a
    ``decide_sequential(..., baseline=...)`` schedule measures): both sides have runs."""
    return None if base and cand else "one side has no runs yet"


def _summarize(
    base: Side, cand: Side, records: list[RunRecord], settings: Settings, uneven: bool = False
) -> Summary:
    """:func:`harness.pipeline.summarize` with each run scored once (a record is scored
    again for every budget and look otherwise; the score is a pure function of it).
    ``uneven``: the sides have different numbers of runs per scenario, which ``harness
    compare`` never judges (``_unfinished``); decided anyway, to measure that design."""

    def cached(rec: RunRecord) -> RunScore:
        return _score(cand if rec.target.side == "candidate" else base, rec)

    unfinished = vars(pipeline)["_unfinished"]
    vars(pipeline)["score_run"] = cached
    if uneven:
        vars(pipeline)["_unfinished"] = _both_sides
    try:
        context = FolderContext(settings=settings)
        return summarize(records, run_id="power", context=context)[0]
    finally:
        vars(pipeline)["score_run"] = score_run
        vars(pipeline)["_unfinished"] = unfinished


def decide_fixed(base: Side, cand: Side, repeats: int) -> Summary:
    """The comparison at ``repeats`` per side, as ``harness compare --repeats N``."""
    records = base.upto(repeats) + cand.upto(repeats)
    settings = Settings(repeats=repeats, stream=base.stream, temperature=TEMPERATURE)
    return _summarize(base, cand, records, settings)


def stop_earlier_rule(summary: Summary, look: int, rounds: int) -> bool:
    """The earlier stopping rule: futility also while the candidate shows a kind
    no baseline run shows (measured beside the shipped rule, paired)."""
    if summary.verdict is not None and summary.verdict.candidate_only_kinds:
        summary = summary.model_copy(
            update={"verdict": summary.verdict.model_copy(update={"candidate_only_kinds": []})}
        )
    return should_stop(summary, look, rounds)


def decide_sequential(
    base: Side,
    cand: Side,
    rounds: int = ROUNDS,
    baseline: Sequence[int] | None = None,
    stop: Callable[[Summary, int, int], bool] = should_stop,
) -> tuple[Summary, int]:
    """The comparison as ``harness compare --sequential``: ``(summary, round decided)``.

    ``baseline``: the baseline's repeats per scenario at each look (one per round; the
    default ``5, 10, ...`` is the candidate's, as a live baseline or a recording read round
    by round gives); another schedule measures an uneven design (see :func:`_summarize`).
    """
    schedule = list(baseline or [look * REPEATS for look in range(1, rounds + 1)])
    if len(schedule) != rounds:
        raise ValueError(f"need one baseline size per round ({rounds}), got {schedule}")
    for look in range(1, rounds + 1):
        uneven = schedule[look - 1] != look * REPEATS
        records = base.upto(schedule[look - 1]) + cand.upto(look * REPEATS)
        settings = Settings(
            repeats=look * REPEATS, stream=base.stream, temperature=TEMPERATURE,
            sequential=True, rounds=rounds, look=look,
        )  # fmt: skip
        summary = _summarize(base, cand, records, settings, uneven)
        if stop(summary, look, rounds):
            return summary, look
    raise AssertionError("unreachable: the last look always stops")


def decide_both(base: Side, cand: Side) -> tuple[tuple[Summary, int], tuple[Summary, int]]:
    """``(shipped rule, earlier futility rule)``, each ``(summary, round decided)``, from one
    pass: the looks are the same until the earlier rule stops (it stops wherever the
    shipped one does, and also on futility with a kind only the candidate shows)."""
    looks: list[Summary] = []

    def keep(summary: Summary, look: int, rounds: int) -> bool:
        looks.append(summary)
        return should_stop(summary, look, rounds)

    shipped = decide_sequential(base, cand, stop=keep)
    old = next(k for k, s in enumerate(looks, start=1) if stop_earlier_rule(s, k, ROUNDS))
    return shipped, (looks[old - 1], old)


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
    """One fixed comparison of two sim profiles (fresh noise per ``seed``)."""
    base = Side(scenarios, index, baseline, "baseline", seed, stream)
    cand = Side(scenarios, index, candidate, "candidate", seed, stream)
    return decide_fixed(base, cand, repeats)


def _noisy(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """Copies of ``scenarios`` sampled at the default temperature (greedy ones too)."""
    out = []
    for sc in scenarios:
        copy = sc.model_copy(deep=True)
        copy.sampling.temperature, copy.sampling.seed = TEMPERATURE, None
        out.append(copy)
    return out


def _verdict(s: Summary) -> str:
    return s.verdict.verdict if s.verdict else "none"


#: one decision: (figure key, verdict, rounds used, runs spent, flags); flags (comma
#: separated, :func:`_flags`): ``only`` a NO CHANGE naming a kind only the candidate shows,
#: ``loop`` a REGRESSION whose headline names ``repeat_loop``, ``loop_sig`` one whose
#: significant kinds include it, ``band_X`` a verdict (INCONCLUSIVE or NO CHANGE) that a
#: band of X on adjusted p would make INCONCLUSIVE (:data:`BANDS`; 0.1: the fixed band)
Outcome = tuple[str, str, int, int, str]


def _flags(s: Summary) -> str:
    """The flags of one decision (see :data:`Outcome`)."""
    v, out = s.verdict, []
    if v is None:
        return ""
    if v.verdict == "NO CHANGE" and v.candidate_only_kinds:
        out.append("only")
    if v.verdict == "REGRESSION" and "repeat_loop" in v.message.split(";")[0]:
        out.append("loop")
    if "repeat_loop" in v.regressed_kinds:
        out.append("loop_sig")
    worse = [
        r.p_adjusted
        for c in s.comparisons
        for r in c.rows
        if r.decisive and r.worse and r.p_adjusted is not None
    ]
    low, st = min(worse, default=1.0), s.settings
    now = suggestive_p(look_alpha(st.alpha, st.look, st.rounds), st.alpha) if st.look else 0.1
    if v.verdict in ("INCONCLUSIVE", "NO CHANGE"):
        for band in BANDS:  # INCONCLUSIVE for another reason than the band: at every band
            if low <= band or (v.verdict == "INCONCLUSIVE" and low > now):
                out.append(f"band_{band:g}")
    return ",".join(out)


def _tally(results: Sequence[tuple[Any, ...]]) -> dict[str, Any]:
    """Counts of verdicts, rounds, runs spent and flags over one figure's outcomes."""
    verdicts = Counter(o[1] for o in results)
    flags = Counter(f for o in results if len(o) > 4 for f in o[4].split(",") if f)
    n = len(results)
    return {
        "n": n,
        "regression": verdicts.get("REGRESSION", 0),
        "regression_rate": verdicts.get("REGRESSION", 0) / n if n else None,
        "inconclusive_rate": verdicts.get("INCONCLUSIVE", 0) / n if n else None,
        "verdicts": dict(verdicts),
        "rounds": {str(k): c for k, c in sorted(Counter(o[2] for o in results).items())},
        "mean_runs": sum(o[3] for o in results) / n if n else None,
        "max_rounds": max((o[2] for o in results), default=0),
        "flags": dict(sorted(flags.items())),
    }


_BENCH: Bench | None = None


def _bench(scenarios: str) -> Bench:
    """The process's :class:`Bench` (loaded once per worker)."""
    global _BENCH
    if _BENCH is None:
        _BENCH = Bench(load_scenarios([scenarios]), ScenarioIndex.from_dir(scenarios))
    return _BENCH


def _job(args: tuple[Any, ...]) -> list[Outcome]:
    """One comparison index of a part: ``(scenarios, candidate or "curve"/"drift", seed,
    seq[, fixed])``: ``seq`` decides it sequentially too, ``fixed`` (default true) fixed."""
    scenarios, cand, seed, seq = args[:4]
    fixed = args[4] if len(args) > 4 else True
    b = _bench(scenarios)
    base = b.side("healthy", "baseline", seed)
    if cand == "curve":
        return b.curve_one(base, seed)
    if cand == "drift":
        return b.drift_one(base, seed)
    if cand == "early":
        return b.drift_one(base, seed, [EARLY_STOP_CASE])
    if cand == "aa-both":
        return b.aa_both_one(seed, seq)
    c = b.side(cand, "candidate", seed)
    out: list[Outcome] = []
    if fixed:
        s = decide_fixed(base, c, REPEATS)
        out.append(("fixed", _verdict(s), 1, b.runs(REPEATS), _flags(s)))
    if seq:
        for key, (s, look) in zip(
            ("sequential", "sequential_earlier_rule"), decide_both(base, c), strict=True
        ):
            out.append((key, _verdict(s), look, b.runs(look * REPEATS), _flags(s)))
    return out


@dataclass
class Bench:
    """The shipped scenarios and what every part needs."""

    scenarios: list[Scenario]
    index: ScenarioIndex

    def side(self, profile: str, side: str, seed: int, stream: bool | str = False) -> Side:
        return Side(self.scenarios, self.index, profile, side, seed, stream)

    def runs(self, repeats: int) -> int:
        return 2 * repeats * len(self.scenarios)

    def aa_both_one(self, seed: int, seq: bool) -> list[Outcome]:
        """One A/A at ``--stream both``: fixed (5 repeats, 10 runs a scenario and side) and,
        with ``seq``, sequential, each decided twice from the same runs: with a repeat as
        the unit (shipped) and with each run as a unit (the rule before it,
        :data:`RUNS_AS_UNITS`); and fixed against a candidate whose streamed runs are
        independent draws (``independent_twins``: another request seed), the sides then
        alike in their failure rates, not in how their twin runs agree."""
        base = self.side("healthy", "baseline", seed, "both")
        cand = self.side("healthy", "candidate", seed, "both")
        loose = replace(cand, independent_twins=True, records=[], made=0, scores={})
        out: list[Outcome] = []
        for suffix, units in (("", True), (RUNS_AS_UNITS, False)):
            with _units(units):
                s = decide_fixed(base, cand, REPEATS)
                out.append((f"fixed{suffix}", _verdict(s), 1, 2 * self.runs(REPEATS), _flags(s)))
                s = decide_fixed(base, loose, REPEATS)
                out.append((f"fixed_independent_twins{suffix}", _verdict(s), 1,
                            2 * self.runs(REPEATS), _flags(s)))  # fmt: skip
                if seq:
                    s, look = decide_sequential(base, cand)
                    out.append((f"sequential{suffix}", _verdict(s), look,
                                2 * self.runs(look * REPEATS), _flags(s)))  # fmt: skip
        return out

    def curve_one(self, base: Side, seed: int) -> list[Outcome]:
        """One index of the loop curve: every rate at every budget and sequential."""
        out: list[Outcome] = []
        for rate in RATES:
            cand = self.side(f"repeat-loop@{rate:g}", "candidate", seed)
            for budget in BUDGETS:
                s = decide_fixed(base, cand, budget)
                out.append(
                    (f"{rate:g}/{budget}", _verdict(s), budget // REPEATS, self.runs(budget),
                     _flags(s))
                )  # fmt: skip
            s, look = decide_sequential(base, cand)
            out.append(
                (f"{rate:g}/sequential", _verdict(s), look, self.runs(look * REPEATS), _flags(s))
            )
        return out

    def drift_one(
        self, base: Side, seed: int, cases: Sequence[tuple[str, float]] = ()
    ) -> list[Outcome]:
        """One index of the drift figures: every drift kind at every rate, sequential (the
        default), the earlier futility rule (paired) and fixed at 20 repeats
        (``--no-sequential --repeats 20``)."""
        out: list[Outcome] = []
        for kind, rate in cases or [(k, r) for k in DRIFT for r in DRIFT_RATES]:
            cand = self.side(f"{kind}@{rate:g}", "candidate", seed)
            key = f"{kind}/{rate:g}"
            both = decide_both(base, cand)
            for how, (s, look) in zip(("sequential", "earlier_rule"), both, strict=True):
                out.append((f"{key}/{how}", _verdict(s), look, self.runs(look * REPEATS),
                            _flags(s)))  # fmt: skip
            if (kind, rate) == EARLY_STOP_CASE:  # --no-sequential --repeats 20
                s = decide_fixed(base, cand, 20)
                out.append((f"{key}/20", _verdict(s), 4, self.runs(20), _flags(s)))
        return out


#: the figure suffix of the rule before repeats were the units of ``--stream both``
RUNS_AS_UNITS = "_runs_as_units"


@contextlib.contextmanager
def _units(repeats: bool) -> Iterator[None]:
    """With ``repeats`` false, every scored run is a unit of the tests, as before a
    ``--stream both`` repeat became one (:attr:`harness.summary.Aggregate.units` left
    empty); restored on exit."""
    shipped = AggregateBuilder._units
    if not repeats:
        AggregateBuilder._units = lambda self: {}  # type: ignore[method-assign]
    try:
        yield
    finally:
        AggregateBuilder._units = shipped  # type: ignore[method-assign]


def _run_jobs(jobs: Sequence[tuple[Any, ...]], workers: int) -> dict[str, Any]:
    """Every job's outcomes, tallied per figure key (``workers`` processes)."""
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            done = pool.map(_job, jobs, chunksize=4)
    else:
        done = [_job(j) for j in jobs]
    by: dict[str, list[Outcome]] = {}
    for outcomes in done:
        for o in outcomes:
            by.setdefault(o[0], []).append(o)
    return {k: _tally(v) for k, v in by.items()}


def _can_show(scenarios: str, kind: str) -> str:
    """``"6 (1 greedy)"``: the scenarios whose runs show ``kind`` when every run has the
    fault (``KIND@1``, one repeat, healthy noise aside)."""
    b = _bench(scenarios)
    side = b.side(f"{kind}@1", "candidate", 1)
    name = kind.replace("-", "_")
    shows = {r.scenario_id for r in side.upto(1) if name in _score(side, r).failures}
    greedy = sum(
        1
        for sc in b.scenarios
        if sc.id in shows
        and "temperature" in sc.sampling.model_fields_set
        and not sc.sampling.temperature
    )
    return f"{len(shows)}" + (f" ({greedy} greedy: one unit a side)" if greedy else "")


def _drift(tallies: dict[str, Any]) -> dict[str, Any]:
    """``{"kind/0.1/sequential": t}`` as ``{"kind": {"0.1": {"sequential": t}}}``."""
    out: dict[str, Any] = {}
    for key, t in tallies.items():
        kind, rate, how = key.split("/")
        out.setdefault(kind, {}).setdefault(rate, {})[how] = t
    return out


def _curve(tallies: dict[str, Any]) -> dict[str, Any]:
    """``{"0.1/10": t}`` as ``{"0.1": {"10": t}}``."""
    out: dict[str, Any] = {}
    for key, t in tallies.items():
        rate, budget = key.split("/")
        out.setdefault(rate, {})[budget] = t
    return out


def gsm8k_part(n: int, questions: int = 500, alpha: float = 0.05) -> dict[str, Any]:
    """GSM8K-``questions``: 0.88 against 0.81 and against 0.88, ``n`` comparisons each."""

    def once(seed: int, acc: float) -> str:
        qs = [f"q{i}" for i in range(questions)]
        base = [_unit("correct", 2 * seed, q) < 0.88 for q in qs]
        cand = [_unit("correct", 2 * seed + 1, q) < acc for q in qs]
        both = sum(x and y for x, y in zip(base, cand, strict=True))
        b = sum(x and not y for x, y in zip(base, cand, strict=True))
        c = sum(y and not x for x, y in zip(base, cand, strict=True))
        return paired_verdict((both, b, c, questions - both - b - c), alpha=alpha)[0]

    out = {}
    for name, acc, offset in (("drop_0.88_0.81", 0.81, 0), ("aa_0.88", 0.88, 1_000_000)):
        verdicts = Counter(once(offset + i, acc) for i in range(n))
        out[name] = {
            "n": n,
            "questions": questions,
            "alpha": alpha,
            "regression_rate": verdicts.get("REGRESSION", 0) / n,
            "inconclusive_rate": verdicts.get("INCONCLUSIVE", 0) / n,
            "verdicts": dict(verdicts),
        }
    return out


# ------------------------------------------------------------------------ recorded baselines

#: seeds of the recordings: ``(a)`` one per comparison, ``(b)``/``(c)`` shared
RECORDED_AA_SEEDS, RECORDED_SEEDS = 600_000, 700_000
#: candidates judged against one recording are numbered from here per case (``(c)``)
CASE_STRIDE = 10_000


def _server(recording: int, j: int, side: str) -> int:
    """The server seed of the ``j``-th fresh server judged with ``recording`` (candidates
    odd, fresh live baselines even; never the recording's own ``2 * recording``)."""
    if not 0 <= j < 100_000 or recording < 1:
        raise ValueError(f"need 0 <= j < 100000 and recording >= 1, got {j}, {recording}")
    return 2 * (recording * 100_000 + j) + (side == "candidate")


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of ``k/n``: ``scipy.stats.binomtest(k,
    n).proportion_ci(method="exact")``; ``(0.0, 1.0)`` when ``n == 0``."""
    if n == 0:
        return 0.0, 1.0
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class RecJob:
    """Candidates judged against one recording (a pure function of these fields).

    The recording is the baseline side of seed ``recording`` (its request seeds, the
    server seed ``2 * recording``), ``schedule[-1]`` repeats per scenario, read at look
    ``k`` up to ``schedule[k - 1]`` repeats. Candidate ``j`` (``first .. first + n - 1``)
    sends the same request seeds as the recording's comparison (``--baseline`` reuses its
    seed) to a fresh server (:func:`_server`). ``live``: each candidate is also judged
    against a fresh live baseline (same request seeds, fresh server, the equal design).
    ``luck``: record every repeat first and return its failed-run shares."""

    scenarios: str
    recording: int
    profile: str
    n: int
    first: int = 0
    live: bool = False
    luck: bool = True
    schedule: tuple[int, ...] = tuple(k * REPEATS for k in range(1, ROUNDS + 1))


#: one decision of a recorded job: (verdict, rounds used, runs spent by both sides, the
#: candidate's runs: the live runs of a comparison against a recording)
Decided = tuple[str, int, int, int]


def _rec_job(job: RecJob) -> dict[str, Any]:
    """Every candidate of ``job`` against its recording (and, ``live``, a fresh baseline)."""
    b = _bench(job.scenarios)
    rec = b.side("healthy", "baseline", job.recording)
    out: dict[str, Any] = {"recording": job.recording, "recorded": [], "live": []}
    if job.luck:
        out.update(_luck(rec, job.schedule))
    per_sc = len(b.scenarios)
    for j in range(job.first, job.first + job.n):
        cand = Side(b.scenarios, b.index, job.profile, "candidate", job.recording,
                    server_seed=_server(job.recording, j, "candidate"))  # fmt: skip
        s, look = decide_sequential(rec, cand, baseline=job.schedule)
        spent = (job.schedule[look - 1] + look * REPEATS) * per_sc
        out["recorded"].append((_verdict(s), look, spent, look * REPEATS * per_sc))
        if job.live:
            fresh = Side(b.scenarios, b.index, "healthy", "baseline", job.recording,
                         server_seed=_server(job.recording, j, "baseline"))  # fmt: skip
            s, look = decide_sequential(fresh, cand)
            out["live"].append(
                (_verdict(s), look, b.runs(look * REPEATS), b.runs(look * REPEATS) // 2)
            )
    return out


def _luck(rec: Side, schedule: Sequence[int]) -> dict[str, Any]:
    """How lucky a recording is: its share of failed runs (every repeat, and the first
    round's), scored as the comparisons score them."""
    runs = rec.upto(schedule[-1])
    failed = [not _score(rec, r).passed for r in runs]
    first = [f for f, r in zip(failed, runs, strict=True) if r.repeat < schedule[0]]
    return {
        "failed": sum(failed),
        "scored": len(failed),
        "fail_rate": sum(failed) / len(failed),
        "fail_rate_first_round": sum(first) / len(first),
    }


def _rate_figure(decided: Sequence[Decided]) -> dict[str, Any]:
    """:func:`_tally` of ``decided`` with the REGRESSION rate's Clopper-Pearson interval
    and the candidate's runs (``mean_candidate_runs``)."""
    t = _tally([("", v, look, runs) for v, look, runs, _ in decided])
    t["regression_ci"] = list(clopper_pearson(t["regression"], t["n"]))
    t["mean_candidate_runs"] = sum(x[3] for x in decided) / len(decided) if decided else None
    return t


def _pmap(fn: Callable[[Any], Any], jobs: Sequence[Any], workers: int) -> list[Any]:
    """``[fn(j) for j in jobs]`` in ``workers`` processes (one job at a time each)."""
    if workers > 1 and len(jobs) > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return pool.map(fn, jobs, chunksize=1)
    return [fn(j) for j in jobs]


def _spread(
    done: Sequence[dict[str, Any]], key: str = "recorded", null: bool = False
) -> dict[str, Any]:
    """The figures of several recordings each judging many candidates: pooled, per
    recording (its conditional rate, interval and luck), and how much they spread.
    ``key="live"``: the same candidates against fresh live baselines, grouped as the
    recorded ones (a control: their groups share no baseline, so no luck). ``null``: the
    candidates are healthy (false alarms): how many recordings exceed alpha."""
    per = []
    luck = ("failed", "scored", "fail_rate", "fail_rate_first_round") if key == "recorded" else ()
    for d in sorted(done, key=lambda d: d["recording"]):
        t = _rate_figure(d[key])
        per.append({
            "recording": d["recording"], "n": t["n"], "regression": t["regression"],
            "regression_rate": t["regression_rate"], "regression_ci": t["regression_ci"],
            "inconclusive_rate": t["inconclusive_rate"], "verdicts": t["verdicts"],
            "mean_runs": t["mean_runs"], **{k: d[k] for k in luck if k in d},
        })  # fmt: skip
    pooled = _rate_figure([x for d in done for x in d[key]])
    rates = [p["regression_rate"] for p in per]
    out: dict[str, Any] = {
        "recordings": len(per),
        "candidates_per_recording": per[0]["n"] if per else 0,
        "pooled": pooled,
        "min_rate": min(rates, default=None),
        "max_rate": max(rates, default=None),
        "dispersion": _dispersion(rates, per[0]["n"] if per else 0),
        "per_recording": per,
    }
    if null:
        out["alpha"] = ALPHA
        out["over_alpha"] = sum(r > ALPHA for r in rates)
        out["clearly_over_alpha"] = sum(p["regression_ci"][0] > ALPHA for p in per)
    fails = [p["fail_rate"] for p in per if "fail_rate" in p]
    if fails:  # Spearman of the recording's failed share and its candidates' figures
        out["mean_fail_rate"] = sum(fails) / len(fails)
        out["luck_correlation"] = _spearman(fails, rates)
        out["luck_correlation_inconclusive"] = _spearman(
            fails, [p["inconclusive_rate"] for p in per]
        )
        out["luck_correlation_runs"] = _spearman(fails, [p["mean_runs"] for p in per])
    return out


def _dispersion(rates: Sequence[float], n: int) -> float | None:
    """Variance of the per-recording rates over the binomial variance ``p (1 - p) / n``
    they would have if the recording did not matter (about 1; more: recordings matter)."""
    if len(rates) < 2 or n < 1:
        return None
    p = sum(rates) / len(rates)
    if p in (0.0, 1.0):
        return None
    var = sum((r - p) ** 2 for r in rates) / (len(rates) - 1)
    return var / (p * (1 - p) / n)


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (``scipy.stats.spearmanr``); None if undefined."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(sps.spearmanr(x, y).statistic)


#: the options of the ``recorded`` part: (flag, default, help)
RECORDED_OPTIONS: tuple[tuple[str, int | str, str], ...] = (
    ("--recorded-aa", 500, "A/A comparisons, each against its own fresh recording"),
    ("--recorded-baselines", 20, "recordings each judging many candidates"),
    ("--recorded-candidates", 50, "healthy candidates judged against each recording"),
    ("--recorded-detect", 25, "broken candidates per recording and case"),
    ("--recorded-cases", "fused-regression,repeat-loop@0.05", "the broken candidates' profiles"),
    ("--recorded-schedule", "5,10,15,20", "the baseline's repeats at each look"),
)


def recorded_part(args: argparse.Namespace) -> dict[str, Any]:
    """Recorded baselines: one recording (``harness record``) judging many candidates.

    ``aa``: each comparison against its own fresh recording (``--recorded-aa``);
    ``spread``: ``--recorded-baselines`` recordings x ``--recorded-candidates`` healthy
    candidates each (the false-alarm rate given the recording); ``detection``: per case of
    ``--recorded-cases``, the same recordings x ``--recorded-detect`` broken candidates,
    each candidate also judged against a fresh live baseline (paired: same candidate runs).
    """
    sc = args.scenarios
    schedule = tuple(int(x) for x in args.recorded_schedule.split(","))
    cases = [c for c in args.recorded_cases.split(",") if c]
    seeds = [RECORDED_SEEDS + i for i in range(args.recorded_baselines)]
    jobs: list[tuple[str, RecJob]] = []  # (figure, job); the largest first
    for c, case in enumerate(cases, start=1):
        jobs += [
            (case, RecJob(sc, r, case, args.recorded_detect, c * CASE_STRIDE, True, True,
                          schedule))
            for r in seeds
        ]  # fmt: skip
    jobs += [("spread", RecJob(sc, r, "healthy", args.recorded_candidates, 0, False, True,
                               schedule)) for r in seeds]  # fmt: skip
    jobs += [
        ("aa", RecJob(sc, RECORDED_AA_SEEDS + i, "healthy", 1, 0, False, False, schedule))
        for i in range(args.recorded_aa)
    ]
    done = _pmap(_rec_job, [job for _, job in jobs], args.workers)
    by: dict[str, list[dict[str, Any]]] = {}
    for (figure, _), d in zip(jobs, done, strict=True):
        by.setdefault(figure, []).append(d)
    detection = {
        case: {"recorded": _spread(by.get(case, [])), "live": _spread(by.get(case, []), "live")}
        for case in cases
    }
    return {
        "recording": {
            "repeats": schedule[-1], "schedule": list(schedule),
            "runs": schedule[-1] * len(_bench(sc).scenarios), "profile": "healthy",
        },
        "aa": _rate_figure([x for d in by.get("aa", []) for x in d["recorded"]]),
        "spread": _spread(by.get("spread", []), null=True),
        "detection": detection,
    }  # fmt: skip


def _timed(name: str, fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    out = fn()
    print(f"  {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return out


def run_parts(args: argparse.Namespace) -> dict[str, Any]:
    """Every part named in ``args.parts``; the figures as one JSON-ready dict."""
    parts, sc, w = set(args.parts.split(",")), args.scenarios, args.workers
    doc: dict[str, Any] = {
        "command": "python -m bench.calibration.power " + " ".join(sys.argv[1:]),
        "defaults": {
            "repeats": REPEATS, "temperature": TEMPERATURE, "alpha": ALPHA,
            "permutations": Settings().permutations, "rounds": ROUNDS,
            "scenarios": len(_bench(sc).scenarios),
        },
    }  # fmt: skip

    def pairs(cand: str, n: int, offset: int, seq: int) -> dict[str, Any]:
        return _run_jobs([(sc, cand, offset + i, i < seq) for i in range(n)], w)

    if "aa" in parts:  # fixed on the first --aa, sequential on the first --aa-sequential
        n, first = max(args.aa, args.aa_sequential), args.aa_first
        aa = [(sc, "healthy", first + i, i < args.aa_sequential, i < args.aa) for i in range(n)]
        doc["aa"] = _timed("aa", lambda: _run_jobs(aa, w))
    if "aa-both" in parts:  # --stream both: fixed on all, sequential on --aa-sequential
        n, first = args.aa_both, 600_000 + args.aa_first
        both = [(sc, "aa-both", first + i, i < args.aa_sequential) for i in range(n)]
        doc["aa_stream_both"] = _timed("aa-both", lambda: _run_jobs(both, w))
    if "one" in parts:
        prof = f"repeat-loop@{ONE_SCENARIO}"
        doc["one_scenario"] = _timed("one", lambda: pairs(prof, args.one, 200_000, args.one))
    if "curve" in parts:
        curve = [(sc, "curve", 300_000 + args.curve_first + i, True) for i in range(args.curve)]
        doc["loop_curve"] = _timed("curve", lambda: _curve(_run_jobs(curve, w)))
    if "drift" in parts:
        drift = [(sc, "drift", 500_000 + i, True) for i in range(args.drift)]
        doc["drift"] = _timed("drift", lambda: _drift(_run_jobs(drift, w)))
        doc["drift_scenarios"] = {kind: _can_show(sc, kind) for kind in DRIFT}
    if "early" in parts:  # the early-stop case alone (the drift part has it too)
        early = [(sc, "early", 500_000 + i, True) for i in range(args.early)]
        doc["early_stop"] = _timed("early", lambda: _drift(_run_jobs(early, w)))
        doc["early_stop_scenarios"] = _can_show(sc, EARLY_STOP_CASE[0])
    if "fused" in parts:
        doc["fused_regression"] = _timed(
            "fused", lambda: pairs("fused-regression", args.fused, 400_000, args.fused)
        )
    if "gsm8k" in parts:
        doc["gsm8k"] = _timed("gsm8k", lambda: gsm8k_part(args.gsm8k))
    if "recorded" in parts:
        doc["recorded"] = _timed("recorded", lambda: recorded_part(args))
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.calibration.power", description=__doc__.split("\n")[0]
    )
    p.add_argument("--scenarios", default=str(ROOT / "scenarios"))
    p.add_argument("--parts", default="aa,one,curve,drift,fused,gsm8k,recorded")
    p.add_argument("--aa", type=int, default=1000)
    p.add_argument("--aa-sequential", type=int, default=200)
    p.add_argument("--aa-first", type=int, default=0, help="the A/A's first seed")
    p.add_argument("--curve-first", type=int, default=0, help="the loop curve's first index")
    p.add_argument("--aa-both", type=int, default=200, help="A/As at --stream both")
    p.add_argument("--one", type=int, default=150)
    p.add_argument("--curve", type=int, default=40)
    p.add_argument("--fused", type=int, default=60)
    p.add_argument("--drift", type=int, default=60)
    p.add_argument("--early", type=int, default=40)
    p.add_argument("--gsm8k", type=int, default=1000)
    for flag, default, what in RECORDED_OPTIONS:
        p.add_argument(flag, type=type(default), default=default, help=what)
    p.add_argument("--workers", type=int, default=1, help="processes (comparisons in parallel)")
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    doc = run_parts(args)
    text = json.dumps(doc, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
