"""What fixes a server error that fails every run: the launch flag a refusal names.

A server launched without the flags that serve tool calls refuses each request the same
way; the message is the server's, the fix is a flag of its launch command. Sources: vLLM's
chat completions request check (``--enable-auto-tool-choice``, ``--tool-call-parser``),
llama.cpp's server (``tools param requires --jinja flag``).
"""

from __future__ import annotations

import re

__all__ = ["server_error_hint"]

PARSERS = "docs/getting-started.md, 'The tool-call parser'"

_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"--enable-auto-tool-choice|--tool-call-parser|tool[- ]call[- ]parser", re.I),
        "the server was launched without a tool-call parser: add --enable-auto-tool-choice "
        "--tool-call-parser NAME (vLLM) or --tool-call-parser NAME (SGLang), NAME the "
        f"parser of the model's chat template ({PARSERS})",
    ),
    (
        re.compile(r"requires --jinja", re.I),
        "llama-server renders tool calls only with its Jinja templates: add --jinja",
    ),
)


def server_error_hint(message: str) -> str | None:
    """The fix of a server's error ``message`` when it names a launch flag, else None."""
    for pattern, hint in _HINTS:
        if pattern.search(message):
            return hint
    return None
