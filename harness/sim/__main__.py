"""``python -m harness.sim [options]``: ``harness sim`` without loading the other commands.

Same options and exit codes as ``harness sim`` (see :mod:`harness.cli.sim`);
starts faster because the other sub-commands (and scipy) are not imported.
"""

from __future__ import annotations

import argparse
import sys

from harness.cli import sim


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.sim``: the ``harness sim`` command alone; the exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness.sim", description=sim.HELP)
    sim.add_arguments(parser)
    return sim.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
