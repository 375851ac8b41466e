"""``harness matrix``: which configuration attribute carries the failure?

Runs the scenarios of a matrix file (:mod:`harness.matrix.spec`) against every
deployment, judges each (pass / fail / not judged), prints the deployments x outcomes
table grouped by outcome and each attribute's classification with its counts
(:mod:`harness.matrix.analysis`), and writes ``matrix.json``, ``summary.json``,
``report.html`` and ``report.md`` into ``results/<run-id>/``.

With two deployments it is also ``harness compare`` between them (the compare tables
and verdict are printed; baseline: the passing one, else the first).

Exit codes: 0 a single carrier is named, or every deployment passed; 1 some failed and
no single attribute carries it (none, or several varying together); 2 bad matrix file or
arguments; 3 a deployment could not be judged (did not boot, too many infrastructure
errors).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.cli import ExitCode
from harness.cli._common import write_report_or_warn
from harness.matrix.run import DeploymentResult, MatrixResult, run_matrix, two_way_summary
from harness.matrix.spec import load_matrix
from harness.options import add_argument
from harness.runfolder import RunFolder

HELP = "Run several deployments and name the configuration attribute that carries a failure."

_OUTCOME_STYLE = {
    "CARRIER": "bold white on blue",
    "ALL PASS": "bold white on green",
    "NOT ISOLATED": "bold white on red",
    "INCOMPLETE": "bold black on yellow",
}
_STATUS_STYLE = {"pass": "green", "fail": "bold red", "error": "yellow"}
_CLASS_TEXT = {
    "carrier": "[bold blue]carrier[/]",
    "ruled_out": "[green]ruled out[/]",
    "confounded": "[magenta]confounded[/]",
    "constant": "[dim]constant[/]",
    "undetermined": "[yellow]undetermined[/]",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("matrix", help="matrix file (YAML/JSON), e.g. examples/matrix-seed-case.yaml")
    add_argument(p, "repeats", help="runs per scenario (default: the matrix file's repeats)")
    add_argument(p, "results")
    p.add_argument("--run-id", default=None, help="run folder name (resumes it if it exists)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html/report.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    spec = load_matrix(args.matrix)  # MatrixError -> exit 2 via harness.cli
    if args.repeats is not None:
        if args.repeats < 1:
            print("error: --repeats must be at least 1", file=sys.stderr)
            return ExitCode.USAGE_ERROR
        spec.repeats = args.repeats
    folder, result = run_matrix(
        spec,
        results=args.results,
        run_id=args.run_id,
        progress=not args.no_progress,
        args={k: v for k, v in vars(args).items() if k != "func"},
    )
    console = Console()
    render_matrix(result, console, outcome=False)
    if len(result.deployments) == 2:
        _render_compare(folder, result, console)
    render_outcome(result, console)
    if not args.no_report:
        write_report_or_warn(RunFolder(folder), console)
    console.print(f"results: {folder}", soft_wrap=True, markup=False)
    return result.exit_code


def _render_compare(folder: Path, result: MatrixResult, console: Console) -> None:
    from harness.present.console import render_compare

    records = list(RunFolder(folder).records())
    two = two_way_summary(records, result.deployments, run_id=result.run_id)
    if two is not None:
        console.rule("compare: the two deployments")
        render_compare(two, console)


# ------------------------------------------------------------------ console output


def _rate(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "-"


def _cells(r: DeploymentResult, attrs: list[str]) -> list[str]:
    gsm = "-" if r.gsm8k_accuracy is None else f"{r.gsm8k_accuracy:.3f}"
    calls = "-" if r.tool_calls_mean is None else f"{r.tool_calls_mean:.1f}"
    status = f"[{_STATUS_STYLE[r.status]}]{r.status}[/]"
    return [
        escape(r.label),
        *[escape(r.attributes.get(a, "-")) for a in attrs],
        status,
        _rate(r.passed, r.scored),
        _rate(r.final_answers, r.scored),
        calls,
        str(r.repeated_calls),
        str(r.drift),
        gsm,
    ]


def deployments_table(result: MatrixResult) -> Table:
    """Deployments x outcomes, failing first, then passing, then not judged (one section each)."""
    attrs = sorted({a for r in result.deployments for a in r.attributes})
    title = result.name or "isolation matrix"
    table = Table(title=escape(title), title_justify="left")
    table.add_column("deployment", no_wrap=True)
    for a in attrs:
        table.add_column(escape(a), style="cyan")
    table.add_column("outcome")
    for col in ("passed", "final", "calls/run", "repeated", "drift", "GSM8K"):
        table.add_column(col, justify="right")
    for status in ("fail", "pass", "error"):
        rows = [r for r in result.deployments if r.status == status]
        for r in rows:
            table.add_row(*_cells(r, attrs))
        if rows:
            table.add_section()
    return table


def render_matrix(result: MatrixResult, console: Console, *, outcome: bool = True) -> None:
    """Print the table, the attribute findings, the warnings and (``outcome``) the outcome."""
    console.print(deployments_table(result))
    console.print(
        "[dim]passed: runs that pass; final: runs that reached a final answer; "
        "repeated/drift: repeated identical calls / drifted arguments over all runs[/]"
    )
    for r in result.deployments:
        if r.reasons:
            why = "; ".join(r.reasons)
            console.print(
                f"  {escape(r.label)} [{_STATUS_STYLE[r.status]}]{r.status}[/]: {escape(why)}"
            )
    if result.findings:
        console.print("[bold]attributes[/]")
    for f in result.findings:
        counts = "; ".join(
            f"{escape(v)}: {c['pass']} pass / {c['fail']} fail" for v, c in sorted(f.counts.items())
        )
        console.print(
            f"  [bold]{escape(f.attribute)}[/]: {_CLASS_TEXT[f.classification]} — {counts}"
            f"  [dim]({escape(f.explanation)})[/]",
            soft_wrap=True,
        )
    for w in result.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(w)}", soft_wrap=True)
    g = result.compare_gsm8k
    if g is not None:
        console.print(
            f"GSM8K, {escape(result.compare_baseline or '?')} (baseline) vs "
            f"{escape(result.compare_candidate or '?')}: {g.verdict} — McNemar exact b={g.b}, "
            f"c={g.c}, p={g.mcnemar_p:.2g}, difference {g.accuracy_diff:+.3f} over {g.n_pairs} questions",
            soft_wrap=True,
        )
    if outcome:
        render_outcome(result, console)


def render_outcome(result: MatrixResult, console: Console) -> None:
    """The last line: the outcome and its message."""
    style = _OUTCOME_STYLE[result.outcome]
    console.print(f"\n[{style}] {result.outcome} [/] {escape(result.message)}", soft_wrap=True)
