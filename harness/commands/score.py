"""``harness score results/<run-id>``: re-score a run folder and rewrite its summary.json.

Scores are pure functions of ``transcripts.jsonl``, so an old run can be re-scored after
the scoring improves. Settings and fusion engagement recorded in an existing
``summary.json`` are kept. Prints the same tables and verdict as ``harness compare`` and
exits with the same codes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from harness.cli import ExitCode
from harness.commands.compare import exit_code, render_summary
from harness.compare import score_dir

HELP = "Re-score a run folder (results/<run-id>) and rewrite its summary.json."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="the run folder, e.g. results/compare-20260101-120000-1234")
    p.add_argument("--quiet", action="store_true", help="print only the verdict line")
    p.add_argument("--strict", action="store_true", help="exit 1 on INCONCLUSIVE too")


def run(args: argparse.Namespace) -> int:
    folder = Path(args.run_dir)
    if not folder.is_dir():
        print(f"error: {folder}: no such run folder (give results/<run-id>)", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    try:
        summary = score_dir(folder)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    console = Console()
    if args.quiet:
        if summary.verdict is not None:
            console.print(summary.verdict.message, markup=False)
    else:
        render_summary(summary, console)
    console.print(f"summary: {folder / 'summary.json'}", markup=False)
    return exit_code(summary, strict=args.strict)
