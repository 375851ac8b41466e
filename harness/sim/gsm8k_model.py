"""GSM8K side of the reference server: answers few-shot prompts.

PLACEHOLDER: owned by the GSM8K work (issue 5), which replaces the body.
The signature is the contract the sim app (issue 3) calls for /v1/completions and
for chat requests that carry a GSM8K few-shot prompt.
"""

from __future__ import annotations

from harness.sim.profiles import SimProfile


def answer(profile: SimProfile, prompt: str, *, seed: int) -> str | None:
    """Answer text for a GSM8K few-shot prompt, or None if ``prompt`` is not one."""
    return None
