"""Error rates of the numerics decision over every path, live and against a recording.

Run: ``python -m bench.calibration.paths [--parts live,recorded] [--aa 200] [--fault 60]
[--json bench/calibration/paths.json]`` (``make calibrate`` runs it with these sizes; the
committed JSON joins a live and a recorded run, each part run in its own process); the
JSON regenerates the table of docs/verdict.md (``python -m bench.calibration.power_table``).

A comparison's numerics (:func:`harness.numerics.section.logprobs_section`) run three
paths, each against its own A/A floor: prefill (teacher-forced prompt logprobs), decode
(greedy decodes of every assistant turn, per-step logprobs) and the routed experts (where a
server returns them). Each path is an input of the one decision
(:func:`harness.stats.verdict.decide`, rule 7): any path REGRESSION makes the comparison a
REGRESSION, any INCONCLUSIVE makes a behavioural NO CHANGE INCONCLUSIVE
(:func:`harness.stats.verdict.numerics_verdict` is that rule over the paths). This bench
measures the paths' verdict together at the shipped defaults (top-5, tolerance 0.003
nats/token, alpha 0.01, the decode rule's early-parting test), over the reference
conversations of ``scenarios/`` (every scenario), every request over HTTP to ``harness sim``
subprocesses whose noise is drawn per request, so every comparison sees fresh noise:

- ``live``: A/A, ``healthy`` against a second ``healthy`` server (``--aa`` comparisons),
  and power, ``healthy`` against ``decode-fault`` (prefill healthy, generation shifted: a
  decode-only kernel fault; ``--fault`` comparisons); the same code as a live compare's
  numerics section (:func:`~harness.numerics.run.compare_logprobs`, then its decode path);
- ``recorded``: the same, the baseline recorded first (``harness record``'s numerics:
  :func:`~harness.numerics.run.record_logprobs`, every path scored twice), then compared
  with a fresh candidate server (:func:`~harness.numerics.run.compare_recorded`); one
  recording per comparison, so every A/A floor is fresh too.

The behavioural half of the decision has its own measured rates (``bench.calibration.power``);
a comparison's false-alarm rate is at most the sum of the two.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import SCENARIOS, sim_process
from harness.numerics.models import LogprobsResult, Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.section import decode_path
from harness.numerics.sequences import from_scenario
from harness.scenario.model import load_scenarios
from harness.stats.verdict import NumericsFinding, numerics_verdict

PARTS = ("live", "recorded")


def _sequences() -> list[Sequence]:
    return [from_scenario(s) for s in load_scenarios([SCENARIOS])]


def _findings(res: LogprobsResult) -> list[NumericsFinding]:
    return [NumericsFinding(p.verdict, p.message, p.path) for p in res.paths()]


def live(seqs: list[Sequence], base: str, cand: str) -> LogprobsResult:
    """A live comparison's numerics: prefill, then the decode path beside it."""
    opts = LogprobsOptions()
    res = compare_logprobs(seqs, base, cand, opts)
    res.decode = decode_path(seqs, base, cand, opts, res)
    return res


def recorded(seqs: list[Sequence], base: str, cand: str) -> LogprobsResult:
    """A comparison against a fresh recording of ``base`` (every path scored twice, as
    ``harness record`` does: :func:`~harness.numerics.run.record_numerics`), each path
    compared as a compare against a recording does (the decode path with the greedy API)."""
    from dataclasses import replace

    from harness.numerics.run import compare_recorded, record_numerics

    opts = LogprobsOptions()
    rec = record_numerics(seqs, base, opts)
    res = compare_recorded(rec, cand, opts)
    if rec.decode is not None:
        res.decode = compare_recorded(rec.decode, cand, replace(opts, api="greedy"))
    return res


def _tally(
    kind: str, seqs: list[Sequence], base: str, cand: str, n: int, into: dict[str, Any]
) -> None:
    """``n`` comparisons of ``kind``; ``into`` holds the counts so far after each one (a
    stopped run keeps every comparison it finished)."""
    run = live if kind == "live" else recorded
    verdicts: Counter[str] = Counter()
    by_path: dict[str, Counter[str]] = {}
    t0 = time.perf_counter()
    for i in range(n):
        found = _findings(run(seqs, base, cand))
        verdicts[numerics_verdict(found) or "none"] += 1
        for f in found:
            by_path.setdefault(f.path, Counter())[f.verdict] += 1
        into.update(
            n=i + 1,
            verdicts=dict(verdicts),
            by_path={k: dict(v) for k, v in by_path.items()},
            seconds_per_comparison=round((time.perf_counter() - t0) / (i + 1), 2),
        )
        print(f"{kind} {i + 1}/{n}: {dict(verdicts)}", file=sys.stderr, flush=True)


def measure(parts: list[str], aa: int, fault: int, out: dict[str, Any]) -> None:
    """Fill ``out`` with every part's figures as they come (module docstring)."""
    seqs = _sequences()
    out.update(sequences=len(seqs), parts={})
    t0 = time.perf_counter()
    try:
        with (
            sim_process("healthy") as base,
            sim_process("healthy") as base2,
            sim_process("decode-fault") as bad,
        ):
            for part in parts:
                cases: dict[str, Any] = {"aa": {}, "decode_fault": {}}
                out["parts"][part] = cases
                _tally(part, seqs, base, base2, aa, cases["aa"])
                _tally(part, seqs, base, bad, fault, cases["decode_fault"])
    finally:
        out["seconds"] = round(time.perf_counter() - t0, 1)
        for cases in out["parts"].values():  # a part cut short keeps what it finished
            for case in [c for c, t in cases.items() if not t]:
                del cases[case]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.calibration.paths", description=__doc__.split("\n")[0]
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)}")
    p.add_argument("--aa", type=int, default=200, help="A/A comparisons per part")
    p.add_argument("--fault", type=int, default=60, help="decode-fault comparisons per part")
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    bad = [x for x in parts if x not in PARTS]
    if bad:
        p.error(f"--parts: unknown {', '.join(bad)} (of {', '.join(PARTS)})")
    m: dict[str, Any] = {}
    signal.signal(signal.SIGTERM, _stop)
    code = 0
    try:
        measure(parts, args.aa, args.fault, m)
    except KeyboardInterrupt:  # SIGTERM or Ctrl-C: write what was finished, say so
        m["stopped"] = "cut short: every finished comparison is counted"
        code = 143
    m["command"] = "python -m bench.calibration.paths " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    text = json.dumps(m, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return code


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
