"""``harness run``: run scenarios against one server and record transcripts.

Writes ``results/<run-id>/manifest.json`` and ``transcripts.jsonl`` (one record per
run, appended as each ends), then prints a per-scenario summary. ``--resume RUN_ID``
reuses that folder and runs only what is not recorded yet.

Exit codes: 0 done; 2 bad arguments or scenario file; 3 at least half of the
recorded runs are infrastructure errors (the server, not the model, failed).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.cli import ExitCode
from harness.client import TargetConfig
from harness.commands._common import add_stream_argument, stream_mode
from harness.parity import pair_runs, parity_report, render_parity
from harness.runner import run_many_sync
from harness.runs import DEFAULT_RESULTS, prepare_run_dir
from harness.scenario import load_scenarios
from harness.transcript import RunRecord, read_records

HELP = "Run scenarios against an OpenAI-compatible server and record transcripts."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    p.add_argument("--target", required=True, help="server URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--model", help="model name (default: first of GET /v1/models)")
    p.add_argument("--label", default="target", help="name of this target in run keys")
    add_stream_argument(p)
    p.add_argument("--repeats", type=int, help="runs per scenario (default: the scenario's)")
    p.add_argument("--concurrency", type=int, default=8, help="runs in flight at once")
    p.add_argument("--results", default=str(DEFAULT_RESULTS), help="results root folder")
    p.add_argument("--run-id", help="name of the run folder (default: run-<time>-<pid>)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish the run RUN_ID (skip recorded runs)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the API key")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout (s)")
    p.add_argument("--max-retries", type=int, default=3, help="retries of transient errors")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    stream = stream_mode(args)
    scenarios = load_scenarios(args.scenarios or ["scenarios"])
    if not scenarios:
        print(f"error: no scenario files in {args.scenarios or ['scenarios']}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    run_id = args.resume or args.run_id
    if args.resume and not (Path(args.results) / args.resume).is_dir():
        print(f"error: --resume: no run folder {Path(args.results) / args.resume}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    folder = prepare_run_dir("run", results=args.results, run_id=run_id, args=vars(args))
    console = Console()
    console.print(f"run folder: [bold]{folder}[/bold]")
    target = TargetConfig(
        base_url=args.target,
        model=args.model,
        label=args.label,
        api_key_env=args.api_key_env,
        timeout_s=args.timeout,
        max_retries=args.max_retries,
    )
    run_many_sync(
        scenarios,
        [target],
        repeats=args.repeats,
        stream=stream,
        concurrency=args.concurrency,
        out_dir=folder,
        resume=True,
        progress=not args.no_progress,
    )
    records = list(read_records(folder / "transcripts.jsonl"))
    console.print(summary_table(records))
    if stream == "both":
        render_parity(parity_report(records), len(pair_runs(records)), console)
    console.print(f"transcripts: {folder / 'transcripts.jsonl'}")
    errors = [r for r in records if r.error is not None]
    if errors:
        console.print(
            f"[red]{len(errors)} run(s) ended with an infrastructure error[/red]"
            " (the server failed, not the model), e.g.:",
            highlight=False,
        )
        for msg in sorted({f"{r.error.kind}: {r.error.message}" for r in errors if r.error})[:3]:
            console.print(f"  {msg}", markup=False, highlight=False)
    return ExitCode.INFRA_ERROR if records and len(errors) * 2 >= len(records) else ExitCode.OK


def summary_table(records: list[RunRecord]) -> Table:
    """Per scenario: runs, tool calls, final answers reached, turn caps, other stops, infra errors."""
    by_id: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        by_id[r.scenario_id].append(r)
    table = Table(title="runs per scenario (final: final answers reached; errors: infrastructure)")
    table.add_column("scenario", overflow="fold", min_width=12)
    for col in ("runs", "tool calls", "final", "turn cap", "len/empty", "errors"):
        table.add_column(col, justify="right")
    for sid in sorted(by_id):
        rs = by_id[sid]
        stops = [r.stop_reason for r in rs]
        calls = sum(1 for r in rs for _ in r.all_tool_calls())
        other = sum(s in ("length", "empty_stop") for s in stops)
        errors = stops.count("error")
        table.add_row(
            sid,
            str(len(rs)),
            str(calls),
            f"{stops.count('final_answer')}/{len(rs)}",
            str(stops.count("turn_cap")),
            str(other),
            f"[red]{errors}[/red]" if errors else "0",
        )
    return table
