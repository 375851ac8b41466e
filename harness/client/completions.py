"""One chat-completion request, its response parsed as received.

:func:`post_completion` makes one attempt through the openai SDK
(``client.post("/chat/completions", ..., stream=True)``, so the body is sent as given,
read by us and kept raw) and returns a :class:`harness.transcript.ResponseRecord`,
parsed by :mod:`harness.client.wire` (the JSON body, or the SSE stream's chunks with
``tool_calls`` deltas assembled by :class:`~harness.client.wire.StreamAssembler`; its
parsers are re-exported here).

Every failure raises :class:`RequestFailed` with an :class:`~harness.transcript.InfraError`
kind: ``http_status`` (with the status), ``timeout``, ``connection`` (refused, reset,
dropped mid-body, a stream that ends without ``[DONE]`` and without any
``finish_reason``), ``invalid_body`` (not JSON, not UTF-8, no ``choices[0].message``, a
stream chunk that is not JSON or has no ``choices``, an empty stream, a body over the
size cap) or ``other`` (an error object in the body, anything else).
``RequestFailed.transient`` says whether a retry may help: every kind but an HTTP status
outside 408/429/5xx and a body over the size cap.

Bounds of one attempt (:class:`Limits`): a total deadline from sending to the last byte
(``deadline_s``: ``--request-timeout``; the SDK's read timeout is the idle timeout between
two reads, the same value), and at most ``max_bytes`` read of the body
(``--max-response-bytes``). A 429/503 answer's ``Retry-After`` (seconds or an HTTP date,
RFC 9110 section 10.2.3) is kept as ``RequestFailed.retry_after_s`` for the retry loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from openai import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AsyncOpenAI,
    OpenAIError,
)

from harness.client.wire import (
    ReadBudget,
    StreamAssembler,
    parse_completion,
    read_body,
    read_sse,
    retry_after_s,
    sse_lines,
)
from harness.errors import TRANSIENT_STATUS, RequestFailed
from harness.transcript import ResponseRecord

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "TRANSIENT_STATUS",
    "ConversationBody",
    "Limits",
    "RequestFailed",
    "StreamAssembler",
    "parse_completion",
    "post_completion",
    "read_sse",
    "request_body",
    "retry_after_s",
    "server_message",
    "sse_lines",
    "status_message",
]


_TIMEOUTS: tuple[type[Exception], ...] = (
    APITimeoutError,
    httpx.TimeoutException,
    asyncio.TimeoutError,
)
_TRANSPORT: tuple[type[Exception], ...] = (
    APIConnectionError,
    httpx.TransportError,
    ConnectionError,
)
#: the SDK's raw HTTP response class (``cast_to`` of :func:`post_completion`)
_RAW_RESPONSE: Any = httpx.Response
try:  # openai >= 3 talks through httpx2, whose exceptions are separate classes
    import httpx2

    _TIMEOUTS += (httpx2.TimeoutException,)
    _TRANSPORT += (httpx2.TransportError,)
    _RAW_RESPONSE = httpx2.Response
except ImportError:  # pragma: no cover - depends on the installed openai
    pass


#: the most bytes of one response body read by default (``--max-response-bytes``): 8 MiB,
#: over 100 times a 1,024-token answer streamed with per-token chunks
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Bounds of one request attempt.

    Attributes:
        deadline_s: seconds from sending the request to the last byte of the answer
            (``None``: no total deadline, only the SDK's per-read timeout).
        max_bytes: the most bytes of the body read; past it the attempt fails
            (``invalid_body``, not retried) and the message says how much was read.
    """

    deadline_s: float | None = None
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


def request_body(params: dict[str, Any]) -> dict[str, Any]:
    """The JSON body for ``params`` (``create``-style kwargs): every field as given, with
    ``extra_body`` merged over the others (as the SDK's ``create`` merges it)."""
    body = {k: v for k, v in params.items() if k != "extra_body"}
    body.update(params.get("extra_body") or {})
    return body


#: whether ``client.post`` takes an encoded body, ``content=`` (openai's ``AsyncAPIClient.post``
#: warns "Please pass raw bytes via the `content` parameter" for bytes given as ``body``);
#: SDKs without it get ``body=`` and encode it themselves
_POST_TAKES_CONTENT = "content" in inspect.signature(AsyncOpenAI.post).parameters


def _dumps(value: Any) -> bytes:
    """JSON as the SDK encodes a request body: compact, UTF-8, NaN refused (ValueError)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class ConversationBody:
    """The request bodies of one conversation, encoded incrementally.

    An agent loop only appends to ``messages``, so each message is encoded once and each
    request is the encoded fields around the joined messages: the bytes :func:`_dumps`
    makes of ``request_body({**params, "messages": messages})``, which is what the SDK
    would send, without encoding the whole conversation again every turn (the SDK's
    ``openapi_dumps`` was ~5% of the runner's CPU per turn over 12 turns: make bench,
    benchmark 1). ``messages`` must not be changed, only appended to.
    """

    def __init__(self, params: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self._frame = _frame(params)
        self._encoded: list[bytes] = []

    def content(self) -> bytes | None:
        """The next request's body, or ``None`` where it is not encoded here (the SDK has no
        ``content=``, ``extra_body`` sets ``messages``, a value is not plain JSON): then
        the SDK encodes ``request_body`` itself, and refuses what it refuses."""
        if self._frame is None:
            return None
        try:
            for msg in self.messages[len(self._encoded) :]:
                self._encoded.append(_dumps(msg))
        except (TypeError, ValueError):
            return None
        head, tail = self._frame
        return b"".join((head, b"[", b",".join(self._encoded), b"]", tail))


def _frame(params: dict[str, Any]) -> tuple[bytes, bytes] | None:
    """The encoded body before and after the value of ``messages`` (see ConversationBody)."""
    if not _POST_TAKES_CONTENT:
        return None
    token = f"messages-{uuid.uuid4().hex}"
    body = request_body({**params, "messages": token})
    if body.get("messages") is not token:
        return None
    try:
        head, *tail = _dumps(body).split(_dumps(token))
    except (TypeError, ValueError):
        return None
    return (head, tail[0]) if len(tail) == 1 else None


async def _post(client: AsyncOpenAI, params: dict[str, Any], content: bytes | None) -> Any:
    """``client.post`` of one chat completion: ``content`` as sent, else ``params``' body."""
    if content is not None:
        return await client.post(
            "/chat/completions", content=content, cast_to=_RAW_RESPONSE, stream=True
        )
    return await client.post(
        "/chat/completions", body=request_body(params), cast_to=_RAW_RESPONSE, stream=True
    )


async def post_completion(
    client: AsyncOpenAI,
    params: dict[str, Any],
    content: bytes | None = None,
    limits: Limits | None = None,
) -> ResponseRecord:
    """One attempt, within ``limits`` (default :class:`Limits`: no total deadline, 8 MiB).
    Raises :class:`RequestFailed` classifying any failure.

    Sent with the SDK's own request method, ``client.post("/chat/completions",
    cast_to=<http response>, stream=True)`` (the SDK's documented way to make a request
    with a body of one's own, README "Undocumented endpoints"): same base URL, API key,
    headers, timeout and error classes (``APIStatusError`` for a non-2xx answer) as
    ``chat.completions.create``, without ``create``'s per-request work the harness does
    not use: the TypedDict transform of every field (``_transform_recursive``; ``model``
    alone is checked against a ``Literal`` of every OpenAI model name), and the response
    wrapper. Together they were ~25% of the client's CPU per turn (make bench, benchmark
    1). The body is ``content`` when given (the encoded ``request_body(params)``, from
    :class:`ConversationBody`), else ``request_body(params)``, sent exactly as given;
    the response is read raw by us.
    """
    limits = limits or Limits()
    t0 = time.perf_counter()
    try:
        rec = await asyncio.wait_for(
            _attempt(client, params, content, ReadBudget(limits.max_bytes)), limits.deadline_s
        )
    except RequestFailed:
        raise
    except APIStatusError as exc:
        raise RequestFailed(
            "http_status",
            status_message(exc),
            status=exc.status_code,
            retry_after_s=retry_after_s(getattr(exc.response, "headers", None)),
        ) from None
    except asyncio.TimeoutError:  # wait_for's own: _attempt converts the others
        raise RequestFailed(
            "timeout",
            f"no complete answer within {limits.deadline_s:g} s (the request's total "
            "deadline, --request-timeout)",
        ) from None
    except _TIMEOUTS as exc:
        raise RequestFailed("timeout", _describe(exc)) from None
    except _TRANSPORT as exc:
        raise RequestFailed("connection", _describe(exc)) from None
    except (OpenAIError, ValueError, TypeError, KeyError) as exc:
        raise RequestFailed("other", _describe(exc)) from None
    rec.latency_s = time.perf_counter() - t0
    return rec


async def _attempt(
    client: AsyncOpenAI, params: dict[str, Any], content: bytes | None, budget: ReadBudget
) -> ResponseRecord:
    """Send, read the whole answer (at most ``budget``), parse it. A timeout inside (the
    SDK's, the transport's) is raised as ``RequestFailed``, apart from the deadline's."""
    try:
        resp = await _post(client, params, content)
    except asyncio.TimeoutError as exc:
        raise RequestFailed("timeout", _describe(exc)) from None
    try:
        if not params.get("stream"):
            return parse_completion(await read_body(resp, budget))
        state = StreamAssembler()
        done = await read_sse(sse_lines(resp.aiter_bytes(), budget), state)
        rec = state.record()
        if not done and rec.finish_reason is None:
            raise RequestFailed(
                "connection",
                f"the stream ended without [DONE] and without a finish_reason after "
                f"{len(state.chunks)} chunk(s), {budget.read:,} bytes (closed early)",
            )
        return rec
    finally:
        await resp.aclose()


#: the keys a server's error body keeps its message under, most specific first
_MESSAGE_KEYS = ("message", "detail", "error", "msg")


def server_message(body: Any, depth: int = 0) -> str | None:
    """The server's message in an error body of any JSON shape, or None: an object's
    ``message`` (the OpenAI shape ``{"error": {"message"}}``, vLLM's flat ``{"object":
    "error", "message"}``), ``detail`` (FastAPI), ``error`` or ``msg`` as a string, else the
    first found inside its values; a list's first (Gemini answers ``[{"error": {...}}]``).
    At most 8 levels deep."""
    if depth > 8:
        return None
    if isinstance(body, dict):
        for key in _MESSAGE_KEYS:
            if isinstance(body.get(key), str) and body[key].strip():
                return str(body[key]).strip()
        values: list[Any] = list(body.values())
    elif isinstance(body, list):
        values = body
    else:
        return None
    return next((m for v in values if (m := server_message(v, depth + 1)) is not None), None)


def status_message(exc: APIStatusError) -> str:
    """The SDK's ``Error code: N - message`` line, with the server's message found in a body
    of any shape (:func:`server_message`) when the SDK's own line lacks it (the SDK reads
    only a top-level object's ``message``), on one line."""
    text = str(exc)
    found = server_message(getattr(exc, "body", None))
    if found is not None and found not in text:
        text = f"Error code: {exc.status_code} - {found}"
    return " ".join(text.split())


def _describe(exc: BaseException) -> str:
    """``"Type: message (CauseType: cause)"``: the SDK's wrapper and the transport's reason."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text
