"""Scenario files: the conversation, the tools and what a correct model does.

A scenario is a YAML (or JSON) file under ``scenarios/``. It is parsed into
:class:`Scenario` with unknown keys rejected (``extra="forbid"``), so a typo is an
error rather than a silently ignored key. Tool ``parameters`` are checked as valid
JSON Schema (Draft 2020-12 meta-schema) at load time.

``targets:`` names the failure kinds the scenario is meant to catch; each must be a
:class:`harness.kinds.FailureKind` value (``harness list --kinds`` prints them).

Errors: every problem with a file raises :class:`ScenarioError`, whose ``str`` is
one line naming the file, the field path and the reason, for example::

    scenarios/x.yaml: tools[1].parameters.properties.values.type: 'arrray' is not a JSON Schema type
    scenarios/x.yaml: targets[1]: 'colapse' is not a failure kind (did you mean 'collapse'?); `harness list --kinds` lists them

Example (abridged)::

    id: entropy_array
    description: ...
    targets: [container_as_string, collapse]
    messages:
      - {role: system, content: You are a careful assistant.}
      - {role: user, content: Compute the entropy of [0.5, 0.25, 0.25] in bits.}
    tools:
      - name: entropy
        description: Shannon entropy of a probability vector.
        parameters: {type: object, properties: {values: {type: array, items: {type: number}}},
                     required: [values]}
        simulator: {builtin: entropy}
    expect:
      calls:
        - tool: entropy
          arguments: {values: [0.5, 0.25, 0.25], base: 2}
          match: {values: {approx: [0.5, 0.25, 0.25], tol: 1.0e-6}}
      final_answer: {required: true, contains: ["1.5"]}
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import jsonschema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from harness.errors import ScenarioError
from harness.kinds import FailureKind, failure_kind
from harness.scenario.parse import MAX_FILE_BYTES, parse_text
from harness.scenario.schemas import schema_problem
from harness.scenario.schemas import validator as schema_validator
from harness.scenario.suites import (
    get_suite,
    registered_suites,
    suite_of_spec,
    unregistered_message,
    unregistered_spec,
)

#: Bounds of the numeric fields (the JSON Schema carries them; docs/scenarios.md "Scenario files:
#: limits"): ``max_turns`` 1-100, ``repeats`` 1-1000, ``sampling.max_tokens``
#: 1-1,000,000, ``sampling.temperature`` 0-2, ``sampling.top_p`` (0, 1],
#: ``simulator.pad_tokens`` 0-200,000.
MAX_TURNS = 100
MAX_REPEATS = 1000
MAX_TOKENS = 1_000_000
MAX_PAD_TOKENS = 200_000

__all__ = [
    "ArgMatcher",
    "ExpectedCall",
    "Expectation",
    "FinalAnswerExpectation",
    "Followup",
    "FunctionCall",
    "Message",
    "MessageToolCall",
    "Sampling",
    "Scenario",
    "SuiteTask",
    "ScenarioError",
    "SimMatchRule",
    "SimulatorSpec",
    "Tool",
    "load_scenario",
    "load_scenarios",
    "scenario_json_schema",
]

#: Schema version of the scenario format; bump on incompatible change.
SCENARIO_FORMAT_VERSION = 1

_JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _check_regex(pattern: str | None) -> None:
    """Raise ValueError naming the problem if ``pattern`` is not a valid Python regex."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r} ({exc}); fix the pattern") from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class FunctionCall(_Strict):
    """The ``function`` of a recorded tool call: its name and ``arguments`` (a JSON string)."""

    name: str
    arguments: str = "{}"


class MessageToolCall(_Strict):
    """A tool call an earlier assistant message made (OpenAI chat format)."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    """One message of the conversation's opening (OpenAI chat format).

    ``tool_calls`` (assistant messages only) and ``role: tool`` messages with their
    ``tool_call_id`` let an opening start mid-conversation, as ``harness import`` writes it.
    """

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str = ""
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _fields_of_role(self) -> Message:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if (self.tool_call_id is not None) != (self.role == "tool"):
            raise ValueError("a tool message needs tool_call_id (and only a tool message has one)")
        return self

    def wire(self) -> dict[str, Any]:
        """The message as sent: ``{"role", "content"}`` plus the fields that are set."""
        return self.model_dump(exclude_none=True)


class SimMatchRule(_Strict):
    """A result chosen when every key in ``when`` equals the call's argument."""

    when: dict[str, Any]
    result: Any = None
    error: str | None = None


class SimulatorSpec(_Strict):
    """How a tool answers; deterministic so both sides see byte-identical results.

    Exactly one of ``result``, ``match``, ``sequence``, ``error``, ``builtin``
    (``match`` may be combined with ``default``/``default_error``).
    A result that is not a string is sent as compact JSON.

    - ``result``: the same result for every call.
    - ``match``: the first rule whose ``when`` matches the arguments; else ``default``.
    - ``sequence``: the n-th call (0-based, per tool) gets ``sequence[n]``;
      past the end the last item repeats. Items may be ``{"error": "..."}``.
    - ``error``: every call gets this tool-error message.
    - ``builtin``: a pure function of the arguments, one of
      :data:`harness.scenario.tools.BUILTINS` (``add``, ``multiply``, ``entropy``, ...).
    - ``pad_tokens``: append roughly this many tokens of filler text to every
      result (for long-context scenarios; ~4 characters per token).
    """

    result: Any = None
    match: list[SimMatchRule] | None = None
    default: Any = None
    default_error: str | None = None
    sequence: list[Any] | None = Field(default=None, min_length=1)
    error: str | None = None
    builtin: str | None = None
    pad_tokens: int = Field(default=0, ge=0, le=MAX_PAD_TOKENS)

    @model_validator(mode="after")
    def _one_kind(self) -> SimulatorSpec:
        kinds = [
            k
            for k in ("result", "match", "sequence", "error", "builtin")
            if getattr(self, k) is not None
        ]
        if len(kinds) > 1:
            raise ValueError(f"choose one of result/match/sequence/error/builtin, not {kinds}")
        if self.builtin is not None:
            from harness.scenario.tools import BUILTINS  # the tools module imports this one

            if self.builtin not in BUILTINS:
                raise ValueError(
                    f"unknown builtin {self.builtin!r}; one of {', '.join(sorted(BUILTINS))}"
                )
        return self


class Tool(_Strict):
    """A tool in the OpenAI function format plus its simulated behaviour."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    simulator: SimulatorSpec = Field(default_factory=lambda: SimulatorSpec(result="ok"))

    def openai_spec(self) -> dict[str, Any]:
        """The ``tools[]`` entry sent on the wire: ``{"type": "function", "function": {...}}``."""
        fn: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.strict is not None:
            fn["strict"] = self.strict
        return {"type": "function", "function": fn}


class ArgMatcher(_Strict):
    """How one argument is checked. Exactly one operator.

    - ``equals``: exact JSON value (``1`` and ``1.0`` differ in type only if
      ``type`` says so; booleans never equal numbers).
    - ``type``: JSON type name (``array``, ``integer``, ...).
    - ``approx`` + ``tol``: numbers (or arrays of numbers) within absolute ``tol``.
    - ``regex``: a string matching the pattern (``re.fullmatch``).
    - ``any``: present, any value.
    """

    equals: Any = None
    type: str | None = None
    approx: float | list[float] | None = None
    tol: float = 1e-6
    regex: str | None = None
    any: bool | None = None

    @model_validator(mode="after")
    def _one_op(self) -> ArgMatcher:
        ops = [
            k for k in ("equals", "type", "approx", "regex", "any") if getattr(self, k) is not None
        ]
        if "equals" not in self.model_fields_set and len(ops) != 1:
            raise ValueError("a matcher takes exactly one of equals/type/approx/regex/any")
        if self.type is not None and self.type not in _JSON_TYPES:
            raise ValueError(f"{self.type!r} is not a JSON type; use one of {sorted(_JSON_TYPES)}")
        _check_regex(self.regex)
        return self


class ExpectedCall(_Strict):
    """One call a correct model makes.

    ``arguments`` are the reference arguments (what a correct model sends; the
    reference server sends exactly these). Every key of ``arguments`` is checked
    for exact equality unless ``match`` gives another matcher for it; ``match``
    may also name keys absent from ``arguments``.
    ``parallel: true`` puts the call in the same assistant message as the one before.
    """

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    match: dict[str, ArgMatcher] = Field(default_factory=dict)
    optional: bool = False
    parallel: bool = False


class FinalAnswerExpectation(_Strict):
    """What the final assistant message must hold (case-insensitive substrings)."""

    required: bool = True
    contains: list[str] = Field(default_factory=list)
    regex: str | None = None
    example: str | None = None  # what the reference server answers; default built from contains

    @model_validator(mode="after")
    def _regex_compiles(self) -> FinalAnswerExpectation:
        _check_regex(self.regex)
        return self

    def reference_text(self) -> str:
        """The reference final answer: ``example``, else a sentence with every ``contains``.

        What the reference server answers and what the numerics score as the healthy
        final turn of a scenario's reference conversation.
        """
        if self.example:
            return self.example
        if self.contains:
            return "Here is what I found: " + "; ".join(self.contains) + "."
        return "Done. The task is complete."


class Expectation(_Strict):
    """Expected behaviour of one segment of the conversation."""

    calls: list[ExpectedCall] = Field(default_factory=list)
    order: Literal["strict", "free"] = "strict"
    final_answer: FinalAnswerExpectation = Field(default_factory=FinalAnswerExpectation)
    max_calls: int | None = None  # more tool calls than this is a failure (e.g. 0: no tool use)


class Followup(_Strict):
    """A user message sent after the previous final answer, and what must follow."""

    user: str
    expect: Expectation = Field(default_factory=Expectation)


class Sampling(_Strict):
    """Sampling parameters sent with every request (``None`` = not sent)."""

    temperature: float | None = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    max_tokens: int | None = Field(default=1024, ge=1, le=MAX_TOKENS)


class SuiteTask(_Strict):
    """A task of a registered suite (:mod:`harness.scenario.suites`): in a file, the
    mapping under the suite's name (``bfcl: {...}``), validated by its ``task_model``.

    ``suite``: the suite's name; ``data``: the task as the suite's model dumps it (JSON).
    """

    suite: str
    data: dict[str, Any]


#: keys every dump carried (as null) before suites were registered; their hashes stay valid
_LEGACY_NULL_KEYS = ("bfcl",)


class Scenario(_Strict):
    """One scenario file, parsed. See the module docstring for the format."""

    format_version: int = SCENARIO_FORMAT_VERSION
    id: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str
    targets: list[str] = Field(
        default_factory=list,
        description="failure kinds this scenario is meant to catch (`harness list --kinds`)",
    )
    tags: list[str] = Field(default_factory=list)
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None
    #: the ``tool_choice`` sent once a tool result is in the conversation (None: keep
    #: ``tool_choice``). ``tool_choice: required`` then ``auto`` forces the first call and
    #: still lets the model answer, as OpenAI's function-calling guide advises (a forced
    #: choice on every turn leaves no way to answer)
    tool_choice_after_result: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    #: what later requests carry of the reasoning the assistant turns produced
    #: (``keep``, ``drop``, ``auto``; None: the command's, else ``auto``):
    #: :data:`harness.runner.REASONING_HISTORY`
    reasoning_history: Literal["keep", "drop", "auto"] | None = None
    expect: Expectation = Field(default_factory=Expectation)
    followups: list[Followup] = Field(default_factory=list)
    max_turns: int = Field(default=12, ge=1, le=MAX_TURNS)
    sampling: Sampling = Field(default_factory=Sampling)
    repeats: int = Field(default=3, ge=1, le=MAX_REPEATS)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    #: a suite's task: tools answered by its backends (:mod:`harness.scenario.suites`);
    #: written in a file as ``<suite name>: {...}``, never as ``task``
    task: SuiteTask | None = None

    # Set by the loader, not part of the file format.
    source: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _suite_task(cls, data: Any) -> Any:
        """``<suite name>: {...}`` -> ``task`` (validated by the suite's ``task_model``)."""
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("task"), dict):  # only a suite's loader sets it, as a SuiteTask
            raise ValueError(
                "`task` is not a key of the file: write a suite's task under the suite's "
                "name (`bfcl: {...}`)"
            )
        suites = registered_suites()
        for key in _LEGACY_NULL_KEYS:
            if data.get(key) is not None and key not in suites:
                raise ValueError(unregistered_message(key))
        named = [
            k for k in data if isinstance(k, str) and k in suites and k not in cls.model_fields
        ]
        legacy = [k for k in _LEGACY_NULL_KEYS if k in data and data[k] is None]
        if not named and not legacy:
            return data
        data = dict(data)
        for key in legacy:
            data.pop(key)
        named = [k for k in named if k in data]
        if len(named) > 1:
            raise ValueError(f"a scenario is a task of one suite at most; it names {named}")
        if named:
            key = named[0]
            model = suites[key].task_model
            task = model.model_validate(data.pop(key)).model_dump(mode="json")
            data["task"] = {"suite": key, "data": task}
        return data

    @model_serializer(mode="wrap")
    def _task_under_its_suite(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        task = out.pop("task", None)
        if task is not None:
            out[task["suite"]] = task["data"]
        return out

    @model_validator(mode="after")
    def _tools_known(self) -> Scenario:
        names = [t.name for t in self.tools]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"tool names must be unique; repeated: {sorted(dupes)}")
        ids: set[str] = set()
        for i, m in enumerate(self.messages):
            ids.update(c.id for c in m.tool_calls or [])
            if m.tool_call_id is not None and m.tool_call_id not in ids:
                raise ValueError(
                    f"messages[{i}].tool_call_id {m.tool_call_id!r} answers no earlier tool call; "
                    "use the id of a call in an assistant message before it"
                )
        return self

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return next((t for t in self.tools if t.name == name), None)

    def openai_tools(self) -> list[dict[str, Any]]:
        """The ``tools`` request field (empty list if the scenario has none)."""
        return [t.openai_spec() for t in self.tools]

    def tools_at(self, segment: int) -> list[Tool]:
        """The tools offered during ``segment``: all but those held out until later."""
        held: Mapping[str, list[str]] = {}
        if self.task is not None:
            held = get_suite(self.task.suite).held_out(self)
        later = {n for seg, names in held.items() if int(seg) > segment for n in names}
        return [t for t in self.tools if t.name not in later]

    def segments(self) -> list[Expectation]:
        """Expectations per segment: the opening, then one per follow-up."""
        return [self.expect, *(f.expect for f in self.followups)]

    def content_hash(self) -> str:
        """sha256 (hex, first 16) of the canonical JSON of the parsed scenario (an unset
        ``reasoning_history`` left out, and ``bfcl`` null when no suite's task is set: the
        hashes of records made before either field existed stay valid)."""
        data = self.model_dump(mode="json")
        if data.get("reasoning_history") is None:
            data.pop("reasoning_history", None)
        for key in _LEGACY_NULL_KEYS:
            data.setdefault(key, None)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- loading


_TYPE_PART = re.compile(r"^(str|int|float|bool|none|list|dict|function-\w+)(\[.*\])?$", re.I)


def _all_field_names() -> set[str]:
    names: set[str] = set()
    models: list[type[BaseModel]] = [
        Scenario, Message, MessageToolCall, FunctionCall, Tool, SimulatorSpec, SimMatchRule,
        ExpectedCall, ArgMatcher, FinalAnswerExpectation, Expectation, Followup, Sampling,
        *(s.task_model for s in registered_suites().values()),
    ]  # fmt: skip
    for model in models:
        names.update(model.model_fields)
    names.update(registered_suites())
    return names


def _loc(loc: Iterable[Any]) -> str:
    """``("tools", 1, "parameters")`` -> ``tools[1].parameters`` (union-member parts dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, str) and _TYPE_PART.match(part):
            continue  # pydantic names the union member it tried: not a field
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _segment_fields(sc: Scenario) -> list[tuple[str, Expectation]]:
    return [("expect", sc.expect)] + [
        (f"followups[{i}].expect", f.expect) for i, f in enumerate(sc.followups)
    ]


def _check_expected_calls(sc: Scenario, path: str | Path | None) -> None:
    """Every expected call names a tool, and its reference arguments fit the tool's schema."""
    names = [t.name for t in sc.tools]
    for where, seg in _segment_fields(sc):
        for j, call in enumerate(seg.calls):
            field = f"{where}.calls[{j}]"
            tool = sc.tool(call.tool)
            if tool is None:
                near = difflib.get_close_matches(call.tool, names, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; tools are {names}"
                raise ScenarioError(path, f"{field}.tool", f"no tool named {call.tool!r}{hint}")
            schema = {k: v for k, v in tool.parameters.items() if k != "required"}
            err = jsonschema.exceptions.best_match(
                schema_validator(schema).iter_errors(call.arguments)
            )
            if err is not None:
                arg = _loc([f"{field}.arguments", *err.absolute_path])
                raise ScenarioError(
                    path,
                    arg,
                    f"reference arguments break the schema of tool {tool.name!r}: {err.message}",
                )


def _check_targets(sc: Scenario, path: str | Path | None) -> None:
    """Every name in ``targets`` is a failure kind (:class:`harness.kinds.FailureKind`)."""
    for i, name in enumerate(sc.targets):
        try:
            failure_kind(name)
        except ValueError as exc:  # names it and suggests the closest kind
            fix = "`harness list --kinds` lists them"
            raise ScenarioError(path, f"targets[{i}]", f"{exc}; {fix}") from None


def _check_tool_schemas(sc: Scenario, path: str | Path | None) -> None:
    validator_cls = jsonschema.Draft202012Validator
    meta = validator_cls(validator_cls.META_SCHEMA, format_checker=validator_cls.FORMAT_CHECKER)
    for i, tool in enumerate(sc.tools):
        params = tool.parameters
        where = f"tools[{i}].parameters"
        for err in meta.iter_errors(params):
            field = _loc([where, *err.absolute_path]) if err.absolute_path else where
            if err.validator in ("anyOf", "type") and "type" in list(err.absolute_path)[-1:]:
                bad = err.instance
                raise ScenarioError(path, field, f"{bad!r} is not a JSON Schema type")
            if err.validator == "format" and err.validator_value == "regex":
                raise ScenarioError(path, field, f"invalid regex {err.instance!r}; fix the pattern")
            raise ScenarioError(path, field, err.message)
        if problem := schema_problem(params):
            raise ScenarioError(path, _loc([where, *problem[0]]), problem[1])
        if params.get("type") != "object":
            raise ScenarioError(path, where + ".type", "tool parameters must be 'object'")


def scenario_from_data(data: Any, path: str | Path | None = None) -> Scenario:
    """Validate already-parsed data into a :class:`Scenario`.

    Raises:
        ScenarioError: on any problem, naming ``path`` and the field.
    """
    if not isinstance(data, dict):
        raise ScenarioError(path, "", "a scenario file must hold a mapping at the top level")
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        # an unknown key first: a typo also makes the real key look missing
        err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        field = _loc(err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1])
            near = difflib.get_close_matches(key, sorted(_all_field_names()), n=1)
            hint = f"did you mean {near[0]!r}?" if near else "check its spelling"
            msg = f"unknown key; {hint} (`harness schema` prints the format)"
        elif err["type"] == "missing":
            msg = "required key missing; add it (`harness schema` prints the format)"
        elif err["type"] in ("less_than_equal", "greater_than_equal", "less_than", "greater_than"):
            msg += " (the bounds: `harness schema`; docs/scenarios.md)"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        raise ScenarioError(path, field, msg) from None
    _check_targets(sc, path)
    _check_tool_schemas(sc, path)
    _check_expected_calls(sc, path)
    if sc.task is not None:  # a suite's task written out as a file: its backends must be there
        get_suite(sc.task.suite).require(path)
    sc.source = str(path) if path is not None else None
    return sc


def load_scenario(path: str | Path) -> Scenario:
    """Load one scenario file (``.yaml``, ``.yml`` or ``.json``).

    Raises:
        ScenarioError: unreadable file, bad YAML/JSON, over a limit of
            :mod:`harness.scenario.parse` (size, depth, aliases, a duplicate key), or an
            invalid scenario.
    """
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise ScenarioError(p, "", f"larger than {MAX_FILE_BYTES:,} bytes; split the file")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(p, "", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(p, f"byte {exc.start}", "not UTF-8; save the file as UTF-8") from None
    return scenario_from_data(parse_text(text, p), p)


SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")


def load_scenarios(paths: Iterable[str | Path]) -> list[Scenario]:
    """Load files and directories (searched recursively for scenario files), sorted by id.

    A path ``<suite>:<spec>`` naming a registered suite (``bfcl:multi_turn_base``, BFCL's
    tasks from the installed ``bfcl-eval``) is that suite's tasks
    (:mod:`harness.scenario.suites`).

    Raises:
        ScenarioError: a bad file, a path that does not exist, or two files with one id.
    """
    files: list[Path] = []
    suites: list[Scenario] = []
    for raw in paths:
        suite = suite_of_spec(str(raw))
        if suite is not None:  # a suite, not a file
            suites += suite.load(str(raw))
            continue
        p = Path(raw)
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.suffix in SCENARIO_SUFFIXES))
        elif p.exists():
            files.append(p)
        else:
            name = unregistered_spec(str(raw))
            if name is not None:  # meant as a suite that is not installed
                raise ScenarioError(
                    p, "", f"no such file or directory, and {unregistered_message(name)}"
                )
            raise ScenarioError(p, "", "no such file or directory")
    out: dict[str, Scenario] = {sc.id: sc for sc in suites}
    for f in files:
        sc = load_scenario(f)
        if sc.id in out:
            raise ScenarioError(f, "id", f"{sc.id!r} is already used by {out[sc.id].source}")
        out[sc.id] = sc
    return [out[k] for k in sorted(out)]


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of the scenario format (for editors; ``harness schema``).

    ``targets`` items carry an ``enum`` of the failure-kind names, so editors complete them.
    """
    schema = Scenario.model_json_schema()
    schema["properties"]["targets"]["items"]["enum"] = [k.value for k in FailureKind]
    # a suite's task is written under the suite's name (``bfcl: {...}``), never as ``task``
    del schema["properties"]["task"]
    schema.get("$defs", {}).pop("SuiteTask", None)
    for name, suite in sorted(registered_suites().items()):
        sub = suite.task_model.model_json_schema(ref_template="#/$defs/{model}")
        schema.setdefault("$defs", {}).update(sub.pop("$defs", {}))
        schema["properties"][name] = {"anyOf": [sub, {"type": "null"}], "default": None}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "harness scenario"
    return schema
