"""``harness compare``: is the candidate worse than the baseline at multi-turn tool calling?

Runs every scenario ``--repeats`` times against both servers into ``results/<run-id>/``,
scores the transcripts, tests the differences (:mod:`harness.stats.verdict`), prints the table
reviewers write by hand and the verdict, and writes ``summary.json`` (and ``report.html``
when the report module is installed).

Without URLs the built-in reference server plays both sides: profile ``healthy`` as the
baseline ("unfused") and ``fused-regression`` as the candidate ("fused"); with ``--aa``
the same target is compared with itself (the noise floor).

Before anything runs, each given URL is asked ``GET /v1/models`` (an unreachable side
fails at once with exit 3), and ``--run-id`` of an existing folder is refused (exit 2)
when it was recorded against other URLs, model, repeats, stream mode or scenario files.

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
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.cli import ExitCode
from harness.cli._common import (
    add_stream_argument,
    preflight,
    resume_hint,
    stream_mode,
)
from harness.client.target import TargetConfig
from harness.options import add_argument, http_url
from harness.pipeline import compare, write_report
from harness.runfolder import DEFAULT_RESULTS, new_run_id, resume_mismatch
from harness.scenario.model import Scenario, load_scenarios
from harness.scoring.parity import render_parity
from harness.stats.verdict import (
    ALPHA,
    COUNT_METRICS,
    DECISION_RULE,
    INFRA_ERROR_LIMIT,
    format_p,
    p_legend,
    scenario_name,
    verdict_label,
)
from harness.summary import (
    Aggregate,
    CallScore,
    RunScore,
    ScenarioComparison,
    Settings,
    Summary,
    write_summary,
)

HELP = "Compare a candidate server against a baseline over the scenarios (A/B, with a verdict)."

#: repeats per scenario and side; chosen with harness/_power.py (see the README's figures)
DEFAULT_REPEATS = 5

_VERDICT_STYLE = {
    "REGRESSION": "bold white on red",
    "IMPROVEMENT": "bold white on green",
    "NO CHANGE": "bold green",
    "INCONCLUSIVE": "bold yellow",
}
_TABLE_ROWS = ["tool_calls", "malformed_args", "repeated_calls", "drift", "final_answer", "passed"]
_ROW_LABELS = {**COUNT_METRICS, "final_answer": "reached a final answer", "passed": "passed"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    add_argument(p, "baseline", help="baseline server (e.g. the unfused build)")
    p.add_argument(
        "--candidate", metavar="URL", type=http_url, help="candidate server (e.g. the fused build)"
    )
    p.add_argument(
        "--baseline-label",
        default=None,
        help="name shown for the baseline (default: baseline; A under --aa; unfused for the "
        "built-in server)",
    )
    p.add_argument(
        "--candidate-label",
        default=None,
        help="name shown for the candidate (default: candidate; A' under --aa; fused for the "
        "built-in server)",
    )
    add_argument(
        p,
        "repeats",
        default=DEFAULT_REPEATS,
        help=f"runs per scenario and side (default {DEFAULT_REPEATS})",
    )
    add_stream_argument(p)
    p.add_argument(
        "--aa", action="store_true", help="A/A: compare one target with itself (noise floor)"
    )
    add_argument(p, "model")
    add_argument(p, "concurrency")
    add_argument(p, "results")
    p.add_argument("--run-id", default=None, help="run folder name (resumes it if it exists)")
    p.add_argument(
        "--baseline-log",
        default=None,
        metavar="FILE",
        help="baseline server log (fusion engagement)",
    )
    p.add_argument("--candidate-log", default=None, metavar="FILE", help="candidate server log")
    for name in ("request_timeout", "api_key_env", "max_retries"):
        add_argument(p, name)
    p.add_argument("--strict", action="store_true", help="exit 1 on INCONCLUSIVE too")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _usage_error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return ExitCode.USAGE_ERROR


def _check(args: argparse.Namespace) -> str | None:
    """A usage problem in ``args``, or None."""
    if args.aa and args.baseline and args.candidate:
        return "--aa compares one server with itself: give --baseline URL alone (drop --candidate)"
    if bool(args.baseline) != bool(args.candidate) and not args.aa:
        given = "--baseline" if args.baseline else "--candidate"
        return f"{given} needs the other side too (--baseline URL --candidate URL), or --aa for an A/A run"
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


def _labels(args: argparse.Namespace) -> tuple[str, str]:
    """Side labels for given URLs: ``baseline``/``candidate``; under --aa ``A`` and ``A'``
    (or ``<label>`` and ``<label> (again)``), so the two columns can be told apart."""
    if not args.aa:
        return args.baseline_label or "baseline", args.candidate_label or "candidate"
    base = args.baseline_label or "A"
    return base, args.candidate_label or ("A'" if base == "A" else f"{base} (again)")


@contextlib.contextmanager
def _targets(args: argparse.Namespace) -> Iterator[tuple[TargetConfig, TargetConfig]]:
    """The two targets; starts the reference server(s) in-process when no URL is given."""
    kw: dict[str, Any] = {
        "model": args.model,
        "timeout_s": args.request_timeout,
        "api_key_env": args.api_key_env,
        "max_retries": args.max_retries,
    }
    if args.baseline or args.candidate:
        b_url = args.baseline or args.candidate
        c_url = b_url if args.aa else args.candidate
        b_label, c_label = _labels(args)
        yield (
            TargetConfig(b_url, label=b_label, side="baseline", **kw),
            TargetConfig(c_url, label=c_label, side="candidate", **kw),
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


#: manifest arguments that must match when an existing run folder is resumed
RESUME_KEYS = ("baseline", "candidate", "aa", "model", "repeats", "stream")
#: the fusion warnings that mean nothing when a server is compared with itself
_AA_NOISE = "shared-experts fusion is "


def _check_resume(args: argparse.Namespace, scenarios: list[Scenario]) -> str | None:
    """Why ``--run-id`` of an existing folder would mix two comparisons, or None."""
    if not args.run_id:
        return None
    folder = Path(args.results or DEFAULT_RESULTS) / args.run_id
    hashes = {s.id: s.content_hash() for s in scenarios}
    why = resume_mismatch(folder, vars(args), RESUME_KEYS, hashes)
    return f"cannot resume: {why}; use a new --run-id or the same arguments" if why else None


def _preflight(args: argparse.Namespace) -> str | None:
    """``GET /v1/models`` on each given URL before anything runs; the first problem."""
    if args.aa:
        sides = [("baseline", args.baseline or args.candidate)]
    else:
        sides = [("baseline", args.baseline), ("candidate", args.candidate)]
    for side, url in sides:
        problem = url and preflight(side, url, args.api_key_env)
        if problem:
            return problem
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        return _usage_error(problem)
    stream = stream_mode(args)  # before loading: a bare --stream may have taken a path
    args.stream = "both" if stream == "both" else ("on" if stream else "off")  # as recorded
    args.scenarios = args.scenarios or ["scenarios"]
    scenarios = load_scenarios(args.scenarios)
    if not scenarios:
        return _usage_error(f"no scenario files in {' '.join(args.scenarios)}")
    problem = _check_resume(args, scenarios)
    if problem:
        return _usage_error(problem)
    down = _preflight(args)
    if down:
        print(f"error: {down}", file=sys.stderr)
        return ExitCode.INFRA_ERROR
    args.run_id = args.run_id or new_run_id("compare")  # known now: printed on Ctrl-C
    try:
        folder, summary = _compare(args, scenarios, stream)
    except KeyboardInterrupt:
        print(resume_hint("compare", args.run_id, "--run-id"), file=sys.stderr)
        return 130
    console = Console()
    render_summary(summary, console)
    _report(folder, console)
    console.print(f"results: {folder}", soft_wrap=True, markup=False)
    return exit_code(summary, strict=args.strict)


def _compare(
    args: argparse.Namespace, scenarios: list[Scenario], stream: Any
) -> tuple[Path, Summary]:
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
    if args.aa and any(w.startswith(_AA_NOISE) for w in summary.warnings):
        # one server against itself: "fusion does not differ" is the point, not a warning
        summary.warnings = [w for w in summary.warnings if not w.startswith(_AA_NOISE)]
        write_summary(folder, summary)
    return folder, summary


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
    _server_args(summary, console)
    scenario_ids = [a.scenario_id for a in summary.aggregates if a.side == summary.sides[0].side]
    for sid in scenario_ids:
        _scenario_table(summary, sid, labels, console)
        comp = summary.comparison(sid)
        _notes(comp, labels, console)
        if sid == "*" or len(scenario_ids) == 1:
            _endings(summary, sid, console)
        if sid != "*":
            _drift_traces(summary, sid, console)
            _divergence(summary.comparison(sid), labels, console)
    if summary.comparisons:
        console.print(p_legend(summary), style="dim", soft_wrap=True, highlight=False)
    _infra(summary, console)
    if summary.settings.stream == "both":
        pairs = {(r.side, r.scenario_id, r.repeat) for r in summary.runs if r.stream}
        render_parity(summary.parity, len(pairs), console)
    _verdict(summary, console)


def _notes(comp: ScenarioComparison | None, labels: dict[str, str], console: Console) -> None:
    """Under a table: why an INCONCLUSIVE scenario is so, and failure kinds only the
    candidate shows."""
    if comp is None:
        return
    if comp.note and comp.verdict == "INCONCLUSIVE":
        console.print(f"  {escape(comp.note)}", soft_wrap=True, highlight=False)
    if comp.new_failure_kinds and comp.verdict != "REGRESSION":
        kinds = ", ".join(comp.new_failure_kinds)
        alone = " alone" if comp.scenario_id != "*" else ""
        who = escape(labels.get("candidate", "candidate"))
        console.print(
            f"  only in {who} (not significant{alone} after Holm): {escape(kinds)}",
            soft_wrap=True,
            highlight=False,
        )


def ending_text(passed: int, failed: dict[str, int]) -> str:
    """``15 passed, 70 failed (65 turn cap, 5 final answer)``: how a side's runs ended,
    by passed or not, then the stop reasons of the failed runs."""
    total = sum(failed.values())
    why = ", ".join(
        f"{n} {k.replace('_', ' ')}" for k, n in sorted(failed.items(), key=lambda x: -x[1])
    )
    return f"{passed} passed" + (f", {total} failed ({why})" if total else "")


def _endings(summary: Summary, sid: str, console: Console) -> None:
    parts = []
    for s in summary.sides:
        a = summary.aggregate(s.side, sid)
        if a is None or a.termination_failed is None:
            return
        passed = a.runs - sum(a.termination_failed.values())
        parts.append(f"{s.label} {ending_text(passed, a.termination_failed)}")
    console.print(f"  how runs ended: {escape('; '.join(parts))}", soft_wrap=True, highlight=False)


def _server_args(summary: Summary, console: Console) -> None:
    """The server arguments that differ; a side reporting none is said so, not diffed."""
    silent = [
        s.label for s in summary.sides if s.fusion is not None and not s.fusion.get("server_args")
    ]
    if silent and len(silent) < len(summary.sides):
        for label in silent:
            console.print(f"{escape(label)} does not report server arguments (no /server_info)")
        return
    if summary.server_args_diff:
        diff = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in summary.server_args_diff.items())
        console.print(f"server arguments that differ: {escape(diff)}", soft_wrap=True)


def _scenario_table(summary: Summary, sid: str, labels: dict[str, str], console: Console) -> None:
    comp = summary.comparison(sid)
    title = escape(scenario_name(sid))
    if comp is not None:
        title += f"  [{_VERDICT_STYLE[comp.verdict]}]{escape(verdict_label(comp))}[/]"
    table = Table(title=title, title_justify="left")
    table.add_column("", no_wrap=True, overflow="ellipsis", max_width=26)
    for s in summary.sides:
        table.add_column(escape(s.label), justify="right")
    if comp is not None:
        table.add_column("p\n(one-sided)", justify="right", min_width=11)  # 2 lines: narrow
        table.add_column("p adj.\n(Holm)", justify="right")
    for metric, label, cells, p, adj in _rows(summary, sid, comp):
        row = [label, *cells] + ([p, adj] if comp is not None else [])
        table.add_row(*row, style="bold red" if adj.endswith("*") and metric else None)
    console.print(table)


def _rows(
    summary: Summary, sid: str, comp: ScenarioComparison | None
) -> list[tuple[str, str, list[str], str, str]]:
    """``(metric, label, cells, p (one-sided), p adj. (Holm) with " *" if significant)``."""
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
        p = format_p(row.p_value) if row is not None else ""
        adj = format_p(row.p_adjusted) if row is not None else ""
        if row is not None and row.significant:
            adj += " *"
        label = row.label if row else _ROW_LABELS.get(metric, metric)
        out.append((metric, label, cells, p, adj))
    return out


def _cell(agg: Aggregate | None, metric: str) -> str:
    if agg is None:
        return "-"
    if metric in COUNT_METRICS:
        c = agg.counts[metric]
        if not c.values:
            return "-"
        if len(set(c.values)) == 1 and len(c.values) > 1:
            return f"{c.total} ({c.values[0]} each)"
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


#: longest console line of a drifted-argument trace (longer ones end with "…")
TRACE_WIDTH = 160


def _cap(line: str, width: int = TRACE_WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _by_turn(run: RunScore) -> list[tuple[int, list[CallScore]]]:
    turns: dict[int, list[CallScore]] = {}
    for c in run.calls:
        turns.setdefault(c.turn, []).append(c)
    return list(turns.items())


def _same(a: list[CallScore], b: list[CallScore]) -> bool:
    """``b`` repeats ``a`` exactly: the same tools and arguments, each a repeated call."""
    return len(a) == len(b) and all(
        x.tool == y.tool and x.arguments == y.arguments and y.repeat_of is not None
        for x, y in zip(a, b, strict=True)
    )


def _fold_line(first: int, last: int, n_calls: int, times: int) -> str:
    where = f"turn {first}" if first == last else f"turns {first}-{last}"
    what = "the same call" if n_calls == 1 else f"the same {n_calls} calls"
    again = "again" if times == 1 else f"repeated {times} more times"
    return f"{where}: {what} {again} (repeated identical calls)"


def drift_trace(run: RunScore, limit: int = 12) -> list[str]:
    """``turn N <tool> <arguments>  <- phrase`` per call of a drifting run.

    Turns that repeat the previous turn's calls exactly are folded into one line
    (``turns 4-9: the same 2 calls repeated 6 more times``); each line is cut to
    :data:`TRACE_WIDTH` characters. At most ``limit`` lines, then ``... N more calls``.
    """
    notes: dict[int, list[str]] = {}
    for d in run.drift:
        notes.setdefault(d.call_index, []).append(f"{d.path}: {d.phrase}" if d.path else d.phrase)
    for m in run.malformed:
        notes.setdefault(m.call_index, []).append(m.kind.replace("_", " "))
    lines: list[str] = []
    turns, i, shown = _by_turn(run), 0, 0
    while i < len(turns) and len(lines) < limit:
        turn, calls = turns[i]
        for c in calls:
            tail = "; ".join(dict.fromkeys(notes.get(c.call_index, [])))
            lines.append(
                _cap(f"turn {turn} {c.tool} {c.arguments}" + (f"  <- {tail}" if tail else ""))
            )
        j = i
        while j + 1 < len(turns) and _same(calls, turns[j + 1][1]):
            j += 1
        if j > i:
            lines.append(_fold_line(turns[i + 1][0], turns[j][0], len(calls), j - i))
        shown += sum(len(c) for _, c in turns[i : j + 1])
        i = j + 1
    if shown < len(run.calls):
        lines.append(f"... {len(run.calls) - shown} more calls")
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
    """Per side: how many runs were infrastructure errors, by kind, with one example each."""
    for s in summary.sides:
        if not s.infra_errors:
            continue
        kinds = ", ".join(f"{k} {n}" for k, n in s.infra_error_kinds.items())
        console.print(
            f"[yellow]infrastructure errors, {escape(s.label)}: {s.infra_errors}/{s.runs} runs "
            f"({escape(kinds)}); excluded from the rates[/]"
        )
        examples: dict[str, str] = {}
        for r in summary.runs:
            if r.side == s.side and r.infra_error is not None:
                examples.setdefault(r.infra_error.kind, r.infra_error.message)
        for kind, message in examples.items():
            console.print(f"  e.g. {kind}: {_cap(message)}", markup=False, highlight=False)


def _verdict(summary: Summary, console: Console) -> None:
    v = summary.verdict
    if v is None:
        return
    message = v.message.removeprefix(v.verdict).lstrip(": ")
    banner: str = v.verdict
    style = _VERDICT_STYLE[v.verdict]
    if v.exit_code == ExitCode.INFRA_ERROR and v.verdict != "REGRESSION":
        banner, style = "TOO MANY INFRASTRUCTURE ERRORS", "bold white on yellow"
        message = message.removeprefix("too many infrastructure errors").lstrip()
    console.print(f"\n[{style}] {escape(banner)} [/] {escape(message)}")
    for r in v.reasons[:12]:
        console.print(f"  - {escape(r)}")
