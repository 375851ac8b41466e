"""Token classes: what each scored position of a sequence is, from the rendered conversation.

Every position of a teacher-forced sequence gets one class (:data:`CLASSES`):

- ``tool_name``: a tool call's function name;
- ``arg_key`` / ``arg_value``: the keys and the scalar values of its arguments (nested
  objects and lists included: their keys are keys, their leaves values);
- ``prose``: an assistant message's content (the final answer, or text beside calls);
- ``reasoning``: an assistant's reasoning (``reasoning_content``, or the inside of a
  ``<think>...</think>`` block in its content);
- ``input``: what the model is given rather than writes: system, user and tool-result
  content;
- ``markup``: everything else: the chat template's role headers, special tokens and
  delimiters, and the JSON or XML syntax around a call (braces, quotes, colons, commas,
  the wrapper's ``name``/``arguments`` keys).

How (:func:`label_conversation`): the token texts the server returned (every adapter
keeps them: vLLM's ``decoded_token``, SGLang's ``return_text_in_logprobs`` texts, the
echo ``tokens``) are joined into the rendered text, each token owning its character span.
The conversation's segments (each message's content, each call's name, each argument
key and value) are found in that text in message order, from a cursor: a message's
content after the previous message's segments, a call's name after its message's content,
its keys and values after its name, within a window of the arguments' length three times
over plus 200 characters (so a key is never taken from a later message). Keys are looked
up from the call's name rather than one after another, so a template that re-serialises
arguments with its keys sorted (Jinja's ``tojson``) is labelled alike; a value is looked
up after its key. A segment is looked up as written (whitespace stripped), JSON-escaped
once and twice (arguments a template writes as a JSON string inside JSON, as ChatML's
``<tool_call>`` does): the earliest form found wins. One the text does not hold is counted
in ``missing`` and its characters stay ``markup``; segments after the last one found are
not counted, the text ends before them, as a sequence cut at the token budget does. Such a
sequence holds the head of its last segment: a segment whose head (its first 8
characters) is found and runs to the end of the text is labelled up to there.

Boundaries: a token whose characters belong to more than one class (a BPE token such as
`` "city`` holds a quote and a key) takes the content class (any class but ``markup``) with
the most characters in it, the earlier one on a tie; it is ``markup`` only when all its
characters are. Content is never lost to the syntax around it, and every token counts once.

Plain prompts (GSM8K) are ``prose`` throughout. Generated tokens (the greedy decode path,
:func:`label_generated`) are labelled from their own text, as no reference rendering holds
them: ``<think>`` blocks are reasoning; a JSON tool call (``{"name": ..., "arguments":
{...}}``, whole or cut) gives its name, keys and values; special tokens (``<|...|>``)
and the chat format's tags (``<tool_call>``, ``<tool_response>``: a small model writes the
latter too) are markup; the rest is prose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CLASSES", "Labels", "label_conversation", "label_generated", "label_plain"]

#: token classes, in the order tables list them
CLASSES: tuple[str, ...] = (
    "tool_name", "arg_key", "arg_value", "prose", "reasoning", "input", "markup",
)  # fmt: skip
MARKUP = "markup"
#: characters of a segment's head looked up when the whole segment is not found (a cut)
_HEAD = 8
#: characters a template may add around one call's arguments (tags, wrapper keys)
_CALL_MARKUP = 200
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)


@dataclass
class Labels:
    """One class per token (``classes[i]`` for token i) and the segments not found in
    the rendered text (``missing``: their characters stayed markup)."""

    classes: list[str]
    missing: int = 0


@dataclass
class _Marks:
    """Per character of the rendered text: its class; a cursor for the search."""

    text: str
    chars: list[str] = field(default_factory=list)
    cursor: int = 0
    missing: int = 0
    #: segments not found since the last one found (the text may end before them)
    trailing: int = 0

    def __post_init__(self) -> None:
        self.chars = [MARKUP] * len(self.text)

    def find(self, segment: str, start: int, limit: int | None = None) -> tuple[int, int] | None:
        """``(begin, end)`` of the earliest of ``segment``'s forms (stripped, JSON-escaped
        once, twice: arguments a template writes as a JSON string) beginning in
        ``[start, limit)``, or of its head when it runs to the end of the text (a cut)."""
        s = segment.strip()
        if not s:
            return None
        once = json.dumps(s)[1:-1]
        best: tuple[int, int] | None = None
        for form in dict.fromkeys((s, once, json.dumps(once)[1:-1])):
            at = self.text.find(form, start, limit)
            span = (at, at + len(form)) if at >= 0 else None
            if span is None:
                at = self.text.find(form[:_HEAD], start, limit)
                if at >= 0 and form.startswith(self.text[at:]):
                    span = (at, len(self.text))
            if span is not None and (best is None or span[0] < best[0]):
                best = span
        return best

    def mark(
        self, segment: str, cls: str, start: int | None = None, limit: int | None = None
    ) -> int | None:
        """Label ``segment`` found from ``start`` (the cursor by default) to ``limit``;
        its end, or None (counted as missing) when the text does not hold it there."""
        span = self.find(segment, self.cursor if start is None else start, limit)
        if span is None:
            self.trailing += 1 if segment.strip() else 0
            return None
        self.missing, self.trailing = self.missing + self.trailing, 0
        self.chars[span[0] : span[1]] = [cls] * (span[1] - span[0])
        return span[1]


def _offsets(texts: Sequence[str]) -> list[tuple[int, int]]:
    out, at = [], 0
    for t in texts:
        out.append((at, at + len(t)))
        at += len(t)
    return out


def _per_token(marks: _Marks, texts: Sequence[str]) -> list[str]:
    """Each token's class from its characters' (the boundary rule, module docstring)."""
    out = []
    for a, b in _offsets(texts):
        counts: dict[str, int] = {}
        for c in marks.chars[a:b]:
            if c != MARKUP:
                counts[c] = counts.get(c, 0) + 1
        out.append(max(counts, key=lambda k: counts[k]) if counts else MARKUP)
    return out


def _leaves(value: Any) -> Iterable[tuple[str | None, Any]]:
    """``(key, scalar)`` pairs of a JSON value in order; a key with a container value
    comes with ``None`` as its scalar, then the container's own pairs."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                yield str(k), None
                yield from _leaves(v)
            else:
                yield str(k), v
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v) if isinstance(v, (dict, list)) else [(None, v)]


def _scalar(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _mark_call(marks: _Marks, call: dict[str, Any]) -> None:
    fn = call.get("function") or {}
    name = fn.get("name")
    end = marks.mark(name, "tool_name") if isinstance(name, str) else None
    if end is None:
        return
    raw = fn.get("arguments")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = None
    if not isinstance(args, (dict, list)):  # not JSON: the whole text is one value
        marks.cursor = marks.mark(str(raw or ""), "arg_value", end) or end
        return
    last, after = end, end
    # the arguments as rendered: at most their JSON escaped twice, plus a template's markup
    limit = end + 3 * len(json.dumps(args)) + _CALL_MARKUP
    for key, v in _leaves(args):
        at = after
        if key is not None:
            span = marks.find(f'"{key}"', end, limit)
            k_end = marks.mark(key, "arg_key", span[0] if span else end, limit)
            at = k_end if k_end is not None else after
        if v is not None:
            v_end = marks.mark(_scalar(v), "arg_value", at, limit)
            after = v_end if v_end is not None else at
        else:
            after = at
        last = max(last, after)
    marks.cursor = last


def _mark_content(marks: _Marks, content: str, cls: str) -> None:
    """Content of class ``cls``; in an assistant's prose, ``<think>`` blocks are reasoning."""
    pieces: list[tuple[str, str]] = []
    if cls == "prose":
        at = 0
        for m in _THINK.finditer(content):
            pieces += [(content[at : m.start()], cls), (m.group(1), "reasoning")]
            at = m.end()
        pieces.append((content[at:], cls))
    else:
        pieces = [(content, cls)]
    for text, c in pieces:
        end = marks.mark(text, c)
        if end is not None:
            marks.cursor = end


def label_conversation(messages: Sequence[dict[str, Any]], texts: Sequence[str]) -> Labels:
    """One class per token of ``texts`` (the server's token texts of the rendered
    ``messages``, OpenAI chat messages), by the method of the module docstring."""
    marks = _Marks("".join(texts))
    for m in messages:
        role = m.get("role")
        assistant = role == "assistant"
        reasoning = m.get("reasoning_content") or m.get("reasoning")
        if assistant and isinstance(reasoning, str):
            _mark_content(marks, reasoning, "reasoning")
        content = m.get("content")
        if isinstance(content, list):  # content parts: their text
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str):
            _mark_content(marks, content, "prose" if assistant else "input")
        for call in m.get("tool_calls") or [] if assistant else []:
            if isinstance(call, dict):
                _mark_call(marks, call)
    return Labels(_per_token(marks, texts), marks.missing)


def label_plain(texts: Sequence[str]) -> Labels:
    """A plain prompt's tokens: ``prose`` throughout."""
    return Labels(["prose"] * len(texts))


#: special tokens and tool-call tags in generated text
_SPECIAL = re.compile(r"<\|[^|>]{1,40}\|>|<｜[^｜]{1,40}｜>|</?(?:tool_call|tool_response|think)>")
_CALL = re.compile(r'\{\s*"name"\s*:\s*"([^"]*)"?(?:\s*,\s*"(?:arguments|parameters)"\s*:\s*)?')
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null')


def _mark_json_args(marks: _Marks, start: int) -> int:
    """Keys and values of the JSON object at ``start`` (cut or whole); its end."""
    text, depth, i = marks.text, 0, start
    while i < len(text):
        ch = text[i]
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                return i + 1
        m = _JSON_TOKEN.match(text, i) if ch not in "{}[],: \n\t" else None
        if m is None:
            i += 1
            continue
        key = text[m.end() :].lstrip().startswith(":") and ch == '"'
        inner = (m.start() + 1, m.end() - (m.group(0).endswith('"') and len(m.group(0)) > 1))
        a, b = inner if ch == '"' else (m.start(), m.end())
        marks.chars[a:b] = ["arg_key" if key else "arg_value"] * (b - a)
        i = m.end()
    return len(text)


def label_generated(texts: Sequence[str]) -> Labels:
    """One class per generated token, from the generated text alone (module docstring)."""
    marks = _Marks("".join(texts))
    text = marks.text
    special = [(m.start(), m.end()) for m in _SPECIAL.finditer(text)]
    marks.chars = ["prose"] * len(text)
    for m in _THINK.finditer(text):
        marks.chars[m.start(1) : m.end(1)] = ["reasoning"] * (m.end(1) - m.start(1))
    for m in _CALL.finditer(text):
        marks.chars[m.start() : m.end()] = [MARKUP] * (m.end() - m.start())
        marks.chars[m.start(1) : m.end(1)] = ["tool_name"] * (m.end(1) - m.start(1))
        if text[m.end() : m.end() + 1] == "{":
            end = _mark_json_args(marks, m.end())
            close = re.match(r"\s*\}", text[end:])  # the wrapper's own brace
            end += close.end() if close else 0
            for j in range(m.end(), end):
                if marks.chars[j] == "prose":
                    marks.chars[j] = MARKUP
    for a, b in special:
        marks.chars[a:b] = [MARKUP] * (b - a)
    return Labels(_per_token(marks, texts))
