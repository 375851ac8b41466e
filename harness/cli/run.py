"""``harness run``: run scenarios against one server, record, score and report.

Writes ``results/<run-id>/manifest.json`` and ``transcripts.jsonl`` (one record per
run, appended as each ends), then scores them into ``summary.json``
(:func:`harness.pipeline.score_dir`), renders ``report.html``/``report.md`` and prints a
per-scenario table (passed runs, final answers, failure kinds). ``--resume RUN_ID`` (or
``--run-id`` of an existing folder) reuses that folder and runs only what is not
recorded yet; it refuses a folder recorded against another server, model, label,
repeats, stream mode or changed scenario files.

Exit codes: 0 every scenario's pass rate is at least ``--min-pass-rate`` (default 1.0:
every scored run passed); 1 a scenario fell below it; 2 bad arguments, scenario file or
a resume that would mix two runs; 3 the server is unreachable, or more than 20% of the
runs are infrastructure errors (the server, not the model, failed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.cli import ExitCode
from harness.cli._common import add_stream_argument, preflight, resume_hint, stream_mode
from harness.client.target import TargetConfig
from harness.options import add_argument
from harness.pipeline import score_dir, write_report
from harness.runfolder import DEFAULT_RESULTS, prepare_run_dir, resume_mismatch
from harness.runner import run_many_sync
from harness.scenario.model import Scenario, load_scenarios
from harness.scoring.parity import render_parity
from harness.stats.verdict import INFRA_ERROR_LIMIT
from harness.summary import Aggregate, Settings, Summary

HELP = "Run scenarios against one OpenAI-compatible server; record, score and report."

#: manifest arguments that must match when a run folder is resumed
RESUME_KEYS = ("target", "model", "label", "repeats", "stream")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    add_argument(p, "target", required=True)
    add_argument(p, "model")
    p.add_argument("--label", default="target", help="name shown for this server (default: target)")
    add_stream_argument(p)
    for name in ("repeats", "concurrency", "min_pass_rate"):
        add_argument(p, name)
    add_argument(p, "results", default=str(DEFAULT_RESULTS))  # the same root, as a path
    p.add_argument("--run-id", help="name of the run folder (default: run-<time>-<pid>)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish the run RUN_ID (skip recorded runs)")
    for name in ("api_key_env", "request_timeout", "max_retries"):
        add_argument(p, name)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _error(msg: str, code: int = ExitCode.USAGE_ERROR) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def _check_resume(args: argparse.Namespace, scenarios: list[Scenario]) -> str | None:
    """A usage problem with ``--resume``/``--run-id``, or None."""
    if args.resume and not (Path(args.results) / args.resume).is_dir():
        return f"--resume: no run folder {Path(args.results) / args.resume}"
    run_id = args.resume or args.run_id
    if not run_id:
        return None
    folder = Path(args.results) / run_id
    hashes = {s.id: s.content_hash() for s in scenarios}
    why = resume_mismatch(folder, vars(args), RESUME_KEYS, hashes)
    if why:
        return f"cannot resume: {why}; use a new --run-id or the same arguments"
    return None


def run(args: argparse.Namespace) -> int:
    stream = stream_mode(args)
    args.stream = "both" if stream == "both" else ("on" if stream else "off")  # as recorded
    scenarios = load_scenarios(args.scenarios or ["scenarios"])
    if not scenarios:
        return _error(f"no scenario files in {args.scenarios or ['scenarios']}")
    problem = _check_resume(args, scenarios)
    if problem:
        return _error(problem)
    down = preflight("target", args.target, args.api_key_env)
    if down:
        return _error(down, ExitCode.INFRA_ERROR)
    folder = prepare_run_dir(
        "run", results=args.results, run_id=args.resume or args.run_id, args=vars(args)
    )
    console = Console()
    console.print(f"run folder: [bold]{folder}[/bold]")
    target = TargetConfig(
        base_url=args.target,
        model=args.model,
        label=args.label,
        api_key_env=args.api_key_env,
        timeout_s=args.request_timeout,
        max_retries=args.max_retries,
    )
    try:
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
    except KeyboardInterrupt:
        print(resume_hint("run", folder.name, "--resume"), file=sys.stderr)
        return 130
    settings = Settings(
        repeats=args.repeats,
        stream=stream,
        model=args.model,
        concurrency=args.concurrency,
        scenarios=[s.id for s in scenarios],
    )
    return _finish(folder, args, console, settings)


def _finish(folder: Path, args: argparse.Namespace, console: Console, settings: Settings) -> int:
    """Score, report, print; the exit code (see the module docstring)."""
    try:
        summary = score_dir(folder, settings=settings)
    except FileNotFoundError as exc:
        return _error(str(exc), ExitCode.INFRA_ERROR)
    console.print(summary_table(summary))
    for line in failure_lines(summary):
        console.print(line, markup=False, highlight=False)
    if summary.settings.stream == "both" or args.stream == "both":
        pairs = {(r.side, r.scenario_id, r.repeat) for r in summary.runs if r.stream}
        render_parity(summary.parity, len(pairs), console)
    _report(folder, console)
    console.print(f"transcripts: {folder / 'transcripts.jsonl'}", markup=False)
    _infra_examples(summary, console)
    return exit_code(summary, args.min_pass_rate)


def _report(folder: Path, console: Console) -> None:
    try:
        path = write_report(folder)
    except Exception as exc:  # the results stand even if the report cannot be drawn
        console.print(f"report not written: {type(exc).__name__}: {exc}", markup=False)
        return
    if path is not None:
        console.print(f"report: {path}", soft_wrap=True, markup=False)


def exit_code(summary: Summary, min_pass_rate: float) -> int:
    """3 if more than 20% of the runs are infrastructure errors, 1 if a scenario's pass
    rate (over its scored runs) is below ``min_pass_rate``, else 0."""
    runs = len(summary.runs)
    errors = sum(r.infra_error is not None for r in summary.runs)
    if runs and errors / runs > INFRA_ERROR_LIMIT:
        return ExitCode.INFRA_ERROR
    for a in summary.aggregates:
        passed = a.rates.get("passed")
        if a.scenario_id != "*" and passed and passed.n and passed.k / passed.n < min_pass_rate:
            return ExitCode.REGRESSION
    return ExitCode.OK


def _kinds(a: Aggregate) -> str:
    kinds = [
        f"{k} {r.k}"
        for k, r in sorted(a.rates.items(), key=lambda kv: (-kv[1].k, kv[0]))
        if r.k and k not in ("passed", "final_answer")
    ]
    return ", ".join(kinds)


def summary_table(summary: Summary) -> Table:
    """Per scenario (and all pooled): runs, passed, tool calls, final answers, turn caps
    and infrastructure errors (the failure kinds follow: :func:`failure_lines`)."""
    several = len({a.side for a in summary.aggregates}) > 1
    table = Table(
        title="runs per scenario (passed; final: final answers reached; of scored runs; "
        "errors: infrastructure)"
    )
    table.add_column("scenario", overflow="fold", min_width=12)
    for col in ("runs", "passed", "tool calls", "final", "turn cap", "errors"):
        table.add_column(col, justify="right")
    for a in summary.aggregates:
        name = "all scenarios" if a.scenario_id == "*" else a.scenario_id
        passed, final = a.rates.get("passed"), a.rates.get("final_answer")
        calls = a.counts.get("tool_calls")
        table.add_row(
            f"{a.label}: {name}" if several else name,
            str(a.runs),
            f"{passed.k}/{passed.n}" if passed else "-",
            str(calls.total) if calls else "-",
            f"{final.k}/{final.n}" if final else "-",
            str(a.termination.get("turn_cap", 0)),
            f"[red]{a.infra_errors}[/red]" if a.infra_errors else "0",
            style="bold" if a.scenario_id == "*" else None,
        )
    return table


def failure_lines(summary: Summary) -> list[str]:
    """``<scenario>: <kind> <runs>, ...`` per scenario with failures (most frequent first)."""
    several = len({a.side for a in summary.aggregates}) > 1
    out = []
    for a in summary.aggregates:
        kinds = _kinds(a)
        if kinds and a.scenario_id != "*":
            out.append(f"  {a.label + ': ' if several else ''}{a.scenario_id}: {kinds}")
    return ["failure kinds (runs showing each):", *out] if out else []


def _infra_examples(summary: Summary, console: Console) -> None:
    """How many runs ended with an infrastructure error, and one message per kind."""
    errors = [r.infra_error for r in summary.runs if r.infra_error is not None]
    if not errors:
        return
    console.print(
        f"[red]{len(errors)} run(s) ended with an infrastructure error[/red]"
        " (the server failed, not the model), e.g.:",
        highlight=False,
    )
    for kind, msg in {e.kind: e.message for e in reversed(errors)}.items():
        console.print(f"  {kind}: {msg}", markup=False, highlight=False)
