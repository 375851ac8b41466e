"""``harness compare``: is the candidate worse than the baseline at multi-turn tool calling?

Says where its run folder is (and the command that resumes it) before anything runs,
then runs every scenario ``--repeats`` times against both servers into it
(:func:`harness.pipeline.compare`: ``transcripts.jsonl``, ``scores.jsonl``,
``summary.json``), prints the verdict first, then the pooled table, one line per
scenario and the evidence of the scenarios that differ (:mod:`harness.present.console`;
every scenario's full table with ``--verbose``), and writes ``report.html``/``report.md``.
``--resume RUN_ID`` finishes an interrupted comparison (the same arguments).

Without URLs the built-in reference server plays both sides: profile ``healthy`` as the
baseline ("unfused") and ``fused-regression`` as the candidate ("fused"); with ``--aa``
the same target is compared with itself (the noise floor).

Before anything runs, each given URL is asked ``GET /v1/models`` (an unreachable side
fails at once with exit 3), and ``--resume``/``--run-id`` of an existing folder is refused
(exit 2) when it was recorded against other URLs, model, repeats, stream mode or scenario
files.

Exit codes: 0 no regression (also INCONCLUSIVE unless ``--strict``), 1 regression (or a
launched side that crashed at boot), 2 usage or configuration error (a recording refused),
3 more than 20% of a side's runs were infrastructure errors, or a launched side never
answered. Every path that writes a run folder leaves a ``report.md`` in it: the verdict,
or what stopped the run and the next step (a crash quoted, a refusal, an interruption).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from harness.cli import ExitCode, interrupted_code
from harness.cli._common import (
    add_launch_arguments,
    add_skip_contract,
    add_stream_argument,
    check_resume,
    exit_code,
    launch_problem,
    open_run_folder,
    preflight,
    refuse_held_ports,
    resume_command,
    stream_mode,
    write_report_or_warn,
)
from harness.cli._failure import interrupted, recording_refused
from harness.client.target import target_from_options
from harness.errors import HarnessError, RecordingError
from harness.numerics.adapters import ADAPTERS
from harness.options import add_argument, rounds, url_or_recording
from harness.pipeline import Target, compare
from harness.present.console import make_console, render_compare
from harness.present.verifier import show_verifier
from harness.present.views import first_drift
from harness.recording import RecordedSide, Recording, check_pair, is_recording_ref
from harness.runfolder import DEFAULT_RESULTS, RunFolder, check_run_id, new_run_id
from harness.scenario.library import default_scenarios
from harness.scenario.model import Scenario, load_scenarios
from harness.scenario.suites import suite_of_spec
from harness.scoring.trigger import single_turn
from harness.stats.sequential import ROUNDS
from harness.stats.verdict import ALPHA, DECISION_RULE, INFRA_ERROR_LIMIT
from harness.summary import Settings, Summary

HELP = "Compare a candidate server against a baseline over the scenarios (A/B, with a verdict)."

#: repeats per scenario and side; chosen with bench/calibration/power.py (the figures: docs/verdict.md)
DEFAULT_REPEATS = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness compare``, added to ``p``."""
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    add_argument(
        p, "baseline",
        help="baseline: a server URL (e.g. the unfused build), or a recording's folder "
        "(harness record; the server need not run)",
    )  # fmt: skip
    p.add_argument(
        "--candidate", metavar="URL|DIR", type=url_or_recording,
        help="candidate: a server URL (e.g. the fused build), or a recording's folder",
    )  # fmt: skip
    p.add_argument(
        "--baseline-cmd", metavar="CMD",
        help="launch the baseline with this command (boot checks), record it into the run "
        "folder and stop it, then launch --candidate-cmd and compare: one server at a time",
    )  # fmt: skip
    p.add_argument(
        "--candidate-cmd", metavar="CMD",
        help="launch the candidate with this command once the baseline is recorded and stopped",
    )  # fmt: skip
    add_launch_arguments(p)
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
    add_argument(p, "temperature")
    add_argument(p, "sampling_seed")
    add_argument(p, "reasoning_history")
    add_argument(p, "history_fields")
    add_skip_contract(p)
    add_argument(p, "concurrency")
    add_argument(p, "results")
    p.add_argument("--run-id", default=None, help="run folder name (resumes it if it exists)")
    p.add_argument(
        "--resume", metavar="RUN_ID", help="finish the comparison RUN_ID (the same arguments)"
    )
    p.add_argument(
        "--baseline-log",
        default=None,
        metavar="FILE",
        help="baseline server log (fusion engagement)",
    )
    p.add_argument("--candidate-log", default=None, metavar="FILE", help="candidate server log")
    for name in ("request_timeout", "api_key_env", "max_retries", "max_response_bytes"):
        add_argument(p, name)
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on INCONCLUSIVE too (CI: a comparison that could not decide fails)",
    )
    p.add_argument(
        "--sequential",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run --repeats per round and stop as soon as the decision is clear "
        "(group-sequential, alpha spent over the rounds; the summary says the runs spent); "
        "on by default, --no-sequential runs --repeats once",
    )
    p.add_argument(
        "--rounds",
        type=rounds,
        default=ROUNDS,
        metavar="K",
        help=f"--sequential: at most K rounds (default {ROUNDS})",
    )
    p.add_argument(
        "--no-logprobs",
        action="store_true",
        help="skip the numerics section (token logprobs of the baseline's conversations on "
        "both servers; on by default when both servers support it)",
    )
    p.add_argument(
        "--logprobs-api",
        choices=["auto", *ADAPTERS],
        default="auto",
        help="logprobs API of the numerics section (default auto)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="every scenario's full table, trace and divergence"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--single-turn",
        action="store_true",
        help="first responses only, with a vendor verifier's figures beside the verdict "
        "(tool-call trigger F1 against the baseline, schema accuracy per side)",
    )


def _usage_error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return ExitCode.USAGE_ERROR


def _check(args: argparse.Namespace) -> str | None:
    """A usage problem in ``args``, or None."""
    if args.baseline_cmd and args.baseline:
        return "give --baseline (a URL or a recording) or --baseline-cmd, not both"
    if args.candidate_cmd and args.candidate:
        return "give --candidate (a URL or a recording) or --candidate-cmd, not both"
    base = args.baseline or args.baseline_cmd
    cand = args.candidate or args.candidate_cmd
    if args.aa and base and cand:
        return "--aa compares one server with itself: give --baseline URL alone (drop --candidate)"
    if args.aa and (args.baseline_cmd or args.candidate_cmd):
        return "--aa takes --baseline URL, not a launch command"
    if args.aa and is_recording_ref(args.baseline or args.candidate):
        return (
            "--aa needs a live server: against a recording, compare a second recording or a "
            "server (--baseline results/<id> --candidate URL)"
        )
    if bool(base) != bool(cand) and not args.aa:
        given = "--baseline" if base else "--candidate"
        return f"{given} needs the other side too (--baseline URL --candidate URL), or --aa for an A/A run"
    for flag, cmd in (
        ("--baseline-cmd", args.baseline_cmd),
        ("--candidate-cmd", args.candidate_cmd),
    ):
        why = launch_problem(flag, cmd)
        if why:
            return why
    for log in (args.baseline_log, args.candidate_log):
        if log and not Path(log).is_file():
            return (
                f"{log}: no such log file (--baseline-log/--candidate-log take a server log file)"
            )
    return None


def _recordings(args: argparse.Namespace, scenarios: list[Scenario]) -> dict[str, Recording]:
    """The recorded sides, opened and checked against this comparison.

    Raises:
        RecordingError: a recording cannot serve (one line naming what differs).
    """
    out: dict[str, Recording] = {}
    for side in ("baseline", "candidate"):
        ref = getattr(args, side)
        if ref and is_recording_ref(ref):
            rec = Recording.open(ref)
            needed = args.repeats * (args.rounds if args.sequential else 1)
            rec.check(
                side, scenarios=scenarios, repeats=needed, stream=args.stream,
                temperature=args.temperature, seed=args.sampling_seed, model=_model_of(args),
                single_turn=args.single_turn, reasoning_history=args.reasoning_history,
            )  # fmt: skip
            out[side] = rec
    if len(out) == 2:
        check_pair(out["baseline"], out["candidate"])
    return out


def _model_of(args: argparse.Namespace) -> str | None:
    """The model the live side serves: ``--model``, else the first of its
    ``GET /v1/models`` (None when no live side, or it does not say)."""
    if args.model:
        return str(args.model)
    live = [u for u in (args.baseline, args.candidate) if u and not is_recording_ref(u)]
    if not live:
        return None
    import httpx

    from harness.client.target import server_root

    try:
        data = httpx.get(server_root(live[0]) + "/v1/models", timeout=10.0).json()
        return str(data["data"][0]["id"])
    except Exception:
        return None


def _sim_dir(paths: list[str]) -> str:
    suites = [p for p in paths if suite_of_spec(p) is not None]
    if suites:  # the reference servers play one suite (harness.scenario.suites)
        return suites[0]
    dirs = {Path(p) if Path(p).is_dir() else Path(p).parent for p in paths}
    return str(dirs.pop()) if len(dirs) == 1 else default_scenarios()


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
def _targets(args: argparse.Namespace) -> Iterator[tuple[Target, Target]]:
    """The two targets; starts the reference server(s) in-process when no URL is given."""
    if args.baseline or args.candidate:
        b_url = args.baseline or args.candidate
        c_url = b_url if args.aa else args.candidate
        b_label, c_label = _labels(args)
        recs = getattr(args, "recordings", {})

        def side(name: Literal["baseline", "candidate"], url: str, label: str) -> Target:
            if name in recs:
                given = args.baseline_label if name == "baseline" else args.candidate_label
                own = recs[name].info.label
                if own in ("baseline", "candidate") and own != name:
                    own = name  # a default label names the role it was recorded for
                return RecordedSide(recs[name], given or own, name)
            return target_from_options(url, label=label, side=name, options=args)

        yield side("baseline", b_url, b_label), side("candidate", c_url, c_label)
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
            target_from_options(b_url, label=b_label, side="baseline", options=args),
            target_from_options(c_url, label=c_label, side="candidate", options=args),
        )


#: manifest arguments that must match when an existing run folder is resumed
RESUME_KEYS = (
    "baseline",
    "candidate",
    "baseline_cmd",
    "candidate_cmd",
    "aa",
    "model",
    "repeats",
    "stream",
    "temperature",
    "sampling_seed",
    "reasoning_history",
    "history_fields",
)


def _preflight(args: argparse.Namespace) -> str | None:
    """``GET /v1/models`` on each given URL before anything runs; the first problem."""
    if args.aa:
        sides = [("baseline", args.baseline or args.candidate)]
    else:
        sides = [("baseline", args.baseline), ("candidate", args.candidate)]
    for side, url in sides:
        problem = url and not is_recording_ref(url) and preflight(side, url, args.api_key_env)
        if problem:
            return problem
    return None


def run(args: argparse.Namespace) -> int:
    """``harness compare``: both sides' runs into one run folder, then the verdict; the exit
    code."""
    problem = _check(args)
    if problem:
        return _usage_error(problem)
    stream = stream_mode(args)  # before loading: a bare --stream may have taken a path
    args.stream = "both" if stream == "both" else ("on" if stream else "off")  # as recorded
    args.scenarios = args.scenarios or [default_scenarios()]
    scenarios = load_scenarios(args.scenarios)
    if not scenarios:
        return _usage_error(f"no scenario files in {' '.join(args.scenarios)}")
    if args.single_turn:
        scenarios = [single_turn(s) for s in scenarios]
    problem = check_resume(args, scenarios, RESUME_KEYS)
    if problem:
        return _usage_error(problem)
    try:
        args.recordings = _recordings(args, scenarios)  # RecordingError: one line, exit 2
    except RecordingError as exc:
        _refused(args, exc, None)
        raise
    down = _preflight(args)
    if down:
        print(f"error: {down}", file=sys.stderr)
        return ExitCode.INFRA_ERROR
    try:
        _check_tokens(args)
    except RecordingError as exc:
        _refused(args, exc, None)
        raise
    refuse_held_ports(args, args.baseline_cmd, args.candidate_cmd)  # LaunchError: exit 2
    console = make_console()
    folder = open_run_folder("compare", args, console, scenarios)
    try:
        if args.baseline_cmd or args.candidate_cmd:
            from harness.cli.compare_launched import compare_launched

            def recheck(a: argparse.Namespace) -> None:
                a.recordings = {**a.recordings, **_recordings(a, scenarios)}
                _check_tokens(a)

            result = compare_launched(args, scenarios, stream, folder, console, _compare, recheck)
            if isinstance(result, int):
                return result
            summary = result
        else:
            summary = _compare(args, scenarios, stream, folder)
    except RecordingError as exc:  # the candidate's model, known once it is up
        _refused(args, exc, folder)
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (raised as SIGINT)
        resume = resume_command(args, folder.path.name)
        runs = sum(1 for _ in folder.run_keys_with_offsets()) if folder.transcripts.exists() else 0
        interrupted("compare", folder.path, runs, resume, console)
        print(f"interrupted; resume with: {resume}", file=sys.stderr)
        return interrupted_code(exc)
    traces = first_drift(s for _, s in folder.scores_with_offsets())
    render_compare(summary, console, traces, verbose=args.verbose)
    if args.single_turn:
        show_verifier(folder, summary, console)
    if getattr(args, "logprobs_line", None):
        console.print(args.logprobs_line, soft_wrap=True, markup=False, highlight=False)
    write_report_or_warn(folder, console)
    return exit_code(summary, strict=args.strict)


def _refused(args: argparse.Namespace, exc: RecordingError, folder: RunFolder | None) -> None:
    """A recording refused: ``report.md`` in the run folder, so a CI job has a report to post
    (the error line is main's). Refused before the runs, the folder gets the report alone,
    no manifest: the same ``--run-id`` with the settings fixed is a new run, not a resume."""
    path = folder.path if folder is not None else None
    if path is None:
        run_id = getattr(args, "resume", None) or args.run_id
        try:
            path = Path(args.results or DEFAULT_RESULTS) / check_run_id(
                run_id or new_run_id("compare")
            )
            path.mkdir(parents=True, exist_ok=True)
        except (HarnessError, OSError):
            return  # no folder to write it in (--results a file...): the error line says it
    recording_refused("compare", path, str(exc), make_console())


def _compare(
    args: argparse.Namespace, scenarios: list[Scenario], stream: Any, folder: RunFolder
) -> Summary:
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
        temperature=args.temperature,
        seed=args.sampling_seed,
        reasoning_history=args.reasoning_history,
        history_fields=args.history_fields,
        skip_contract=args.skip_contract,
        sequential=args.sequential,
        rounds=args.rounds,
    )
    with _targets(args) as (base, cand):
        after = None if args.no_logprobs else _logprobs_hook(args, base, cand)
        return compare(
            scenarios,
            base,
            cand,
            settings=settings,
            folder=folder,
            logs=(args.baseline_log, args.candidate_log),
            progress=not args.no_progress,
            after_runs=after,
            single_turn=args.single_turn,
        )


def _check_tokens(args: argparse.Namespace) -> None:
    """Against a recorded baseline with numerics, the live candidate must tokenise the
    recorded sequences as recorded (one request, before any run).

    Raises:
        RecordingError: it does not (the recording can no longer serve the numerics).
    """
    rec = args.recordings.get("baseline")
    if rec is None or args.no_logprobs or not args.candidate or is_recording_ref(args.candidate):
        return
    scores = rec.numerics()
    if scores is None:
        return
    from harness.client.target import server_root
    from harness.errors import TokenizationMismatch
    from harness.numerics.run import LogprobsOptions, check_recorded_tokens

    try:
        check_recorded_tokens(
            scores, server_root(args.candidate),
            LogprobsOptions(
                model=args.model, timeout_s=args.request_timeout,
                api_key=os.environ.get(args.api_key_env),
            ),  # fmt: skip
        )  # fmt: skip
    except TokenizationMismatch as exc:
        raise RecordingError(
            f"{rec.path} cannot serve as the baseline: a numerics sequence no longer "
            f"tokenises the same on the candidate ({exc}); record the baseline again, or "
            "compare with --no-logprobs"
        ) from None


def _logprobs_hook(
    args: argparse.Namespace, base: Target, cand: Target
) -> Callable[[RunFolder], None]:
    """The numerics section (:func:`harness.numerics.section.numerics_hook`), its line kept
    for the console."""
    from harness.numerics.run import LogprobsOptions
    from harness.numerics.section import numerics_hook
    from harness.present.logprobs import section_line

    def done(res: Any, why: str | None) -> None:
        args.logprobs_line = section_line(res, why)

    return numerics_hook(base, cand, LogprobsOptions(api=args.logprobs_api, model=args.model), done)
