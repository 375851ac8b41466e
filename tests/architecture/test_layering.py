"""The layering of ``harness/`` as ARCHITECTURE.md writes it down, checked on the source.

Every import of ``harness.<x>`` (at module level or inside a function, ``TYPE_CHECKING``
included) is an arrow from the importing package to ``<x>``. An arrow to a higher layer
must be one of the named exceptions, every named exception must still exist, and the
arrows without the exceptions must have no circle.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "harness"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"


def layers(text: str) -> dict[str, int]:
    """``{unit: rank}`` from the ```` ```layers ```` block (highest layer first)."""
    m = re.search(r"```layers\n(.*?)```", text, re.S)
    assert m, "ARCHITECTURE.md: no ```layers block under ## Layers"
    rows = [line.split(":", 1)[1].split() for line in m.group(1).strip().splitlines()]
    return {unit: len(rows) - i for i, row in enumerate(rows) for unit in row}


def exceptions(text: str) -> set[tuple[str, str]]:
    """The named upward arrows: the ``| `a` | `b` | why |`` rows of the Layers section."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", section, re.M))


def unit_of(path: Path) -> str | None:
    """The layer unit of a source file: its package or top-level module (None: entry point)."""
    rel = path.relative_to(PACKAGE)
    if rel.name == "__main__.py" or rel == Path("__init__.py"):
        return None
    return rel.parts[0].removesuffix(".py")


def imported(path: Path) -> list[tuple[str, int]]:
    """``(unit, line)`` for every ``harness.<unit>`` the file imports, relative ones resolved."""
    module = list(path.relative_to(ROOT).with_suffix("").parts)
    if module[-1] == "__init__":
        module = module[:-1]
    package = module if path.name == "__init__.py" else module[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names = [".".join([*base, *([node.module] if node.module else [])])]
                if not node.module:  # from . import x, y
                    names = [".".join([*base, a.name]) for a in node.names]
            elif node.module == "harness":  # from harness import pipeline, runner
                names = [f"harness.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "harness" and len(parts) > 1:
                found.append((parts[1], node.lineno))
    return found


def arrows() -> dict[tuple[str, str], list[str]]:
    """``{(from, to): ["file:line", ...]}`` between different units of ``harness/``."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        src = unit_of(path)
        if src is None:
            continue
        for dst, line in imported(path):
            if dst != src:
                out[(src, dst)].append(f"{path.relative_to(ROOT)}:{line}")
    return out


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(set(graph) | {b for _, b in edges}):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def architecture() -> str:
    return ARCHITECTURE.read_text(encoding="utf-8")


def test_every_package_has_a_layer(architecture: str) -> None:
    rank = layers(architecture)
    units = {unit_of(p) for p in PACKAGE.rglob("*.py")} - {None}
    missing = sorted(u for u in units if u not in rank)
    assert not missing, f"ARCHITECTURE.md ## Layers: give these a layer: {missing}"
    gone = sorted(u for u in rank if u not in units)
    assert not gone, f"ARCHITECTURE.md ## Layers names units that do not exist: {gone}"


def test_no_arrow_points_up_but_the_named_ones(architecture: str) -> None:
    rank = layers(architecture)
    allowed = exceptions(architecture)
    up = {e: where for e, where in arrows().items() if rank.get(e[1], 0) > rank.get(e[0], 0)}
    unnamed = {f"{a} -> {b}": where for (a, b), where in up.items() if (a, b) not in allowed}
    assert not unnamed, f"imports from a higher layer (ARCHITECTURE.md ## Layers): {unnamed}"
    stale = sorted(f"{a} -> {b}" for a, b in allowed if (a, b) not in up)
    assert not stale, f"ARCHITECTURE.md ## Layers lists arrows that no longer exist: {stale}"


def test_no_import_circle_outside_the_named_arrows(architecture: str) -> None:
    allowed = exceptions(architecture)
    edges = {e for e in arrows() if e not in allowed}
    assert circles(edges) == []


def test_the_checks_can_fail() -> None:
    """The parsers and the circle finder on hand-made input (a check that cannot fail is none)."""
    text = "## Layers\n```layers\ntop: a\nlow: b c\n```\n| `b` | `a` | why |\n\n## Next\n"
    assert layers(text) == {"a": 2, "b": 1, "c": 1}
    assert exceptions(text) == {("b", "a")}
    assert circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert circles({("a", "b"), ("b", "c")}) == []
