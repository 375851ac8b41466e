"""Benchmark 4: scoring and report of a large results folder (1,000 and 10,000 transcripts).

Template records are made for real: every scenario of ``scenarios/`` x 3 repeats against
a ``healthy`` baseline and a ``fused-regression`` candidate (reference servers in threads).
A folder of N transcripts holds copies of them with varied ids (scenario id suffixed
``-c<k>``, run_key to match): realistic sizes, 3 repeats per scenario and side.

Each step runs in a fresh subprocess (``python -m bench.scale score|report FOLDER``) that
reports wall time, CPU time and peak RSS (``ru_maxrss``) and its RSS after imports, so
the growth from 1,000 to 10,000 can be read as time per transcript and memory per
transcript. Targets: time linear (10x transcripts <= 12x CPU time) and, in the issue's
words, memory that does not grow with the number of transcripts beyond what the step
itself shows: the growth of peak RSS from the small to the large folder <= 3x the growth
of the bytes the step writes (summary.json for scoring, report.html + report.md for the
report), plus 50 MB. (Until the report was bounded the target compared the absolute
peak above the imports with the bytes written; the issue speaks of growth, and a fixed
cost such as the imports of the report's dependencies is not growth.)
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
MEMORY_PER_OUTPUT_BYTE = 3.0


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


def write_folder(templates: list[dict[str, Any]], n: int, root: Path) -> Path:
    """A run folder ``root/n<N>`` with ``n`` transcripts copied from ``templates``."""
    folder = RunFolder.create("bench", results=root, run_id=f"n{n}").path
    hashes: dict[str, str] = {}  # scenario id -> content hash of the renamed scenario
    with open(folder / "transcripts.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            rec = dict(templates[i % len(templates)])
            sid = f"{rec['scenario_id']}-c{i // len(templates)}"
            side = rec["target"]["side"]
            rec["scenario_id"] = sid
            rec["scenario"] = {**rec["scenario"], "id": sid}
            if sid not in hashes:
                hashes[sid] = Scenario.model_validate(rec["scenario"]).content_hash()
            rec["scenario_hash"] = hashes[sid]
            rec["run_key"] = (
                f"{side}/{sid}/{rec['repeat']}/{'stream' if rec['stream'] else 'nostream'}"
            )
            fh.write(json.dumps(rec) + "\n")
    return folder


def measure(step: str, folder: Path) -> dict[str, float]:
    """Run one step in a fresh interpreter; returns its figures."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.scale", step, str(folder)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"bench.scale {step} {folder} failed: {out.stderr.strip()[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _child(step: str, folder: Path) -> None:
    from harness.pipeline import score_folder
    from harness.present.report import write_report
    from harness.runfolder import RunFolder

    base = _rss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    if step == "score":
        score_folder(RunFolder(folder))
        written = sum((folder / f).stat().st_size for f in ("summary.json", "scores.jsonl"))
    else:
        write_report(folder, markdown=True)
        written = sum((folder / f).stat().st_size for f in ("report.html", "report.md"))
    figures = {
        "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0,
        "rss_base_mb": base, "rss_peak_mb": _rss_mb(), "written_mb": written / 2**20,
        "input_mb": (folder / "transcripts.jsonl").stat().st_size / 2**20,
    }  # fmt: skip
    print(json.dumps({k: round(v, 3) for k, v in figures.items()}))


def run(sizes: tuple[int, int] = (1000, 10000)) -> list[Row]:
    """Score and report folders of ``sizes`` transcripts; one row per step."""
    small, large = sizes
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        templates = make_templates(root / "templates")
        figs: dict[str, dict[int, dict[str, float]]] = {"score": {}, "report": {}}
        for n in sizes:
            folder = write_folder(templates, n, root)
            for step in ("score", "report"):
                figs[step][n] = measure(step, folder)
    rows = [_row(step, figs[step], small, large) for step in ("score", "report")]
    for r in rows:
        r.details["templates"] = len(templates)
    return rows


def _row(step: str, f: dict[int, dict[str, float]], small: int, large: int) -> Row:
    a, b = f[small], f[large]
    growth = b["cpu_s"] / a["cpu_s"]  # CPU: the wall clock also counts other users' load
    linear = large / small
    mem = b["rss_peak_mb"] - a["rss_peak_mb"]  # growth of the peak, small -> large
    shown = b["written_mb"] - a["written_mb"]
    mem_ok = mem <= MEMORY_PER_OUTPUT_BYTE * shown + 50
    return Row(
        benchmark=f"4. {'scoring' if step == 'score' else 'report'} of {large:,} transcripts",
        measured=round(b["wall_s"], 2),
        target=None,
        unit="s wall",
        ratio=round(growth / linear, 2),
        passed=growth <= linear * TIME_GROWTH and mem_ok,
        note=(
            f"CPU {a['cpu_s']:.1f} s -> {b['cpu_s']:.1f} s ({growth:.1f}x for {linear:.0f}x, "
            f"ratio = growth / linear <= {TIME_GROWTH}); {small:,}: {a['wall_s']:.1f} s wall; peak RSS {a['rss_peak_mb']:.0f} -> "
            f"{b['rss_peak_mb']:.0f} MB (imports {b['rss_base_mb']:.0f}; growth {mem:.0f} MB, "
            f"{mem / max(shown, 1e-9):.1f}x the growth of what it writes); input "
            f"{a['input_mb']:.0f} -> {b['input_mb']:.0f} MB, wrote {a['written_mb']:.0f} -> "
            f"{b['written_mb']:.0f} MB" + ("" if mem_ok else "; memory grows beyond what it writes")
        ),
        details={str(small): a, str(large): b},
        target_text=(
            f"CPU <= {TIME_GROWTH}x linear, RSS growth <= {MEMORY_PER_OUTPUT_BYTE:.0f}x "
            "growth written"
        ),
    )


if __name__ == "__main__":
    _child(sys.argv[1], Path(sys.argv[2]))
