"""Infrastructure faults of the reference server: the answers that replace the model's.

The profile's ``infra`` (:data:`harness.sim.profiles.INFRA_FAULTS`), or a GSM8K
question's own entry in ``gsm8k_faults`` (``harness sim --gsm8k-fault INDEX=FAULT``),
answers a POST request instead of the model:

===================  ===================================================================
``http-500``         HTTP 500, an OpenAI-shaped error body (transient: clients retry)
``http-400``         HTTP 400, an OpenAI-shaped error body (not transient: never retried)
``flaky-500``        HTTP 500 on the first try of a conversation's first request (or of
                     a completions prompt), the model's answer on the next try
``slow``             sleeps ``delay_s`` seconds, then the model answers
``invalid-json``     HTTP 200 with :data:`GARBAGE_BODY` (streaming: one event of it)
``no-choices``       HTTP 200 with ``"choices": []`` (streaming: one such event)
``connection-drop``  HTTP 200, headers promising :data:`DROP_LENGTH` bytes, the first bytes
                     of the body, then the connection closes (:class:`ConnectionDropped`)
``endless`` ...      the transport faults of :mod:`harness.sim.misbehave` (``endless``,
                     ``cut-stream``, ``bad-utf8``, ``rate-limit``, ``huge``, ``error-200``)
===================  ===================================================================

Shapes of the error bodies: the OpenAI API reference (``{"error": {"message", "type",
"code"}}``), as vLLM and SGLang answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from harness.errors import HarnessError
from harness.sim.misbehave import TRANSPORT_FAULTS, transport_response
from harness.sim.profiles import InfraFault
from harness.sim.wire import sse

__all__ = [
    "DROP_LENGTH",
    "GARBAGE_BODY",
    "ConnectionDropped",
    "error_response",
    "flaky_key",
    "infra_response",
]

#: the body ``invalid-json`` answers with: a proxy's error page, then half a JSON object
GARBAGE_BODY = '<html><body>502 Bad Gateway</body></html>\n{"choices": [{"mess'
#: the body length a ``connection-drop`` response promises (it sends far less)
DROP_LENGTH = 1000

#: vLLM's answer to ``tool_choice: "auto"`` (the default when tools are given) without
#: ``--enable-auto-tool-choice`` (the request check of its chat completions endpoint)
NO_PARSER_AUTO = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
#: vLLM's answer to ``tool_choice: "required"`` (or a named function) without a parser
NO_PARSER_REQUIRED = 'tool_choice="required" requires --tool-call-parser to be set'


class ConnectionDropped(HarnessError):
    """Raised inside a response on purpose (``connection-drop``): the ASGI server then
    closes the connection mid-body. Not logged (see :mod:`harness.sim.server`)."""


def error_response(status: int, message: str, kind: str = "invalid_request_error") -> Response:
    """An OpenAI-shaped error answer: ``{"error": {"message", "type", "code": status}}``."""
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)


def flaky_key(body: dict[str, Any]) -> str | None:
    """Key of a request that fails once under ``flaky-500`` (a conversation's first
    request, or a completions prompt: sha256 hex), or None (a later turn)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        if any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
            return None
        blob = json.dumps(messages, sort_keys=True)
    else:
        blob = json.dumps([body.get("prompt"), body.get("text")], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


async def infra_response(
    infra: InfraFault | None,
    body: dict[str, Any],
    *,
    obj: str,
    model: str,
    flaky_seen: set[str],
    delay_s: float,
) -> Response | None:
    """The answer of the fault ``infra`` to a request with ``body``, or None when the
    model answers (no fault, ``slow`` once it slept, ``flaky-500`` on a retry).

    ``obj``: the endpoint's object name (``"chat.completion"``) for ``no-choices``;
    ``model``: the model id it reports; ``flaky_seen``: keys already failed once
    (updated); ``delay_s``: the sleep of ``slow``.
    """
    stream = bool(body.get("stream"))
    if infra == "http-500":
        return error_response(500, "simulated internal server error", "server_error")
    if infra == "http-400":
        return error_response(400, "simulated refusal: the server does not accept this request")
    if infra == "no-tool-parser" and body.get("tools") and body.get("tool_choice") != "none":
        required = body.get("tool_choice") == "required" or isinstance(
            body.get("tool_choice"), dict
        )
        return error_response(400, NO_PARSER_REQUIRED if required else NO_PARSER_AUTO)
    if infra == "flaky-500":
        key = flaky_key(body)
        if key is not None and key not in flaky_seen:
            flaky_seen.add(key)
            return error_response(500, "simulated transient server error", "server_error")
    if infra == "slow":
        await asyncio.sleep(delay_s)
    if infra == "invalid-json":
        if stream:  # an event whose data is not JSON
            return Response(sse(GARBAGE_BODY.replace("\n", " ")), media_type="text/event-stream")
        return Response(GARBAGE_BODY, media_type="application/json")
    if infra == "no-choices":
        return _no_choices(obj, model, stream)
    if infra == "connection-drop":
        return _DroppingResponse(stream)
    if infra in TRANSPORT_FAULTS:
        key = flaky_key(body) if infra == "rate-limit" else None
        first_try = key is not None and key not in flaky_seen
        if key is not None:
            flaky_seen.add(key)
        return transport_response(infra, obj=obj, model=model, stream=stream, first_try=first_try)
    return None


def _no_choices(obj: str, model: str, stream: bool) -> Response:
    """A 200 answer with ``"choices": []`` (streaming: one such event, then ``[DONE]``)."""
    empty: dict[str, Any] = {"id": f"sim-{uuid.uuid4().hex[:24]}", "object": obj}
    empty |= {"created": int(time.time()), "model": model, "choices": []}
    empty["usage"] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    if stream:
        return StreamingResponse(iter([sse(empty), sse("[DONE]")]), media_type="text/event-stream")
    return JSONResponse(empty)


class _DroppingResponse(Response):
    """Status 200 and headers promising :data:`DROP_LENGTH` bytes, the first bytes of the
    body, then the connection is closed (the ASGI server closes it when the app raises
    after the response started)."""

    def __init__(self, stream: bool) -> None:
        super().__init__(
            status_code=200,
            headers={"content-length": str(DROP_LENGTH)},
            media_type="text/event-stream" if stream else "application/json",
        )
        self.part = b'data: {"id":"chatcmpl-' if stream else b'{"id":"chatcmpl-'

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        await send(start)
        await send({"type": "http.response.body", "body": self.part, "more_body": True})
        raise ConnectionDropped("connection-drop: closed mid-body on purpose")
