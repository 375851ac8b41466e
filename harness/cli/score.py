"""``harness score results/<run-id>``: re-score a run folder and rewrite its summary.json.

Scores are pure functions of ``transcripts.jsonl``, so an old run can be re-scored after
the scoring improves (:func:`harness.pipeline.score_folder` rewrites ``scores.jsonl`` and
``summary.json``). Settings and fusion engagement recorded in an existing
``summary.json`` are kept; ``report.html``/``report.md`` are redrawn. Prints the same console as ``harness compare`` (or ``harness
run`` for a one-sided folder) and exits with the same codes. A ``harness matrix`` folder
(its manifest's ``extra`` has ``matrix``) is re-scored with
:func:`harness.matrix.run.rescore_matrix` (``summary.json`` and ``matrix.json``), printed
with the matrix console and exits as ``harness matrix`` does. A ``harness gsm8k`` folder
(``gsm8k.jsonl``) is re-scored with :func:`harness.gsm8k.run.rescore`; any other folder
(``harness boot``) is a usage error pointing at ``harness report``. A recording
(``harness record``'s folder) exits as ``harness record`` does: 3 over the
infrastructure-error limit, else 0 (a recorded build is not judged alone).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import ExitCode
from harness.cli._common import exit_code, gsm8k_exit_code, write_report_or_warn
from harness.pipeline import score_folder
from harness.present.console import make_console, render_compare, render_run
from harness.present.views import first_drift, headline
from harness.runfolder import RunFolder
from harness.summary import Summary

HELP = (
    "Re-score a run folder (results/<run-id>: run, compare, matrix or gsm8k) and rewrite "
    "its summary."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness score``, added to ``p``."""
    p.add_argument("run_dir", help="the run folder, e.g. results/compare-20260101-120000-1234")
    p.add_argument("--quiet", action="store_true", help="print only the verdict line")
    p.add_argument("--strict", action="store_true", help="exit 1 on INCONCLUSIVE too")
    p.add_argument(
        "--verbose", action="store_true", help="every scenario's full table, trace and divergence"
    )


def _exit_code(summary: Summary, args: argparse.Namespace, recorded: bool) -> int:
    """The folder's exit code (:func:`harness.cli._common.exit_code`); a recording is not
    judged, as ``harness record`` exits: 3 over the infrastructure-error limit, else 0."""
    if recorded:
        o = summary.outcome
        return ExitCode.INFRA_ERROR if o is not None and o.infra_limited else ExitCode.OK
    return exit_code(summary, strict=args.strict)


def run(args: argparse.Namespace) -> int:
    """``harness score``: re-score a run folder from its transcripts and print the verdict; the exit
    code."""
    folder = Path(args.run_dir)
    if not folder.is_dir():
        print(f"error: {folder}: no such run folder (give results/<run-id>)", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    rf = RunFolder(folder)
    manifest = rf.manifest()  # RunFolderError (unreadable) -> exit 2 via harness.cli
    is_matrix = manifest is not None and "matrix" in manifest.extra
    is_gsm8k = not rf.transcripts.exists() and rf.has(RunFolder.GSM8K_RECORDS)
    if not (is_matrix or rf.transcripts.exists() or is_gsm8k):
        return _not_a_run_folder(folder)
    # the folder's one writer while its files are rewritten: a `compare` still writing it
    # refuses this (RunFolderError, one line -> exit 2 via harness.cli), and the reverse
    rf.lock(fix=f"wait for it to end, then `harness score {folder}`")
    if is_matrix:
        return _matrix(rf, quiet=args.quiet)
    if is_gsm8k:
        return _gsm8k(folder)
    summary = score_folder(rf)
    recorded = manifest is not None and manifest.kind == "record"
    _say_skipped(rf)
    console = make_console()
    if args.quiet:  # the verdict line alone; the report is still redrawn
        banner, message = headline(summary)
        console.print(f"{banner}: {message}", markup=False, soft_wrap=True)
        write_report_or_warn(rf, console, say=False)
        return _exit_code(summary, args, recorded)
    render = render_compare if summary.kind == "compare" else render_run
    traces = first_drift(s for _, s in rf.scores_with_offsets())
    render(summary, console, traces, verbose=args.verbose)
    if rf.has(RunFolder.VERIFIER):  # a compare --single-turn folder: rewritten by score_folder
        from harness.present.verifier import show_verifier

        show_verifier(rf, summary, console)
    console.print(f"summary: {rf.summary_path}", markup=False, soft_wrap=True)
    write_report_or_warn(rf, console)
    return _exit_code(summary, args, recorded)


def _say_skipped(folder: RunFolder) -> None:
    """One ``warning:`` line on stderr per file with lines left out while scoring."""
    for name, offsets in sorted(folder.skipped.items()):
        n = len(offsets)
        print(
            f"warning: {folder.file(name)}: {n} line{'s' if n != 1 else ''} skipped (at byte "
            f"{', '.join(str(o) for o in sorted(offsets)[:5])}): not complete JSON, as a run "
            "killed while writing leaves it; those runs are not scored (--resume re-runs them)",
            file=sys.stderr,
        )


def _matrix(folder: RunFolder, *, quiet: bool) -> int:
    """A ``harness matrix`` folder: :func:`harness.matrix.run.rescore_matrix` rewrites its
    ``summary.json`` and ``matrix.json``; printed and exited as ``harness matrix`` does."""
    from harness.cli.matrix import exit_code as matrix_exit_code
    from harness.cli.matrix import print_result
    from harness.matrix.run import rescore_matrix

    result = rescore_matrix(folder.path)
    console = make_console()
    if quiet:
        console.print(f"{result.outcome}: {result.message}", markup=False, soft_wrap=True)
        write_report_or_warn(folder, console, say=False)
        return matrix_exit_code(result)
    print_result(result, console)
    console.print(f"matrix: {folder.file(RunFolder.MATRIX)}", markup=False, soft_wrap=True)
    write_report_or_warn(folder, console)
    return matrix_exit_code(result)


def _gsm8k(folder: Path) -> int:
    """A ``harness gsm8k`` folder: recompute ``gsm8k.json`` (:func:`harness.gsm8k.run.rescore`)."""
    from harness.gsm8k.run import rescore
    from harness.present.checks import render_gsm8k

    try:
        summary = rescore(folder)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {folder}: cannot re-score this GSM8K run ({exc})", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    console = make_console()
    render_gsm8k(summary, console)
    rf = RunFolder(folder)
    console.print(f"summary: {rf.file(RunFolder.GSM8K_SUMMARY)}", markup=False, soft_wrap=True)
    write_report_or_warn(rf, console)
    return gsm8k_exit_code(summary)


def _not_a_run_folder(folder: Path) -> int:
    what = (
        "a boot folder (boot.json)"
        if RunFolder(folder).has(RunFolder.BOOT)
        else "no transcripts.jsonl"
    )
    print(
        f"error: {folder}: {what}; `harness score` re-scores run/compare/matrix folders "
        "(transcripts.jsonl) and GSM8K folders (gsm8k.jsonl); `harness report "
        f"{folder}` re-renders the report of any folder",
        file=sys.stderr,
    )
    return ExitCode.USAGE_ERROR
