r"""Transport faults of the reference server: answers that break the HTTP or SSE contract.

The infrastructure faults of :mod:`harness.sim.infra` that misbehave below the JSON
level, each as real servers and proxies were seen to send it:

===================  ===================================================================
``endless``          HTTP 200 that never ends: streaming, a content chunk every
                     :data:`TRICKLE_S` seconds forever; not streaming, the body one byte
                     every :data:`TRICKLE_S` seconds (a read never times out)
``cut-stream``       streaming: one chunk ``"Hel"`` without ``finish_reason``, then the
                     body ends cleanly without ``[DONE]``; not streaming: the body ends
                     cleanly halfway through its JSON
``bad-utf8``         HTTP 200 whose content holds bytes that are not UTF-8 (``\xff\xfe``)
``rate-limit``       HTTP 429 with ``Retry-After:`` :data:`RETRY_AFTER_S` on the first try
                     of a conversation's first request, the model's answer on the next
``huge``             HTTP 200 whose content is :data:`HUGE_BYTES` bytes (streaming: in
                     64 KiB chunks), then a normal end
``error-200``        HTTP 200 whose body is an OpenAI error object (streaming: one event
                     of it, then ``[DONE]``)
===================  ===================================================================
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

__all__ = ["HUGE_BYTES", "RETRY_AFTER_S", "TRANSPORT_FAULTS", "TRICKLE_S", "transport_response"]

#: seconds between two pieces of an ``endless`` answer
TRICKLE_S = 0.1
#: the ``Retry-After`` of ``rate-limit`` (seconds)
RETRY_AFTER_S = 1
#: the content size of ``huge`` (10 MB, as real proxies were seen to send)
HUGE_BYTES = 10_000_000
#: the faults of this module (a part of ``harness.sim.profiles.INFRA_FAULTS``)
TRANSPORT_FAULTS = ("endless", "cut-stream", "bad-utf8", "rate-limit", "huge", "error-200")

_SSE = "text/event-stream"


def _chunk(obj: str, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": f"sim-{uuid.uuid4().hex[:24]}", "object": f"{obj}.chunk", "created": int(time.time()),
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


def _message(obj: str, model: str, content: str) -> dict[str, Any]:
    msg = {"role": "assistant", "content": content}
    return {
        "id": f"sim-{uuid.uuid4().hex[:24]}", "object": obj, "created": int(time.time()),
        "model": model, "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
    }  # fmt: skip


async def _endless(obj: str, model: str, stream: bool) -> AsyncIterator[bytes]:
    """Pieces of an answer that never ends, one every :data:`TRICKLE_S` seconds."""
    if stream:
        yield _chunk(obj, model, {"role": "assistant", "content": ""})
    body = json.dumps(_message(obj, model, "and " * 1000)).encode()
    i = 0
    while True:
        await asyncio.sleep(TRICKLE_S)
        yield _chunk(obj, model, {"content": " and"}) if stream else body[i % len(body) :][:1]
        i += 1


def _huge(obj: str, model: str, stream: bool) -> Iterator[bytes]:
    piece = "x" * 65536
    if not stream:
        yield json.dumps(_message(obj, model, "x" * HUGE_BYTES)).encode()
        return
    for _ in range(HUGE_BYTES // len(piece)):
        yield _chunk(obj, model, {"content": piece})
    yield _chunk(obj, model, {}, "stop") + b"data: [DONE]\n\n"


def _bad_utf8(obj: str, model: str, stream: bool) -> bytes:
    r"""The answer ``caf\xff\xfe`` (not UTF-8) in its JSON, as bytes."""
    if not stream:
        return json.dumps(_message(obj, model, "caf@@")).encode().replace(b"@@", b"\xff\xfe")
    first = _chunk(obj, model, {"role": "assistant", "content": "caf@@"})
    return first.replace(b"@@", b"\xff\xfe") + _chunk(obj, model, {}, "stop") + b"data: [DONE]\n\n"


def _error_200(stream: bool) -> Response:
    error = {"error": {"message": "simulated error in a 200 answer", "type": "server_error"}}
    if stream:
        events = f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n"
        return Response(events, media_type=_SSE)
    return JSONResponse(error)


def transport_response(
    fault: str, *, obj: str, model: str, stream: bool, first_try: bool
) -> Response | None:
    """The answer of the transport fault ``fault`` (one of :data:`TRANSPORT_FAULTS`), or
    ``None`` when the model answers (``rate-limit`` after its first refusal).
    ``first_try``: this request's key was not refused before (``rate-limit``)."""
    media = _SSE if stream else "application/json"
    if fault == "endless":
        return StreamingResponse(_endless(obj, model, stream), media_type=media)
    if fault == "cut-stream":
        if stream:
            part = _chunk(obj, model, {"role": "assistant", "content": "Hel"})
        else:
            part = json.dumps(_message(obj, model, "Hello")).encode()[:40]
        return StreamingResponse(iter([part]), media_type=media)
    if fault == "bad-utf8":
        return Response(_bad_utf8(obj, model, stream), media_type=media)
    if fault == "huge":
        return StreamingResponse(_huge(obj, model, stream), media_type=media)
    if fault == "error-200":
        return _error_200(stream)
    if fault == "rate-limit" and first_try:
        error = {"error": {"message": "simulated rate limit", "type": "rate_limit_error"}}
        return JSONResponse(error, 429, headers={"retry-after": str(RETRY_AFTER_S)})
    return None
