"""``harness record``: record one server as a baseline, to compare against once it is gone.

On a box that fits one server at a time (a TP-8 model on 8 GPUs)::

    harness record --target http://127.0.0.1:30000 --label unfused     # then stop it
    # ... start the fused build on the same port ...
    harness compare --baseline results/<id> --candidate http://127.0.0.1:30000

``--cmd "..."`` launches the server instead (as ``harness boot`` does: health, fusion
engagement, a crash quoted), records it and stops it. The run folder
(:mod:`harness.recording`) holds the scenario runs at the full budget of ``compare``'s
defaults (``--repeats`` per round x ``--rounds``: every sequential round a comparison may
read), the numerics sequences scored twice (the baseline's own A/A floor; ``--no-logprobs``
skips them), GSM8K answers with ``--gsm8k N``, and the server's facts. A killed recording
resumes with ``--resume RUN_ID``.

Exit codes: 0 recorded; 1 a launched server crashed at boot (the crash quoted, in the
console and in the folder's ``report.md``) or a boot check failed (e.g. ``--expect-fusion
on`` against a server whose fusion is off; the recording is kept); 2 usage error; 3 the
server is unreachable, a launched server never answered (cannot be started, or timed
out), or more than 20% of its runs were infrastructure errors (the recording is kept,
but a comparison against it would not be judged).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.cli import ExitCode, interrupted_code
from harness.cli._common import (
    add_launch_arguments,
    add_skip_contract,
    add_stream_argument,
    check_resume,
    launch_problem,
    launched_side,
    open_run_folder,
    preflight,
    print_side_boot,
    refuse_held_ports,
    resume_command,
    stream_mode,
    write_report_or_warn,
)
from harness.cli._failure import boot_failed, interrupted
from harness.client.target import TargetConfig, target_from_options
from harness.numerics.adapters import ADAPTERS
from harness.options import add_argument, count, positive_int, rounds
from harness.present.console import dominant_error_lines, make_console
from harness.recording import RecordingInfo, record, save_info
from harness.redaction import redact_url
from harness.runfolder import RunFolder
from harness.scenario.library import default_scenarios
from harness.scenario.model import load_scenarios
from harness.scoring.trigger import single_turn
from harness.server.boot import boot_summary
from harness.stats.sequential import ROUNDS

HELP = "Record one server as a baseline (runs, numerics, GSM8K, facts) to compare against later."

#: manifest arguments that must match when a recording is resumed
RESUME_KEYS = ("target", "cmd", "model", "label", "repeats", "rounds", "stream", "temperature",
               "sampling_seed", "single_turn", "numerics_only", "no_logprobs",
               "logprobs_gsm8k", "logprobs_max_tokens", "gsm8k", "reasoning_history")  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness record``, added to ``p``."""
    from harness.cli.compare import DEFAULT_REPEATS

    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    src = p.add_mutually_exclusive_group(required=True)
    add_argument(src, "target", help="the server to record, already running")
    src.add_argument("--cmd", help="launch the server with this command, record it, stop it")
    add_launch_arguments(p)
    p.add_argument(
        "--label", default="baseline", help="name shown for this server (default baseline)"
    )
    add_argument(
        p, "repeats", default=DEFAULT_REPEATS,
        help=f"runs per scenario per round (default {DEFAULT_REPEATS}, as compare's)",
    )  # fmt: skip
    p.add_argument(
        "--rounds", type=rounds, default=ROUNDS, metavar="K",
        help=f"rounds recorded (default {ROUNDS}: every round a sequential compare may read)",
    )  # fmt: skip
    add_stream_argument(p)
    for name in (
        "model",
        "temperature",
        "sampling_seed",
        "reasoning_history",
        "concurrency",
        "results",
    ):
        add_argument(p, name)
    add_skip_contract(p)
    p.add_argument("--run-id", default=None, help="run folder name (resumes it if it exists)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish the recording RUN_ID")
    p.add_argument(
        "--log", metavar="FILE", help="with --target: the server's log (fusion engagement)"
    )
    p.add_argument(
        "--single-turn", action="store_true", help="first responses only (compare --single-turn)"
    )
    p.add_argument(
        "--no-logprobs", action="store_true", help="do not record the numerics sequences"
    )
    p.add_argument(
        "--numerics-only", action="store_true",
        help="record only the numerics (the scenarios' reference conversations and "
        "--logprobs-gsm8k prompts, scored twice): for harness logprobs, not compare",
    )  # fmt: skip
    p.add_argument("--logprobs-api", choices=["auto", *ADAPTERS], default="auto",
                   help="logprobs API of the numerics sequences (default auto)")  # fmt: skip
    p.add_argument("--logprobs-max-tokens", type=positive_int, default=None, metavar="N",
                   help="positions scored per numerics sequence at most (default 512)")  # fmt: skip
    p.add_argument("--logprobs-gsm8k", type=count, default=0, metavar="N",
                   help="also score N GSM8K prompts as numerics sequences (more sequences "
                   "for the paired test when there are few scenarios; needs the GSM8K data)")  # fmt: skip
    p.add_argument("--gsm8k", type=count, default=0, metavar="N",
                   help="also record GSM8K answers to the first N test questions (default 0)")  # fmt: skip
    p.add_argument(
        "--gsm8k-data", metavar="PATH", help="GSM8K test.jsonl (default: download, cached)"
    )
    for name in ("request_timeout", "api_key_env", "max_retries", "max_response_bytes"):
        add_argument(p, name)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _error(msg: str, code: int = ExitCode.USAGE_ERROR) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return code


def target_config(args: argparse.Namespace, url: str, label: str) -> TargetConfig:
    """A live side from the shared request options of ``args``."""
    return target_from_options(url, label=label, options=args)


def new_info(args: argparse.Namespace, url: str, label: str) -> RecordingInfo:
    """The settings of a recording made with ``args``."""
    per_round = 0 if getattr(args, "numerics_only", False) else args.repeats
    return RecordingInfo(
        label=label, url=redact_url(url), repeats_per_round=per_round, rounds=args.rounds,
        stream=args.stream, temperature=args.temperature, seed=args.sampling_seed,
        reasoning_history=getattr(args, "reasoning_history", None),
        single_turn=bool(getattr(args, "single_turn", False)), model=args.model,
    )  # fmt: skip


def record_options(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The numerics options (None: not recorded) and the GSM8K options (None: none)."""
    from harness.numerics.run import LogprobsOptions

    numerics = None
    if not args.no_logprobs:
        numerics = LogprobsOptions(api=args.logprobs_api, model=args.model)
        if getattr(args, "logprobs_max_tokens", None):
            numerics.max_tokens = args.logprobs_max_tokens
    n = getattr(args, "gsm8k", 0) or 0
    gsm8k = {"num_questions": n, "data": args.gsm8k_data} if n else None
    return numerics, gsm8k


@contextlib.contextmanager
def _served(
    args: argparse.Namespace, folder: RunFolder, console: Any
) -> Iterator[tuple[str | None, Any]]:
    """The URL to record (``--target``, or the server ``--cmd`` launched into the folder,
    None if it did not boot) and its boot report (None for ``--target``; final once the
    block is left: the server is stopped then)."""
    if args.target:
        yield args.target, None
        return
    with launched_side(args.cmd, folder.path, args) as (url, report):
        yield url, report


def run(args: argparse.Namespace) -> int:
    """``harness record``: one server's runs kept as a recorded baseline; the exit code."""
    stream = stream_mode(args)
    args.stream = "both" if stream == "both" else ("on" if stream else "off")  # as recorded
    args.scenarios = args.scenarios or [default_scenarios()]
    scenarios = load_scenarios(args.scenarios)
    if not scenarios:
        return _error(f"no scenario files in {' '.join(args.scenarios)}")
    if args.single_turn:
        scenarios = [single_turn(s) for s in scenarios]
    if args.numerics_only and args.no_logprobs:
        return _error("--numerics-only records the numerics: drop --no-logprobs")
    problem = (
        launch_problem("--cmd", args.cmd)
        or check_resume(args, scenarios, RESUME_KEYS)
        or _other_kind(args)
    )
    if problem:
        return _error(problem)
    refuse_held_ports(args, args.cmd)  # LaunchError: one line, exit 2
    if args.target:
        down = preflight("target", args.target, args.api_key_env)
        if down:
            return _error(down, ExitCode.INFRA_ERROR)
    console = make_console()
    folder = open_run_folder("record", args, console, scenarios)
    numerics, gsm8k = record_options(args)
    info: RecordingInfo | None = None
    try:
        with _served(args, folder, console) as (url, report):
            if url is not None:
                info = existing_info(folder) or new_info(args, url, args.label)
                info.url = redact_url(url)  # the recording keeps no key (userinfo, ?key=)
                target = target_config(args, url, args.label)
                info = record(
                    scenarios, target, folder, info, log=args.log or _log(report),
                    numerics=numerics, gsm8k=gsm8k, concurrency=args.concurrency or 8,
                    progress=not args.no_progress, extra_sequences=_gsm8k_sequences(args),
                    contract=not args.skip_contract,
                )  # fmt: skip
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (raised as SIGINT)
        resume = resume_command(args, folder.path.name)
        interrupted("record", folder.path, _runs(folder), resume, console)
        print(f"interrupted; resume with: {resume}", file=sys.stderr)
        return interrupted_code(exc)
    boot: dict[str, Any] = {}
    if report is not None:
        boot = boot_summary(report)
        print_side_boot(console, args.label, boot)
        if info is not None:
            info.boot = boot
            if info.side is not None:
                info.side.boot = boot
            save_info(folder, info)
    if info is None:
        return boot_failed("record", folder.path, folder.path, f"the server ({args.label})",
                           boot, console)  # fmt: skip
    code = _done(folder, info, console, args)
    if code == ExitCode.OK and info.boot is not None and info.boot.get("verdict") == "FAIL":
        failed = [c["name"] for c in info.boot.get("checks", []) if c["verdict"] == "FAIL"]
        print(
            f"error: a boot check failed ({', '.join(failed)}; {folder.path}/boot.json): "
            "the recording is kept, but its server did not start as expected",
            file=sys.stderr,
        )
        return ExitCode.REGRESSION
    return code


def _other_kind(args: argparse.Namespace) -> str | None:
    """A ``--resume``/``--run-id`` folder that another command made (never recorded into)."""
    from harness.runfolder import DEFAULT_RESULTS

    name = args.resume or args.run_id
    if not name:
        return None
    folder = RunFolder(Path(args.results or DEFAULT_RESULTS) / name)
    try:
        manifest = folder.manifest()
    except Exception:
        return None
    if manifest is not None and manifest.kind not in (None, "record"):
        return f"{folder.path} was made by harness {manifest.kind}, not record: give a new --run-id"
    return None


def _gsm8k_sequences(args: argparse.Namespace) -> list[Any]:
    """``--logprobs-gsm8k N``: N GSM8K few-shot prompts as extra numerics sequences.

    Raises:
        GSM8KDataError: the GSM8K data cannot be loaded.
    """
    n = getattr(args, "logprobs_gsm8k", 0) or 0
    if not n or args.no_logprobs:
        return []
    from harness.gsm8k.data import load_dataset
    from harness.numerics.sequences import from_gsm8k

    return list(from_gsm8k(load_dataset(args.gsm8k_data).questions, n))


def _runs(folder: RunFolder) -> int:
    """The runs in the folder's transcripts so far."""
    return sum(1 for _ in folder.run_keys_with_offsets()) if folder.transcripts.exists() else 0


def _log(report: Any) -> str | None:
    return report.log_path if report is not None else None


def existing_info(folder: RunFolder) -> RecordingInfo | None:
    """The recording settings a resumed folder was started with, or None."""
    from harness.recording import RECORDING_KEY

    manifest = folder.manifest()
    if manifest is None or RECORDING_KEY not in manifest.extra:
        return None
    return RecordingInfo.model_validate(manifest.extra[RECORDING_KEY])


def _done(folder: RunFolder, info: RecordingInfo, console: Any, args: argparse.Namespace) -> int:
    summary = folder.read_summary() if folder.transcripts.exists() else None
    runs = sum(1 for _ in folder.run_keys_with_offsets()) if summary is not None else 0
    fusion = (info.side.fusion or {}).get("state") if info.side else None
    what = (
        f"{runs} runs of {len(info.scenarios)} scenarios ({info.repeats_per_round} x "
        f"{info.rounds} rounds, stream {info.stream}, temperature {info.temperature})"
        if info.repeats
        else f"numerics only, {len(info.scenarios)} scenarios"
    )
    lines = [
        f"recorded {info.label} ({info.url}, model {info.model or '?'}): {what}; "
        f"fusion {fusion or 'UNKNOWN'}",
        f"  numerics: {info.numerics or 'not recorded (--no-logprobs)'}",
    ]
    if info.gsm8k:
        lines.append(f"  gsm8k: {info.gsm8k.get('num_questions')} questions recorded")
    if info.repeats:
        lines.append(
            f"  compare against it: harness compare --baseline {folder.path} --candidate URL "
            f"(or make compare UNFUSED={folder.path} FUSED=URL)"
        )
    else:
        lines.append(
            f"  compare against it: harness logprobs --baseline {folder.path} --candidate URL"
        )
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if summary is not None:
        write_report_or_warn(folder, console)
    outcome = summary.outcome if summary is not None else None
    if outcome is not None and outcome.infra_limited:
        for line in dominant_error_lines(summary):  # type: ignore[arg-type]
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        print(
            f"error: {folder.path}: too many infrastructure errors in the recorded runs "
            "(more than 20%); a comparison against it would not be judged: record again",
            file=sys.stderr,
        )
        return ExitCode.INFRA_ERROR
    return ExitCode.OK
