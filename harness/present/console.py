"""The console: what ``harness compare``, ``run`` and ``score`` print, top-down.

A reviewer reads a comparison in this order (:func:`render_compare`):

1. the verdict line and its reasons, the two servers (URL, fusion engagement), warnings,
   and the contract pre-flight side by side (what each server honoured of a request; the
   details of any check a side did not pass, or where the sides differ);
2. the pooled table: sides as columns, the key rows and every decisive row;
3. one compact table with a row per scenario (passed runs per side, the failure kinds
   only one side shows, the per-scenario verdict);
4. only for the scenarios that differ: the note, the drifted-argument trace and the
   first divergence;
5. the p-value legend, infrastructure errors, stream/non-stream parity.

With ``verbose`` every scenario's full table follows (the report always has them). A
one-sided run (:func:`render_run`) prints its outcome, a table of scenarios and the
failure kinds. Everything comes from :mod:`harness.present.views`; model text is printed
with markup off (never interpreted). :func:`make_console` does not cut tables at 80
columns when stdout is not a terminal (CI logs, ``tee``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.kinds import plural
from harness.present.terminal import printable
from harness.present.views import (
    MAX_REASONS,
    ScenarioRow,
    TableRow,
    Trace,
    contract_rows,
    divergence_lines,
    ending_text,
    headline,
    metric_rows,
    p_legend,
    scenario_name,
    scenario_rows,
    unit_noun,
    units_note,
)
from harness.stats.aggregate import unit_count_stat, unit_rate
from harness.summary import Summary

__all__ = [
    "NON_TTY_WIDTH",
    "VERDICT_STYLE",
    "make_console",
    "render_compare",
    "render_parity",
    "render_run",
    "verdict_banner",
]

#: console width when stdout is not a terminal: wide enough that no table is cut
NON_TTY_WIDTH = 200

VERDICT_STYLE = {
    "REGRESSION": "bold white on red",
    "IMPROVEMENT": "bold white on green",
    "NO CHANGE": "bold green",
    "INCONCLUSIVE": "bold yellow",
    "PASSED": "bold white on green",
    "FAILED": "bold white on red",
    "TOO MANY INFRASTRUCTURE ERRORS": "bold white on yellow",
}
#: reasons printed under the verdict (the rest are in the report)
#: lines of a drifted-argument trace printed (the report shows more)
CONSOLE_TRACE_LINES = 12
#: scenarios in the console's per-scenario table at most, and scenarios whose trace and
#: divergence it prints, without ``--verbose`` (the report holds every one): 2,000
#: scenarios are not 20,000 console lines
CONSOLE_SCENARIOS = 50
CONSOLE_DETAILS = 10

Traces = Mapping[tuple[str, str], Trace]


def make_console(*, stderr: bool = False) -> Console:
    """A console for the command line: the terminal's width on a terminal, else
    :data:`NON_TTY_WIDTH` columns (no wrapping at 80 in CI logs)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else NON_TTY_WIDTH)


def _print(console: Console, text: str, style: str | None = None) -> None:
    """Plain text (model output included): no markup, no highlighting, no wrapping, no
    terminal escape sequences (:func:`harness.present.terminal.printable`)."""
    console.print(printable(text), style=style, markup=False, highlight=False, soft_wrap=True)


# ------------------------------------------------------------------ the verdict


def verdict_banner(summary: Summary) -> tuple[str, str, str]:
    """``(banner, style, message)``: :func:`harness.present.views.headline` with its style."""
    banner, message = headline(summary)
    return banner, VERDICT_STYLE.get(banner, "bold"), message


def _verdict(summary: Summary, console: Console) -> None:
    banner, style, message = verdict_banner(summary)
    console.print(f"[{style}] {escape(banner)} [/] {escape(message)}", soft_wrap=True)
    reasons = summary.verdict.reasons if summary.verdict else []
    for r in reasons[:MAX_REASONS]:
        _print(console, f"  - {r}")
    if len(reasons) > MAX_REASONS:
        more = plural(len(reasons) - MAX_REASONS, "more reason")
        _print(console, f"  ... {more} in the report")
    if summary.verdict is not None and summary.verdict.power:
        _print(console, f"  {summary.verdict.power}")


def _sides(summary: Summary, console: Console) -> None:
    for s in summary.sides:
        url = s.target.base_url if s.target else "?"
        fusion = f"  fusion {s.fusion.get('state')}" if s.fusion else ""
        role = s.side if s.side in ("baseline", "candidate") else "target"
        label = "" if s.label == role else f"{s.label}  "  # not "target: target"
        recorded = f"  (recorded: {s.recorded})" if s.recorded else ""
        boot = f"  boot {s.boot.get('verdict')}" if s.boot else ""
        _print(console, f"{role}: {label}{url}{fusion}{boot}{recorded}")
    for w in summary.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(w)}", soft_wrap=True)
    silent = [
        s.label for s in summary.sides if s.fusion is not None and not s.fusion.get("server_args")
    ]
    if silent and len(silent) < len(summary.sides):
        for name in silent:
            _print(console, f"{name} does not report server arguments (no /server_info)")
    elif summary.server_args_diff:
        diff = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in summary.server_args_diff.items())
        _print(console, f"server arguments that differ: {diff}")


# ------------------------------------------------------------------ tables


def _metric_table(summary: Summary, sid: str, rows: list[TableRow], title: str) -> Table:
    tested = summary.comparison(sid) is not None
    table = Table(title=title, title_justify="left")
    table.add_column("", min_width=12)
    for s in summary.sides:
        table.add_column(escape(s.label), justify="right")
    if tested:
        table.add_column("p (one-sided)", justify="right")
        table.add_column("p adj. (W-Y)", justify="right")
    for row in rows:
        cells = [escape(row.label), *map(escape, row.cells)]
        cells += [row.p_value, row.p_adjusted] if tested else []
        table.add_row(*cells, style="bold red" if row.significant and row.worse else None)
    return table


def _pooled(summary: Summary, console: Console) -> None:
    n = len([s for s in summary.scenario_ids() if s != "*"])
    rep = summary.settings.repeats
    sid = (
        "*"
        if summary.aggregate(summary.sides[0].side, "*") and n > 1
        else summary.scenario_ids()[0]
    )
    per = f" x {plural(rep, 'repeat')} per side" if rep else ""
    title = f"{scenario_name(sid) if n > 1 else sid} ({plural(n, 'scenario')}{per})"
    rows = [r for r in metric_rows(summary, sid) if r.key or r.decisive]
    console.print(_metric_table(summary, sid, rows, title))
    ends = [
        f"{s.label} {ending_text(a)}"
        for s in summary.sides
        if (a := summary.aggregate(s.side, sid))
    ]
    _print(console, f"  how runs ended: {'; '.join(ends)}")


def _capped(rows: list[ScenarioRow], first: set[str], most: int) -> list[ScenarioRow]:
    """At most ``most`` of ``rows`` in their order, those in ``first`` (the scenarios that
    differ or fail) kept before the others."""
    if len(rows) <= most:
        return rows
    keep = [r for r in rows if r.scenario_id in first][:most]
    keep += [r for r in rows if r.scenario_id not in first][: most - len(keep)]
    kept = {r.scenario_id for r in keep}
    return [r for r in rows if r.scenario_id in kept]


def _not_shown(console: Console, hidden: int, what: str) -> None:
    if hidden > 0:
        _print(
            console,
            f"  ... {hidden} more {what} not shown here: the report has every one "
            "(report.html, report.md), --verbose prints them all",
            style="dim",
        )


def _scenario_table(summary: Summary, rows: list[ScenarioRow], width: int = 200) -> Table:
    """One row per scenario. Narrower than its natural width (a terminal of 80
    columns), every column but the failure kinds gets a fixed width and the kinds fold,
    so no column is cut."""
    compared = summary.kind == "compare"
    table = _scenario_columns(summary, rows, compared, fixed=None)
    if Console(width=10_000).measure(table).maximum > width:  # its natural width
        table = _scenario_columns(summary, rows, compared, fixed=width)
    for r in rows:
        cells = [escape(r.scenario_id), *r.passed, escape(r.only)]
        if compared:
            style = VERDICT_STYLE.get(r.verdict, "bold yellow" if r.differs else "")
            cells.append(f"[{style}]{escape(r.verdict)}[/]" if style else escape(r.verdict))
        table.add_row(*cells)
    return table


def _scenario_columns(
    summary: Summary, rows: list[ScenarioRow], compared: bool, *, fixed: int | None
) -> Table:
    """The per-scenario table's columns (no rows); ``fixed``: the console width to fit."""
    table = Table(title=f"per scenario ({plural(len(rows), 'scenario')})", title_justify="left")
    ids = max((len(r.scenario_id) for r in rows), default=8)
    table.add_column("scenario", min_width=10, overflow="fold", width=fixed and min(ids, 20))
    for i, s in enumerate(summary.sides):
        cells = max((len(r.passed[i]) for r in rows if i < len(r.passed)), default=3)
        label = f"{escape(s.label)} passed"
        w = fixed and max(cells, min(len(s.label), 10), 6)
        table.add_column(label, justify="right", overflow="fold", width=w)
    table.add_column(
        "failure kinds only one side shows" if compared else "failure kinds",
        min_width=12 if fixed else 20,
        overflow="fold",
    )
    if compared:
        table.add_column("verdict", overflow="fold", width=fixed and 11)
    return table


def _shared_notes(summary: Summary, rows: list[ScenarioRow]) -> frozenset[str]:
    """Notes that several scenarios share (printed once, under the compact table)."""
    notes = [c.note for r in rows if (c := summary.comparison(r.scenario_id)) and c.note]
    return frozenset(n for n in notes if notes.count(n) > 1)


def _detail(
    summary: Summary,
    sid: str,
    traces: Traces,
    console: Console,
    *,
    full: bool,
    shared: frozenset[str] = frozenset(),
) -> None:
    """A scenario's note, (full table), drifted-argument traces and first divergence; the
    scenario's heading is left out when there is nothing to show under it."""
    comp = summary.comparison(sid)
    body: list[str] = []
    if comp is not None and comp.note and comp.note not in shared:
        body.append(f"  {comp.note}")
    for s in summary.sides:
        trace = traces.get((s.side, sid))
        if trace is not None:
            body.append(f"  drifted arguments, {s.label} ({trace.run_key}):")
            body += ["    " + t.text() for t in trace.lines[:CONSOLE_TRACE_LINES]]
            if len(trace.lines) > CONSOLE_TRACE_LINES:
                more = len(trace.lines) - CONSOLE_TRACE_LINES
                body.append(f"    ... {more} more lines in the report")
    body += [
        ("  " if i == 0 else "    ") + text
        for i, text in enumerate(divergence_lines(comp, summary))
    ]
    agg = summary.aggregate(summary.sides[0].side, sid) if summary.sides else None
    label = comp.label if comp else f"{unit_rate(agg, 'passed').text()} passed" if agg else ""
    if full:
        console.print(_metric_table(summary, sid, metric_rows(summary, sid), f"{sid}  {label}"))
    elif body:
        console.print(f"[bold]{escape(sid)}[/]  {escape(label)}", soft_wrap=True)
    for line in body:
        _print(console, line)


# ------------------------------------------------------------------ the commands


def _contract(summary: Summary, console: Console) -> None:
    """The contract pre-flight: one line per side with its checks passed, then a line per
    check some side did not pass or the sides differ on (each side's status and detail)."""
    rows = contract_rows(summary)
    if not rows:
        return
    sides = [label for label, _, _ in rows[0].cells]
    for i, side in enumerate(sides):
        ok = sum(r.cells[i][1] == "ok" for r in rows if i < len(r.cells))
        _print(console, f"contract pre-flight, {side}: {ok}/{len(rows)} checks honoured")
    for r in rows:
        if not (r.bad or r.differs or any(st == "unsupported" for _, st, _ in r.cells)):
            continue
        mark = " (the sides differ)" if r.differs else ""
        cells = "; ".join(f"{label} {st}: {detail}" for label, st, detail in r.cells)
        style = "yellow" if r.bad or r.differs else "dim"
        _print(console, f"  {r.name}{mark}: {cells}", style=style)


def render_compare(
    summary: Summary, console: Console, traces: Traces | None = None, *, verbose: bool = False
) -> None:
    """Print a comparison top-down (see the module docstring). ``traces``: (side,
    scenario) -> the first drifting run's trace (:func:`harness.present.views.first_drift`)."""
    traces = traces or {}
    _verdict(summary, console)
    _dominant_error(summary, console)
    _sides(summary, console)
    _contract(summary, console)
    if not summary.aggregates:
        return
    _pooled(summary, console)
    rows = scenario_rows(summary)
    shared = _shared_notes(summary, rows)
    if len(rows) > 1:
        differ = {r.scenario_id for r in rows if r.differs}
        shown = rows if verbose else _capped(rows, differ, CONSOLE_SCENARIOS)
        console.print(_scenario_table(summary, shown, console.width))
        _not_shown(console, len(rows) - len(shown), "scenarios")
        for note in sorted(shared):
            labels = {
                r.verdict
                for r in rows
                if (c := summary.comparison(r.scenario_id)) and c.note == note
            }
            _print(console, f"  {', '.join(sorted(labels))}: {note}")
    detailed = [r for r in rows if verbose or r.differs or (len(rows) == 1 and traces)]
    for r in detailed if verbose else detailed[:CONSOLE_DETAILS]:
        _detail(summary, r.scenario_id, traces, console, full=verbose, shared=shared)
    _not_shown(console, 0 if verbose else len(detailed) - CONSOLE_DETAILS, "scenario traces")
    if summary.comparisons:
        _print(console, p_legend(summary), style="dim")
    _infra(summary, console)
    render_parity(summary, console)


def render_run(
    summary: Summary, console: Console, traces: Traces | None = None, *, verbose: bool = False
) -> None:
    """Print a one-sided run: the outcome, the per-scenario table, the traces of the
    scenarios below the pass rate (every scenario's table with ``verbose``), infrastructure
    errors."""
    _verdict(summary, console)
    _dominant_error(summary, console)
    _sides(summary, console)
    _contract(summary, console)
    rows = scenario_rows(summary)
    failing = set(summary.outcome.failing) if summary.outcome else set()
    shown = rows if verbose else _capped(rows, failing, CONSOLE_SCENARIOS)
    console.print(_scenario_table(summary, shown, console.width))
    _not_shown(console, len(rows) - len(shown), "scenarios")
    for s in summary.sides:
        a = summary.aggregate(s.side, "*")
        if a is not None:
            calls = unit_count_stat(a, "tool_calls")
            tool_calls = calls.total if calls is not None else 0
            _print(
                console,
                f"  {s.label}: {unit_rate(a, 'passed').text()} {unit_noun(a)} passed, "
                f"{unit_rate(a, 'final_answer').text()} reached a final answer, "
                f"{tool_calls} tool calls; how runs ended: {ending_text(a)}",
            )
    detailed = [r for r in rows if verbose or r.scenario_id in failing]
    for r in detailed if verbose else detailed[:CONSOLE_DETAILS]:
        _detail(summary, r.scenario_id, traces or {}, console, full=verbose)
    _not_shown(console, 0 if verbose else len(detailed) - CONSOLE_DETAILS, "scenario traces")
    if note := units_note(summary):
        _print(console, note, style="dim")
    _infra(summary, console)
    render_parity(summary, console)


def dominant_error_lines(summary: Summary) -> list[str]:
    """Per side whose runs mostly failed for the server (over half), the error most of them
    met, the server's message, and the launch flag that fixes it when the message names
    one (:func:`harness.client.hints.server_error_hint`)."""
    from harness.client.hints import server_error_hint

    lines = []
    for s in summary.sides:
        if not s.infra_errors or 2 * s.infra_errors <= s.runs or not s.infra_error_kinds:
            continue
        kind, n = max(s.infra_error_kinds.items(), key=lambda kv: kv[1])
        message = " ".join(s.infra_error_examples.get(kind, "").split())[:300]
        lines.append(
            f"{s.label}: {n}/{s.runs} runs failed on the same server error ({kind}): {message}"
        )
        hint = server_error_hint(message)
        if hint:
            lines.append(f"  fix: {hint}")
    return lines


def _dominant_error(summary: Summary, console: Console) -> None:
    for line in dominant_error_lines(summary):
        _print(console, line, style="bold yellow")


def _infra(summary: Summary, console: Console) -> None:
    """Per side: how many runs were infrastructure errors, by kind, with one example each."""
    for s in summary.sides:
        if not s.infra_errors:
            continue
        kinds = ", ".join(f"{k} {n}" for k, n in s.infra_error_kinds.items())
        console.print(
            f"[yellow]infrastructure errors (the server failed, not the model), "
            f"{escape(s.label)}: {s.infra_errors}/{s.runs} runs ({escape(kinds)}); "
            "left out of every rate[/]",
            soft_wrap=True,
        )
        for kind, message in s.infra_error_examples.items():
            _print(console, f"  e.g. {kind}: {message[:300]}")


def render_parity(summary: Summary, console: Console) -> None:
    """Stream/non-stream parity: one line when all pairs agree, else a table of diffs."""
    pairs, diffs = summary.parity_pairs, summary.parity
    if not pairs:
        return
    if not diffs:
        _print(
            console, f"stream/non-stream parity: {plural(pairs, 'pair')} of runs, no differences"
        )
        return
    runs = len({(d.target, d.scenario_id, d.repeat) for d in diffs})
    table = Table(
        title=f"stream/non-stream parity: {runs} of {plural(pairs, 'pair')} "
        + ("differs" if runs == 1 else "differ"),
        title_justify="left",
    )
    for col in ("target", "scenario", "rep", "where", "field", "stream", "nostream"):
        table.add_column(col, overflow="fold")
    for d in diffs:
        where = "end" if d.turn is None else f"turn {d.turn}"
        where += f" call {d.call_index}" if d.call_index is not None else ""
        cells = [d.target, d.scenario_id, str(d.repeat), where, d.field, d.stream, d.nostream]
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
