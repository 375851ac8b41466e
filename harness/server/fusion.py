"""Shared-experts fusion engagement: did the feature under test actually turn on?

A comparison of a fused and an unfused MoE build means nothing if fusion never
engaged. SGLang decides per model at load time (``determine_num_fused_shared_experts``
in ``python/sglang/srt/models/deepseek_v2.py``, ``glm4_moe.py``, ...) and says so
only in its log (matched formats, from SGLang's source):

- ``Shared experts fusion optimization enabled.`` (``log_info_on_rank0`` in
  ``load_weights`` when ``num_fused_shared_experts > 0``): proves ON;
- ``<reason> Shared experts fusion optimization is disabled.`` (the model refused,
  e.g. ``Config not support fused shared expert(s).``): OFF;
- ``server_args.py`` automatic-disable warnings, e.g. ``FlashInfer TRTLLM MoE is
  enabled. --disable-shared-experts-fusion is automatically set.`` and the older
  ``Flashinfer MoE is enabled. Shared expert fusion is disabled.``: OFF.

``GET /server_info`` (older SGLang: ``/get_server_info``) returns the server
arguments at top level (``dataclasses.asdict(server_args)``) plus
``internal_states`` from the scheduler, whose copy of
``disable_shared_experts_fusion`` is the one a model flips to ``true`` when it
refuses fusion. ``disable_shared_experts_fusion: false`` alone is therefore NOT
proof of ON: only the log proves it. States: ``ON`` (the log proves it), ``OFF``
(a flag or the log says so), ``UNKNOWN`` (neither).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from harness.client.target import server_root
from harness.redaction import redact_url

__all__ = [
    "FusionEngagement",
    "FusionState",
    "collect_engagement",
    "decide_engagement",
    "fusion_warning",
    "server_args_from_info",
    "server_args_diff",
]

FusionState = Literal["ON", "OFF", "UNKNOWN"]

#: log lines proving fusion engaged
ENABLED_PATTERNS = [re.compile(r"Shared experts? fusion optimization enabled", re.I)]
#: log lines saying fusion was refused or switched off automatically
DISABLED_PATTERNS = [
    re.compile(r"Shared experts? fusion optimization is disabled", re.I),
    re.compile(r"--disable-shared-experts-fusion is automatically set", re.I),
    re.compile(r"Shared experts? fusion is disabled", re.I),
]
FLAG = "disable_shared_experts_fusion"
#: top-level /server_info keys that are not server arguments
_NOT_ARGS = {"internal_states", "status", "server_args"}
#: arguments that differ between any two servers without meaning anything
IGNORED_DIFF_KEYS = frozenset(
    {"port", "host", "nccl_port", "dist_init_addr", "metrics_port", "url", "base_url"}
)


class FusionEngagement(BaseModel):
    """What a server says about shared-experts fusion, and the verdict drawn from it."""

    schema_version: int = 1
    state: FusionState = "UNKNOWN"
    reason: str = ""  # one line: why this state
    evidence: list[str] = Field(default_factory=list)  # log lines / "server_info: key=value"
    server_args: dict[str, Any] = Field(default_factory=dict)
    model_info: dict[str, Any] | None = None
    models: Any = None  # GET /v1/models body
    endpoints: dict[str, str] = Field(default_factory=dict)  # path -> "200" / error text
    base_url: str | None = None
    log_path: str | None = None


def _scan_log(lines: list[str]) -> tuple[list[str], list[str]]:
    on = [ln for ln in lines if any(p.search(ln) for p in ENABLED_PATTERNS)]
    off = [ln for ln in lines if any(p.search(ln) for p in DISABLED_PATTERNS)]
    return on, off


def _scheduler_flags(info: dict[str, Any]) -> list[bool]:
    states = info.get("internal_states")
    if not isinstance(states, list):
        return []
    return [bool(s[FLAG]) for s in states if isinstance(s, dict) and FLAG in s]


def server_args_from_info(info: dict[str, Any] | None) -> dict[str, Any]:
    """Server arguments from a ``/server_info`` body: top-level keys (SGLang puts
    ``asdict(server_args)`` there) merged with a nested ``server_args`` dict if any."""
    if not info:
        return {}
    args = {k: v for k, v in info.items() if k not in _NOT_ARGS}
    nested = info.get("server_args")
    if isinstance(nested, dict):
        args.update(nested)
    return args


def decide_engagement(
    log_lines: list[str], server_info: dict[str, Any] | None
) -> tuple[FusionState, str, list[str]]:
    """Pure decision: ``(state, reason, evidence)`` from log lines and a /server_info body."""
    on, off = _scan_log(log_lines)
    args = server_args_from_info(server_info)
    sched = _scheduler_flags(server_info or {})
    flag_off = args.get(FLAG) is True or any(sched)
    flag_ev = [f"server_info: {FLAG}=true"] if args.get(FLAG) is True else []
    flag_ev += ["server_info.internal_states: " + f"{FLAG}=true"] if any(sched) else []
    if on and (off or flag_off):
        return "UNKNOWN", "conflicting: the log says enabled and disabled", on + off + flag_ev
    if on:
        return "ON", "the log says fusion is enabled", on
    if off:
        return "OFF", "the log says fusion is disabled", off + flag_ev
    if flag_off:
        where = "the server arguments say" if args.get(FLAG) is True else "the scheduler says"
        return "OFF", f"{where} {FLAG}=true", flag_ev
    if args.get(FLAG) is False:
        why = f"{FLAG}=false, but no log line proves fusion engaged (the model may refuse it)"
        return "UNKNOWN", why, [f"server_info: {FLAG}=false"]
    return "UNKNOWN", "no fusion line in the log and no fusion flag in /server_info", []


def _get_json(client: httpx.Client, url: str, endpoints: dict[str, str]) -> Any:
    path = httpx.URL(url).path
    try:
        r = client.get(url)
    except httpx.HTTPError as exc:
        endpoints[path] = f"error: {type(exc).__name__}"
        return None
    endpoints[path] = str(r.status_code)
    if r.status_code != 200:
        return None
    try:
        return r.json()
    except ValueError:
        endpoints[path] = f"{r.status_code} (not JSON)"
        return None


def _read_log(log_path: str | Path | None, log_text: str | None) -> list[str]:
    text = log_text or ""
    if log_path is not None and Path(log_path).exists():
        text += Path(log_path).read_text(encoding="utf-8", errors="replace")
    return text.splitlines()


def collect_engagement(
    base_url: str | None,
    *,
    log_path: str | Path | None = None,
    log_text: str | None = None,
    timeout_s: float = 10.0,
) -> FusionEngagement:
    """Ask the server at ``base_url`` (root, ``/v1`` stripped) and scan its log.

    GETs ``/server_info`` (falling back to ``/get_server_info``), ``/model_info`` and
    ``/v1/models`` with httpx; an endpoint that fails is recorded in ``endpoints``,
    never raised. ``base_url=None`` judges from the log alone.
    """
    endpoints: dict[str, str] = {}
    info = model_info = models = None
    if base_url:
        root = server_root(base_url)
        with httpx.Client(timeout=timeout_s) as client:
            info = _get_json(client, root + "/server_info", endpoints)
            if not isinstance(info, dict):
                info = _get_json(client, root + "/get_server_info", endpoints)
            model_info = _get_json(client, root + "/model_info", endpoints)
            models = _get_json(client, root + "/v1/models", endpoints)
    info = info if isinstance(info, dict) else None
    state, reason, evidence = decide_engagement(_read_log(log_path, log_text), info)
    return FusionEngagement(
        state=state,
        reason=reason,
        evidence=evidence,
        server_args=server_args_from_info(info),
        model_info=model_info if isinstance(model_info, dict) else None,
        models=models,
        endpoints=endpoints,
        base_url=redact_url(base_url) if base_url else None,  # no key written (issue 18)
        log_path=str(log_path) if log_path is not None else None,
    )


def server_args_diff(
    a: dict[str, Any], b: dict[str, Any], *, ignore: frozenset[str] = IGNORED_DIFF_KEYS
) -> dict[str, dict[str, Any]]:
    """Server arguments whose values differ: ``{key: {"baseline": a[key], "candidate": b[key]}}``.

    A key absent on one side shows as ``None`` there; keys in ``ignore`` (ports,
    hosts) are skipped. Sorted by key. Empty when either side reports no server
    arguments at all (no ``/server_info``: nothing to compare, not a difference per key).
    """
    if not a or not b:
        return {}
    keys = sorted((set(a) | set(b)) - ignore)
    return {k: {"baseline": a.get(k), "candidate": b.get(k)} for k in keys if a.get(k) != b.get(k)}


def fusion_warning(base: FusionEngagement, cand: FusionEngagement) -> str | None:
    """A one-line warning when fusion does not differ between the sides, else None.

    Both ``OFF``: neither side ran the fused path. Both ``UNKNOWN``: nothing shows
    that the variable under comparison differs. (Other pairs return None.)
    """
    if base.state == cand.state == "OFF":
        return (
            "shared-experts fusion is OFF on both sides: the variable under comparison "
            "does not differ (" + (cand.reason or "no reason given") + ")"
        )
    if base.state == cand.state == "UNKNOWN":
        return (
            "shared-experts fusion is UNKNOWN on both sides: nothing shows the variable under "
            "comparison differs; pass the server logs (--baseline-log/--candidate-log)"
        )
    return None
