"""``harness report results/<run-id> [--markdown] [--open]``: render a run folder's report."""

from __future__ import annotations

import argparse
import sys
import webbrowser

from harness.cli import ExitCode
from harness.present.report import ReportInputError, write_report
from harness.runfolder import RunFolder

HELP = "Write report.html (and report.md with --markdown) for a run folder."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness report``, added to ``p``."""
    p.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run folder, e.g. results/compare-20260101-120000-1"
    )
    p.add_argument(
        "--markdown", action="store_true", help="also write report.md (a pull-request comment)"
    )
    p.add_argument("--open", action="store_true", help="open report.html in the default browser")


def run(args: argparse.Namespace) -> int:
    """``harness report``: report.html (and report.md) of a run folder; the exit code."""
    try:
        html = write_report(args.run_dir, markdown=args.markdown)
    except ReportInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    print(f"wrote {html}")
    if args.markdown:
        print(f"wrote {RunFolder(html.parent).file(RunFolder.REPORT_MD)}")
    if args.open:
        webbrowser.open(html.resolve().as_uri())
    return ExitCode.OK
