"""Talking to an OpenAI-compatible server: target configuration, client, server facts.

The chat requests themselves are made by :mod:`harness.runner` through the openai SDK
(``AsyncOpenAI`` with any ``base_url``). This module holds what is per target:

- :class:`TargetConfig`: URL, model, label, API-key variable, timeout, retries.
- :func:`target_from_options`: a :class:`TargetConfig` from the shared request options
  (:mod:`harness.options`) of a command's parsed arguments, the pytest plugin's settings
  or a matrix deployment: the one place that maps option names to its fields.
- :func:`make_client`: the ``AsyncOpenAI`` for a target (SDK retries off: the runner
  retries itself so every attempt is counted in the transcript).
- :func:`openai_base_url` / :func:`server_root`: ``http://h:p`` <-> ``http://h:p/v1``.
- :func:`fetch_target_info`: ``GET /v1/models`` and ``GET /server_info`` (SGLang; also
  ``/get_server_info``), recorded as :class:`harness.transcript.TargetInfo`. Any failure
  there is tolerated and recorded as ``None``: server facts are optional.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from openai import AsyncOpenAI

from harness.client.completions import DEFAULT_MAX_RESPONSE_BYTES, Limits
from harness.redaction import redact_data
from harness.transcript import TargetInfo

__all__ = [
    "MAX_BACKOFF_S",
    "MAX_RETRY_AFTER_S",
    "OPTION_FIELDS",
    "TargetConfig",
    "fetch_target_info",
    "make_client",
    "openai_base_url",
    "server_root",
    "target_from_options",
]

#: the longest wait between two attempts of a request (seconds)
MAX_BACKOFF_S = 30.0
#: the longest ``Retry-After`` honoured (seconds); a longer one is waited this long
MAX_RETRY_AFTER_S = 60.0


@dataclass
class TargetConfig:
    """One server under test.

    Attributes:
        base_url: server URL, with or without the ``/v1`` suffix.
        model: ``model`` request field; ``None``: the first id of ``GET /v1/models``.
        label: human label (``"fused"``); names the run in ``run_key`` when ``side`` is unset.
        side: ``"baseline"`` / ``"candidate"`` in a comparison, else ``None``.
        api_key_env: environment variable holding the API key (``"EMPTY"`` if unset).
        timeout_s: per-request timeout in seconds: the total deadline of one attempt
            (sending to the last byte) and the SDK's connect/read/write timeout each.
        max_retries: retries of a transient failure (429, 5xx, timeout, reset connection,
            a garbled or cut answer).
        max_response_bytes: the most bytes read of one answer (larger: infrastructure
            error, not retried).
        extra_body: extra request fields for this server (merged over the scenario's).
        backoff_s: first retry delay in seconds; doubles per retry (capped at 30 s,
            :meth:`retry_delay_s`).
    """

    base_url: str
    model: str | None = None
    label: str = "target"
    side: Literal["baseline", "candidate"] | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    max_retries: int = 3
    extra_body: dict[str, Any] = field(default_factory=dict)
    backoff_s: float = 0.5
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    @property
    def name(self) -> str:
        """``side`` if set, else ``label``: the first part of every ``run_key``."""
        return self.side or self.label

    def api_key(self) -> str:
        """The API key from ``api_key_env``, or ``"EMPTY"`` (local servers ignore it)."""
        return os.environ.get(self.api_key_env) or "EMPTY"

    def retry_delay_s(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based): ``backoff_s``
        doubled per attempt, at most :data:`MAX_BACKOFF_S`; the server's ``Retry-After``
        instead when it is longer, at most :data:`MAX_RETRY_AFTER_S`."""
        backoff = min(self.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
        if retry_after_s is not None and retry_after_s > backoff:
            return float(min(retry_after_s, MAX_RETRY_AFTER_S))
        return float(backoff)

    def limits(self) -> Limits:
        """The bounds of one attempt: ``timeout_s`` as the total deadline, the size cap."""
        return Limits(deadline_s=self.timeout_s, max_bytes=self.max_response_bytes)


#: the shared options (:data:`harness.options.OPTIONS` names) a target is built from, and
#: the :class:`TargetConfig` field each sets
OPTION_FIELDS: dict[str, str] = {
    "model": "model",
    "api_key_env": "api_key_env",
    "request_timeout": "timeout_s",
    "max_retries": "max_retries",
    "max_response_bytes": "max_response_bytes",
}


class _Unset(enum.Enum):
    UNSET = enum.auto()


_UNSET = _Unset.UNSET


def target_from_options(
    url: str,
    *,
    label: str,
    side: Literal["baseline", "candidate"] | None = None,
    options: object = None,
    model: str | None | _Unset = _UNSET,
    api_key_env: str | _Unset = _UNSET,
    timeout_s: float | _Unset = _UNSET,
    max_retries: int | _Unset = _UNSET,
    max_response_bytes: int | _Unset = _UNSET,
) -> TargetConfig:
    """A live target for ``url`` from the shared request options of ``options``.

    ``options`` is anything with the options as attributes, named as in
    :data:`harness.options.OPTIONS` (:data:`OPTION_FIELDS`: ``model``, ``api_key_env``,
    ``request_timeout`` in seconds, ``max_retries``, ``max_response_bytes``): a command's
    parsed arguments (``argparse.Namespace``), the pytest plugin's settings, a matrix
    file's deployment; None for none. An option it does not have keeps
    :class:`TargetConfig`'s default. A keyword given here (the field's name and unit)
    wins over the option: where a command's target differs from its options (no
    ``model``, a per-deployment timeout), the caller says so.

    Args:
        url: the server's URL, with or without ``/v1``.
        label: the target's label (``"fused"``, ``"baseline"``).
        side: ``"baseline"``/``"candidate"`` in a comparison, else None.
        options: the parsed options, or None.
        model: ``model`` request field (None: the first of ``GET /v1/models``).
        api_key_env: environment variable holding the API key.
        timeout_s: per-request timeout in seconds.
        max_retries: retries of a transient failure.
        max_response_bytes: the most bytes read of one answer.

    Returns:
        The :class:`TargetConfig`.
    """
    given: dict[str, Any] = {
        "model": model,
        "api_key_env": api_key_env,
        "timeout_s": timeout_s,
        "max_retries": max_retries,
        "max_response_bytes": max_response_bytes,
    }
    fields: dict[str, Any] = {}
    for option, name in OPTION_FIELDS.items():
        value = given[name]
        if value is _UNSET:
            value = getattr(options, option, _UNSET)
        if value is not _UNSET:
            fields[name] = value
    return TargetConfig(url, label=label, side=side, **fields)


def openai_base_url(url: str) -> str:
    """``http://h:p`` or ``http://h:p/`` -> ``http://h:p/v1`` (unchanged if it ends in /v1)."""
    u = url.rstrip("/")
    return u if u.endswith("/v1") else u + "/v1"


def server_root(url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p`` (the root, where SGLang serves /server_info)."""
    u = url.rstrip("/")
    return u[: -len("/v1")] if u.endswith("/v1") else u


def make_client(cfg: TargetConfig) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` for ``cfg`` with SDK retries disabled (``max_retries=0``)."""
    return AsyncOpenAI(
        base_url=openai_base_url(cfg.base_url),
        api_key=cfg.api_key(),
        max_retries=0,
        timeout=cfg.timeout_s,
    )


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    """The JSON body of ``GET url``, or ``None`` on any failure (status, network, body)."""
    try:
        resp = await client.get(url)
        if resp.status_code != 200:
            return None
        return resp.json()
    except (httpx.HTTPError, ValueError):
        return None


async def fetch_target_info(cfg: TargetConfig) -> TargetInfo:
    """What the server says about itself: ``/v1/models`` and ``/server_info``.

    Never raises for server trouble: unanswered fields are ``None``. ``model`` is
    ``cfg.model`` or else the first model id listed by ``/v1/models``.
    """
    headers = {"Authorization": f"Bearer {cfg.api_key()}"}
    timeout = httpx.Timeout(min(cfg.timeout_s, 10.0))
    async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
        models = await _get_json(client, openai_base_url(cfg.base_url) + "/models")
        root = server_root(cfg.base_url)
        info = await _get_json(client, root + "/server_info")
        if not isinstance(info, dict):
            info = await _get_json(client, root + "/get_server_info")
    model = cfg.model
    if model is None and isinstance(models, dict):
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], dict):
            first = data[0].get("id")
            model = first if isinstance(first, str) else None
    return TargetInfo(
        label=cfg.label,
        side=cfg.side,
        base_url=cfg.base_url,
        model=model,
        models=redact_data(models),  # a server's own keys stay out of every file
        server_info=redact_data(info) if isinstance(info, dict) else None,
    )
