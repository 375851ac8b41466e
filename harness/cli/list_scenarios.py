"""``harness list``: the scenarios, what failure kinds they target, their tools.

``harness list --kinds`` prints the failure-kind vocabulary instead
(:class:`harness.kinds.FailureKind`: name, family, label, description): the names a
scenario's ``targets:`` may use and what the tables and the report call them.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.cli import ExitCode
from harness.kinds import FailureKind, plural
from harness.present.console import make_console
from harness.scenario.library import default_scenarios
from harness.scenario.model import load_scenarios
from harness.scenario.suites import registered_suites, suite_of_spec

HELP = "List scenarios (id, targeted failure kinds, tools, tags); --kinds: the failure kinds."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness list``, added to ``p``."""
    p.add_argument(
        "scenarios",
        nargs="*",
        help="scenario files or folders (default: ./scenarios, else the shipped library)",
    )
    p.add_argument(
        "--kinds",
        action="store_true",
        help="list the failure kinds instead (name, family, label, description): "
        "the names a scenario's targets: may use",
    )


def kinds_table() -> Table:
    """Every :class:`~harness.kinds.FailureKind`, in family order, as a rich table
    (cells are plain text: ``[TOOL_CALLS]`` in a description is not markup)."""
    table = Table(title=f"{len(FailureKind)} failure kinds")
    table.add_column("name", no_wrap=True)
    table.add_column("family", no_wrap=True)
    table.add_column("label", ratio=2)
    table.add_column("description", ratio=3)
    for kind in FailureKind:
        cells = (kind.value, kind.family.value, kind.label, kind.description)
        table.add_row(*(Text(c) for c in cells))
    return table


def scenarios_table(console: Console, paths: list[str]) -> Table:
    """One row per scenario: id, targets, tools (and tags, description when wide).

    Raises:
        ScenarioError: a scenario file that cannot be used.
    """
    scenarios = load_scenarios(paths)
    wide = console.width >= 140  # tags and descriptions only where they fit
    title = plural(len(scenarios), "scenario") + f" ({', '.join(paths)})"
    table = Table(title=title, show_lines=not wide)
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
    return table


def suites_tables(paths: list[str], *, every: bool) -> list[Table]:
    """One table per registered suite (:mod:`harness.scenario.suites`): of the suite's specs
    among ``paths``, or, with ``every`` (no path given), of what each suite offers."""
    tables = []
    for suite in registered_suites().values():
        named = [p for p in paths if suite_of_spec(p) is suite]
        if not named and not every:
            continue
        listing = suite.listing(named)
        table = Table(title=listing.title, caption=listing.caption)
        for i, col in enumerate(listing.columns):
            table.add_column(col, no_wrap=i == 0, justify="left" if i == 0 else "right")
        for row in listing.rows:
            table.add_row(*row)
        tables.append(table)
    return tables


def run(args: argparse.Namespace) -> int:
    """``harness list``: the scenarios' table, or the failure kinds with ``--kinds``; the exit
    code."""
    if args.kinds and args.scenarios:
        print("error: --kinds lists the vocabulary; give it no scenario files", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    console = make_console()
    paths = args.scenarios or [default_scenarios()]
    console.print(kinds_table() if args.kinds else scenarios_table(console, paths))
    if not args.kinds:
        for table in suites_tables(paths, every=not args.scenarios):
            console.print(table)
    return ExitCode.OK
