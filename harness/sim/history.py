"""What the reference server demands of the history it is sent: the earlier assistant turns
a request carries back, as two servers check them (profile fields of
:class:`harness.sim.profiles.SimProfile`):

- ``reparse_history``: every earlier assistant call's ``arguments`` are parsed as JSON
  before the chat template sees them, as vLLM does (``vllm/entrypoints/chat_utils.py``,
  ``_postprocess_messages``: ``json.loads`` of each ``tool_calls[].function.arguments``
  string; SGLang's chat serving parses them too). A call that does not parse (the model's
  own unterminated arguments, sent back as received) makes every later request HTTP 400
  with the decoder's message, in vLLM's error body ``{"object": "error", "message",
  "type": "BadRequestError", "param": null, "code": 400}``;
- ``call_signatures``: each tool call the server sends carries an opaque field,
  ``extra_content.google.thought_signature`` (Gemini's OpenAI compatibility,
  ai.google.dev/gemini-api/docs/thought-signatures), and a later request whose assistant
  call lacks it, or changed it, is HTTP 400 with Gemini's error body, a JSON *list*
  (``[{"error": {"code": 400, "message", "status": "INVALID_ARGUMENT"}}]``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from starlette.responses import JSONResponse, Response

from harness.sim.profiles import SimProfile

__all__ = ["call_extra", "history_refusal", "signature"]


def signature(call_id: str | None, name: str) -> str:
    """The opaque signature the server attaches to a call (a pure function of it)."""
    return hashlib.sha256(f"sig:{call_id}:{name}".encode()).hexdigest()[:24]


def call_extra(profile: SimProfile, call_id: str | None, name: str) -> dict[str, Any]:
    """The fields the server adds to a ``tool_calls`` entry beside ``id``, ``type`` and
    ``function`` (``{}`` unless the profile has ``call_signatures``)."""
    if not profile.call_signatures:
        return {}
    return {"extra_content": {"google": {"thought_signature": signature(call_id, name)}}}


def _assistant_calls(messages: list[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "assistant":
            for c in m.get("tool_calls") or []:
                if isinstance(c, dict):
                    yield i, c


def _unparsed(messages: list[Any]) -> str | None:
    """The decoder's message for the first earlier call whose arguments do not parse."""
    for _, c in _assistant_calls(messages):
        args = (c.get("function") or {}).get("arguments")
        if isinstance(args, str) and args:
            try:
                json.loads(args)
            except ValueError as exc:
                return str(exc)
    return None


def _unsigned(messages: list[Any]) -> str | None:
    """Gemini's message for the first earlier call sent back without its signature."""
    for i, c in _assistant_calls(messages):
        fn = c.get("function") or {}
        sig = ((c.get("extra_content") or {}).get("google") or {}).get("thought_signature")
        if sig != signature(c.get("id"), str(fn.get("name"))):
            return (
                "Function call is missing a thought_signature in functionCall parts. This is "
                "required for tools to work correctly, and missing thought_signature may lead "
                f"to degraded model performance. Additional data, function call "
                f"`default_api:{fn.get('name')}` , position {i}. Please refer to "
                "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
            )
    return None


def history_refusal(profile: SimProfile, messages: Any) -> Response | None:
    """The HTTP 400 answer to a request whose history the profile refuses, or None."""
    if not isinstance(messages, list):
        return None
    if profile.reparse_history:
        found = _unparsed(messages)
        if found is not None:
            body = {"object": "error", "message": found, "type": "BadRequestError"}
            return JSONResponse({**body, "param": None, "code": 400}, 400)
    if profile.call_signatures:
        found = _unsigned(messages)
        if found is not None:
            error = {"code": 400, "message": found, "status": "INVALID_ARGUMENT"}
            return JSONResponse([{"error": error}], 400)
    return None
