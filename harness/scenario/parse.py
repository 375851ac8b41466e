"""Reading a scenario file's text into plain data, safely: bounded size, depth and expansion.

:func:`parse_text` turns the text of a ``.yaml``/``.yml`` or ``.json`` file into Python
data (``yaml.SafeLoader``; ``json``) and refuses, with a :class:`ScenarioError` naming
the file, the line and the fix, what the format allows but a scenario never needs:

- a file over :data:`MAX_FILE_BYTES`;
- nesting deeper than :data:`MAX_DEPTH` levels (counted with YAML aliases expanded);
- a YAML alias that refers to a node containing it (a recursive anchor), and aliases
  whose expansion exceeds :data:`MAX_NODES` nodes (the "billion laughs" document);
  refused on the node graph, before any object is built;
- a key given twice in one mapping (YAML and JSON: the last would silently win).

The limits are the ones PyYAML leaves to its users (its ``SafeLoader`` builds recursive
and exponentially aliased documents as asked; CVE-2003-1564 describes the expansion
attack); YAML merge keys (``<<``) are allowed and count as their expansion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ScenarioError

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_NODES", "nesting_depth", "parse_text"]

#: the largest scenario file read (bytes)
MAX_FILE_BYTES = 4 * 1024 * 1024
#: the deepest nesting of mappings and lists (the top-level mapping is level 1)
MAX_DEPTH = 64
#: the most YAML nodes a document may hold with its aliases expanded
MAX_NODES = 200_000


class _Refused(Exception):
    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(reason)
        self.line, self.reason = line, reason


#: libyaml's parser when PyYAML has it (about 5 times faster), else the pure-Python one
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE):  # type: ignore[misc]
    """``SafeLoader`` (libyaml's when present) that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise _Refused(
                        key_node.start_mark.line + 1,
                        f"key {key_node.value!r} is given twice in one mapping; keep one",
                    )
                seen.add(key_node.value)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _check_graph(root: yaml.Node) -> None:
    """Refuse recursive aliases, a deep or over-expanding document (iterative DFS over the
    node graph: each node's size and depth with aliases expanded, memoised)."""
    done: dict[int, tuple[int, int]] = {}
    path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        kids = _children(node)
        if finished:
            size = 1 + sum(done[id(k)][0] for k in kids)
            depth = (0 if not kids else 1) + max((done[id(k)][1] for k in kids), default=0)
            if size > MAX_NODES:
                raise _Refused(_line(node), f"aliases expand to more than {MAX_NODES:,} nodes; "
                               "write the values out or use fewer aliases")  # fmt: skip
            if depth > MAX_DEPTH:
                raise _Refused(_line(node), f"nested deeper than {MAX_DEPTH} levels; flatten it")
            done[id(node)] = (size, depth)
            path.discard(id(node))
            continue
        if id(node) in done:
            continue
        path.add(id(node))
        stack.append((node, True))
        for kid in kids:
            if id(kid) in path:
                raise _Refused(_line(kid), "an alias refers to a node that contains it "
                               "(a recursive anchor); remove the alias")  # fmt: skip
            if id(kid) not in done:
                stack.append((kid, False))


def _load_yaml(text: str) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    finally:
        getattr(loader, "dispose", lambda: None)()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(None, f"key {key!r} is given twice in one object; keep one")
        out[key] = value
    return out


def nesting_depth(data: Any, limit: int = MAX_DEPTH) -> int:
    """The nesting depth of JSON data (iterative: no recursion limit); counted up to
    ``limit`` + 1, which any deeper data gives."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        items = value.values() if isinstance(value, dict) else value
        if isinstance(value, (dict, list)):
            deepest = max(deepest, level)
            if level <= limit:
                stack.extend((v, level + 1) for v in items)
    return deepest


def _load_json(text: str) -> Any:
    data = json.loads(text, object_pairs_hook=_no_duplicates)
    if nesting_depth(data) > MAX_DEPTH:
        raise _Refused(None, f"nested deeper than {MAX_DEPTH} levels; flatten it")
    return data


def parse_text(text: str, path: Path) -> Any:
    """The data of a scenario file's ``text`` (JSON when ``path`` ends in ``.json``, else
    YAML), within the limits of the module docstring.

    Raises:
        ScenarioError: not valid YAML/JSON, or over a limit (``path``, the line, the fix).
    """
    fmt = "JSON" if path.suffix == ".json" else "YAML"
    if len(text) > MAX_FILE_BYTES:
        raise ScenarioError(path, "", f"larger than {MAX_FILE_BYTES:,} bytes; split the file")
    try:
        return _load_json(text) if fmt == "JSON" else _load_yaml(text)
    except _Refused as exc:
        raise ScenarioError(path, f"line {exc.line}" if exc.line else "", exc.reason) from None
    except RecursionError:
        raise ScenarioError(
            path, "", f"nested deeper than {MAX_DEPTH} levels; flatten it"
        ) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        line = getattr(exc, "lineno", None) if line is None else line + 1
        where = f"line {line}" if line else ""
        reason = getattr(exc, "problem", None) or getattr(exc, "msg", None) or str(exc)
        if "nesting depth" in reason:  # libyaml's own limit (1,000 levels)
            reason = f"nested deeper than {MAX_DEPTH} levels; flatten it"
        else:
            reason = f"not valid {fmt}: {reason}"
        raise ScenarioError(path, where, reason) from None
