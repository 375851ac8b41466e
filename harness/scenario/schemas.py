"""Tool parameter schemas, compiled one way everywhere: nothing fetched, patterns in linear time.

Every place that checks arguments against a tool's JSON Schema (scenario loading, the
tool simulators, scoring, the single-turn figures) gets its validator from
:func:`validator`, a Draft 2020-12 validator with two changes:

- ``$ref`` resolves inside the schema only: the validator's ``referencing`` registry has
  a retrieve function that refuses (:func:`_refuse`), so a URL is never fetched
  (jsonschema's default still retrieves remote references over the network);
- ``pattern``, ``patternProperties`` and ``additionalProperties`` match with RE2
  (``google-re2``: no backtracking, time linear in the input), so a pattern such as
  ``^(a+)+$`` cannot take exponential time on a model's argument and block the event loop.

:func:`schema_problem` is the load-time check (a ``$ref`` that is not local, a pattern
RE2 cannot run): a scenario with one is refused in one line (file, field, fix), so a
pattern check can never overrun during a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

import jsonschema
import re2
import referencing
import referencing.exceptions
from jsonschema import ValidationError

__all__ = ["schema_problem", "validator"]

#: keys whose values are data, not subschemas (a ``$ref`` in them is not a reference)
_DATA_KEYS = {"default", "const", "enum", "examples"}
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 cannot compile is reported once, by us


def _refuse(uri: str) -> referencing.Resource[Any]:
    """The registry's retrieve function: never fetch (a URL, a file, anything)."""
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


@lru_cache(maxsize=512)
def _re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (raises ``re2.error`` when RE2 cannot run it)."""
    return re2.compile(pattern, options=_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    """Whether RE2 finds ``pattern`` in ``text``. A pattern RE2 cannot run is refused at
    load (:func:`schema_problem`); one that still comes here (a scenario recorded in an
    older run folder) is not checked: never a failure of the model's argument."""
    try:
        return _re2(pattern).search(text) is not None
    except re2.error:
        return True


def _pattern(v: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if v.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(v: Any, pp: dict[str, Any], instance: Any, schema: Any) -> Any:
    if not v.is_type(instance, "object"):
        return
    for patrn, sub in pp.items():
        for k, value in instance.items():
            if _search(patrn, k):
                yield from v.descend(value, sub, path=k, schema_path=patrn)


def _additional(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """jsonschema's ``find_additional_properties``, with RE2."""
    props, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    return [k for k in instance if k not in props and not any(_search(p, k) for p in patterns)]


def _additional_properties(v: Any, ap: Any, instance: Any, schema: Any) -> Any:
    if not v.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if v.is_type(ap, "object"):
        for extra in extras:
            yield from v.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(e) for e in sorted(extras))
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            was = "was" if len(extras) == 1 else "were"
            listed = ", ".join(repr(e) for e in extras)
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {was} unexpected)"
            )


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)
_REGISTRY: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]


def validator(schema: dict[str, Any]) -> Any:
    """A Draft 2020-12 validator of ``schema`` that never retrieves a ``$ref`` and
    matches patterns with RE2 (see the module docstring)."""
    return _cached(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=512)
def _cached(schema_json: str) -> Any:
    return _Validator(json.loads(schema_json), registry=_REGISTRY)


#: keywords whose value maps names to subschemas (a key there is a name, not a keyword)
_NAMED = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}


def _walk(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str, Any]]:
    """``(path, key, value)`` of every keyword of the schema ``node`` and its subschemas
    (data values such as ``default`` are not walked)."""
    if isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, i))
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        yield path, str(k), v
        if k in _NAMED and isinstance(v, dict):
            for name, sub in v.items():
                yield from _walk(sub, (*path, k, name))
        elif k not in _DATA_KEYS:
            yield from _walk(v, (*path, k))


def _re2_problem(pattern: str) -> str | None:
    try:
        _re2(pattern)
    except re2.error as exc:
        why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return (
            f"pattern {pattern!r} cannot be matched in linear time ({why}); rewrite it "
            "without lookaround or backreferences (patterns are checked with RE2)"
        )
    return None


def _resolves(root: Any, ref: str) -> bool:
    """Whether a local ``$ref`` (``#``, ``#/$defs/x`` a JSON pointer, RFC 6901; ``#name``
    an ``$anchor``) names something inside ``root``."""
    frag = unquote(ref[1:])
    if not frag:
        return True
    if not frag.startswith("/"):
        return any(k == "$anchor" and v == frag for _, k, v in _walk(root))
    node = root
    for part in frag[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def schema_problem(schema: Any) -> tuple[tuple[Any, ...], str] | None:
    """The first thing that keeps ``schema`` from being checked safely, as
    ``(path inside the schema, one-line reason with the fix)``, or ``None``.

    A ``$ref``/``$dynamicRef`` that does not start with ``#`` (a URL, a file: never
    fetched), a local ``$ref`` that points at nothing (``#/definitions/nope``: the
    validator would raise when a call reaches it), a ``pattern`` or ``patternProperties``
    key that RE2 cannot compile.
    """
    for path, key, value in _walk(schema):
        if key in ("$ref", "$dynamicRef") and isinstance(value, str) and not value.startswith("#"):
            return (*path, key), (
                f"{key} {value!r} is not local and is never fetched; copy the referenced "
                "schema into the tool's parameters ($defs) and refer to it as '#/$defs/...'"
            )
        if key == "$ref" and isinstance(value, str) and not _resolves(schema, value):
            return (*path, key), (
                f"$ref {value!r} points at nothing in the tool's parameters; define what it "
                "names (under $defs) or fix the pointer"
            )
        if key == "pattern" and isinstance(value, str) and (why := _re2_problem(value)):
            return (*path, key), why
        if key == "patternProperties" and isinstance(value, dict):
            for p in value:
                if why := _re2_problem(str(p)):
                    return (*path, key), why
    return None
