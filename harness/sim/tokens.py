"""Approximate token counts of the reference server (deterministic, no tokenizer).

Rule: one token per started group of 4 characters (the OpenAI rule of thumb,
"1 token ~ 4 characters of English"), so ``count_tokens("") == 0`` and
``count_tokens("abcde") == 2``. Chat prompts add 4 tokens per message for the
role and separators. :data:`CHARS_PER_TOKEN` is also what ``max_tokens``
truncation cuts at.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["CHARS_PER_TOKEN", "count_tokens", "prompt_tokens", "text_of", "truncate_tokens"]

CHARS_PER_TOKEN = 4
_PER_MESSAGE = 4


def count_tokens(text: str | None) -> int:
    """Approximate tokens in ``text``: ``ceil(len(text) / 4)``; ``None`` counts 0."""
    if not text:
        return 0
    return -(-len(text) // CHARS_PER_TOKEN)


def truncate_tokens(text: str, max_tokens: int) -> str:
    """The first ``max_tokens`` tokens of ``text`` (``max_tokens * 4`` characters)."""
    return text[: max(0, max_tokens) * CHARS_PER_TOKEN]


def prompt_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """Approximate prompt tokens of a chat request: contents, tool calls and tool specs."""
    total = 0
    for msg in messages:
        total += _PER_MESSAGE + count_tokens(text_of(msg.get("content")))
        if msg.get("tool_calls"):
            total += count_tokens(json.dumps(msg["tool_calls"], separators=(",", ":")))
    if tools:
        total += count_tokens(json.dumps(tools, separators=(",", ":")))
    return total


def text_of(content: Any) -> str:
    """The text of a message's ``content``: a string, or its text parts joined; else ``""``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
