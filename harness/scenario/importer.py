"""Scenarios from recorded traffic: one OpenAI chat-completions request per JSONL line.

``harness import requests.jsonl -o scenarios/imported/`` (:func:`import_requests`) turns
each request into a scenario file. A line holds a request body (``messages``, ``tools``,
optional ``tool_choice``, ``parallel_tool_calls`` and sampling fields), bare or in an
envelope, as the tools that collect such traffic write it:

- bare body: K2-Vendor-Verifier's test set (``samples.jsonl``, "one request body per
  line"; MoonshotAI/K2-Vendor-Verifier ``tool_calls_eval.py``, ``read_jsonl``), whose
  role ``_input`` is read as ``system`` as that verifier does (``prepare_request``);
- ``{"request": body, ...}``: K2-Vendor-Verifier's ``results.jsonl`` (``ValidationResult``
  keeps the prepared request under ``request``, with ``response`` and ``finish_reason``);
- ``{"url", "method", "headers", "body": body}``: LiteLLM proxy's
  ``proxy_server_request`` (BerriAI/litellm ``litellm/proxy/litellm_pre_call_utils.py``,
  ``add_litellm_data_to_request``), which callbacks and the spend logs store
  (``store_prompts_in_spend_logs``); and a spend-log row holding it,
  ``{"proxy_server_request": {...}}`` (the value may be JSON text).

Each request becomes a scenario (:func:`scenario_data`):

- the opening is the conversation up to its last ``user`` or ``tool`` message
  (assistant ``tool_calls`` and ``tool`` results kept, so it may start mid-loop);
- each tool answers with the results recorded in the conversation: a ``match`` rule on the
  recorded arguments per result, else ``default_error`` (the simulator's syntax);
- without a golden run the expectation is empty (no expected calls, no final answer
  required), so only the schema, drift and protocol checks apply;
  :mod:`harness.golden` adds one from a trusted server;
- the id is ``imported-`` and 12 hex digits of the sha256 of the request as imported
  (canonical JSON of the scenario's messages, tools and request fields; ``stream`` and
  ``model`` left out), so the same request always gets the same id and a repeated
  request (say, streamed and not) is merged into one scenario;
- secrets are not copied: headers never are (those that look like credentials are
  reported), and text that looks like a key (:data:`SECRET_PATTERNS`) in any message,
  recorded tool call or tool description is replaced by ``[REDACTED]`` and reported.

A line that cannot be imported is reported as one :class:`LineProblem`
(``requests.jsonl:7: messages[2].role: 'function' is not supported; ...``) and the import
goes on with the next line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from harness.errors import ScenarioError
from harness.scenario.model import Scenario, scenario_from_data
from harness.scenario.parse import MAX_DEPTH, MAX_FILE_BYTES, nesting_depth, parse_text

__all__ = [
    "SECRET_PATTERNS",
    "MAX_LINE_BYTES",
    "ImportReport",
    "LineProblem",
    "ParsedLine",
    "Redaction",
    "Unread",
    "import_lines",
    "loaded",
    "read_lines",
    "redact_text",
    "request_id",
    "scenario_data",
    "scenario_text",
    "unwrap",
]

#: what looks like a credential: (name, pattern); the match is replaced by ``[REDACTED]``
SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("api key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")),
    ("AWS access key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("bearer token", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=\-]{16,}")),
    (
        "key assignment",
        re.compile(
            r"(?i)\b(?:api[_-]?key|secret|token|password|passwd)\b\s*[:=]\s*['\"]?"
            r"[A-Za-z0-9._~+/\-]{12,}"
        ),
    ),
]
REDACTED = "[REDACTED]"
#: the longest line read (bytes): a scenario file's cap, 4 times (an envelope may hold the
#: recorded response, JSON escapes shrink as YAML); what is written is checked again
MAX_LINE_BYTES = 4 * MAX_FILE_BYTES
#: levels an envelope adds above a request body (``{"proxy_server_request": {"body": ...}}``)
_ENVELOPE_LEVELS = 2
#: libyaml's emitter when PyYAML has it (10x faster on long tool results), else Python's
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_SECRET_HEADER = re.compile(r"(?i)(authorization|api[-_]?key|token|secret|cookie|password)")
#: request fields copied into ``extra_body`` (sampling and decoding knobs; never ``user``,
#: ``metadata`` or anything that identifies a caller)
EXTRA_FIELDS = (
    "stop", "response_format", "top_k", "min_p", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "reasoning_effort", "chat_template_kwargs",
)  # fmt: skip
_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class LineProblem:
    """A line that was not imported: ``str`` is ``file:line: field: reason``."""

    source: str
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{self.source}:{self.line}: {where}{self.reason}"


@dataclass(frozen=True)
class Redaction:
    """Something that looked like a secret and was not copied (``where``: the field)."""

    line: int
    where: str
    kind: str


@dataclass
class ParsedLine:
    """One imported request: its line, the scenario data and what was redacted."""

    line: int
    data: dict[str, Any]
    stream: bool
    redactions: list[Redaction] = field(default_factory=list)


@dataclass
class ImportReport:
    """What an import did: scenarios by id (first line wins), duplicates, problems."""

    scenarios: dict[str, ParsedLine] = field(default_factory=dict)
    duplicates: list[tuple[int, int, str]] = field(default_factory=list)  # (line, first, id)
    problems: list[LineProblem] = field(default_factory=list)
    redactions: list[Redaction] = field(default_factory=list)
    lines: int = 0


class _Bad(Exception):
    """A problem with one line: the field and the reason."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(reason)
        self.where, self.reason = where, reason


# ------------------------------------------------------------------ reading


@dataclass(frozen=True)
class Unread:
    """A line :func:`read_lines` did not hand over as text: why (one line)."""

    reason: str


def read_lines(path: Path) -> Iterator[tuple[int, str | Unread]]:
    """``(1-based line number, text)`` of every non-blank line of a UTF-8 file; a line that
    is not UTF-8 or is longer than :data:`MAX_LINE_BYTES` comes as an :class:`Unread` (the
    other lines are still read). A line with no end within another :data:`MAX_LINE_BYTES`
    (``/dev/zero``) ends the reading, so at most twice that is read past the last line.

    Raises:
        ScenarioError: the file cannot be read (names the file and the fix).
    """
    try:
        with path.open("rb") as fh:
            yield from _lines_of(fh)
    except FileNotFoundError:
        raise ScenarioError(path, "", "no such file; give a JSONL file of requests") from None
    except OSError as exc:
        raise ScenarioError(path, "", f"cannot read: {exc.strerror}") from None


def _lines_of(fh: BinaryIO) -> Iterator[tuple[int, str | Unread]]:
    n = 0
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        n += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            cap = f"{MAX_LINE_BYTES:,} bytes"
            if not _skip_line(fh, MAX_LINE_BYTES):
                yield n, Unread(f"longer than {cap} and no end of line within {cap} more: "
                                "the rest of the file is not read; is it a JSONL file?")  # fmt: skip
                return
            yield n, Unread(f"longer than {cap} (the cap of a line); not read")
            continue
        if n == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a BOM is dropped
            raw = raw[3:]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield n, Unread(f"not UTF-8 (byte {exc.start} of the line); save it as UTF-8")
            continue
        if text.strip():
            yield n, text


def _skip_line(fh: BinaryIO, limit: int) -> bool:
    """Read past the end of the current line (at most ``limit`` bytes); whether it ended."""
    skipped = 0
    while skipped < limit:
        chunk = fh.readline(min(1 << 20, limit - skipped))
        if not chunk or chunk.endswith(b"\n"):
            return True
        skipped += len(chunk)
    return False


def _as_object(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):  # a spend-log column may hold JSON text
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _Bad(where, f"not valid JSON text ({exc.msg})") from None
    if not isinstance(value, dict):
        raise _Bad(where, "must be a JSON object")
    return value


def unwrap(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``(request body, headers, field path)`` of one line (the envelopes above).

    Raises:
        _Bad: an envelope holds no request object.
    """
    headers: dict[str, Any] = {}
    where = ""
    for _ in range(3):  # a spend-log row -> proxy_server_request -> body
        if "messages" in obj:
            return obj, headers, where
        for key in ("proxy_server_request", "request", "body"):
            if key in obj:
                where = f"{where}.{key}" if where else key
                if isinstance(obj.get("headers"), dict):
                    headers = obj["headers"]
                obj = _as_object(obj[key], where)
                break
        else:
            break
    if "messages" not in obj:
        raise _Bad(where or "messages", "no 'messages': not a chat-completions request body")
    own = obj.get("headers")
    return obj, (own if isinstance(own, dict) else headers), where


# ------------------------------------------------------------------ secrets


def redact_text(text: str) -> tuple[str, list[str]]:
    """``text`` with every :data:`SECRET_PATTERNS` match replaced, and the kinds found."""
    kinds: list[str] = []
    for name, pattern in SECRET_PATTERNS:
        text, n = pattern.subn(REDACTED, text)
        kinds += [name] * (n > 0)
    return text, kinds


def _redact_data(value: Any, where: str, line: int, found: list[Redaction]) -> Any:
    """``value`` (parsed JSON) with :func:`redact_text` applied to every string in it;
    each secret found is added to ``found`` under its field path."""
    if isinstance(value, str):
        text, kinds = redact_text(value)
        found += [Redaction(line, where, k) for k in kinds]
        return text
    if isinstance(value, dict):
        return {k: _redact_data(v, f"{where}.{k}", line, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_data(v, f"{where}[{i}]", line, found) for i, v in enumerate(value)]
    return value


def _header_secrets(headers: dict[str, Any], line: int) -> list[Redaction]:
    return [
        Redaction(line, f"headers.{k}", "credential header (headers are never copied)")
        for k, v in headers.items()
        if _SECRET_HEADER.search(str(k)) or (isinstance(v, str) and redact_text(v)[1])
    ]


# ------------------------------------------------------------------ messages


def _text(content: Any, where: str) -> str:
    """Message content as text: a string, ``None`` (empty) or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", None):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _Bad(f"{where}[{i}]", f"a {kind!r} part; only text parts can be imported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise _Bad(where, "content must be a string or a list of text parts")


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise _Bad(where, "a tool call needs a 'function' object")
    fn = call["function"]
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):  # some logs keep the parsed object
        args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    cid = call.get("id")
    if not isinstance(cid, str) or not cid:
        raise _Bad(f"{where}.id", "a recorded tool call needs its id")
    return {
        "id": cid,
        "type": "function",
        "function": {"name": str(fn.get("name", "")), "arguments": args},
    }


def _message(msg: Any, i: int) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise _Bad(where, "must be an object with a 'role'")
    role = "system" if msg.get("role") == "_input" else msg.get("role")  # K2-Vendor-Verifier
    if role not in _ROLES:
        raise _Bad(f"{where}.role", f"{role!r} is not supported; one of {', '.join(_ROLES)}")
    out: dict[str, Any] = {"role": role, "content": _text(msg.get("content"), f"{where}.content")}
    if role == "assistant" and msg.get("tool_calls"):
        calls = msg["tool_calls"]
        if not isinstance(calls, list):
            raise _Bad(f"{where}.tool_calls", "must be a list")
        out["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    if role == "tool":
        if not isinstance(msg.get("tool_call_id"), str):
            raise _Bad(
                f"{where}.tool_call_id", "a tool message needs the id of the call it answers"
            )
        out["tool_call_id"] = msg["tool_call_id"]
    return out


def _opening(raw: Any) -> list[dict[str, Any]]:
    """The messages up to the last ``user`` or ``tool`` message."""
    if not isinstance(raw, list) or not raw:
        raise _Bad("messages", "must be a non-empty list")
    msgs = [_message(m, i) for i, m in enumerate(raw)]
    last = max((i for i, m in enumerate(msgs) if m["role"] in ("user", "tool")), default=None)
    if last is None:
        raise _Bad("messages", "no user or tool message to start from")
    return msgs[: last + 1]


def _redact_messages(msgs: list[dict[str, Any]], line: int) -> list[Redaction]:
    found: list[Redaction] = []
    for i, m in enumerate(msgs):
        m["content"], kinds = redact_text(m["content"])
        found += [Redaction(line, f"messages[{i}].content", k) for k in kinds]
        for j, c in enumerate(m.get("tool_calls", [])):
            c["function"]["arguments"], kinds = redact_text(c["function"]["arguments"])
            where = f"messages[{i}].tool_calls[{j}].function.arguments"
            found += [Redaction(line, where, k) for k in kinds]
    return found


# ------------------------------------------------------------------ tools


def _recorded(msgs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Recorded answers per tool name: ``match`` rules (``when`` = the call's arguments)."""
    calls = {c["id"]: c["function"] for m in msgs for c in m.get("tool_calls", [])}
    rules: dict[str, list[dict[str, Any]]] = {}
    for m in msgs:
        fn = calls.get(m.get("tool_call_id", ""))
        if m["role"] != "tool" or fn is None:
            continue
        try:
            args = json.loads(fn["arguments"] or "{}")
        except json.JSONDecodeError:
            continue  # a malformed recorded call: nothing to match on
        if not isinstance(args, dict):
            continue
        mine = rules.setdefault(fn["name"], [])
        if all(r["when"] != args for r in mine):
            mine.append({"when": args, "result": m["content"]})
    return rules


def _tools(raw: Any, recorded: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _Bad("tools", "must be a list")
    out = []
    for i, t in enumerate(raw):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _Bad(f"tools[{i}]", 'must be {"type": "function", "function": {"name": ...}}')
        tool: dict[str, Any] = {"name": fn["name"], "description": str(fn.get("description") or "")}
        if fn.get("parameters") is not None:
            tool["parameters"] = fn["parameters"]
        if isinstance(fn.get("strict"), bool):
            tool["strict"] = fn["strict"]
        tool["simulator"] = {
            "match": recorded.get(fn["name"], []),
            "default_error": "Error: no recorded result for these arguments",
        }
        out.append(tool)
    return out


# ------------------------------------------------------------------ the scenario


def _request_fields(body: dict[str, Any]) -> dict[str, Any]:
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    sampling = {"temperature": body.get("temperature"), "top_p": body.get("top_p"),
                "seed": body.get("seed")}  # fmt: skip
    # what the request set (an unset temperature leaves the command's --temperature); an
    # unset max_tokens stays unset (null: not sent), as recorded
    sampling = {k: v for k, v in sampling.items() if v is not None}
    out: dict[str, Any] = {"sampling": {**sampling, "max_tokens": max_tokens}}
    for key in ("tool_choice", "parallel_tool_calls"):
        if body.get(key) is not None:
            out[key] = body[key]
    extra = {k: body[k] for k in EXTRA_FIELDS if body.get(k) is not None}
    if extra:
        out["extra_body"] = extra
    return out


def request_id(data: dict[str, Any]) -> str:
    """``imported-`` + 12 hex digits of the sha256 of the canonical JSON of ``data``
    (the scenario's messages, tools and request fields, before id and description)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "imported-" + hashlib.sha256(blob.encode()).hexdigest()[:12]


def scenario_data(
    body: dict[str, Any], line: int, source: str
) -> tuple[dict[str, Any], list[Redaction]]:
    """The scenario (as file data, validated) of one request body, and what was redacted.

    Raises:
        _Bad: the body is not an importable request (field and reason).
    """
    msgs = _opening(body.get("messages"))
    redactions = _redact_messages(msgs, line)
    tools = _tools(body.get("tools"), _recorded(msgs))
    for i, tool in enumerate(tools):
        tool["description"], kinds = redact_text(tool["description"])
        redactions += [Redaction(line, f"tools[{i}].description", k) for k in kinds]
        if "parameters" in tool:  # a default, a description, an example, an enum value
            where = f"tools[{i}].parameters"
            tool["parameters"] = _redact_data(tool["parameters"], where, line, redactions)
    core: dict[str, Any] = {"messages": msgs, "tools": tools}
    core |= _request_fields(body)
    if "extra_body" in core:  # stop strings, response_format's schema
        core["extra_body"] = _redact_data(core["extra_body"], "extra_body", line, redactions)
    rid = request_id(core)
    results = sum(m["role"] == "tool" for m in msgs)
    data: dict[str, Any] = {
        "id": rid,
        "description": f"Imported from {Path(source).name} line {line}: {len(msgs)} messages, "
        f"{results} recorded tool results; no golden run (schema and protocol checks only).",
        "tags": ["imported", "tool-results" if results else "no-tool-results"],
        **core,
        "expect": {"calls": [], "final_answer": {"required": False}},
    }
    try:
        scenario_from_data(data, source)
        scenario_text(data)  # within the limits `list` and `run` read files with
    except ScenarioError as exc:
        raise _Bad(exc.field, exc.reason) from None
    return data, redactions


def scenario_text(data: dict[str, Any]) -> str:
    """The YAML file of scenario ``data``, checked as a scenario file is read
    (:func:`harness.scenario.parse.parse_text`: size, depth), so that ``harness list`` and
    ``harness run`` take it.

    Raises:
        ScenarioError: over a limit (the reason names it; the field is empty).
    """
    text: str = yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=100)
    try:
        parse_text(text, Path(f"{data['id']}.yaml"))
    except ScenarioError as exc:
        raise ScenarioError(None, "", f"as a scenario file: {exc.reason}") from None
    return text


def _parse(n: int, text: str, source: str) -> ParsedLine:
    deep = f"nested deeper than {MAX_DEPTH} levels (the cap of a scenario file)"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad("", f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # json's C decoder: a line nested about 1,000 levels deep
        raise _Bad("", deep) from None
    most = MAX_DEPTH + _ENVELOPE_LEVELS
    if nesting_depth(obj, most) > most:  # refused before any recursive step
        raise _Bad("", deep)
    if not isinstance(obj, dict):
        raise _Bad("", "must be a JSON object (a request body, or one in an envelope)")
    body, headers, where = unwrap(obj)
    try:
        data, redactions = scenario_data(body, n, source)
    except _Bad as exc:
        raise _Bad(
            f"{where}.{exc.where}" if where and exc.where else exc.where, exc.reason
        ) from None
    return ParsedLine(n, data, bool(body.get("stream")), _header_secrets(headers, n) + redactions)


def import_lines(lines: Iterable[tuple[int, str | Unread]], source: str) -> ImportReport:
    """Parse every line; duplicates merged into the first line with the same id.

    Returns:
        :class:`ImportReport` (never raises for a bad line: it is a :class:`LineProblem`).
    """
    report = ImportReport()
    for n, text in lines:
        report.lines += 1
        try:
            if isinstance(text, Unread):
                raise _Bad("", text.reason)
            parsed = _parse(n, text, source)
        except _Bad as exc:
            report.problems.append(LineProblem(source, n, exc.where, exc.reason))
            continue
        report.redactions += parsed.redactions
        rid = parsed.data["id"]
        first = report.scenarios.get(rid)
        if first is not None:
            report.duplicates.append((n, first.line, rid))
            continue
        report.scenarios[rid] = parsed
    return report


def loaded(parsed: ParsedLine) -> Scenario:
    """The :class:`Scenario` of an imported line (already validated once)."""
    return scenario_from_data(parsed.data)
