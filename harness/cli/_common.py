"""Argument helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import os

import httpx

from harness.options import add_argument
from harness.runner import StreamMode

_MODES: dict[str, StreamMode] = {
    "both": "both",
    "on": True,
    "true": True,
    "off": False,
    "false": False,
}


def add_stream_argument(p: argparse.ArgumentParser) -> None:
    """``--stream`` (on), ``--stream both`` (each scenario both ways), ``--stream off``.

    No argument type: a value that is not a mode is a scenario path (see :func:`stream_mode`).
    """
    add_argument(p, "stream", type=None, metavar="MODE")


def stream_mode(args: argparse.Namespace) -> StreamMode:
    """The ``--stream`` value as a runner mode.

    A value that is not a mode is a scenario path that followed a bare ``--stream``
    (``harness run --stream scenarios/``): it is moved back to ``args.scenarios``.
    """
    value = str(args.stream)
    if value.lower() in _MODES:
        return _MODES[value.lower()]
    args.scenarios = [value, *(args.scenarios or [])]
    return True


def preflight(label: str, url: str, api_key_env: str = "OPENAI_API_KEY") -> str | None:
    """``GET /v1/models`` once before a long run: a line ``<label> <url>: <problem>``, or None.

    Only an unreachable server (connection refused, timeout, DNS), a 5xx or an auth
    refusal (401/403) is a problem; a server without ``/v1/models`` (404) is let through.
    """
    root = url.rstrip("/").removesuffix("/v1")
    key = os.environ.get(api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(root + "/v1/models", headers=headers, timeout=10.0)
    except httpx.ConnectError as exc:
        why = "connection refused" if "refused" in str(exc).lower() else f"cannot connect ({exc})"
        return f"{label} {url}: {why}"
    except httpx.TimeoutException:
        return f"{label} {url}: no answer to GET /v1/models within 10 s"
    except httpx.HTTPError as exc:
        return f"{label} {url}: {type(exc).__name__}: {exc}"
    if r.status_code in (401, 403):
        return f"{label} {url}: GET /v1/models answered {r.status_code} (set ${api_key_env})"
    if r.status_code >= 500:
        return f"{label} {url}: GET /v1/models answered {r.status_code}"
    return None


def resume_hint(command: str, run_id: str, flag: str) -> str:
    """The line printed on Ctrl-C: how to finish the interrupted run."""
    return f"interrupted; resume with: harness {command} ... {flag} {run_id} (the same arguments)"
