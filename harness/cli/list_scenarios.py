"""``harness list``: the scenarios, what failure kinds they target, their tools."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from harness.scenario.model import load_scenarios

HELP = "List scenarios: id, targeted failure kinds, tags, tools, description."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")


def run(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.scenarios or ["scenarios"])
    console = Console()
    wide = console.width >= 140  # tags and descriptions only where they fit
    table = Table(title=f"{len(scenarios)} scenarios", show_lines=not wide)
    widest_id = max((len(sc.id) for sc in scenarios), default=2)
    table.add_column("id", no_wrap=True, min_width=widest_id)
    table.add_column("targets (failure kinds)", ratio=3)
    table.add_column("tools", ratio=2)
    if wide:
        table.add_column("tags", ratio=2)
        table.add_column("description", ratio=4, overflow="ellipsis")
    for sc in scenarios:
        text = " ".join(sc.description.split())
        row = [sc.id, ", ".join(sc.targets), ", ".join(t.name for t in sc.tools)]
        if wide:
            row += [", ".join(sc.tags), text.split(". ")[0].rstrip(".") + "."]
        table.add_row(*row)
    console.print(table)
    return 0
