"""Argument drift: how one tool call's arguments differ from what the tool wants.

Pure functions of a parsed arguments object, the tool's JSON Schema (``parameters``) and,
when known, the reference value (the scenario's expected arguments or an earlier value
of the same argument in the run). Used by :mod:`harness.scoring.score`.

What it finds: the ``drift`` family of :class:`harness.kinds.FailureKind` (names, labels
and meanings live there), one finding per argument path, the most specific first: a
type drift (a container or scalar sent as a string, a string decoded as a scalar, an
integer sent as a float), then a collapse where the reference is not collapsed, a value
outside the schema's ``enum``, and inside objects the keys dropped or not declared.
A top-level key with none of these whose value the scenario's matcher rejects is a
``value_mismatch``. Each finding carries a phrase for the reader (``"array sent as a
string"``, ``"values collapsed to zeros"``).

Matcher semantics are those of :class:`harness.scenario.model.ArgMatcher`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.kinds import FailureKind
from harness.scenario.model import ArgMatcher

__all__ = [
    "Drift",
    "canonical_json",
    "excerpt",
    "find_drift",
    "is_collapsed",
    "json_type",
    "matcher_accepts",
]

_CONTAINERS = {"array", "object"}
_SCALARS = {"number", "integer", "boolean", "null"}


@dataclass(frozen=True)
class Drift:
    """One drifted argument: ``kind`` (a drift-family :class:`~harness.kinds.FailureKind`),
    ``path`` (``values``, ``a[1].b``), ``phrase``, and the received / reference values
    (Python objects; ``expected`` may be absent)."""

    kind: FailureKind
    path: str
    phrase: str
    value: Any
    expected: Any = None
    has_expected: bool = False


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys (the identity used for repeated identical calls)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def excerpt(value: Any, limit: int = 120) -> str:
    """JSON text of ``value`` (strings of raw text as they are), cut to ``limit`` chars."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    """The JSON type name of a Python value (``integer`` for ints, ``number`` for floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "unknown"


def _schema_types(schema: dict[str, Any] | None) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    out: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            out |= _schema_types(sub)
    return out


def is_collapsed(value: Any) -> bool:
    """``0``, ``""``, ``null``, ``[]``, ``{}``, or an array of only such scalars."""
    if value is None or value == "" or value == [] or value == {}:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    if isinstance(value, list):
        return all(
            v is None
            or v == ""
            or (isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0)
            for v in value
        )
    return False


def _collapse_phrase(value: Any) -> str:
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return "values collapsed to empty strings"
        if all(v is None for v in value):
            return "values collapsed to nulls"
        return "values collapsed to zeros"
    return f"value collapsed to {json.dumps(value)}"


def _parse_json_string(value: str) -> Any:
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return _MISSING


_MISSING = object()


def _scalar_in_string(value: str, wanted: set[str]) -> str | None:
    parsed = _parse_json_string(value.strip())
    if parsed is _MISSING:
        return None
    t = json_type(parsed)
    if t == "integer" and ("integer" in wanted or "number" in wanted):
        return "number"
    if t == "number" and "number" in wanted:
        return "number"
    if t in ("boolean", "null") and t in wanted:
        return t
    return None


def _type_drift(
    path: str, value: Any, schema: dict[str, Any] | None, ref: Any, has_ref: bool
) -> Drift | None:
    wanted = _schema_types(schema)
    if not wanted and has_ref:
        wanted = {json_type(ref)} | ({"number"} if json_type(ref) == "integer" else set())
    if isinstance(value, str) and "string" not in wanted:
        if wanted & _CONTAINERS:
            parsed = _parse_json_string(value.strip())
            if isinstance(parsed, (list, dict)) or value.strip()[:1] in ("[", "{"):
                shape = (
                    "array" if isinstance(parsed, list) or value.strip()[:1] == "[" else "object"
                )
                phrase = f"{shape} sent as a string"
                return Drift(FailureKind.CONTAINER_AS_STRING, path, phrase, value, ref, has_ref)
        scalar = _scalar_in_string(value, wanted) if wanted & _SCALARS else None
        if scalar is not None:
            return Drift(
                FailureKind.SCALAR_AS_STRING,
                path,
                f"{scalar} sent as a string",
                value,
                ref,
                has_ref,
            )
    if "string" in wanted and not wanted & _SCALARS and json_type(value) in _SCALARS:
        phrase = f"string sent as {json_type(value)}"
        return Drift(FailureKind.STRING_AS_SCALAR, path, phrase, value, ref, has_ref)
    if (
        isinstance(value, float)
        and "integer" in wanted
        and "number" not in wanted
        and math.isfinite(value)
        and value == int(value)
    ):
        return Drift(FailureKind.INT_AS_FLOAT, path, "integer sent as a float", value, ref, has_ref)
    return None


def _walk(
    path: str, value: Any, schema: dict[str, Any] | None, ref: Any, has_ref: bool
) -> Iterator[Drift]:
    """Findings for ``value`` at ``path`` and below (one per path at most)."""
    found = _type_drift(path, value, schema, ref, has_ref)
    if found is not None:
        yield found
        return
    if has_ref and is_collapsed(value) and not is_collapsed(ref):
        yield Drift(FailureKind.COLLAPSE, path, _collapse_phrase(value), value, ref, True)
        return
    if isinstance(schema, dict) and "enum" in schema and value not in schema["enum"]:
        yield Drift(
            FailureKind.ENUM_VIOLATION,
            path,
            f"{excerpt(value)} is not one of the allowed values",
            value,
            schema["enum"],
            True,
        )
        return
    if isinstance(value, dict):
        yield from _walk_object(path, value, schema, ref if isinstance(ref, dict) else None)
    elif isinstance(value, list) and isinstance(schema, dict):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        refs = ref if isinstance(ref, list) and len(ref) == len(value) else None
        for i, item in enumerate(value):
            yield from _walk(
                f"{path}[{i}]", item, items, refs[i] if refs else None, refs is not None
            )


def _walk_object(
    path: str, value: dict[str, Any], schema: dict[str, Any] | None, ref: dict[str, Any] | None
) -> Iterator[Drift]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}
    required = list(schema.get("required") or []) if isinstance(schema, dict) else []
    wanted_keys = dict.fromkeys([*required, *(ref or {})])
    for key in wanted_keys:
        if key not in value:
            exp = (ref or {}).get(key)
            yield Drift(
                FailureKind.DROPPED_KEYS,
                _join(path, key),
                f"key {key!r} dropped",
                None,
                exp,
                ref is not None and key in ref,
            )
    extra = (schema or {}).get("additionalProperties")
    closed = (bool(props) or extra is False) and extra is not True
    for key, item in value.items():
        sub = props.get(key) if isinstance(props.get(key), dict) else None
        if closed and key not in props and key not in (ref or {}):
            yield Drift(
                FailureKind.UNEXPECTED_KEYS, _join(path, key), f"unexpected key {key!r}", item
            )
            continue
        has = ref is not None and key in ref
        yield from _walk(_join(path, key), item, sub, (ref or {}).get(key), has)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def matcher_accepts(matcher: ArgMatcher, value: Any) -> bool:
    """Whether ``value`` satisfies ``matcher`` (see :class:`harness.scenario.model.ArgMatcher`)."""
    if matcher.any is not None:
        return True
    if matcher.type is not None:
        t = json_type(value)
        return t == matcher.type or (matcher.type == "number" and t == "integer")
    if matcher.approx is not None:
        return _approx(value, matcher.approx, matcher.tol)
    if matcher.regex is not None:
        return isinstance(value, str) and re.fullmatch(matcher.regex, value) is not None
    return _equal(value, matcher.equals)


def _approx(value: Any, target: float | list[float], tol: float) -> bool:
    if isinstance(target, list):
        return (
            isinstance(value, list)
            and len(value) == len(target)
            and all(_approx(v, t, tol) for v, t in zip(value, target, strict=True))
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(float(value) - float(target)) <= tol


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: booleans never equal numbers; ``1 == 1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return (
        type(a) is type(b)
        and a == b
        or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)
    )


def find_drift(
    args: dict[str, Any],
    schema: dict[str, Any] | None,
    reference: dict[str, Any] | None = None,
    matchers: dict[str, ArgMatcher] | None = None,
) -> list[Drift]:
    """All drift findings of one call's parsed ``args``.

    ``reference``: the reference arguments (expected call or an earlier value), keys absent
    when unknown. ``matchers``: explicit matchers per top-level key; a key of
    ``reference`` without a matcher must equal it. ``value_mismatch`` is reported for
    keys with no more specific finding.
    """
    found = list(_walk_object("", args, schema, reference))
    flagged = {d.path.split("[")[0].split(".")[0] for d in found}
    checks: dict[str, ArgMatcher] = {k: ArgMatcher(equals=v) for k, v in (reference or {}).items()}
    checks.update(matchers or {})
    for key, matcher in checks.items():
        if key in flagged or key not in args:
            continue
        if not matcher_accepts(matcher, args[key]):
            exp = (
                matcher.model_dump(exclude_defaults=True)
                if key in (matchers or {})
                else checks[key].equals
            )
            found.append(
                Drift(
                    FailureKind.VALUE_MISMATCH,
                    key,
                    "value differs from the expected",
                    args[key],
                    exp,
                    True,
                )
            )
    return found
