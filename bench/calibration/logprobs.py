"""Error rates of ``harness logprobs`` (the numerics verdict), against the reference server.

Run: ``python -m bench.calibration.logprobs [--aa 200] [--regression 200] [--benign 200] [--sequences N]
[--json bench/calibration/logprobs.json]`` (also ``make calibrate``, with these sizes); the
JSON regenerates the numerics figures of docs/numerics.md (``python -m bench.calibration.power_table``).

Each comparison is :func:`harness.numerics.run.compare_logprobs` at its defaults (API
auto-detected: vLLM's ``prompt_logprobs``; top-5; tolerance 0.003 nats per token; alpha
0.01) over the first ``--sequences`` reference conversations of ``scenarios/`` (default:
every scenario, at most 512 tokens each), every request over HTTP to ``harness sim``
subprocesses. Each comparison draws fresh batch noise (the servers' noise is drawn per
request). It reports:

- false alarms: REGRESSION among ``--aa`` comparisons of ``healthy`` against a second
  ``healthy`` server (target <= 1%);
- detection: REGRESSION among ``--regression`` comparisons against ``fused-regression``
  (target >= 99%);
- benign: REGRESSION among ``--benign`` comparisons against ``kv-cache-quant`` (target:
  not a regression in >= 99%);
- requests to a verdict on fused-regression: logprobs vs ``harness compare`` at its
  defaults (5 repeats of every scenario per side, the turns recorded), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import SCENARIOS, Row, sim_process
from harness.numerics.models import Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_scenario
from harness.scenario.model import load_scenarios

#: detection-probe requests on the baseline (vLLM: /tokenize + /v1/completions)
PROBE_REQUESTS = 2


def _sequences(n: int | None) -> list[Sequence]:
    """The first ``n`` scenarios' reference conversations (None: every scenario's)."""
    return [from_scenario(s) for s in load_scenarios([SCENARIOS])][:n]


def _verdicts(base: str, cand: str, seqs: list[Sequence], n: int) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    requests = 0
    ab: list[float] = []
    aa: list[float] = []
    for _ in range(n):
        res = compare_logprobs(seqs, base, cand, LogprobsOptions())
        counts[res.verdict] += 1
        requests = sum(res.requests.values()) + PROBE_REQUESTS
        ab.append(res.stats.ab_mean_kl or 0.0)
        aa.append(res.stats.aa_mean_kl or 0.0)
    return {"verdicts": dict(counts), "n": n, "requests_per_verdict": requests,
            "ab_mean_kl": sum(ab) / n, "aa_mean_kl": sum(aa) / n}  # fmt: skip


def behavioural_requests(seed: int = 0) -> dict[str, Any]:
    """Requests ``harness compare`` makes at its defaults (sequential, healthy vs
    fused-regression, every turn a request), counted in process: the runner's own loop
    against the sim's request handler (:mod:`bench.calibration.power`'s sides, the same code path as
    over HTTP but for the socket), decided by the same rule, rounds included."""
    from bench.calibration.power import REPEATS, Side, decide_sequential
    from harness.sim.model import ScenarioIndex

    scenarios = load_scenarios([SCENARIOS])
    index = ScenarioIndex.from_dir(str(SCENARIOS))
    base = Side(scenarios, index, "healthy", "baseline", seed)
    cand = Side(scenarios, index, "fused-regression", "candidate", seed)
    summary, look = decide_sequential(base, cand)
    runs = base.upto(look * REPEATS) + cand.upto(look * REPEATS)
    verdict = summary.verdict.verdict if summary.verdict else None
    return {"requests": sum(len(r.turns) for r in runs), "verdict": verdict, "rounds": look}


def measure(aa: int, regression: int, benign: int, sequences: int | None) -> dict[str, Any]:
    seqs = _sequences(sequences)
    out: dict[str, Any] = {"sequences": len(seqs), "probe_requests": PROBE_REQUESTS}
    t0 = time.perf_counter()
    with sim_process("healthy") as base, sim_process("healthy") as base2:
        out["aa"] = _verdicts(base, base2, seqs, aa)
        with sim_process("fused-regression") as fused:
            out["regression"] = _verdicts(base, fused, seqs, regression)
        with sim_process("kv-cache-quant") as kv:
            out["benign"] = _verdicts(base, kv, seqs, benign)
    out["behavioural"] = behavioural_requests()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _rate(block: dict[str, Any]) -> float:
    return float(block["verdicts"].get("REGRESSION", 0) / block["n"])


def rows(m: dict[str, Any]) -> list[Row]:
    """The bench table's rows of :func:`measure`'s figures."""
    n = m["sequences"]
    fa, det, ben = _rate(m["aa"]), _rate(m["regression"]), 1 - _rate(m["benign"])
    lp, beh = m["regression"]["requests_per_verdict"], m["behavioural"]["requests"]
    note = f"{n} sequences per side, defaults; python -m bench.calibration.logprobs"
    return [
        Row("5a. logprobs A/A false alarms", round(100 * fa, 2), 1.0, "%", None, fa <= 0.01,
            f"{m['aa']['n']} comparisons healthy vs healthy; {note}", m["aa"]),
        Row("5b. logprobs detects fused-regression", round(100 * det, 2), 99.0, "%", None,
            det >= 0.99, f"{m['regression']['n']} comparisons; {note}", m["regression"]),
        Row("5c. logprobs: kv-cache-quant not a regression", round(100 * ben, 2), 99.0, "%",
            None, ben >= 0.99, f"{m['benign']['n']} comparisons; {note}", m["benign"]),
        Row("5d. requests to a verdict, compare / logprobs", round(beh / lp, 1), 10.0, "x",
            round(beh / lp / 10, 2), beh / lp >= 10,
            f"harness compare (defaults) {beh} requests vs logprobs {lp}", m["behavioural"]),
    ]  # fmt: skip


def run(
    aa: int = 200, regression: int = 200, benign: int = 200, sequences: int | None = None
) -> list[Row]:
    return rows(measure(aa, regression, benign, sequences))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.calibration.logprobs", description=__doc__.split("\n")[0]
    )
    for name, default in (("aa", 200), ("regression", 200), ("benign", 200)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--sequences", type=int, default=None, help="default: every scenario")
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    m = measure(args.aa, args.regression, args.benign, args.sequences)
    m["command"] = "python -m bench.calibration.logprobs " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    text = json.dumps(m, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    for r in rows(m):
        print(
            f"{r.benchmark}: {r.measured:g} {r.unit} (target {r.target:g}) {'pass' if r.passed else 'FAIL'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
