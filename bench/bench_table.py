"""The benchmarks page's table, generated from the latest ``make bench`` run.

``python -m bench.run`` writes ``results/bench/bench-<time>.json`` (every row, the load
average, the CPUs, the platform). ``bench/bench.json`` is the latest full run kept in the
repository; this module renders it between ``<!-- bench:begin -->`` and
``<!-- bench:end -->`` of ``docs/benchmarks.md``: the date, the machine, the command and
one row per figure. ``make bench`` keeps its new run and rewrites the page.

Usage::

    python -m bench.bench_table [--from results/bench/bench-<time>.json] [--check]

``--check`` writes nothing and exits 1 when the page differs from what ``bench/bench.json``
gives (``tests/docs/test_docs.py`` runs it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["BEGIN", "END", "KEPT", "PAGE", "main", "render", "update"]

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "bench" / "bench.json"
PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _row(r: dict[str, Any]) -> str:
    target = r.get("target_text") or (
        "-" if r["target"] is None else f"{r['target']:g} {r['unit']}"
    )
    ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
    result = {True: "met", False: "missed", None: "info"}[r["passed"]]
    return (f"| {_cell(r['benchmark'])} | {r['measured']:g} {_cell(r['unit'])} | "
            f"{_cell(target)} | {ratio} | {result} | {_cell(r.get('note', ''))} |")  # fmt: skip


def render(doc: dict[str, Any]) -> str:
    """The block (Markdown) from a ``bench.run`` JSON document."""
    started = datetime.fromisoformat(doc["started_at"]).strftime("%Y-%m-%d %H:%M UTC")
    only = sorted({str(b.get("benchmark", "")) for b in doc.get("benchmarks", [])} - {""})
    command = "make bench" if not only or only == ["1", "2", "3", "4", "5"] else (
        f"python -m bench.run --only {','.join(only)}")  # fmt: skip
    before = ", ".join(f"{x:.1f}" for x in doc["load_average_before"])
    after = ", ".join(f"{x:.1f}" for x in doc["load_average_after"])
    lines = [
        f"Measured {started} by `{command}` on {doc['cpus']} CPUs ({_cell(doc['platform'])}, "
        f"Python {doc['python']}), load average {before} before and {after} after"
        + (" (quick sizes: a smoke run, not figures)" if doc.get("quick") else "")
        + ".",
        "",
        "| benchmark | measured | target | ratio | result | how |",
        "|---|---|---|---|---|---|",
        *(_row(r) for r in doc["rows"]),
    ]
    load = max(doc["load_average_before"][0], doc["load_average_after"][0])
    if doc.get("cpus") and load > doc["cpus"]:
        lines[0] += (
            f" The machine was shared (load {load:.1f} on {doc['cpus']} CPUs), so the wall-time "
            "figures (2, 3) measure the other jobs as much as the harness; the CPU-time ratios "
            "(1, 4) hold better."
        )
    errors = [b for b in doc.get("benchmarks", []) if b.get("error")]
    lines += [
        f"| {_cell(b.get('benchmark', '?'))} | error: {_cell(b['error'])} | | | | |" for b in errors
    ]
    return "\n".join(lines)


def update(page: str, doc: dict[str, Any]) -> str:
    """``page`` with the block between the markers replaced.

    Raises:
        ValueError: the page has no ``BEGIN``/``END`` markers.
    """
    start, stop = page.find(BEGIN), page.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"no {BEGIN} ... {END} block (add the two markers)")
    return page[: start + len(BEGIN)] + "\n" + render(doc) + "\n" + page[stop:]


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or check) the page; 0 written or fresh, 1 stale."""
    p = argparse.ArgumentParser(prog="python -m bench.bench_table",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--from", dest="source", type=Path, help="a bench.run JSON to keep first")
    p.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    p.add_argument("--page", type=Path, default=PAGE, help=f"the page (default {PAGE})")
    args = p.parse_args(argv)
    if args.source is not None:
        shutil.copyfile(args.source, KEPT)
    doc = json.loads(KEPT.read_text(encoding="utf-8"))
    old = args.page.read_text(encoding="utf-8")
    new = update(old, doc)
    if args.check:
        if new != old:
            print(f"{args.page}: stale; run `python -m bench.bench_table`", file=sys.stderr)
        return 0 if new == old else 1
    args.page.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
