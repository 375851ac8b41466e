"""``harness list``: the scenarios, what failure kinds they target, their tools."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from harness.scenario import load_scenarios

HELP = "List scenarios: id, targeted failure kinds, tags, tools, description."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")


def run(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.scenarios or ["scenarios"])
    table = Table(title=f"{len(scenarios)} scenarios")
    widest_id = max((len(sc.id) for sc in scenarios), default=2)
    table.add_column("id", no_wrap=True, min_width=widest_id)
    for col, ratio in (("targets", 2), ("tags", 2), ("tools", 2), ("description", 4)):
        table.add_column(col, overflow="fold", ratio=ratio)
    for sc in scenarios:
        text = sc.description.strip()
        first = text.splitlines()[0] if text else ""
        table.add_row(
            sc.id,
            ", ".join(sc.targets),
            ", ".join(sc.tags),
            ", ".join(t.name for t in sc.tools),
            first.split(". ")[0].rstrip(".") + ".",
        )
    Console().print(table)
    return 0
