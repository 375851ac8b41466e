"""``make bench``: the harness's own speed and scale, against the targets docs/benchmarks.md states.

Runs the benchmarks (one module each), prints one table (benchmark, measured, target,
ratio, pass/fail) and writes ``results/bench/bench-<UTC timestamp>.json`` with every
raw figure, the load average before and after (the machine may be shared) and the
versions. Usage::

    python -m bench.run [--quick] [--only 1,2,3,4] [--out results/bench]

``--quick`` uses smaller sizes (for a smoke run); figures to quote come from the full
sizes, run twice to see the spread. Exit status 0 even when a target is missed (the
table says which): a benchmark measures, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import client_overhead, concurrency, gsm8k_throughput, scale
from bench.common import ROOT, Row, load_average
from harness._version import __version__
from harness.runfolder import git_revision

#: benchmark number -> (full run, quick run)
BENCHMARKS: dict[str, tuple[Callable[[], list[Row]], Callable[[], list[Row]]]] = {
    "1": (client_overhead.run, lambda: client_overhead.run(runs=5, rounds=1)),
    "2": (concurrency.run, lambda: concurrency.run(runs=8, concurrency=4, latency_ms=20)),
    "3": (gsm8k_throughput.run, lambda: gsm8k_throughput.run(n=40, parallel=8, rounds=1)),
    "4": (scale.run, lambda: scale.run(sizes=(24, 240))),
}


def _one(key: str, quick: bool) -> tuple[list[Row], dict[str, Any]]:
    t0 = time.perf_counter()
    try:
        rows = BENCHMARKS[key][1 if quick else 0]()
        error = None
    except Exception as exc:  # one failing benchmark must not hide the others' figures
        rows, error = [], f"{type(exc).__name__}: {exc}"
    return rows, {"benchmark": key, "seconds": round(time.perf_counter() - t0, 1), "error": error}


def table(rows: list[Row], errors: list[dict[str, Any]]) -> Table:
    """The bench table; each row's note is printed under it, dimmed."""
    t = Table(title="make bench: the harness's own speed and scale", show_lines=True)
    for col in ("benchmark", "measured", "target", "ratio", "result"):
        t.add_column(col, justify="left" if col == "benchmark" else "right")
    for r in rows:
        target = r.target_text or ("-" if r.target is None else f"{r.target:g} {r.unit}")
        verdict = {True: "[green]pass", False: "[red]FAIL", None: "[dim]info"}[r.passed]
        ratio = "-" if r.ratio is None else f"{r.ratio:g}x"
        t.add_row(
            f"{r.benchmark}\n[dim]{r.note}", f"{r.measured:g} {r.unit}", target, ratio, verdict
        )
    for e in errors:
        t.add_row(f"{e['benchmark']}. [red]error: {e['error']}", "", "", "", "[red]ERROR")
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (smoke run, not figures)")
    p.add_argument("--only", default="1,2,3,4", help="comma-separated benchmark numbers")
    p.add_argument("--out", default=str(ROOT / "results" / "bench"), help="JSON output folder")
    args = p.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in BENCHMARKS]
    if unknown:
        p.error(
            f"--only: unknown benchmark {', '.join(unknown)}; choose from 1,2,3,4 (the decision rules' error rates: make calibrate)"
        )
    started, load_before = datetime.now(timezone.utc), load_average()
    rows: list[Row] = []
    runs: list[dict[str, Any]] = []
    console = Console(width=None if sys.stdout.isatty() else 150)
    for k in keys:
        console.print(f"[dim]benchmark {k}...", highlight=False)
        got, info = _one(k, args.quick)
        rows += got
        runs.append(info)
    console.print(table(rows, [r for r in runs if r["error"]]))
    load_after = load_average()
    console.print(f"load average before {load_before}, after {load_after} on {os.cpu_count()} CPUs")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{started.strftime('%Y%m%d-%H%M%S')}{'-quick' if args.quick else ''}.json"
    doc = {
        "started_at": started.isoformat(), "quick": args.quick, "harness_version": __version__,
        "git_revision": git_revision(), "python": sys.version.split()[0],
        "platform": platform.platform(), "cpus": os.cpu_count(),
        "load_average_before": load_before, "load_average_after": load_after,
        "benchmarks": runs, "rows": [r.as_dict() for r in rows],
    }  # fmt: skip
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    console.print(f"wrote {path}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
