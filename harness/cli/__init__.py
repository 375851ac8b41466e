"""The ``harness`` command line: one sub-command per module in ``harness.cli``.

Each command module defines ``HELP: str``, ``add_arguments(parser)`` and
``run(args) -> int``. ``main(argv) -> int`` is both the console script and the
Python API (as ``pytest.main`` is).

Exit codes (:class:`ExitCode`): 0 no regression / success, 1 regression or check
failed, 2 usage or configuration error, 3 too many infrastructure errors to judge.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from harness._version import describe

__all__ = ["COMMANDS", "ExitCode", "catch_sigterm", "interrupted_code", "main"]


class ExitCode(IntEnum):
    """The command line's exit codes: 0 passed, 1 regression, 2 usage error, 3 infrastructure
    error."""

    OK = 0
    REGRESSION = 1
    USAGE_ERROR = 2
    INFRA_ERROR = 3


#: sub-command name -> module (imported lazily so ``harness --help`` stays fast)
COMMANDS: dict[str, str] = {
    "run": "harness.cli.run",
    "sim": "harness.cli.sim",
    "compare": "harness.cli.compare",
    "record": "harness.cli.record",
    "logprobs": "harness.cli.logprobs",
    "score": "harness.cli.score",
    "gsm8k": "harness.cli.gsm8k",
    "boot": "harness.cli.boot",
    "report": "harness.cli.report",
    "matrix": "harness.cli.matrix",
    "list": "harness.cli.list_scenarios",
    "schema": "harness.cli.schema",
    "import": "harness.cli.import_",
}


def _parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """Build the parser; with ``only``, import just that command's module (fast start)."""
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Correctness regression harness for multi-turn tool calling.",
    )
    parser.add_argument("--version", action="version", version=f"harness {describe()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, object] = {}
    for name, modname in COMMANDS.items():
        if only is not None and name != only:
            continue
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        modules[name] = mod
    return parser, modules


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see :class:`ExitCode`).

    A :class:`harness.errors.HarnessError` that reaches here is printed as one line
    (``error: ...``): exit 3 for a server that failed (``RequestFailed``), else 2.
    """
    from harness.errors import HarnessError, RequestFailed

    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser, modules = _parser(first if first in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (exit 2) or --help: returned, as pytest.main does
        return int(exc.code or 0) if not isinstance(exc.code, str) else ExitCode.USAGE_ERROR
    if not args.command:
        parser.print_help()
        return ExitCode.USAGE_ERROR
    args.argv = argv  # the command line as given (resume hints repeat it)
    previous = catch_sigterm() if args.command != "sim" else None  # uvicorn handles its own
    try:
        return int(modules[args.command].run(args))  # type: ignore[attr-defined]
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.INFRA_ERROR if isinstance(exc, RequestFailed) else ExitCode.USAGE_ERROR
    except KeyboardInterrupt as exc:
        print("interrupted", file=sys.stderr)
        return interrupted_code(exc)
    except BrokenPipeError:  # `harness ... | head`: the reader left; say nothing more
        # the recipe of https://docs.python.org/3/library/signal.html#note-on-sigpipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # as a shell reports a process ended by SIGPIPE
    finally:
        from harness.runfolder import release_locks

        release_locks()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


#: whether the interruption of the running command was a SIGTERM (see :func:`_on_sigterm`)
_TERMINATED = [False]


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: SIGINT is raised, so the command stops as it does on Ctrl-C
    (``asyncio.run`` cancels its main task, then ``KeyboardInterrupt``) and prints the
    same resume hint; :func:`interrupted_code` then says 143."""
    _TERMINATED[0] = True
    signal.raise_signal(signal.SIGINT)


def catch_sigterm() -> Any:
    """Route SIGTERM to :func:`_on_sigterm` (main thread only); the handler it replaced.

    Also for a driver that calls :func:`main` step by step (``e2e/driver.py``): a SIGTERM
    between steps is then a ``KeyboardInterrupt`` too, and :func:`interrupted_code` 143."""
    _TERMINATED[0] = False
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # inherited as ignored (a background job of a script, as CI runners start
        # commands): the SIGINT that a SIGTERM raises would do nothing, and the command
        # would run on; Python's own handler, so it stops as on Ctrl-C
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return signal.signal(signal.SIGTERM, _on_sigterm)


def interrupted_code(exc: BaseException) -> int:
    """The exit code of a command stopped by ``exc`` (a ``KeyboardInterrupt``): 143
    (128 + SIGTERM) after a SIGTERM, else 130 (128 + SIGINT), as a shell reports them."""
    return 128 + (signal.SIGTERM if _TERMINATED[0] else signal.SIGINT)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
