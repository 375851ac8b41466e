r"""Tool calls leaked into ``content``: a call written as text instead of sent as ``tool_calls``.

When a server's tool-call parser does not recognise what the model wrote (a new chat
template, a special token the detokenizer kept, a call after a sentence of prose), the
call reaches the client as text in ``message.content`` with ``tool_calls`` empty and
finish_reason ``stop``, and a client that trusts the wire takes it for the final answer.
:func:`find_leaks` recovers such calls from any text, by shape and by the declared tool
names; :func:`markup_tokens` lists the tool-call markup and chat-template tokens left in
it (each parser format's delimiters: :mod:`harness.scoring.markup`). Both are pure
functions of the text and the request's tools.

A *leaked call* names a declared tool and carries an arguments-like object, in one of
these dialects (``Leak.dialect``):

==============  ========================================================================
``json``        ``{"name": T, "arguments"|"parameters"|"args"|"input": {...}}``, alone or in a
                JSON array; arguments an object or a string holding one (Hermes/Qwen
                ``<tool_call>``, Llama 3.x JSON, Mistral ``[TOOL_CALLS][...]``)
``openai``      the OpenAI wire shape as text: ``{"tool_calls": [{"type": "function",
                "function": {"name": T, "arguments": "..."}}]}``, or one such entry
``pythonic``    ``[T(a="x"), U(b=1)]`` or a call alone on its line, keyword arguments with
                literal values (Llama 3.2/4 pythonic, vLLM's ``pythonic`` parser); parsed
                with :mod:`ast` and :func:`ast.literal_eval`, never evaluated
``name_json``   ``T{...}``, ``T\n{...}``, ``functions.T:0 {...}``, ``to=functions.T ...json
                {...}``: the tool's name, then a JSON object whose keys are all parameters
                of the tool, or any object when the name starts its line (as it does
                between special tokens) (Kimi K2, DeepSeek V3, gpt-oss harmony, LFM2)
``xml``         ``<function=T><parameter=k>v</parameter></function>`` (Qwen3-Coder)
==============  ========================================================================

Wrapping does not matter: special tokens known or not (``<|...|>``, ``<｜...｜>``,
``[TOOL_CALLS]``-style, ``<tool_call>``-style tags), markdown fences (```` ```json ````)
and prose before or after are read through. What is *not* a leak: prose that names a
tool ("I looked up order A-17 with lookup_order"), a call-like text in the middle of a
sentence, JSON that is not a call shape (an answer object, a tool *definition* with a
``description`` or a JSON Schema as ``parameters``), a name that is not a declared tool.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from harness.scoring.markup import MARKUP_PATTERNS

__all__ = [
    "MARKUP_PATTERNS",
    "Leak",
    "ToolParams",
    "find_leaks",
    "markup_tokens",
    "tool_params",
]

#: any special token of the ``<|name|>`` / ``<｜name｜>`` shape, known or not
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,48}\|>|<｜[^<>｜\s]{1,48}｜>")
_BRACKET_TOKEN = re.compile(r"\[/?[A-Z][A-Z_]{2,30}\]")
_TAG = re.compile(r"</?[A-Za-z_][\w.:-]{0,40}>")
_FENCE = re.compile(r"^[ \t]*(?:`{3,}|~{3,})[\w+-]*[ \t]*$", re.MULTILINE)
_FUNCTION_TAG = re.compile(r"<function=([\w.-]{1,64})>")
_XML_CALL = re.compile(r"<function=([\w.-]{1,64})>(.*?)</function>", re.DOTALL)
_XML_PARAM = re.compile(r"<parameter=([\w.-]{1,64})>\n?(.*?)\n?</parameter>", re.DOTALL)
_PAREN = re.compile(r"\s*\(")
_GAP = re.compile(r"(?::\d+)?\s*(?:json\s*)?\{")  # between a name and its arguments
_ARG_KEYS = ("arguments", "parameters", "args", "input")
_MAX_CHARS = 50_000  # longer content is read up to here
_MAX_TRIES = 400  # JSON decode attempts per text
_MAX_CALL = 4_000  # characters of one pythonic call

#: declared tools: name -> the names of its parameters (``None``: not known)
ToolParams = Mapping[str, frozenset[str] | None]


@dataclass(frozen=True)
class Leak:
    """One call recovered from text: ``tool`` (a declared name), ``arguments`` (the object
    written; ``{}`` when none), ``dialect`` (see the module table), ``start``/``end``
    (character span in the text as read: special tokens and fences replaced by newlines)."""

    tool: str
    arguments: dict[str, Any]
    dialect: str
    start: int
    end: int


def tool_params(tools: Iterable[Any]) -> dict[str, frozenset[str] | None]:
    """``{name: parameter names}`` of tools in the OpenAI request format
    (``{"type": "function", "function": {"name", "parameters"}}``) or the scenario format
    (``{"name", "parameters"}``); entries without a name are skipped."""
    out: dict[str, frozenset[str] | None] = {}
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) and "function" in t else t
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        props = (fn.get("parameters") or {}).get("properties")
        out[fn["name"]] = frozenset(props) if isinstance(props, dict) else None
    return out


def markup_tokens(content: str) -> list[str]:
    """The tool-call markup and chat-template tokens in ``content``, in order, each once:
    every supported parser format's delimiters (:data:`harness.scoring.markup.CALL_MARKUP`,
    with the template tokens: :data:`MARKUP_PATTERNS`) and any ``<|name|>``-shaped special
    token."""
    found = [m.group(0) for p in (MARKUP_PATTERNS, _SPECIAL) for m in p.finditer(content)]
    return sorted(set(found), key=content.find)


def find_leaks(content: str | None, tools: ToolParams) -> list[Leak]:
    """Every call to a tool of ``tools`` written into ``content`` (see the module docstring).

    Returns an empty list when ``tools`` is empty or nothing in the text has a call shape.
    Pure; reads at most the first 50,000 characters; never evaluates the text.
    """
    if not content or not tools:
        return []
    text = content[:_MAX_CHARS]
    plain = _plain(text)
    leaks: list[Leak] = []
    for found in (_json_calls(plain, tools), _name_json(plain, tools), _pythonic(plain, tools)):
        leaks += [a for a in found if not any(a.start < b.end and b.start < a.end for b in leaks)]
    return _xml_calls(text, tools) + leaks


# ------------------------------------------------------------------ reading the text


def _plain(text: str) -> str:
    """``text`` with ``<function=T>`` as ``T``, and special tokens, tags, bracket tokens
    and fence lines as newlines (so a wrapped call stands on its own line)."""
    text = _FUNCTION_TAG.sub(lambda m: f"\n{m.group(1)}\n", text)
    for pattern in (MARKUP_PATTERNS, _SPECIAL, _BRACKET_TOKEN, _TAG, _FENCE):
        text = pattern.sub("\n", text)
    return text


def _names(tools: ToolParams) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(tools, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])({alternatives})(?![\w-])")


def _as_object(value: Any) -> dict[str, Any] | None:
    """An arguments value as an object: the object, or a string holding one; else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _is_schema(args: dict[str, Any]) -> bool:
    """Whether ``args`` is a JSON Schema (a tool definition's ``parameters``), not values."""
    return args.get("type") == "object" and isinstance(args.get("properties"), dict)


# ------------------------------------------------------------------ JSON shapes


def _json_values(text: str) -> Iterator[tuple[int, int, Any]]:
    """``(start, end, value)`` of each outermost JSON object or array in ``text``."""
    decoder = json.JSONDecoder()
    pos = tries = 0
    while tries < _MAX_TRIES:
        start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
        if start < 0:
            return
        tries += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            pos = start + 1
            continue
        yield start, end, value
        pos = end


def _shapes(value: Any, tools: ToolParams, dialect: str) -> list[tuple[str, dict[str, Any], str]]:
    """``(tool, arguments, dialect)`` of every call shape in one decoded JSON value."""
    if isinstance(value, list):
        return [c for v in value[:64] for c in _shapes(v, tools, dialect)]
    if not isinstance(value, dict):
        return []
    if isinstance(value.get("tool_calls"), list):
        return _shapes(value["tool_calls"], tools, "openai")
    fn = value.get("function", value.get("function_call"))
    if isinstance(fn, dict):
        return _shapes(fn, tools, "openai")
    name, key = value.get("name"), next((k for k in _ARG_KEYS if k in value), None)
    if not isinstance(name, str) or name not in tools or key is None or "description" in value:
        return []
    args = _as_object(value[key])
    if args is None or _is_schema(args):
        return []
    return [(name, args, dialect)]


def _json_calls(text: str, tools: ToolParams) -> list[Leak]:
    return [
        Leak(name, args, dialect, start, end)
        for start, end, value in _json_values(text)
        for name, args, dialect in _shapes(value, tools, "json")
    ]


def _name_json(text: str, tools: ToolParams) -> list[Leak]:
    """``T{...}``: a declared name, a short gap, then an object: of the tool's parameters,
    or of any keys when the name stands at the start of its line (wrapped in tokens)."""
    decoder = json.JSONDecoder()
    out = []
    for m in _names(tools).finditer(text):
        g = _GAP.match(text, m.end())
        if g is None:
            continue
        try:
            args, end = decoder.raw_decode(text, g.end() - 1)
        except (ValueError, RecursionError):
            continue
        known = tools[m.group(1)]
        alone = not _line_before(text, m.start()).removesuffix("functions.")
        fits = isinstance(args, dict) and (alone or known is None or set(args) <= known)
        if fits and (args or not known):
            out.append(Leak(m.group(1), args, "name_json", m.start(), end))
    return out


# ------------------------------------------------------------------ pythonic and XML


def _literal_call(source: str, name: str) -> dict[str, Any] | None:
    """The keyword arguments of ``source`` if it is exactly ``name(k=literal, ...)``."""
    try:
        node = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    func = node.func if isinstance(node, ast.Call) else None
    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if not isinstance(node, ast.Call) or called != name or node.args:
        return None
    try:
        return {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


def _call_at(
    text: str, start: int, name: str, budget: list[int]
) -> tuple[dict[str, Any], int] | None:
    """``(arguments, end)`` of the literal call to ``name`` starting at ``start``, if any;
    each parse attempt spends one of ``budget[0]``."""
    pos = text.find("(", start)
    while budget[0] > 0:
        pos = text.find(")", pos + 1)
        if pos < 0 or pos - start > _MAX_CALL:
            return None
        budget[0] -= 1
        args = _literal_call(text[start : pos + 1], name)
        if args is not None:
            return args, pos + 1
    return None


def _line_before(text: str, start: int) -> str:
    return text[text.rfind("\n", 0, start) + 1 : start].strip(" \t`")


def _standalone(text: str, start: int, end: int) -> bool:
    """A call inside ``[...]`` (a list of calls), or alone on its line."""
    before = _line_before(text, start)
    after = text[end:].split("\n", 1)[0].strip()
    if before.endswith(("[", ",")) and after.startswith(("]", ",")):
        return True
    return not before and after.strip("`;") == ""


def _pythonic(text: str, tools: ToolParams) -> list[Leak]:
    """Literal calls in a list or alone on their line (at most 400 parse attempts)."""
    out, budget = [], [_MAX_TRIES]
    for m in _names(tools).finditer(text):
        start = m.start() - (len("functions.") if text[: m.start()].endswith("functions.") else 0)
        before = _line_before(text, start)
        if not _PAREN.match(text, m.end()) or (before and before[-1] not in "[,"):
            continue
        found = _call_at(text, start, m.group(1), budget)
        if found is not None and _standalone(text, start, found[1]):
            out.append(Leak(m.group(1), found[0], "pythonic", start, found[1]))
    return out


def _xml_calls(text: str, tools: ToolParams) -> list[Leak]:
    """``<function=T><parameter=k>v</parameter></function>``; values JSON if they parse."""
    out = []
    for m in _XML_CALL.finditer(text):
        if m.group(1) not in tools or "<parameter=" not in m.group(2):
            continue
        args: dict[str, Any] = {}
        for p in _XML_PARAM.finditer(m.group(2)):
            try:
                args[p.group(1)] = json.loads(p.group(2))
            except (ValueError, RecursionError):
                args[p.group(1)] = p.group(2)
        out.append(Leak(m.group(1), args, "xml", m.start(), m.end()))
    return out
