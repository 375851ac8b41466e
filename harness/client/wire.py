"""The wire format of a chat completion: a response body or an SSE stream, read within a
byte cap, parsed as received into a :class:`harness.transcript.ResponseRecord`.

- non-streaming (:func:`parse_completion`): the JSON body (``raw``) and
  ``choices[0].message``: ``content``, ``reasoning_content`` (or ``reasoning``),
  ``tool_calls`` with ``arguments`` exactly as received (a string normally; an object if
  the server sent one), legacy ``function_call``, ``finish_reason``, ``usage``;
- streaming (SSE: :func:`sse_lines`, :func:`read_sse`): the list of chunk objects
  (``raw``), with ``tool_calls`` deltas assembled by ``index`` (:class:`StreamAssembler`,
  which lists its rules).

A body that cannot be read raises :class:`~harness.errors.RequestFailed`:
``invalid_body`` (not JSON, not UTF-8, no ``choices[0].message``, a stream chunk that is
not JSON or has no ``choices``, an empty stream, a body over the size cap) or ``other``
(an error object in the body). A 429/503 answer's ``Retry-After`` (seconds or an HTTP
date, RFC 9110 section 10.2.3) is read by :func:`retry_after_s`. Making the request is
:mod:`harness.client.completions`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from harness.errors import RequestFailed
from harness.transcript import ResponseRecord, ToolCallRecord, render

__all__ = [
    "ReadBudget",
    "StreamAssembler",
    "accumulate",
    "parse_completion",
    "read_body",
    "read_sse",
    "retry_after_s",
    "sse_lines",
]


class ReadBudget:
    """Counts the bytes read of one response body against a cap (``max_bytes``: the
    attempt's ``Limits.max_bytes``, :mod:`harness.client.completions`); ``read``: the bytes
    read so far."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.read = max_bytes, 0

    def take(self, n: int) -> None:
        """Count ``n`` more bytes read.

        Raises:
            RequestFailed: ``invalid_body`` (not transient) once more than ``max_bytes``
                have been read.
        """
        self.read += n
        if self.read > self.max_bytes:
            raise RequestFailed(
                "invalid_body",
                f"response larger than --max-response-bytes {self.max_bytes:,}: reading "
                f"stopped after {self.read:,} bytes (raise --max-response-bytes to accept it)",
                transient=False,
            )


async def read_body(resp: Any, budget: ReadBudget) -> bytes:
    """The whole body of ``resp`` (an HTTP response read as it streams), at most
    ``budget.max_bytes`` (a larger ``Content-Length`` is refused before reading).

    Raises:
        RequestFailed: ``invalid_body`` for a body over the cap.
    """
    length = resp.headers.get("content-length", "")
    if length.isdigit() and int(length) > budget.max_bytes:
        budget.take(int(length))
    parts: list[bytes] = []
    async for chunk in resp.aiter_bytes():
        budget.take(len(chunk))
        parts.append(chunk)
    return b"".join(parts)


def _decode_line(line: bytes, offset: int) -> str:
    try:
        return line.removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestFailed(
            "invalid_body",
            f"stream is not valid UTF-8 at byte {offset + exc.start}: "
            f"{line[max(0, exc.start - 20) : exc.start + 20]!r}",
        ) from None


async def sse_lines(chunks: AsyncIterator[bytes], budget: ReadBudget) -> AsyncIterator[str]:
    r"""The lines of an SSE body (``\n`` or ``\r\n`` ended), each decoded as strict
    UTF-8 (the SSE format, WHATWG HTML section 9.2.5); at most ``budget.max_bytes`` read.

    Raises:
        RequestFailed: ``invalid_body`` for bytes that are not UTF-8 (a stream is refused
            as a non-streaming body is, never decoded with replacement characters) or a
            body over the cap.
    """
    buf, offset = b"", 0
    async for chunk in chunks:
        budget.take(len(chunk))
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield _decode_line(line, offset)
            offset += len(line) + 1
    if buf:
        yield _decode_line(buf, offset)


def retry_after_s(headers: Any) -> float | None:
    """``Retry-After`` in seconds (delay-seconds or an HTTP date, RFC 9110 section
    10.2.3), or ``None`` when absent or unreadable; never negative."""
    value = (headers.get("retry-after") or "").strip() if headers is not None else ""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _text(content: Any) -> str | None:
    """Message content as text: strings as is, a list of parts joined, else compact JSON."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "".join(p for p in parts if isinstance(p, str))
    return render(content)


#: the fields of a message, of a ``tool_calls`` entry and of its ``function`` that the
#: record reads; the others are kept as received (``extra``) and sent back
_MESSAGE_KEYS = frozenset({"role", "content", "reasoning_content", "reasoning", "tool_calls"})
_CALL_KEYS = frozenset({"index", "id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})


def _others(obj: dict[str, Any], known: frozenset[str]) -> dict[str, Any] | None:
    """``obj``'s fields outside ``known``, or None when there are none."""
    out = {k: v for k, v in obj.items() if k not in known}
    return out or None


def _call_record(i: int, tc: Any) -> ToolCallRecord:
    if not isinstance(tc, dict):
        return ToolCallRecord(index=i, arguments=tc)
    fn_raw = tc.get("function")
    fn: dict[str, Any] = fn_raw if isinstance(fn_raw, dict) else {}
    idx = tc.get("index")
    return ToolCallRecord(
        index=idx if isinstance(idx, int) else i,
        id=_opt_str(tc.get("id")),
        type=_opt_str(tc.get("type")),
        name=_opt_str(fn.get("name")),
        arguments=fn.get("arguments"),
        extra=_others(tc, _CALL_KEYS),
        function_extra=_others(fn, _FUNCTION_KEYS),
    )


def accumulate(acc: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """``delta`` merged into ``acc`` as openai-python's ``accumulate_delta``
    (``lib/streaming/_deltas.py``) merges stream deltas: a new key or a None value is set,
    ``index``/``type`` replaced, strings concatenated, numbers added, objects merged
    recursively, lists extended; anything else (a None delta) keeps the value."""
    for key, value in delta.items():
        prev = acc.get(key)
        if prev is None or key in ("index", "type"):
            acc[key] = value
        elif isinstance(prev, str) and isinstance(value, str):
            acc[key] = prev + value
        elif isinstance(prev, dict) and isinstance(value, dict):
            acc[key] = accumulate(dict(prev), value)
        elif isinstance(prev, list) and isinstance(value, list) or _number(prev) and _number(value):
            acc[key] = prev + value
    return acc


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_completion(body: bytes) -> ResponseRecord:
    """A non-streaming response body -> :class:`ResponseRecord` (``raw`` = the parsed body).

    Raises:
        RequestFailed: ``invalid_body`` if the body is not JSON or has no ``choices[0].message``.
    """
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise RequestFailed("invalid_body", f"response is not JSON: {body[:200]!r}") from None
    if isinstance(data, dict) and "error" in data and "choices" not in data:
        raise RequestFailed("other", f"server returned an error object: {render(data['error'])}")
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise RequestFailed("invalid_body", f"response has no choices: {render(data)[:200]}")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise RequestFailed("invalid_body", "response choices[0] has no message object")
    calls_raw = msg.get("tool_calls")
    calls: list[Any] = calls_raw if isinstance(calls_raw, list) else []
    return ResponseRecord(
        content=_text(msg.get("content")),
        reasoning_content=_opt_str(msg.get("reasoning_content") or msg.get("reasoning")),
        tool_calls=[_call_record(i, tc) for i, tc in enumerate(calls)],
        function_call=msg.get("function_call")
        if isinstance(msg.get("function_call"), dict)
        else None,
        finish_reason=_opt_str(choices[0].get("finish_reason")),
        usage=data.get("usage") if isinstance(data.get("usage"), dict) else None,
        model=_opt_str(data.get("model")),
        raw=data,
        choices=len(choices),
        extra=_others(msg, _MESSAGE_KEYS),
    )


class StreamAssembler:
    """Accumulates SSE chunk objects into one assistant message.

    ``tool_calls`` deltas follow the OpenAI streaming format: every entry has an ``index``
    (``ChoiceDeltaToolCall.index: int``, required, in openai-python
    ``types/chat/chat_completion_chunk.py``); ``id``, ``type`` and ``function.name`` come in
    the first delta of an index; ``function.arguments`` fragments concatenate (the SDK's
    ``lib/streaming/_deltas.py`` ``accumulate_delta`` raises on an entry without
    ``index``). Assembled here, with what a strict client could not assemble kept visible
    for scoring (:mod:`harness.scoring.score`):

    - ``id`` and ``name`` as the SDK's ``accumulate_delta`` assembles them: every string
      fragment of one index concatenated (a name split over two deltas is whole; a later
      delta repeating ``id`` and ``name`` doubles them, ``get_weatherget_weather``, as
      every SDK client reads it; ``""`` adds nothing); where a client keeping each
      field's first fragment reads another call, that reading is kept in
      ``ToolCallRecord.first_fragments`` (``ambiguous_call_deltas``); ``type`` from the
      first delta; string ``arguments`` concatenated, an object ``arguments`` kept as
      received;
    - an entry with no ``index`` is recorded with ``index=None`` (``missing_call_index``);
      it continues the last such call unless it brings another ``id`` with a name;
    - a different ``id`` with a ``function.name`` on an index that is already open starts a
      second call with the same ``index`` (``shared_call_index``; later fragments go to
      it), instead of merging two calls into one; a different ``id`` without a name (a
      server drawing a fresh id per chunk) continues the open call, and is noted;
    - a later delta of a call that repeats ``name`` (``""`` or the same name) or ``id`` is
      tolerated, as strict clients tolerate it, and noted in ``ResponseRecord.notes``.

    Calls are listed by ``index`` (no index last), then in order of arrival. Only the
    choice of index 0 is assembled; ``choices`` counts the distinct choice indices seen.
    """

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.content: str | None = None
        self.reasoning: str | None = None
        self.calls: list[dict[str, Any]] = []  # in order of arrival
        self.open: dict[int | None, dict[str, Any]] = {}  # wire index -> its latest call
        self.notes: list[str] = []
        self.function_call: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.saw_choice = False
        self.choice_indices: set[Any] = set()
        self.extra: dict[str, Any] = {}  # the deltas' other fields, accumulated

    def add(self, chunk: Any) -> None:
        """Take one parsed stream chunk; :class:`RequestFailed` when it is not an object, is an
        error, or has no choices."""
        self.chunks.append(chunk)
        if not isinstance(chunk, dict):
            raise RequestFailed(
                "invalid_body", f"stream chunk is not an object: {render(chunk)[:200]}"
            )
        if "error" in chunk and not chunk.get("choices"):
            raise RequestFailed("other", f"error in stream: {render(chunk['error'])[:500]}")
        if not isinstance(chunk.get("choices"), list):
            raise RequestFailed(
                "invalid_body", f"stream chunk has no choices: {render(chunk)[:200]}"
            )
        self.model = self.model or _opt_str(chunk.get("model"))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk["choices"]:
            if isinstance(choice, dict):
                at = choice.get("index", 0)
                self.choice_indices.add(at if isinstance(at, (int, str)) else repr(at))
                if at in (0, None):
                    self.saw_choice = True
                    self._add_choice(choice)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        self.finish_reason = _opt_str(choice.get("finish_reason")) or self.finish_reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content = (self.content or "") + delta["content"]
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str):
            self.reasoning = (self.reasoning or "") + reasoning
        for tc in delta.get("tool_calls") or []:
            if isinstance(tc, dict):
                self._add_call(tc)
        if isinstance(delta.get("function_call"), dict):
            self.function_call = _merge_fn(self.function_call or {}, delta["function_call"])
        accumulate(self.extra, _others(delta, _MESSAGE_KEYS | {"function_call"}) or {})

    def _add_call(self, tc: dict[str, Any]) -> None:
        raw_idx = tc.get("index")
        idx = raw_idx if isinstance(raw_idx, int) and not isinstance(raw_idx, bool) else None
        cid = _opt_str(tc.get("id")) or None
        fn = tc.get("function")
        named = isinstance(fn, dict) and bool(_opt_str(fn.get("name")))
        entry = self.open.get(idx)
        other = cid is not None and entry is not None and entry["id"] not in (None, cid)
        if entry is None or (other and named):
            entry = {"index": idx, "id": None, "type": None}
            self.calls.append(entry)
            self.open[idx] = entry
        elif other:
            self._note(entry, f"brings another id {cid!r} without a name (kept {entry['id']!r})")
        elif cid is not None and cid == entry["id"]:
            self._note(entry, f"repeats its id {cid!r}")
        entry["id"] = entry["id"] or cid
        entry["type"] = entry["type"] or _opt_str(tc.get("type"))
        accumulate(entry.setdefault("extra", {}), _others(tc, _CALL_KEYS) or {})
        if isinstance(fn, dict):
            accumulate(entry.setdefault("function_extra", {}), _others(fn, _FUNCTION_KEYS) or {})
        _sdk_concat(entry, "sdk_id", tc.get("id"))
        if isinstance(fn, dict):
            _sdk_concat(entry, "sdk_name", fn.get("name"))
            if isinstance(fn.get("name"), str) and entry.get("name"):
                self._note(entry, f"repeats name {fn['name']!r}")
            _merge_fn(entry, fn)

    def _note(self, entry: dict[str, Any], what: str) -> None:
        """One note per kind of tolerated repetition and call, for the transcript."""
        note = f"tool_calls index {entry['index']}: a later delta {what} (tolerated)"
        if note not in self.notes:
            self.notes.append(note)

    def record(self) -> ResponseRecord:
        """The assembled response; :class:`RequestFailed` when the stream had no chunk or no
        choice."""
        if not self.chunks:
            raise RequestFailed("invalid_body", "stream ended without any chunk")
        if not self.saw_choice:
            raise RequestFailed("invalid_body", "no stream chunk carried a choice")
        calls = [_sdk_record(c) for _, c in sorted(enumerate(self.calls), key=_call_order)]
        return ResponseRecord(
            content=self.content,
            reasoning_content=self.reasoning,
            tool_calls=calls,
            function_call=self.function_call,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
            stream=True,
            raw=self.chunks,
            notes=self.notes,
            choices=len(self.choice_indices),
            extra=self.extra or None,
        )


def _sdk_concat(entry: dict[str, Any], key: str, value: Any) -> None:
    """One field as openai-python's ``accumulate_delta`` (``lib/streaming/_deltas.py``)
    builds it: the first value, then each string fragment appended to a string."""
    prev = entry.get(key)
    if prev is None:
        entry[key] = value
    elif isinstance(prev, str) and isinstance(value, str):
        entry[key] = prev + value


def _sdk_record(c: dict[str, Any]) -> ToolCallRecord:
    """A call as the SDK assembles it, with the first-fragment reading where that differs."""
    first = {"id": c["id"], "name": c.get("name")}
    sdk = {
        "id": _opt_str(c.get("sdk_id")) or first["id"],
        "name": _opt_str(c.get("sdk_name")) or first["name"],
    }
    return ToolCallRecord(
        index=c["index"], id=sdk["id"], type=c["type"], name=sdk["name"],
        arguments=c.get("arguments"), first_fragments=first if first != sdk else None,
        extra=c.get("extra") or None, function_extra=c.get("function_extra") or None,
    )  # fmt: skip


def _call_order(item: tuple[int, dict[str, Any]]) -> tuple[bool, int, int]:
    """Calls by ``index`` (those without one last), then by arrival."""
    arrival, call = item
    return call["index"] is None, call["index"] or 0, arrival


def _merge_fn(entry: dict[str, Any], fn: dict[str, Any]) -> dict[str, Any]:
    """Merge one ``function`` delta: first name wins, string arguments concatenate."""
    entry["name"] = entry.get("name") or _opt_str(fn.get("name"))
    args = fn.get("arguments")
    if isinstance(args, str):
        prev = entry.get("arguments")
        entry["arguments"] = (prev if isinstance(prev, str) else "") + args
    elif args is not None:  # an object instead of a string: kept as received
        entry["arguments"] = args
    return entry


async def read_sse(lines: AsyncIterator[str], state: StreamAssembler) -> bool:
    """Feed the ``data:`` payloads of an SSE body to ``state`` until ``[DONE]``; returns
    whether ``[DONE]`` came (``False``: the body ended first)."""
    data: list[str] = []

    def flush() -> bool:
        if not data:
            return False
        payload = "\n".join(data)
        data.clear()
        if payload.strip() == "[DONE]":
            return True
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise RequestFailed(
                "invalid_body", f"stream chunk is not JSON: {payload[:200]!r}"
            ) from None
        state.add(chunk)
        return False

    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line.strip() and flush():
            return True
    return flush()
