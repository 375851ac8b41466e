"""BFCL multi-turn tasks as scenarios, read from the installed ``bfcl-eval`` package.

Source: the Berkeley Function Calling Leaderboard (``bfcl-eval`` on PyPI, Apache-2.0),
pinned to :data:`BFCL_EVAL_VERSION`. Nothing of it is copied here: the task files
(``bfcl_eval/data/BFCL_v4_<category>.json``), the ground truth
(``data/possible_answer/...``), the tool descriptions (``data/multi_turn_func_doc/``)
and the backend classes are read from the package at load time.

One task becomes one :class:`~harness.scenario.model.Scenario`: the first user turn is
the opening, each later turn a follow-up; the tools are the function docs of the
task's ``involved_classes`` with BFCL's types mapped to JSON Schema as BFCL's own
OpenAI-style handlers do (``GORILLA_TO_OPENAPI``, the traversal of
``bfcl_eval.model_handler.utils._cast_to_openai_type``; no system prompt, as BFCL's
function-calling mode); each turn's ground-truth calls are its expected calls; the
backends' state goes in ``Scenario.task`` (a :class:`~harness.bfcl.task.BfclTask`).
``miss_func`` tasks hold their missing functions back until the turn that adds them,
whose user message is BFCL's ``DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC``.

Ground-truth calls (Python call syntax such as ``mv(source='a', destination='b')``)
are parsed with :mod:`ast` and :func:`ast.literal_eval`, never evaluated; positional
arguments are named by the backend method's signature.

Errors: :class:`~harness.errors.ScenarioError` naming the suite when ``bfcl-eval`` is
not installed (with the command that installs it) or the category is unknown.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from harness.bfcl.task import BfclTask, task_of
from harness.errors import ScenarioError
from harness.scenario.model import (
    Expectation,
    ExpectedCall,
    FinalAnswerExpectation,
    Followup,
    Message,
    Sampling,
    Scenario,
    SuiteTask,
    Tool,
)

__all__ = [
    "BFCL_EVAL_VERSION",
    "CATEGORIES",
    "INSTALL_HINT",
    "SUITE_PREFIX",
    "available_suites",
    "backend_class",
    "backend_counts",
    "load_suite",
    "parse_ground_truth",
    "require_bfcl",
    "suite_category",
    "to_json_schema",
]

#: The bfcl-eval release the suite is read from (``make bfcl`` installs it).
BFCL_EVAL_VERSION = "2026.3.23"
SUITE_PREFIX = "bfcl:"
#: The multi-turn categories this adapter loads (200 tasks each in this release).
CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
INSTALL_HINT = (
    f"bfcl-eval is not installed; run `make bfcl` (pip install --no-deps "
    f"bfcl-eval=={BFCL_EVAL_VERSION} mpmath)"
)
#: ``max_tokens`` of every request (the scenario default, 1024, cuts long_context's
#: longest ground-truth call short)
MAX_TOKENS = 4096
#: What the harness's reference server answers to end a turn (BFCL needs no text).
TURN_DONE = "I have completed this request."


def suite_category(spec: str) -> tuple[str, int | None]:
    """``"bfcl:multi_turn_base"`` -> ``("multi_turn_base", None)``; a count after a colon
    keeps the first tasks in BFCL's order: ``"bfcl:multi_turn_base:20"`` -> ``(..., 20)``.

    Raises:
        ScenarioError: not one of :data:`CATEGORIES`, or a count that is not a positive integer.
    """
    rest = spec[len(SUITE_PREFIX) :] if spec.startswith(SUITE_PREFIX) else spec
    cat, _, count = rest.partition(":")
    if cat not in CATEGORIES:
        names = ", ".join(SUITE_PREFIX + c for c in CATEGORIES)
        raise ScenarioError(spec, "", f"unknown BFCL suite {cat!r}; one of {names}")
    if count and not (count.isdigit() and int(count) > 0):
        fix = f"write {SUITE_PREFIX}{cat}:N with N a positive number of tasks"
        raise ScenarioError(spec, "", f"task count {count!r} is not a positive integer; {fix}")
    return cat, int(count) if count else None


def require_bfcl(where: str | Path | None) -> None:
    """Check that bfcl-eval's backends can be imported.

    Raises:
        ScenarioError: naming ``where`` (a suite or a file) and the install command.
    """
    try:
        importlib.import_module("bfcl_eval.constants.executable_backend_config")
        importlib.import_module("mpmath")
    except ImportError:
        raise ScenarioError(where, "", INSTALL_HINT) from None


def _data_dir() -> Path:
    return Path(str(resources.files("bfcl_eval") / "data"))


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """A BFCL data file: one JSON object per line."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def backend_class(name: str) -> type:
    """The backend class called ``name`` (``GorillaFileSystem``) from bfcl-eval."""
    config = importlib.import_module("bfcl_eval.constants.executable_backend_config")
    module = importlib.import_module(config.CLASS_FILE_PATH_MAPPING[name])
    cls: type = getattr(module, name)
    return cls


def _cast(properties: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """BFCL's parameter types -> JSON Schema types (``_cast_to_openai_type``'s rules)."""
    out: dict[str, Any] = {}
    for key, value in properties.items():
        v = dict(value)
        if v.get("type") == "float":
            v["format"] = "float"
            v["description"] = v.get("description", "") + " This is a float type value."
        v["type"] = mapping.get(v.get("type", "string"), "string")
        if v["type"] in ("array", "object") and "properties" in v:
            v["properties"] = _cast(v["properties"], mapping)
        elif v["type"] == "array" and "items" in v:
            v["items"] = next(iter(_cast({"i": v["items"]}, mapping).values()))
        out[key] = v
    return out


def to_json_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function doc's ``parameters`` (types ``dict``, ``float``, ``tuple``, ``any``)
    as the JSON Schema object BFCL's OpenAI-style handlers send."""
    mapping = importlib.import_module("bfcl_eval.constants.type_mappings").GORILLA_TO_OPENAPI
    schema = {k: v for k, v in parameters.items() if k != "response"}
    schema["type"] = "object"
    schema["properties"] = _cast(parameters.get("properties", {}), mapping)
    return schema


@lru_cache(maxsize=16)
def _func_docs(class_name: str) -> tuple[Tool, ...]:
    config = importlib.import_module("bfcl_eval.constants.executable_backend_config")
    path = _data_dir() / "multi_turn_func_doc" / config.MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(
        Tool(
            name=d["name"], description=d["description"], parameters=to_json_schema(d["parameters"])
        )
        for d in _read_lines(path)
    )


def _plain(value: Any) -> Any:
    """A literal as JSON data: tuples become lists (recursively)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def parse_ground_truth(text: str, methods: dict[str, Any]) -> ExpectedCall:
    """One ground-truth call string -> an expected call (parsed, never evaluated).

    ``methods``: name -> backend method (its signature names positional arguments).

    Raises:
        ValueError: not a single call of a known method with literal arguments.
    """
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a function call: {text!r}")
    name = node.func.id
    if name not in methods:
        raise ValueError(f"no backend method {name!r}")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    bound = inspect.signature(methods[name]).bind_partial(*args, **kwargs)
    return ExpectedCall(tool=name, arguments=_plain(dict(bound.arguments)))


def _methods(classes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in classes:
        cls = backend_class(c)
        out.update(
            {n: m for n, m in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
        )
    return {n: _unbound(m) for n, m in out.items()}


def _unbound(fn: Any) -> Any:
    """A method's signature without ``self`` (so positional arguments bind as on an instance)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]

    def stub(*a: Any, **k: Any) -> None: ...

    stub.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return stub


def _user_text(turn: list[dict[str, Any]], added_prompt: str) -> str:
    """A BFCL turn's user text; an empty turn (``miss_func``) gets BFCL's added-tools prompt."""
    return "\n\n".join(str(m.get("content", "")) for m in turn) or added_prompt


def _segment(calls: list[ExpectedCall]) -> Expectation:
    """A turn's expectation: BFCL's tolerance (any order, extra calls, no text required)."""
    return Expectation(
        calls=calls,
        order="free",
        final_answer=FinalAnswerExpectation(required=False, example=TURN_DONE),
    )


def _task(entry: dict[str, Any], truth: list[list[str]], category: str, prompt: str) -> Scenario:
    """One BFCL task as a scenario (see the module docstring)."""
    classes = list(entry["involved_classes"])
    methods = _methods(classes)
    tools = [t for c in classes for t in _func_docs(c)]
    turns = entry["question"]
    segments = [_segment([parse_ground_truth(c, methods) for c in calls]) for calls in truth]
    opening = turns[0] or [{"role": "user", "content": prompt}]
    held = {str(k): list(v) for k, v in (entry.get("missed_function") or {}).items()}
    n_calls = sum(len(s.calls) for s in segments)
    return Scenario(
        id=entry["id"],
        description=(
            f"BFCL {category} task {entry['id']} (bfcl-eval {BFCL_EVAL_VERSION}): "
            f"{len(turns)} user turns, {n_calls} ground-truth calls on {', '.join(classes)}."
        ),
        tags=["bfcl", category, *(f"backend:{c}" for c in sorted(classes))],
        messages=[Message(role=m["role"], content=m["content"]) for m in opening],
        tools=tools,
        expect=segments[0],
        followups=[
            Followup(user=_user_text(t, prompt), expect=s)
            for t, s in zip(turns[1:], segments[1:], strict=True)
        ],
        max_turns=2 * n_calls + 4 * len(turns),
        # long_context ground truth writes up to ~7k characters in one call
        sampling=Sampling(max_tokens=MAX_TOKENS),
        task=SuiteTask(
            suite="bfcl",
            data=BfclTask(
                category=category,
                task_id=entry["id"],
                version=BFCL_EVAL_VERSION,
                classes=classes,
                initial_config=entry.get("initial_config") or {},
                long_context="long_context" in category,
                held_out=held,
            ).model_dump(mode="json"),
        ),
    )


@lru_cache(maxsize=8)
def _suite(category: str) -> tuple[Scenario, ...]:
    prompts = importlib.import_module("bfcl_eval.constants.default_prompts")
    prompt = prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    data = _data_dir()
    tasks = _read_lines(data / f"BFCL_v4_{category}.json")
    truth = {
        a["id"]: a["ground_truth"]
        for a in _read_lines(data / "possible_answer" / f"BFCL_v4_{category}.json")
    }
    return tuple(_task(e, truth[e["id"]], category, prompt) for e in tasks)


def load_suite(spec: str) -> list[Scenario]:
    """The tasks of a BFCL suite (``"bfcl:multi_turn_base"``, or its first N tasks:
    ``"bfcl:multi_turn_base:N"``) as scenarios, sorted by id.

    Raises:
        ScenarioError: unknown category, bfcl-eval not installed (one line with the
            install command), or a task this adapter cannot read (naming the task).
    """
    category, count = suite_category(spec)
    require_bfcl(spec)
    try:
        suite = [sc.model_copy(deep=True) for sc in _suite(category)[:count]]
    except (ValueError, KeyError, SyntaxError, OSError) as exc:
        raise ScenarioError(spec, "", f"cannot read the BFCL data: {exc}") from None
    for sc in suite:
        sc.source = spec
    return sorted(suite, key=lambda s: s.id)


def backend_counts(scenarios: list[Scenario]) -> dict[str, int]:
    """Tasks per backend class (a task with two backends counts for both), by name."""
    counts: dict[str, int] = {}
    for sc in scenarios:
        task = task_of(sc)
        for c in task.classes if task else []:
            counts[c] = counts.get(c, 0) + 1
    return dict(sorted(counts.items()))


def available_suites() -> list[tuple[str, int | None]]:
    """``(suite name, tasks)`` of every category; tasks ``None`` when bfcl-eval is missing."""
    try:
        require_bfcl("bfcl")
    except ScenarioError:
        return [(SUITE_PREFIX + cat, None) for cat in CATEGORIES]
    return [
        (SUITE_PREFIX + cat, len(_read_lines(_data_dir() / f"BFCL_v4_{cat}.json")))
        for cat in CATEGORIES
    ]
