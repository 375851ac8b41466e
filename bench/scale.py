"""Benchmark 4: scoring, summary and report of a large results folder (1,000 and 10,000 runs).

Template records are made for real: every scenario of ``scenarios/`` x 3 repeats against
a ``healthy`` baseline and a ``fused-regression`` candidate (reference servers in threads).
A folder of N runs holds copies of them, in two layouts:

- ``runs`` (the target): the same 17 scenarios, more repeats (repeat numbers shifted so
  every ``run_key`` is new). What grows is only the number of runs, as when a user raises
  ``--repeats``: the target is peak memory at 10,000 runs at most 1.2x the peak at
  1,000, and time linear.
- ``scenarios`` (reported): each copy renamed to a new scenario (``<id>-c<k>``), so the
  scenarios grow with the runs (1,666 at 10,000), as a suite imported from traffic would.
  The summary and the report hold one entry per scenario, so memory grows with them; the
  figure says by how much.

Each folder is scored and reported in a fresh subprocess (``python -m bench.scale both
FOLDER``), as ``harness compare`` does after its runs: :func:`harness.pipeline.score_folder`
then :func:`harness.present.report.write_report`. The child reports wall time, CPU time,
peak RSS (``ru_maxrss``) and its RSS after imports.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, SCENARIOS, Row
from harness.client.target import TargetConfig
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import Scenario, load_scenarios

TIME_GROWTH = 1.2  # allowed slack over linear
MEMORY_GROWTH = 1.2  # peak RSS at the large size over the peak at the small one
LAYOUTS = ("runs", "scenarios")


def make_templates(folder: Path) -> list[dict[str, Any]]:
    """Run the starter scenarios against both sides; returns the records as JSON dicts."""
    from harness.sim.server import serve_in_thread

    scenarios = load_scenarios(sorted(SCENARIOS.glob("*.yaml")))
    with (
        serve_in_thread("healthy", scenarios_dir=SCENARIOS) as a,
        serve_in_thread("fused-regression", scenarios_dir=SCENARIOS) as b,
    ):
        targets = [
            TargetConfig(a, label="unfused", side="baseline"),
            TargetConfig(b, label="fused", side="candidate"),
        ]
        recs = run_many_sync(scenarios, targets, repeats=3, out_dir=folder, progress=False)
    return [json.loads(r.model_dump_json()) for r in recs]


def _copy(rec: dict[str, Any], k: int, layout: str, hashes: dict[str, str]) -> dict[str, Any]:
    """The ``k``-th copy of a template record: a new repeat, or a new scenario."""
    rec = dict(rec)
    if layout == "scenarios":
        sid = f"{rec['scenario_id']}-c{k}"
        rec["scenario_id"], rec["scenario"] = sid, {**rec["scenario"], "id": sid}
        if sid not in hashes:
            hashes[sid] = Scenario.model_validate(rec["scenario"]).content_hash()
        rec["scenario_hash"] = hashes[sid]
    else:
        rec["repeat"] = rec["repeat"] + 3 * k
    mode = "stream" if rec["stream"] else "nostream"
    rec["run_key"] = f"{rec['target']['side']}/{rec['scenario_id']}/{rec['repeat']}/{mode}"
    return rec


def write_folder(
    templates: list[dict[str, Any]], n: int, root: Path, layout: str = "scenarios"
) -> Path:
    """A run folder ``root/<layout>-n<N>`` with ``n`` runs copied from ``templates``."""
    folder = RunFolder.create("bench", results=root, run_id=f"{layout}-n{n}")
    hashes: dict[str, str] = {}  # scenario id -> content hash of the renamed scenario
    with open(folder.transcripts, "w", encoding="utf-8") as fh:
        for i in range(n):
            rec = _copy(templates[i % len(templates)], i // len(templates), layout, hashes)
            fh.write(json.dumps(rec) + "\n")
    return folder.path


def measure(folder: Path) -> dict[str, float]:
    """Score and report ``folder`` in a fresh interpreter; returns its figures."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.scale", "both", str(folder)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"bench.scale {folder} failed: {out.stderr.strip()[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _child(folder: Path) -> None:
    from harness.pipeline import score_folder
    from harness.present.report import write_report

    base = _rss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    rf = RunFolder(folder)
    score_folder(rf)
    scored = {"score_wall_s": time.perf_counter() - w0, "score_rss_mb": _rss_mb()}
    write_report(folder, markdown=True)
    files = (RunFolder.SCORES, RunFolder.SUMMARY, RunFolder.REPORT_HTML, RunFolder.REPORT_MD)
    figures = {
        "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
        "rss_base_mb": base, "rss_peak_mb": _rss_mb(), **scored,
        "summary_mb": rf.summary_path.stat().st_size / 2**20,
        "written_mb": sum(rf.file(f).stat().st_size for f in files) / 2**20,
        "input_mb": rf.transcripts.stat().st_size / 2**20,
    }  # fmt: skip
    print(json.dumps({k: round(v, 3) for k, v in figures.items()}))


def run(sizes: tuple[int, int] = (1000, 10000)) -> list[Row]:
    """Score and report folders of ``sizes`` runs in both layouts; one row per layout."""
    small, large = sizes
    figs: dict[str, dict[int, dict[str, float]]] = {lay: {} for lay in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        templates = make_templates(root / "templates")
        for layout in LAYOUTS:
            for n in sizes:
                figs[layout][n] = measure(write_folder(templates, n, root, layout))
    rows = [_row(layout, figs[layout], small, large) for layout in LAYOUTS]
    for r in rows:
        r.details["templates"] = len(templates)
    return rows


def _row(layout: str, f: dict[int, dict[str, float]], small: int, large: int) -> Row:
    a, b = f[small], f[large]
    growth = b["cpu_s"] / a["cpu_s"]  # CPU: the wall clock also counts other users' load
    linear = large / small
    mem = b["rss_peak_mb"] / a["rss_peak_mb"]
    what = "17 scenarios, repeats grow" if layout == "runs" else "scenarios grow with the runs"
    return Row(
        benchmark=f"4{'a' if layout == 'runs' else 'b'}. score + report, {large:,} runs ({what})",
        measured=round(mem, 2),
        target=MEMORY_GROWTH if layout == "runs" else None,
        unit="x peak RSS",
        ratio=round(growth / linear, 2),
        passed=growth <= linear * TIME_GROWTH and (layout != "runs" or mem <= MEMORY_GROWTH),
        note=(
            f"peak RSS {a['rss_peak_mb']:.0f} -> {b['rss_peak_mb']:.0f} MB ({mem:.2f}x; "
            f"imports {b['rss_base_mb']:.0f} MB; after scoring {a['score_rss_mb']:.0f} -> "
            f"{b['score_rss_mb']:.0f} MB); CPU {a['cpu_s']:.1f} -> {b['cpu_s']:.1f} s "
            f"({growth:.1f}x for {linear:.0f}x runs); wall {a['wall_s']:.1f} -> {b['wall_s']:.1f} s; "
            f"summary.json {a['summary_mb']:.2f} -> {b['summary_mb']:.2f} MB; input "
            f"{a['input_mb']:.0f} -> {b['input_mb']:.0f} MB"
        ),
        details={str(small): a, str(large): b},
        target_text=(
            f"peak RSS <= {MEMORY_GROWTH}x, CPU <= {TIME_GROWTH}x linear"
            if layout == "runs"
            else f"CPU <= {TIME_GROWTH}x linear (memory reported)"
        ),
    )


if __name__ == "__main__":
    _child(Path(sys.argv[2]))
