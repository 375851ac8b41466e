"""How often the absolute rule fails a healthy server: ``harness run`` with no baseline.

Run: ``python -m bench.calibration.run_absolute [--sessions 20] [--json FILE]`` (default
``bench/calibration/run_absolute.json``).

Each session is ``harness run --target URL scenarios/`` at its defaults (each scenario's
own ``repeats``, ``--min-pass-rate 1.0``: every run must pass) against a fresh reference
server of the ``healthy`` profile with its own seed (``SEED_BASE + i``: fresh noise, a
failed run in about 2% of runs at temperature > 0) and its own ``--sampling-seed``. A
session fails when the command exits 1. The figure: sessions failed of sessions run, with
a 95% Clopper-Pearson interval, and the scenarios that failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from scipy.stats import binomtest

from harness.cli import main
from harness.sim.server import serve_in_thread

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
SEED_BASE = 7000
DEFAULT_JSON = Path(__file__).with_name("run_absolute.json")


def session(i: int, work: Path) -> dict[str, Any]:
    """One ``harness run`` at its defaults on a fresh healthy server; its outcome."""
    quiet = io.StringIO()
    with (
        serve_in_thread("healthy", scenarios_dir=str(SCENARIOS), seed=SEED_BASE + i) as url,
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        code = main(["run", str(SCENARIOS), "--target", url, "--sampling-seed", str(i),
                     "--no-progress", "--results", str(work), "--run-id", f"s{i}"])  # fmt: skip
    summary = json.loads((work / f"s{i}" / "summary.json").read_text())
    failed = [
        a["scenario_id"]
        for a in summary["aggregates"]
        if a["scenario_id"] != "*" and a["rates"]["passed"]["k"] < a["rates"]["passed"]["n"]
    ]
    return {"session": i, "exit": code, "failed_scenarios": sorted(set(failed))}


def main_(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [session(i, Path(tmp)) for i in range(args.sessions)]
    failed = sum(r["exit"] == 1 for r in runs)
    ci = binomtest(failed, len(runs)).proportion_ci(0.95, method="exact")
    lo, hi = float(ci.low), float(ci.high)
    out = {
        "command": f"python -m bench.calibration.run_absolute --sessions {args.sessions}",
        "sessions": len(runs), "failed_sessions": failed, "ci95": [lo, hi],
        "scenarios_failed": dict(Counter(s for r in runs for s in r["failed_scenarios"])),
        "runs": runs,
    }  # fmt: skip
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{failed}/{len(runs)} sessions failed (95% CI {lo:.1%}-{hi:.1%}); {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
