"""``harness run``: run scenarios against one server, record, score and report.

Says where its run folder is (and the command that resumes it) before anything runs;
records one ``transcripts.jsonl`` line per run as each ends, then scores them
(:func:`harness.pipeline.score_folder`: ``scores.jsonl``, ``summary.json`` with the run's
outcome), prints PASSED/FAILED, a per-scenario table (passed runs, failure kinds) and
renders ``report.html``/``report.md``. ``--resume RUN_ID`` (or
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

from harness.cli import ExitCode, interrupted_code
from harness.cli._common import (
    add_skip_contract,
    add_stream_argument,
    check_resume,
    exit_code,
    open_run_folder,
    preflight,
    resume_command,
    stream_mode,
    write_report_or_warn,
)
from harness.cli._failure import interrupted
from harness.client.target import TargetConfig, target_from_options
from harness.options import add_argument
from harness.pipeline import FolderContext, score_folder
from harness.preflight import check_sides
from harness.present.console import make_console, render_run
from harness.present.views import first_drift
from harness.runner import SamplingPolicy, StreamMode, run_many_sync
from harness.scenario.library import default_scenarios
from harness.scenario.model import Scenario, load_scenarios
from harness.stats.verdict import INFRA_ERROR_LIMIT
from harness.summary import Settings, SideInfo

HELP = (
    "Run scenarios against one OpenAI-compatible server; record, score and report (absolute: "
    "every run must pass, a smoke test; to gate a build, compare it against a baseline)"
)

#: manifest arguments that must match when a run folder is resumed
RESUME_KEYS = (
    "target", "model", "label", "repeats", "stream", "temperature", "sampling_seed",
    "reasoning_history", "history_fields",
)  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness run``, added to ``p``."""
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    add_argument(p, "target", required=True)
    add_argument(p, "model")
    p.add_argument("--label", default="target", help="name shown for this server (default: target)")
    add_stream_argument(p)
    for name in ("repeats", "concurrency", "min_pass_rate", "temperature", "sampling_seed"):
        add_argument(p, name)
    add_argument(p, "reasoning_history")
    add_argument(p, "history_fields")
    add_skip_contract(p)
    add_argument(p, "results")
    p.add_argument("--run-id", help="name of the run folder (default: run-<time>-<pid>)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish the run RUN_ID (skip recorded runs)")
    for name in ("api_key_env", "request_timeout", "max_retries", "max_response_bytes"):
        add_argument(p, name)
    p.add_argument("--verbose", action="store_true", help="every scenario's full table and trace")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _error(msg: str, code: int = ExitCode.USAGE_ERROR) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    """``harness run``: the scenarios against one server, each scenario's pass rate judged; the exit
    code."""
    stream = stream_mode(args)
    args.stream = "both" if stream == "both" else ("on" if stream else "off")  # as recorded
    args.scenarios = args.scenarios or [default_scenarios()]
    scenarios = load_scenarios(args.scenarios)
    if not scenarios:
        return _error(f"no scenario files in {' '.join(args.scenarios)}")
    problem = check_resume(args, scenarios, RESUME_KEYS)
    if problem:
        return _error(problem)
    down = preflight("target", args.target, args.api_key_env)
    if down:
        return _error(down, ExitCode.INFRA_ERROR)
    console = make_console()
    folder = open_run_folder("run", args, console, scenarios)
    sides = {args.label: SideInfo(side=args.label, label=args.label)}
    if not args.skip_contract:  # before any scenario: what the server honours
        check_sides(folder, sides, {args.label: _target(args)})
    try:
        run_many_sync(
            scenarios, [_target(args)], repeats=args.repeats, stream=stream,
            concurrency=args.concurrency, out_dir=folder, resume=True,
            progress=not args.no_progress, keep=False,
            sampling=SamplingPolicy(
                args.temperature, args.sampling_seed, args.reasoning_history,
                args.history_fields,
            ),
        )  # fmt: skip
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (raised as SIGINT)
        resume = resume_command(args, folder.path.name)
        runs = sum(1 for _ in folder.run_keys_with_offsets()) if folder.transcripts.exists() else 0
        interrupted("run", folder.path, runs, resume, console)
        print(f"interrupted; resume with: {resume}", file=sys.stderr)
        return interrupted_code(exc)
    context = FolderContext(settings=_settings(args, stream, scenarios), sides=sides)
    summary = score_folder(folder, context)
    traces = first_drift(s for _, s in folder.scores_with_offsets())
    render_run(summary, console, traces, verbose=args.verbose)
    write_report_or_warn(folder, console)
    console.print(f"transcripts: {folder.transcripts}", markup=False, highlight=False)
    return exit_code(summary)


def _target(args: argparse.Namespace) -> TargetConfig:
    return target_from_options(args.target, label=args.label, options=args)


def _settings(args: argparse.Namespace, stream: StreamMode, scenarios: list[Scenario]) -> Settings:
    """How the runs were made and will be judged (``summary.json``'s ``settings``)."""
    return Settings(
        repeats=args.repeats,
        stream=stream,
        model=args.model,
        concurrency=args.concurrency,
        scenarios=[s.id for s in scenarios],
        infra_error_limit=INFRA_ERROR_LIMIT,
        min_pass_rate=args.min_pass_rate,
        temperature=args.temperature,
        seed=args.sampling_seed,
        reasoning_history=args.reasoning_history,
        history_fields=args.history_fields,
        skip_contract=args.skip_contract,
    )
