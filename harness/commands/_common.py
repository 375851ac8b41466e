"""Argument helpers shared by several sub-commands."""

from __future__ import annotations

import argparse

from harness.runner import StreamMode

_MODES: dict[str, StreamMode] = {
    "both": "both",
    "on": True,
    "true": True,
    "off": False,
    "false": False,
}


def add_stream_argument(p: argparse.ArgumentParser) -> None:
    """``--stream`` (stream), ``--stream both`` (each scenario both ways), ``--stream off``."""
    p.add_argument(
        "--stream",
        nargs="?",
        const="on",
        default="off",
        metavar="both",
        help="stream responses (SSE); `--stream both` runs each scenario both ways",
    )


def stream_mode(args: argparse.Namespace) -> StreamMode:
    """The ``--stream`` value as a runner mode.

    A value that is not a mode is a scenario path that followed a bare ``--stream``
    (``harness run --stream scenarios/``): it is moved back to ``args.scenarios``.
    """
    value = str(args.stream)
    if value.lower() in _MODES:
        return _MODES[value.lower()]
    args.scenarios = [value, *(args.scenarios or [])]
    return True
