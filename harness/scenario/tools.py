"""Tool simulators: what a scenario's tools answer, deterministically.

Both servers under comparison must see byte-identical tool results for identical
calls, so every simulator is a pure function of ``(tool, raw arguments, call index)``
(:func:`simulate`). Arguments are parsed with :func:`json.loads` only (model output is
never evaluated as code) and validated against the tool's JSON Schema (``jsonschema``,
Draft 2020-12, :func:`harness.scenario.schemas.validator`: no ``$ref`` fetched, RE2 patterns). Bad arguments get a tool-error message back, as a real tool would
answer, for example::

    Error: invalid arguments: values: '[0.5, 0.25, 0.25]' is not of type 'array'

and the agent loop goes on. Results that are not strings are sent as compact JSON
with sorted keys. The kinds of simulator are described in
:class:`harness.scenario.model.SimulatorSpec`; the built-in functions are :data:`BUILTINS`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema.exceptions import best_match

from harness.errors import ToolInputError
from harness.scenario.model import SimulatorSpec, Tool
from harness.scenario.schemas import validator
from harness.transcript import render

__all__ = ["BUILTINS", "ToolInputError", "ToolOutcome", "parse_arguments", "render", "simulate"]


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's answer: the ``tool`` message content, and whether it is a tool error."""

    content: str
    error: bool = False


def _validator(schema_json: str) -> Any:
    return validator(json.loads(schema_json))


def _type_name(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def parse_arguments(tool: Tool, arguments_raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Parse and validate raw ``arguments`` (a JSON string, or an object some servers send).

    Returns:
        ``(arguments, None)`` when valid, else ``(None, reason)`` with a one-line reason.
    """
    if isinstance(arguments_raw, str):
        try:
            args = json.loads(arguments_raw)
        except json.JSONDecodeError as exc:
            return None, f"not valid JSON ({exc.msg} at char {exc.pos})"
    else:
        args = arguments_raw
    if not isinstance(args, dict):
        return None, f"expected a JSON object, got {_type_name(args)}"
    schema = json.dumps(tool.parameters, sort_keys=True)
    if isinstance(arguments_raw, str):
        problem = _cached_problem(schema, arguments_raw)
    else:
        problem = _schema_problem(schema, args)
    return (args, None) if problem is None else (None, problem)


def _schema_problem(schema_json: str, args: dict[str, Any]) -> str | None:
    """The most relevant schema error (``"path: message"``), or ``None`` if valid."""
    err = best_match(_validator(schema_json).iter_errors(args))
    if err is None:
        return None
    path = ".".join(str(p) for p in err.absolute_path)
    return f"{path}: {err.message}" if path else err.message


@lru_cache(maxsize=1024)
def _cached_problem(schema_json: str, arguments_json: str) -> str | None:
    """:func:`_schema_problem` of a JSON object's text (a pure function of the two
    strings), kept: every repeat and both sides send the same argument strings, and a
    schema check costs ~40 us, the largest part of the runner's own CPU per turn
    (make bench, benchmark 1)."""
    return _schema_problem(schema_json, json.loads(arguments_json))


def simulate(tool: Tool, arguments_raw: Any, call_index: int) -> ToolOutcome:
    """The answer of ``tool`` to one call.

    Args:
        tool: the scenario's tool (its ``parameters`` schema and ``simulator``).
        arguments_raw: ``function.arguments`` exactly as received (normally a string).
        call_index: 0-based count of earlier calls to this tool in the run (``sequence``).

    Returns:
        :class:`ToolOutcome`; identical inputs give byte-identical content.
    """
    args, problem = parse_arguments(tool, arguments_raw)
    if args is None:
        return ToolOutcome(f"Error: invalid arguments: {problem}", error=True)
    outcome = _answer(tool.simulator, args, call_index)
    if tool.simulator.pad_tokens:
        outcome = ToolOutcome(outcome.content + _padding(tool.simulator.pad_tokens), outcome.error)
    return outcome


def _answer(spec: SimulatorSpec, args: dict[str, Any], call_index: int) -> ToolOutcome:
    if spec.builtin is not None:
        fn = BUILTINS.get(spec.builtin)
        if fn is None:
            return ToolOutcome(f"Error: unknown builtin {spec.builtin!r}", error=True)
        try:
            return ToolOutcome(render(fn(args)))
        except ToolInputError as exc:
            return ToolOutcome(f"Error: {exc}", error=True)
    if spec.error is not None:
        return ToolOutcome(spec.error, error=True)
    if spec.sequence is not None:
        if not spec.sequence:
            return ToolOutcome("null")
        return _item(spec.sequence[min(call_index, len(spec.sequence) - 1)])
    if spec.match is not None:
        for rule in spec.match:
            if all(k in args and _json_equal(args[k], v) for k, v in rule.when.items()):
                return (
                    ToolOutcome(rule.error, True)
                    if rule.error
                    else ToolOutcome(render(rule.result))
                )
        if spec.default_error is not None:
            return ToolOutcome(spec.default_error, error=True)
        if spec.default is None:
            return ToolOutcome(f"Error: no result for arguments {render(args)}", error=True)
        return ToolOutcome(render(spec.default))
    return ToolOutcome(render(spec.result))


def _item(item: Any) -> ToolOutcome:
    if isinstance(item, dict) and set(item) == {"error"}:
        return ToolOutcome(str(item["error"]), error=True)
    return ToolOutcome(render(item))


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values where booleans never equal numbers (``True != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and isinstance(a, str) == isinstance(b, str)


_FILLER = "Archived log entry: routine status nominal, no action required, values within range. "


def _padding(tokens: int) -> str:
    """About ``tokens`` tokens (4 characters each) of fixed filler text."""
    n = tokens * 4
    return "\n" + (_FILLER * (n // len(_FILLER) + 1))[:n]


# ---------------------------------------------------------------- built-ins


def _show(v: Any) -> str:
    """A value as JSON text for error messages (strings quoted)."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _number(args: dict[str, Any], key: str, default: float | None = None) -> float:
    v = args.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ToolInputError(f"{key} must be a finite number, got {_show(v)}")
    return v


def _numbers(args: dict[str, Any], key: str = "values") -> list[float]:
    v = args.get(key)
    if not isinstance(v, list):
        raise ToolInputError(f"{key} must be an array of numbers, got {_type_name(v)}")
    if not v:
        raise ToolInputError(f"{key} must not be empty")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ToolInputError(f"{key} must be an array of numbers, found {_show(x)}")
    return list(v)


def _clean(x: float) -> float | int:
    """Round away float noise (12 decimals); integral values become ints.

    Raises:
        ToolInputError: ``x`` is infinite or NaN (overflow, or such arguments).
    """
    if not math.isfinite(x):
        raise ToolInputError(f"result is not a finite number ({x})")
    r = round(x, 12)
    return int(r) if r == int(r) and abs(r) < 2**53 else r


def _arith(op: Callable[[float, float], float]) -> Callable[[dict[str, Any]], Any]:
    def fn(args: dict[str, Any]) -> Any:
        return {"result": _clean(op(_number(args, "a"), _number(args, "b")))}

    return fn


def _divide(args: dict[str, Any]) -> Any:
    a, b = _number(args, "a"), _number(args, "b")
    if b == 0:
        raise ToolInputError("division by zero")
    return {"result": _clean(a / b)}


def _entropy(args: dict[str, Any]) -> Any:
    """Shannon entropy of a probability vector; ``base`` default e (nats), 2 gives bits."""
    p = _numbers(args)
    base = _number(args, "base", math.e)
    if base <= 0 or base == 1:
        raise ToolInputError(f"base must be positive and not 1, got {render(base)}")
    if any(x < 0 for x in p):
        raise ToolInputError("values must be non-negative probabilities")
    if abs(sum(p) - 1.0) > 1e-6:
        raise ToolInputError(f"values must sum to 1, got sum {render(_clean(sum(p)))}")
    log = math.log2 if base == 2 else (lambda x: math.log(x) / math.log(base))
    h = -sum(x * log(x) for x in p if x > 0)
    return {"entropy": _clean(h + 0.0), "base": args.get("base", "e")}


def _normalize(args: dict[str, Any]) -> Any:
    v = _numbers(args)
    total = sum(v)
    if total == 0:
        raise ToolInputError("values sum to 0; cannot normalize")
    return {"values": [_clean(x / total) for x in v]}


def _stat(fn: Callable[[list[float]], float], key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda args: {key: _clean(fn(_numbers(args)))}


def _sort(args: dict[str, Any]) -> Any:
    reverse = args.get("descending", False) is True
    return {"values": sorted(_numbers(args), reverse=reverse)}


#: name -> pure function of the validated arguments (raises :class:`ToolInputError`).
BUILTINS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "add": _arith(lambda a, b: a + b),
    "subtract": _arith(lambda a, b: a - b),
    "multiply": _arith(lambda a, b: a * b),
    "divide": _divide,
    "entropy": _entropy,
    "normalize": _normalize,
    "mean": _stat(lambda v: sum(v) / len(v), "mean"),
    "sum": _stat(sum, "sum"),
    "max": _stat(max, "max"),
    "min": _stat(min, "min"),
    "sort": _sort,
    "echo": lambda args: args,
}
