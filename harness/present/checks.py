"""Console output of the checks beside the scenario A/B: GSM8K, boot checks, the matrix.

What ``harness gsm8k``, ``harness boot``, ``harness matrix`` (and ``harness score`` of a
GSM8K folder) print, from the results they wrote; the commands in :mod:`harness.cli`
only parse arguments and pick exit codes. Model and server text is escaped (rich markup
never interprets it).
"""

from __future__ import annotations

import sys
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.gsm8k.models import GSM8KSummary
from harness.kinds import plural
from harness.matrix.result import DeploymentResult, MatrixResult
from harness.server.boot import BootReport

__all__ = ["deployments_table", "print_boot", "render_gsm8k", "render_matrix", "render_outcome"]

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


def render_gsm8k(summary: GSM8KSummary, console: Console) -> None:
    """Per side: accuracy with its interval, invalid answers, lm-eval accuracies, errors,
    time; with a baseline, the paired McNemar comparison and the verdict."""
    table = Table(title=f"GSM8K {summary.run_id}", box=box.SIMPLE_HEAD)
    for col in ("server", "n", "acc", "95% CI", "invalid", "strict", "flex", "err", "s", "tok/s"):
        table.add_column(col, no_wrap=True, min_width=8 if col == "server" else None)
    for s in summary.sides:
        ci = s.accuracy_interval
        table.add_row(
            s.label, str(s.n), f"{s.accuracy:.3f}", f"{ci.low:.3f}-{ci.high:.3f}",
            f"{s.invalid_rate:.3f}", f"{s.accuracy_strict:.3f}", f"{s.accuracy_flexible:.3f}",
            str(s.n_errors), f"{s.latency_s:.1f}", f"{s.output_throughput:.0f}",
        )  # fmt: skip
    console.print(table)
    p = summary.paired
    if p is not None:
        ci = p.diff_interval
        console.print(
            f"pairs {p.n_pairs}: both correct {p.both_correct}, baseline only {p.b}, "
            f"candidate only {p.c}; McNemar p={p.mcnemar_p:.3g} (one-sided "
            f"{p.p_worse if p.p_worse is not None else p.mcnemar_p:.3g}); difference "
            f"{p.accuracy_diff:+.3f} [{ci.low:+.3f}, {ci.high:+.3f}] ({ci.level:.0%})"
        )
        if p.min_detectable_drop is not None:
            console.print(
                f"minimum detectable drop: {p.min_detectable_drop:.1%} (80% power at alpha "
                f"{p.alpha:g}, this question count and discordance); margin {p.margin:.1%}"
            )
        console.print(f"verdict: [bold]{p.verdict}[/bold] ({p.reason})")


def print_boot(report: BootReport, out: Any = None) -> None:
    """One line per check (verdict, name, detail), evidence lines indented below."""
    out = out or sys.stdout
    for c in report.checks:
        print(f"{c.verdict:<4}  {c.name}: {c.detail}", file=out)
        for ln in c.evidence[:8]:
            print(f"        | {ln}", file=out)
    print(f"boot: {report.verdict}", file=out)


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
            f"c={g.c}, p={g.mcnemar_p:.2g}, difference {g.accuracy_diff:+.3f} over {plural(g.n_pairs, 'question')}",
            soft_wrap=True,
        )
    if outcome:
        render_outcome(result, console)


def render_outcome(result: MatrixResult, console: Console) -> None:
    """The last line: the outcome and its message."""
    style = _OUTCOME_STYLE[result.outcome]
    console.print(f"\n[{style}] {result.outcome} [/] {escape(result.message)}", soft_wrap=True)
