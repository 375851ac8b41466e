"""``harness compare``: is the candidate worse than the baseline at multi-turn tool calling?

Runs every scenario ``--repeats`` times against both servers into ``results/<run-id>/``,
scores the transcripts, tests the differences (:mod:`harness.verdict`), prints the table
reviewers write by hand and the verdict, and writes ``summary.json`` (and ``report.html``
when the report module is installed).

Without URLs the built-in reference server plays both sides: profile ``healthy`` as the
baseline ("unfused") and ``fused-regression`` as the candidate ("fused"); with ``--aa``
the same target is compared with itself (the noise floor).

Exit codes: 0 no regression (also INCONCLUSIVE unless ``--strict``), 1 regression,
2 usage or configuration error, 3 more than 20% of a side's runs were infrastructure errors.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.cli import ExitCode
from harness.client import TargetConfig
from harness.commands._common import add_stream_argument, stream_mode
from harness.compare import compare, write_report
from harness.parity import render_parity
from harness.scenario import load_scenarios
from harness.summary import Aggregate, RunScore, ScenarioComparison, Settings, Summary
from harness.verdict import ALPHA, COUNT_METRICS, DECISION_RULE, INFRA_ERROR_LIMIT

HELP = "Compare a candidate server against a baseline over the scenarios (A/B, with a verdict)."

#: repeats per scenario and side; chosen with harness/_power.py (see the README's figures)
DEFAULT_REPEATS = 5

_VERDICT_STYLE = {
    "REGRESSION": "bold white on red",
    "IMPROVEMENT": "bold white on green",
    "NO CHANGE": "bold green",
    "INCONCLUSIVE": "bold yellow",
}
_TABLE_ROWS = ["tool_calls", "malformed_args", "repeated_calls", "final_answer", "passed"]
_ROW_LABELS = {**COUNT_METRICS, "final_answer": "reached a final answer", "passed": "passed"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    p.add_argument("--baseline", metavar="URL", help="baseline server (e.g. the unfused build)")
    p.add_argument("--candidate", metavar="URL", help="candidate server (e.g. the fused build)")
    p.add_argument(
        "--baseline-label",
        default=None,
        help="name shown for the baseline (default: baseline; unfused for the built-in server)",
    )
    p.add_argument(
        "--candidate-label",
        default=None,
        help="name shown for the candidate (default: candidate; fused for the built-in server)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"runs per scenario and side (default {DEFAULT_REPEATS})",
    )
    add_stream_argument(p)
    p.add_argument(
        "--aa", action="store_true", help="A/A: compare one target with itself (noise floor)"
    )
    p.add_argument("--model", default=None, help="model name (default: first of GET /v1/models)")
    p.add_argument("--concurrency", type=int, default=8, help="runs in flight per comparison")
    p.add_argument(
        "--results", default=None, help="results root (default results/ or $HARNESS_RESULTS)"
    )
    p.add_argument("--run-id", default=None, help="run folder name (resumes it if it exists)")
    p.add_argument(
        "--baseline-log",
        default=None,
        metavar="FILE",
        help="baseline server log (fusion engagement)",
    )
    p.add_argument("--candidate-log", default=None, metavar="FILE", help="candidate server log")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds")
    p.add_argument("--strict", action="store_true", help="exit 1 on INCONCLUSIVE too")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _usage_error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return ExitCode.USAGE_ERROR


def _check(args: argparse.Namespace) -> str | None:
    """A usage problem in ``args``, or None."""
    if args.repeats < 1:
        return "--repeats must be at least 1"
    if args.concurrency < 1:
        return "--concurrency must be at least 1"
    if bool(args.baseline) != bool(args.candidate) and not args.aa:
        given = "--baseline" if args.baseline else "--candidate"
        return f"{given} needs the other side too (--baseline URL --candidate URL), or --aa for an A/A run"
    for url in (args.baseline, args.candidate):
        if url and not url.startswith(("http://", "https://")):
            return f"{url!r} is not a URL; give http://HOST:PORT (with or without /v1)"
    for log in (args.baseline_log, args.candidate_log):
        if log and not Path(log).is_file():
            return (
                f"{log}: no such log file (--baseline-log/--candidate-log take a server log file)"
            )
    return None


def _sim_dir(paths: list[str]) -> str:
    dirs = {Path(p) if Path(p).is_dir() else Path(p).parent for p in paths}
    return str(dirs.pop()) if len(dirs) == 1 else "scenarios"


def _sim_log(folder: str, profile: str) -> str:
    """Write the boot log a ``harness sim --profile PROFILE`` would print; return its path."""
    from harness.sim.moe import boot_log_lines
    from harness.sim.profiles import get_profile

    path = Path(folder) / f"{profile}.log"
    path.write_text("\n".join(boot_log_lines(get_profile(profile), capture=False)) + "\n")
    return str(path)


@contextlib.contextmanager
def _targets(args: argparse.Namespace) -> Iterator[tuple[TargetConfig, TargetConfig]]:
    """The two targets; starts the reference server(s) in-process when no URL is given."""
    kw = {"model": args.model, "timeout_s": args.timeout}
    if args.baseline or args.candidate:
        b_url = args.baseline or args.candidate
        c_url = b_url if args.aa else args.candidate
        yield (
            TargetConfig(b_url, label=args.baseline_label or "baseline", side="baseline", **kw),
            TargetConfig(
                c_url,
                label=args.candidate_label or ("baseline" if args.aa else "candidate"),
                side="candidate",
                **kw,
            ),
        )
        return
    from harness.sim.server import serve_in_thread

    folder = _sim_dir(args.scenarios)
    cand_profile = "healthy" if args.aa else "fused-regression"
    with (
        tempfile.TemporaryDirectory(prefix="harness-sim-logs-") as logs,
        serve_in_thread("healthy", scenarios_dir=folder, seed=0) as b_url,
        serve_in_thread(cand_profile, scenarios_dir=folder, seed=1) as c_url,
    ):
        # the in-process servers' boot logs, so fusion engagement is judged as for real ones
        args.baseline_log = args.baseline_log or _sim_log(logs, "healthy")
        args.candidate_log = args.candidate_log or _sim_log(logs, cand_profile)
        b_label = args.baseline_label or ("healthy" if args.aa else "unfused")
        c_label = args.candidate_label or ("healthy-again" if args.aa else "fused")
        yield (
            TargetConfig(b_url, label=b_label, side="baseline", **kw),
            TargetConfig(c_url, label=c_label, side="candidate", **kw),
        )


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        return _usage_error(problem)
    stream = stream_mode(args)  # before loading: a bare --stream may have taken a path
    args.scenarios = args.scenarios or ["scenarios"]
    scenarios = load_scenarios(args.scenarios)
    if not scenarios:
        return _usage_error(f"no scenario files in {' '.join(args.scenarios)}")
    settings = Settings(
        repeats=args.repeats,
        stream=stream,
        aa=args.aa,
        model=args.model,
        concurrency=args.concurrency,
        scenarios=[s.id for s in scenarios],
        alpha=ALPHA,
        infra_error_limit=INFRA_ERROR_LIMIT,
        decision_rule=DECISION_RULE,
    )
    console = Console()
    with _targets(args) as (base, cand):
        folder, summary = compare(
            scenarios,
            base,
            cand,
            settings=settings,
            results=args.results,
            run_id=args.run_id,
            logs=(args.baseline_log, args.candidate_log),
            progress=not args.no_progress,
            args={k: v for k, v in vars(args).items() if k != "func"},
        )
    render_summary(summary, console)
    _report(folder, console)
    console.print(f"results: {folder}", soft_wrap=True, markup=False)
    return exit_code(summary, strict=args.strict)


def exit_code(summary: Summary, *, strict: bool = False) -> int:
    """The process exit code of a summary (see the module docstring)."""
    v = summary.verdict
    if v is None:
        return ExitCode.OK
    if v.exit_code:
        return v.exit_code
    return ExitCode.REGRESSION if strict and v.verdict == "INCONCLUSIVE" else ExitCode.OK


def _report(folder: Path, console: Console) -> None:
    try:
        path = write_report(folder)
    except Exception as exc:  # the verdict stands even if the report cannot be drawn
        console.print(
            f"[yellow]report not written: {escape(type(exc).__name__)}: {escape(str(exc))}[/]"
        )
        return
    if path is not None:
        console.print(f"report: {path}", soft_wrap=True, markup=False)


# ------------------------------------------------------------------ console output


def render_summary(summary: Summary, console: Console) -> None:
    """Print the per-scenario tables, drifted-argument traces, divergences and the verdict."""
    labels = {s.side: s.label for s in summary.sides}
    for s in summary.sides:
        url = s.target.base_url if s.target else "?"
        fusion = f"  fusion {s.fusion.get('state')}" if s.fusion else ""
        console.print(f"[bold]{escape(s.side)}[/]: {escape(s.label)}  {escape(url)}{fusion}")
    for w in summary.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(w)}")
    if summary.server_args_diff:
        diff = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in summary.server_args_diff.items())
        console.print(f"server arguments that differ: {escape(diff)}")
    scenario_ids = [a.scenario_id for a in summary.aggregates if a.side == summary.sides[0].side]
    for sid in scenario_ids:
        _scenario_table(summary, sid, labels, console)
        comp = summary.comparison(sid)
        if comp is not None and comp.new_failure_kinds and comp.verdict != "REGRESSION":
            kinds = ", ".join(comp.new_failure_kinds)
            console.print(
                f"  only in {escape(labels.get('candidate', 'candidate'))}, not significant: {escape(kinds)}"
            )
        if sid != "*":
            _drift_traces(summary, sid, console)
            _divergence(summary.comparison(sid), labels, console)
    _infra(summary, console)
    if summary.settings.stream == "both":
        pairs = {(r.side, r.scenario_id, r.repeat) for r in summary.runs if r.stream}
        render_parity(summary.parity, len(pairs), console)
    _verdict(summary, console)


def _scenario_table(summary: Summary, sid: str, labels: dict[str, str], console: Console) -> None:
    comp = summary.comparison(sid)
    title = "all scenarios" if sid == "*" else sid
    if comp is not None:
        title += f"  [{_VERDICT_STYLE[comp.verdict]}]{comp.verdict}[/]"
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for s in summary.sides:
        table.add_column(escape(s.label), justify="right")
    if comp is not None:
        table.add_column("p (one-sided)", justify="right")
    for metric, label, cells, p in _rows(summary, sid, comp):
        row = [label, *cells] + ([p] if comp is not None else [])
        table.add_row(*row, style="bold red" if p.endswith("*") and metric else None)
    console.print(table)


def _rows(
    summary: Summary, sid: str, comp: ScenarioComparison | None
) -> list[tuple[str, str, list[str], str]]:
    aggs = [summary.aggregate(s.side, sid) for s in summary.sides]
    by_metric = {r.metric: r for r in comp.rows} if comp else {}
    kinds = sorted(
        {
            k
            for a in aggs
            if a
            for k, r in a.rates.items()
            if r.k and k not in ("passed", "final_answer")
        }
    )
    out = []
    for metric in [*_TABLE_ROWS, *kinds]:
        row = by_metric.get(metric)
        cells = [_cell(a, metric) for a in aggs]
        p = "" if row is None or row.p_value is None else f"{row.p_value:.2g}"
        if row is not None and row.significant:
            p += " *"
        label = row.label if row else _ROW_LABELS.get(metric, metric)
        out.append((metric, label, cells, p))
    return out


def _cell(agg: Aggregate | None, metric: str) -> str:
    if agg is None:
        return "-"
    if metric in COUNT_METRICS:
        c = agg.counts[metric]
        if not c.values:
            return "-"
        vals = ", ".join(map(str, c.values)) if len(c.values) <= 5 else f"median {c.median:g}"
        return f"{c.total} ({vals})"
    r = agg.rates.get(metric)
    return f"{r.k}/{r.n}" if r else "-"


def _drift_traces(summary: Summary, sid: str, console: Console) -> None:
    for side in summary.sides:
        run = next(
            (r for r in summary.runs if r.side == side.side and r.scenario_id == sid and r.drift),
            None,
        )
        if run is not None:
            console.print(f"  drifted arguments, {escape(side.label)} ({escape(run.run_key)}):")
            for line in drift_trace(run):
                console.print("    " + escape(line), soft_wrap=True)


def drift_trace(run: RunScore, limit: int = 12) -> list[str]:
    """``turn N <tool> <arguments>  <- phrase`` per call of a drifting run.

    A stretch of identical repeats is folded into one line.
    """
    notes: dict[int, list[str]] = {}
    for d in run.drift:
        notes.setdefault(d.call_index, []).append(f"{d.path}: {d.phrase}" if d.path else d.phrase)
    for m in run.malformed:
        notes.setdefault(m.call_index, []).append(m.kind.replace("_", " "))
    lines: list[str] = []
    calls = run.calls
    i = 0
    while i < len(calls) and len(lines) < limit:
        c = calls[i]
        j = i
        while (
            j + 1 < len(calls)
            and calls[j + 1].repeat_of is not None
            and calls[j + 1].arguments == c.arguments
            and calls[j + 1].tool == c.tool
        ):
            j += 1
        tail = "; ".join(dict.fromkeys(notes.get(c.call_index, [])))
        lines.append(f"turn {c.turn} {c.tool} {c.arguments}" + (f"  <- {tail}" if tail else ""))
        if j > i:
            first, last = calls[i + 1].turn, calls[j].turn
            where = f"turn {first}" if first == last else f"turns {first}-{last}"
            times = "again" if j - i == 1 else f"{j - i} more times"
            lines.append(f"{where}: the same call {times} (repeated identical calls)")
        i = j + 1
    if i < len(calls):
        lines.append(f"... {len(calls) - i} more calls")
    return lines


def _divergence(comp: ScenarioComparison | None, labels: dict[str, str], console: Console) -> None:
    d = comp.first_divergence if comp else None
    if d is None:
        return
    console.print(f"  first divergence at turn {d.turn}:")
    for side, calls in (("baseline", d.baseline), ("candidate", d.candidate)):
        console.print(
            f"    {escape(labels.get(side, side))}: {escape(' | '.join(calls))}", soft_wrap=True
        )


def _infra(summary: Summary, console: Console) -> None:
    for s in summary.sides:
        if s.infra_errors:
            kinds = ", ".join(f"{k} {n}" for k, n in s.infra_error_kinds.items())
            console.print(
                f"[yellow]infrastructure errors, {escape(s.label)}: {s.infra_errors}/{s.runs} runs "
                f"({escape(kinds)}); excluded from the rates[/]"
            )


def _verdict(summary: Summary, console: Console) -> None:
    v = summary.verdict
    if v is None:
        return
    message = v.message.removeprefix(v.verdict).lstrip(": ")
    console.print(f"\n[{_VERDICT_STYLE[v.verdict]}] {escape(v.verdict)} [/] {escape(message)}")
    for r in v.reasons[:12]:
        console.print(f"  - {escape(r)}")
