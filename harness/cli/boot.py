r"""``harness boot``: launch a server (or check a running one) and judge its start.

Examples::

    harness boot --cmd "python -m sglang.launch_server --model-path M --port 30000 \
        --enable-return-routed-experts" --probe routed-experts --boot-timeout 1800 \
        --forbid-log "Shared experts fusion optimization is disabled"
    harness boot --target http://127.0.0.1:30000 --log server.log --expect-fusion on

The run folder (``boot.json``, ``server.log``, the report) is printed as soon as it
exists, before the server is launched, so a killed boot can be found.

Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from harness.cli import ExitCode
from harness.cli._common import recorded_args, write_report_or_warn
from harness.options import add_argument, http_url
from harness.present.checks import print_boot
from harness.present.console import make_console
from harness.redaction import redact_text
from harness.runfolder import RunFolder
from harness.server.boot import boot, check_running, refuse_held_port
from harness.server.experts import MoeShape, load_model_config, moe_shape_from_config
from harness.server.process import resolve_command, url_from_command

HELP = "Launch a server command (or check a running server): health, log, fusion, routed experts."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness boot``, added to ``p``."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--cmd", "--boot-cmd", help="server launch command (split like a shell, no shell)"
    )
    add_argument(src, "target", help="check a server already running at URL")
    p.add_argument(
        "--log", "--boot-log", metavar="FILE", help="with --target: the server's log to scan"
    )
    p.add_argument(
        "--url",
        type=http_url,
        help="with --cmd: where the server answers (else --port or its log)",
    )
    p.add_argument(
        "--expect-log",
        action="append",
        default=[],
        metavar="REGEX",
        help="a log line must match (repeatable)",
    )
    p.add_argument(
        "--forbid-log",
        action="append",
        default=[],
        metavar="REGEX",
        help="no log line may match (repeatable)",
    )
    p.add_argument(
        "--ignore-error",
        action="append",
        default=[],
        metavar="REGEX",
        help="a traceback or CUDA/HIP error line matching this is not a failure (repeatable)",
    )
    add_argument(p, "boot_timeout")
    p.add_argument(
        "--health-path",
        default="/health",
        help="health endpoint polled until it answers 200 (default /health; 503 = starting)",
    )
    p.add_argument("--probe", choices=["routed-experts"], help="also run this probe")
    p.add_argument(
        "--probe-endpoint",
        choices=["generate", "chat", "completions"],
        default="generate",
        help="endpoint of the routed-experts probe",
    )
    p.add_argument(
        "--expect-fusion",
        choices=["on", "off"],
        help="FAIL unless shared-experts fusion is in this state",
    )
    p.add_argument("--model-config", metavar="FILE", help="HF config.json giving the MoE geometry")
    p.add_argument(
        "--num-layers",
        type=int,
        help="MoE geometry (else the config.json of the launch command's or the server's model)",
    )
    p.add_argument("--top-k", type=int, help="experts per token (num_experts_per_tok)")
    p.add_argument("--num-experts", type=int, help="routed experts (n_routed_experts)")
    p.add_argument("--dense-layers", default="", help="comma-separated dense layer indices")
    add_argument(p, "results")


def _shape(args: argparse.Namespace) -> MoeShape | None | str:
    """The MoE geometry from flags or ``--model-config``; a str is a usage error."""
    given = [args.num_layers, args.top_k, args.num_experts]
    if args.model_config and not any(v is not None for v in given):
        shape = moe_shape_from_config(
            load_model_config(args.model_config), source=args.model_config
        )
        if shape is None:
            return (
                f"--model-config {args.model_config}: not a readable config.json with "
                "num_hidden_layers, num_experts_per_tok and n_routed_experts"
            )
        return shape
    if not any(v is not None for v in given):
        return None
    if any(v is None for v in given):
        return "--num-layers, --top-k and --num-experts go together: give all three"
    try:
        dense = [int(x) for x in args.dense_layers.split(",") if x.strip()]
    except ValueError:
        return f"--dense-layers {args.dense_layers!r}: expected comma-separated integers"
    return MoeShape(
        num_layers=args.num_layers,
        top_k=args.top_k,
        num_routed_experts=args.num_experts,
        dense_layers=dense,
        source="flags",
    )


def _usage_error(args: argparse.Namespace) -> str | None:
    for flag, rxs in (
        ("--expect-log", args.expect_log),
        ("--forbid-log", args.forbid_log),
        ("--ignore-error", args.ignore_error),
    ):
        for rx in rxs:
            try:
                re.compile(rx)
            except re.error as exc:
                return f"{flag} {rx!r}: invalid regular expression ({exc}); fix the pattern"
    if args.url and args.target:
        return "--url goes with --cmd (with --target the URL is the target)"
    if args.cmd is not None:
        try:
            argv = shlex.split(args.cmd)
        except ValueError as exc:
            return f"--cmd {args.cmd!r}: cannot split it ({exc}); check the quotes"
        if not argv:
            return "--cmd is empty: give the server launch command"
        try:
            resolve_command(argv)
        except FileNotFoundError as exc:
            return f"--cmd: {exc}"
    if args.log and not args.target:
        return "--log goes with --target (with --cmd the log is captured to server.log)"
    if args.log and not Path(args.log).is_file():
        return f"--log {args.log}: no such file"
    return None


def run(args: argparse.Namespace) -> int:
    """``harness boot``: launch or reach the server, run the boot checks, write boot.json; the exit
    code."""
    problem = _usage_error(args)
    shape = _shape(args)
    if isinstance(shape, str):
        problem = problem or shape
    if problem:
        print(f"error: {redact_text(problem)}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    if args.cmd:  # a port that already answers: LaunchError, one line, exit 2
        refuse_held_port(args.url or url_from_command(shlex.split(args.cmd)))
    opts: dict[str, Any] = {"endpoint": args.probe_endpoint}
    if isinstance(shape, MoeShape):
        opts["shape"] = shape
    folder = RunFolder.create("boot", results=args.results, args=recorded_args(args))
    print(f"run folder: {folder.path}", flush=True)
    common: dict[str, Any] = dict(
        expect_log=args.expect_log,
        forbid_log=args.forbid_log,
        probe=args.probe,
        run_dir=folder.path,
        health_path=args.health_path,
        expect_fusion=args.expect_fusion,
        probe_opts=opts,
        ignore_errors=args.ignore_error,
    )
    if args.cmd:
        report = boot(args.cmd, timeout_s=args.boot_timeout, url=args.url, **common)
    else:
        report = check_running(args.target, log_path=args.log, **common)
    print_boot(report)
    print(f"results: {folder.path}")
    write_report_or_warn(folder, make_console())
    return ExitCode.REGRESSION if report.verdict == "FAIL" else ExitCode.OK
