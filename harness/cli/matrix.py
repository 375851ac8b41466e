"""``harness matrix``: which configuration attribute carries the failure?

Runs the scenarios of a matrix file (:mod:`harness.matrix.spec`) against every
deployment (:func:`harness.matrix.run.run_matrix`; the run folder is printed as soon as
it exists), judges each (pass / fail / not judged), prints the deployments x outcomes
table grouped by outcome and each attribute's classification with its counts
(:mod:`harness.matrix.analysis`), and writes ``matrix.json``, ``summary.json``,
``report.html`` and ``report.md`` into ``results/<run-id>/``.

With two deployments it is also ``harness compare`` between them: the compare tables and
verdict the matrix decided (:attr:`harness.matrix.result.MatrixResult.compare`) are
printed; baseline: the passing one, else the first.

Exit codes: 0 a single carrier is named, or every deployment passed; 1 some failed and
no single attribute carries it (none, or several varying together); 2 bad matrix file or
arguments; 3 a deployment could not be judged (did not boot, too many infrastructure
errors).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from harness.cli import ExitCode
from harness.cli._common import recorded_args, write_report_or_warn
from harness.matrix.result import MatrixResult
from harness.matrix.run import run_matrix
from harness.matrix.spec import load_matrix
from harness.options import add_argument
from harness.present.checks import render_matrix, render_outcome
from harness.present.console import make_console, render_compare
from harness.runfolder import RunFolder

#: the exit code of each outcome: one carrier (or all pass) 0, none isolated 1, a
#: deployment not judged 3
_EXIT = {
    "CARRIER": ExitCode.OK,
    "ALL PASS": ExitCode.OK,
    "NOT ISOLATED": ExitCode.REGRESSION,
    "INCOMPLETE": ExitCode.INFRA_ERROR,
}

HELP = "Run several deployments and name the configuration attribute that carries a failure."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness matrix``, added to ``p``."""
    p.add_argument("matrix", help="matrix file (YAML/JSON), e.g. examples/matrix-seed-case.yaml")
    add_argument(p, "repeats", help="runs per scenario (default: the matrix file's repeats)")
    add_argument(p, "results")
    p.add_argument("--run-id", default=None, help="run folder name (resumes it if it exists)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html/report.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def exit_code(result: MatrixResult) -> ExitCode:
    """The exit code of a matrix's outcome (see the module docstring)."""
    return _EXIT[result.outcome]


def print_result(result: MatrixResult, console: Console) -> None:
    """The matrix console (also ``harness score`` of a matrix folder): the deployments
    table and findings, with two deployments the comparison the matrix decided, then the
    outcome line."""
    render_matrix(result, console, outcome=False)
    if result.compare is not None:
        console.rule("compare: the two deployments")
        render_compare(result.compare, console)
    render_outcome(result, console)


def run(args: argparse.Namespace) -> int:
    """``harness matrix``: every deployment of the matrix file run and compared; the exit code."""
    spec = load_matrix(args.matrix)  # MatrixError -> exit 2 via harness.cli
    if args.repeats is not None:  # harness.options refused anything below 1
        spec.repeats = args.repeats
    console = make_console()

    def say_where(folder: RunFolder) -> None:
        console.print(f"run folder: {folder.path}", markup=False, highlight=False, soft_wrap=True)

    folder, result = run_matrix(
        spec, results=args.results, run_id=args.run_id, progress=not args.no_progress,
        args=recorded_args(args), on_folder=say_where,
    )  # fmt: skip
    print_result(result, console)
    if not args.no_report:
        write_report_or_warn(RunFolder(folder), console)
    console.print(f"results: {folder}", soft_wrap=True, markup=False)
    return exit_code(result)
