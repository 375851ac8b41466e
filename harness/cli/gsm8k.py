"""``harness gsm8k``: GSM8K few-shot accuracy of a server, or paired against a baseline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.cli import ExitCode
from harness.cli._common import gsm8k_exit_code, write_report_or_warn
from harness.client.target import target_from_options
from harness.errors import RecordingError
from harness.gsm8k.data import GSM8KDataError
from harness.gsm8k.run import GSM8K_TIMEOUT_S, compare_gsm8k, run_gsm8k
from harness.options import add_argument, positive_int, rate
from harness.present.checks import render_gsm8k
from harness.present.console import make_console
from harness.recording import RecordedSide, Recording, is_recording_ref
from harness.runfolder import DEFAULT_RESULTS, RunFolder, check_run_id, new_run_id

HELP = (
    "GSM8K few-shot accuracy (SGLang's benchmark format) of --target; with --baseline, "
    "a paired comparison (McNemar's exact test) and a verdict."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness gsm8k``, added to ``p``."""
    add_argument(p, "target", required=True)
    add_argument(
        p, "baseline",
        help="the baseline server's URL, or a recording with GSM8K answers (harness record "
        "--gsm8k N): enables the paired comparison",
    )  # fmt: skip
    p.add_argument(
        "--target-label", default=None, help="label of --target (default target/candidate)"
    )
    p.add_argument(
        "--baseline-label", default="baseline", help="name shown for --baseline (default baseline)"
    )
    p.add_argument(
        "--num-questions",
        "--gsm8k-questions",
        type=int,
        default=500,
        help="first N test questions (500)",
    )
    p.add_argument(
        "--num-shots", "--gsm8k-shots", type=int, default=5, help="few-shot examples (5)"
    )
    p.add_argument(
        "--parallel", type=positive_int, default=64, help="requests in flight per server (64)"
    )
    p.add_argument(
        "--api",
        choices=["completions", "chat"],
        default="completions",
        help="completions: SGLang's few-shot prompt via /v1/completions (default); "
        "chat: the same shots as chat turns via /v1/chat/completions",
    )
    p.add_argument(
        "--data", "--gsm8k-data", help="GSM8K jsonl (default: download the official test split)"
    )
    p.add_argument("--exclude-shots", action="store_true", help="do not ask/score the shots")
    add_argument(p, "model")
    p.add_argument(
        "--max-tokens", type=int, default=512, help="new tokens per answer (default 512)"
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="level of the one-sided McNemar test for REGRESSION (default 0.05)",
    )
    p.add_argument(
        "--margin",
        type=rate,
        default=0.02,
        metavar="DROP",
        help="INCONCLUSIVE while the interval still admits an accuracy drop larger than "
        "DROP (default 0.02: 2 points)",
    )
    p.add_argument("--strict", action="store_true", help="exit 1 on INCONCLUSIVE too (CI)")
    add_argument(p, "results")
    p.add_argument(
        "--run-id", default=None, help="name of the run folder (default: gsm8k-<time>-<pid>)"
    )
    add_argument(p, "api_key_env")
    add_argument(  # an answer of 512 tokens takes longer than one turn of a scenario
        p,
        "request_timeout",
        default=GSM8K_TIMEOUT_S,
        help=f"per-request timeout in seconds (default {GSM8K_TIMEOUT_S:g})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check(args: argparse.Namespace) -> str | None:
    for name in ("num_questions", "parallel", "max_tokens"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if args.num_shots < 0:
        return "--num-shots must be 0 or more"
    if args.exclude_shots and args.num_shots >= args.num_questions:
        return "--exclude-shots leaves no question: raise --num-questions above --num-shots"
    if not 0 < args.alpha < 1:
        return "--alpha must be between 0 and 1"
    return None


def run(args: argparse.Namespace) -> int:
    """``harness gsm8k``: the GSM8K questions against the target (and the baseline, paired); the
    exit code."""
    problem = _check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    root = Path(args.results) if args.results else DEFAULT_RESULTS
    folder = RunFolder(root / check_run_id(args.run_id or new_run_id("gsm8k")))
    if args.run_id and folder.path.exists():
        print(
            f"error: {folder.path} exists and a GSM8K run is not resumed; "
            "give a new --run-id (or none)",
            file=sys.stderr,
        )
        return ExitCode.USAGE_ERROR
    console = make_console()
    console.print(f"run folder: {folder.path}", markup=False, highlight=False, soft_wrap=True)
    args.run_id = folder.path.name
    options = {
        "data": args.data, "num_questions": args.num_questions, "num_shots": args.num_shots,
        "parallel": args.parallel, "api": args.api, "exclude_shots": args.exclude_shots,
        "max_tokens": args.max_tokens, "alpha": args.alpha, "margin": args.margin,
        "results": args.results,
        "run_id": args.run_id, "progress": not args.no_progress,
    }  # fmt: skip
    try:
        if args.baseline:
            base: Any = target_from_options(args.baseline, label=args.baseline_label, options=args)
            if is_recording_ref(args.baseline):  # its recorded answers (harness record --gsm8k)
                base = RecordedSide(Recording.open(args.baseline), args.baseline_label)
            cand = target_from_options(
                args.target, label=args.target_label or "candidate", options=args
            )
            summary = compare_gsm8k(base, cand, **options)
        else:
            target = target_from_options(
                args.target, label=args.target_label or "target", options=args
            )
            summary = run_gsm8k(target, **options)
    except (GSM8KDataError, RecordingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    render_gsm8k(summary, console)
    console.print(f"results: {folder.file(RunFolder.GSM8K_SUMMARY)}", markup=False, highlight=False)
    write_report_or_warn(folder, console)
    return gsm8k_exit_code(summary, strict=args.strict)
