"""A/A false failures of the pytest plugin with a baseline, on the reference server.

Run: ``python -m bench.calibration.plugin_aa [--sessions 40] [--baseline recorded|live] [--json FILE]``
(default ``bench/calibration/plugin_aa.json``).

Each session is one ``pytest`` process, as CI runs it, over the shipped scenarios at the
shipped defaults (temperature 0.7, ``--harness-repeats`` 5 per round, at most 4 rounds, alpha
0.01, batching on) against a fresh healthy target, with:

- ``recorded``: a fresh recording of another fresh healthy server (``harness record`` at
  its defaults, the server stopped before the session), ``--harness-baseline=<folder>``;
- ``live``: a fresh live healthy server, ``--harness-baseline=URL``.

Session ``i`` uses the server seeds ``SEED_BASE + 2i`` (baseline) and ``+ 1`` (target) in
either mode: ``--baseline both`` runs each session both ways, a check of the recorded path
(a recording and a live server of one seed make the same runs, so the two must decide
alike: ``paired``), not two independent samples; ``--first N`` starts at another seed.

Every server is the ``healthy`` profile with its own seed (fresh noise: optional calls,
reordered steps, and a failed run in about 2% of runs at temperature > 0). With
``--noisy`` (the default) every scenario is sampled, greedy ones too (as
:func:`bench.calibration.power._noisy`: ``long_context_logs`` is otherwise greedy and never noisy),
so each of the 19 tests can fail by noise on either side. The numerics section is off on
both sides (``--no-logprobs``, ``--harness-logprobs=false``): it judges no test.

A false failure is a failed (or errored) test in a session of equal servers. The figures:
sessions with any failed test, and failed tests of all tests run, each with a 95%
Clopper-Pearson interval (the tests of one session are not independent: the session
figure is the one the design bounds, at alpha; the per-test one is descriptive). Beside
them, ``absolute_rule``: what the default absolute thresholds (``--min-pass-rate 1.0``,
the rule before a baseline judged relatively) would have failed on the same runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from scipy import stats as sps

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JSON = ROOT / "bench" / "calibration" / "plugin_aa.json"
#: the plugin's default temperature (the noisy setting of a greedy scenario)
TEMPERATURE = 0.7
#: server seeds are numbered from here (fresh noise, away from the tests' seeds)
SEED_BASE = 50_000


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of ``k/n`` (as :func:`bench.calibration.power.clopper_pearson`)."""
    if n == 0:
        return 0.0, 1.0
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def write_scenarios(folder: Path, noisy: bool) -> int:
    """The shipped scenarios into ``folder`` (with ``noisy``, every one sampled at
    :data:`TEMPERATURE`, no scenario seed); returns how many."""
    folder.mkdir(parents=True)
    n = 0
    for src in sorted((ROOT / "scenarios").glob("*.yaml")):
        n += 1
        if not noisy:
            shutil.copy(src, folder / src.name)
            continue
        data = yaml.safe_load(src.read_text(encoding="utf-8"))
        sampling = data.get("sampling")
        if isinstance(sampling, dict) and "temperature" in sampling:
            sampling["temperature"] = TEMPERATURE
            sampling.pop("seed", None)
            (folder / src.name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        else:
            shutil.copy(src, folder / src.name)
    return n


def _record(scenarios: Path, results: Path, seed: int) -> Path:
    """A healthy server (``seed``) recorded at ``harness record``'s defaults, then stopped."""
    from harness.cli import main
    from harness.sim.server import serve_in_thread

    with serve_in_thread("healthy", scenarios_dir=scenarios, seed=seed) as url:
        code = main([
            "record", str(scenarios), "--target", url, "--results", str(results),
            "--run-id", "baseline", "--no-progress", "--no-logprobs",
        ])  # fmt: skip
    if code != 0:
        raise RuntimeError(f"harness record exited {code}")
    return results / "baseline"


def _pytest(work: Path, target: str, baseline: str, extra: Sequence[str]) -> dict[str, Any]:
    """One pytest session in ``work``; its tests' outcomes and the comparison."""
    junit = work / "junit.xml"
    cmd = [
        sys.executable, "-m", "pytest", "scenarios", "-q", "-p", "no:cacheprovider",
        "--harness-target", target, f"--harness-baseline={baseline}",
        f"--harness-results={work / 'results'}",
        "--harness-logprobs=false", f"--junitxml={junit}", *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    failed = [
        tc.get("name", "")
        for tc in suite.iter("testcase")
        if tc.find("failure") is not None or tc.find("error") is not None
    ]
    [folder] = (work / "results").glob("pytest-*")
    summary = json.loads((folder / "summary.json").read_text())
    verdict = summary.get("verdict") or {}
    runs = sum(1 for _ in (folder / "transcripts.jsonl").open())
    # what the rule before a baseline judged relatively would have failed: the default
    # --min-pass-rate 1.0 on the candidate's runs (a missed final answer or a repeat loop
    # fails the run too)
    absolute = [
        a["scenario_id"]
        for a in summary["aggregates"]
        if a["side"] == "candidate" and a["scenario_id"] != "*"
        and a["rates"]["passed"]["k"] < a["scored"]
    ]  # fmt: skip
    return {
        "exit": proc.returncode,
        "tests": int(suite.get("tests", 0)),
        "failed": failed,
        "verdict": verdict.get("verdict"),
        "message": verdict.get("message"),
        "look": summary["settings"].get("look"),
        "runs": runs,
        "absolute_failed": absolute,
    }


def session(i: int, mode: str, noisy: bool, extra: Sequence[str]) -> dict[str, Any]:
    """Session ``i``: a fresh healthy target against a fresh recording or live server."""
    from harness.sim.server import serve_in_thread

    base_seed, target_seed = SEED_BASE + 2 * i, SEED_BASE + 2 * i + 1
    with tempfile.TemporaryDirectory(prefix="plugin-aa-") as tmp:
        work = Path(tmp)
        (work / "pytest.ini").write_text("[pytest]\n")
        scenarios = work / "scenarios"
        write_scenarios(scenarios, noisy)
        t0 = time.monotonic()
        if mode == "recorded":
            rec = _record(scenarios, work / "recordings", base_seed)
            recorded = time.monotonic() - t0
            with serve_in_thread("healthy", scenarios_dir=scenarios, seed=target_seed) as url:
                out = _pytest(work, url, str(rec), extra)
        else:
            recorded = 0.0
            with (
                serve_in_thread("healthy", scenarios_dir=scenarios, seed=base_seed) as base,
                serve_in_thread("healthy", scenarios_dir=scenarios, seed=target_seed) as url,
            ):
                out = _pytest(work, url, base, extra)
    out.update(session=i, mode=mode, record_s=round(recorded, 1),
               seconds=round(time.monotonic() - t0, 1))  # fmt: skip
    return out


def tally(sessions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sessions with any failed test, failed tests of all run, with their intervals."""
    n = len(sessions)
    bad = sum(1 for s in sessions if s["failed"])
    tests = sum(s["tests"] for s in sessions)
    failed = sum(len(s["failed"]) for s in sessions)
    return {
        "sessions": n,
        "sessions_failed": bad,
        "session_rate": bad / n if n else None,
        "session_ci95": clopper_pearson(bad, n),
        "tests": tests,
        "tests_failed": failed,
        "test_rate": failed / tests if tests else None,
        "test_ci95": clopper_pearson(failed, tests),
        "absolute_rule": {  # the defaults' absolute thresholds on the same runs
            "sessions_failed": sum(1 for s in sessions if s["absolute_failed"]),
            "tests_failed": sum(len(s["absolute_failed"]) for s in sessions),
        },
        "verdicts": dict(Counter(s["verdict"] for s in sessions)),
        "looks": dict(Counter(str(s["look"]) for s in sessions)),
        "mean_runs": sum(s["runs"] for s in sessions) / n if n else None,
        "mean_seconds": sum(s["seconds"] for s in sessions) / n if n else None,
    }


def paired(recorded: Sequence[dict[str, Any]], live: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Session ``i`` of both modes has the same seeds: the recording of the server of seed
    ``b`` holds the runs a live server of seed ``b`` makes (the reference server is a pure
    function of its seed and the request seeds), so both sessions should decide alike."""
    keys = ("failed", "verdict", "look", "runs")
    by_index = {x["session"]: x for x in live}
    both = [(r, by_index[r["session"]]) for r in recorded if r["session"] in by_index]
    same = [all(r[k] == x[k] for k in keys) for r, x in both]
    return {"sessions": len(same), "agree": sum(same), "compared": list(keys)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--baseline", choices=["recorded", "live", "both"], default="recorded")
    p.add_argument("--noisy", action=argparse.BooleanOptionalAction, default=True,
                   help="sample every scenario, greedy ones too (default on)")  # fmt: skip
    p.add_argument("--first", type=int, default=0, help="first session index (seeds)")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    p.add_argument("--append", action="store_true",
                   help="add these sessions to those of --json (other --first)")  # fmt: skip
    p.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = p.parse_args(argv)
    modes = ["recorded", "live"] if args.baseline == "both" else [args.baseline]
    doc: dict[str, Any] = {
        "command": "python -m bench.calibration.plugin_aa " + " ".join(argv or sys.argv[1:]),
        "settings": {"scenarios": "shipped", "noisy": args.noisy, "profile": "healthy",
                     "temperature": TEMPERATURE, "repeats_per_round": 5, "rounds": 4,
                     "alpha": 0.01, "numerics": "off", "extra": args.pytest_args},
    }  # fmt: skip
    old = json.loads(args.json.read_text()) if args.append and args.json.exists() else {}
    doc["commands"] = [*old.get("commands", [old["command"]] if old else []), doc["command"]]
    for mode in ("recorded", "live"):
        if mode in old and mode not in modes:
            doc[mode] = old[mode]
    for mode in modes:
        runs = list(old.get(mode, {}).get("sessions", []))
        done = {s["session"] for s in runs}
        for i in range(args.first, args.first + args.sessions):
            if i in done:
                continue
            s = session(i, mode, args.noisy, args.pytest_args)
            runs.append(s)
            print(
                f"{mode} {i}: {s['tests'] - len(s['failed'])}/{s['tests']} passed, "
                f"{s['verdict']} at look {s['look']}, {s['runs']} runs, {s['seconds']} s"
                + (f"; FAILED {', '.join(s['failed'])}: {s['message']}" if s["failed"] else ""),
                flush=True,
            )
        doc[mode] = {"tally": tally(runs), "sessions": runs}
        t = doc[mode]["tally"]
        lo, hi = t["session_ci95"]
        tlo, thi = t["test_ci95"]
        print(
            f"{mode}: sessions with a failed test {t['sessions_failed']}/{t['sessions']} "
            f"= {t['session_rate']:.3f} [95% CP {lo:.3f}, {hi:.3f}]; tests failed "
            f"{t['tests_failed']}/{t['tests']} = {t['test_rate']:.4f} [{tlo:.4f}, {thi:.4f}]; "
            f"the absolute defaults would fail {t['absolute_rule']['sessions_failed']} "
            f"sessions, {t['absolute_rule']['tests_failed']} tests",
            flush=True,
        )
    if "recorded" in doc and "live" in doc:
        doc["paired"] = paired(doc["recorded"]["sessions"], doc["live"]["sessions"])
        print(f"paired: {doc['paired']['agree']}/{doc['paired']['sessions']} sessions agree")
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
