"""A small OpenAI-compatible test server with one behaviour per URL prefix (runner tests).

``serve(scenarios)`` starts it with uvicorn on 127.0.0.1 (port 0) in a thread and yields a
:class:`FaultServer`; ``server.url(mode)`` is the base URL of one behaviour, e.g.
``http://127.0.0.1:PORT/always500`` (the OpenAI base URL adds ``/v1``). Modes:

- ``ok``: a scripted healthy model. It recognises the scenario by the first user
  message and follows its expected calls (reference ``arguments``), one assistant message
  per call, then answers with ``final_answer.example``; streaming and not.
- ``slowok``: ``ok`` after ``latency_s`` seconds per request (``max_in_flight`` counts
  the most requests it held at once).
- ``always500``: HTTP 500 every time.  ``flaky``: HTTP 500 on the first ``flaky_failures``
  requests, then ``ok``.  ``hang``: sleeps ``hang_s`` before answering (past the timeout).
- ``badjson``: 200 with a body that is not JSON.  ``nochoices``: 200 JSON without ``choices``.
- ``drop``: sends headers and part of the body, then drops the connection.
- ``badstream``: a stream whose second chunk is not JSON.
- ``noid``: ``ok`` but tool calls carry no ``id``; ``objargs``: arguments sent as an object.
- ``loop``: repeats the scenario's first expected call forever (reaches the turn cap).
- ``length``: answers with finish_reason ``length``; ``empty``: no content, no tool calls.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.scenario.model import Scenario


@dataclass
class FaultServer:
    base: str = ""
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    flaky_failures: int = 1
    latency_s: float = 0.2
    hang_s: float = 3.0
    counts: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0

    def url(self, mode: str) -> str:
        return f"{self.base}/{mode}"


def _script(sc: Scenario) -> list[tuple[list[list[dict[str, Any]]], str]]:
    """Per segment: the assistant turns (lists of calls) and the final text."""
    out = []
    for seg in sc.segments():
        turns: list[list[dict[str, Any]]] = []
        for call in seg.calls:
            item = {"name": call.tool, "arguments": call.arguments}
            if call.parallel and turns:
                turns[-1].append(item)
            else:
                turns.append([item])
        fa = seg.final_answer
        out.append((turns, fa.example or " ".join(fa.contains) or "Done."))
    return out


def _next_message(server: FaultServer, messages: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """What the scripted model says next: ``{"content"}`` or ``{"calls"}``."""
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    sc = next((s for s in server.scenarios.values() if s.messages[-1].content == first_user), None)
    if sc is None:
        return {"content": "I do not know this conversation."}
    segment = sum(m["role"] == "user" for m in messages) - 1
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    done = sum(1 for m in messages[last_user:] if m["role"] == "assistant" and m.get("tool_calls"))
    turns, final = _script(sc)[segment]
    if mode == "loop":
        return {"calls": _script(sc)[0][0][0]}
    if mode == "length":
        return {"content": "The entropy is", "finish": "length"}
    if mode == "empty":
        return {"content": ""}
    if done < len(turns):
        return {"calls": turns[done]}
    return {"content": final}


def _wire_calls(calls: list[dict[str, Any]], mode: str, turn: int) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(calls):
        args: Any = c["arguments"] if mode == "objargs" else json.dumps(c["arguments"])
        tc: dict[str, Any] = {
            "index": i,
            "type": "function",
            "function": {"name": c["name"], "arguments": args},
        }
        if mode != "noid":
            tc["id"] = f"call_{turn}_{i}"
        out.append(tc)
    return out


def _completion(msg: dict[str, Any], mode: str, turn: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    finish = msg.get("finish", "stop")
    if "calls" in msg:
        message["tool_calls"] = _wire_calls(msg["calls"], mode, turn)
        finish = "tool_calls"
    return {
        "id": f"cmpl-{turn}",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _chunks(msg: dict[str, Any], mode: str, turn: int) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"cmpl-{turn}",
            "object": "chat.completion.chunk",
            "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if "calls" in msg:
        for tc in _wire_calls(msg["calls"], mode, turn):
            args = tc["function"]["arguments"]
            half = len(args) // 2 if isinstance(args, str) else None
            if half is None:  # an object: sent whole in one delta
                yield chunk({"tool_calls": [tc]})
                continue
            yield chunk(
                {
                    "tool_calls": [
                        {
                            **tc,
                            "function": {"name": tc["function"]["name"], "arguments": args[:half]},
                        }
                    ]
                }
            )
            yield chunk(
                {"tool_calls": [{"index": tc["index"], "function": {"arguments": args[half:]}}]}
            )
        yield chunk({}, "tool_calls")
    else:
        text = msg["content"]
        for i in range(0, len(text), 7):
            yield chunk({"content": text[i : i + 7]})
        yield chunk({}, msg.get("finish", "stop"))
    yield {
        "id": f"cmpl-{turn}",
        "object": "chat.completion.chunk",
        "model": "scripted",
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _sse(chunks: Iterator[dict[str, Any]], broken: bool = False) -> Iterator[str]:
    for i, c in enumerate(chunks):
        yield "data: {not json\n\n" if broken and i == 1 else f"data: {json.dumps(c)}\n\n"
    yield "data: [DONE]\n\n"


def make_app(server: FaultServer) -> Starlette:
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def chat(request: Request) -> Response:
        mode = request.path_params["mode"]
        body = await request.json()
        server.requests.append((mode, body))
        n = server.counts[mode] = server.counts.get(mode, 0) + 1
        early = await _fault(server, mode, n)
        if early is not None:
            return early
        if mode == "slowok":
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                await asyncio.sleep(server.latency_s)
            finally:
                server.in_flight -= 1
        msg = _next_message(server, body["messages"], mode)
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if body.get("stream"):
            return StreamingResponse(
                _sse(_chunks(msg, mode, turn), mode == "badstream"), media_type="text/event-stream"
            )
        return JSONResponse(_completion(msg, mode, turn))

    return Starlette(
        routes=[
            Route("/{mode}/v1/models", models),
            Route("/{mode}/v1/chat/completions", chat, methods=["POST"]),
        ]
    )


async def _fault(server: FaultServer, mode: str, n: int) -> Response | None:
    if mode == "always500" or (mode == "flaky" and n <= server.flaky_failures):
        return JSONResponse({"error": {"message": "boom", "type": "server_error"}}, 500)
    if mode == "hang":
        await asyncio.sleep(server.hang_s)
    if mode == "badjson":
        return Response("{'choices': [oops", media_type="application/json")
    if mode == "nochoices":
        return JSONResponse({"id": "x", "object": "chat.completion", "model": "scripted"})
    if mode == "drop":
        return _DroppingResponse()
    return None


class _DroppingResponse(Response):
    """Promises 1000 bytes, sends 10, then fails: uvicorn drops the connection."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"1000"), (b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"choices"', "more_body": True})
        raise ConnectionResetError("dropped on purpose")


@contextmanager
def serve(scenarios: list[Scenario], **kw: Any) -> Iterator[FaultServer]:
    """Run the server in a background thread; yields it with ``base`` set."""
    server = FaultServer(scenarios={s.id: s for s in scenarios}, **kw)
    config = uvicorn.Config(
        make_app(server), host="127.0.0.1", port=0, log_level="critical", lifespan="off"
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fault server did not start")
        time.sleep(0.01)
    port = uv.servers[0].sockets[0].getsockname()[1]
    server.base = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        uv.should_exit = True
        thread.join(timeout=5)
