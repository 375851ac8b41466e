"""``harness schema``: print the JSON Schema of the scenario format."""

from __future__ import annotations

import argparse
import json

from harness.scenario.model import scenario_json_schema

HELP = "Print the JSON Schema of the scenario file format (for editors)."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness schema``, added to ``p``."""
    p.add_argument(
        "--indent", type=int, default=2, help="spaces per JSON indentation level (default 2)"
    )


def run(args: argparse.Namespace) -> int:
    """``harness schema``: print the scenario format's JSON Schema; exit code 0."""
    print(json.dumps(scenario_json_schema(), indent=args.indent))
    return 0
