"""MoE side of the reference server: boot log, /server_info, /model_info, routed experts.

PLACEHOLDER: owned by the boot-checks work (issue 6), which replaces the bodies.
The signatures are the contract the sim app (issue 3) calls.
"""

from __future__ import annotations

from typing import Any

from harness.sim.profiles import SimProfile


def boot_log_lines(profile: SimProfile, *, capture: bool) -> list[str]:
    """Log lines the server prints while starting (SGLang-like)."""
    return ["Starting reference server", "The server is fired up and ready to roll!"]


def crash_traceback(profile: SimProfile, *, capture: bool) -> str | None:
    """An SGLang-like Python traceback if this profile crashes at boot, else None."""
    return None


def server_info(profile: SimProfile, *, capture: bool) -> dict[str, Any]:
    """Body of GET /server_info (and /get_server_info)."""
    return {}


def model_info(profile: SimProfile) -> dict[str, Any]:
    """Body of GET /model_info."""
    return {}


def routed_experts_payload(
    profile: SimProfile, *, prompt_tokens: int, completion_tokens: int, seed: int
) -> dict[str, Any]:
    """Fields to add for return_routed_experts: ``{"routed_experts": <base64>, ...}``."""
    return {}
