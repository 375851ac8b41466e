"""Shared-experts fusion engagement: did the feature under test actually turn on?

A comparison of a fused and an unfused MoE build means nothing if fusion never
engaged. SGLang decides per model at load time and says so unevenly, per version and
per model family (read from the released packages):

- ``Shared experts fusion optimization enabled.``: logged by DeepSeek V3/R1
  (``sglang/srt/models/deepseek_common/deepseek_weight_loader.py``, in
  ``sglang==0.5.10.post1`` and ``sglang==0.5.23``), GLM-4.5V (``glm4v_moe.py``), Step3-VL,
  MiniMax-M3, ... when ``num_fused_shared_experts > 0``: proves ON.
- GLM-4.5/4.6 (``Glm4MoeForCausalLM``, ``sglang/srt/models/glm4_moe.py``) and GLM-4.7-Flash
  (``Glm4MoeLiteForCausalLM``) fuse their shared expert **without** that line, in both
  versions. What proves it there: the routed-experts capture buffer (with
  ``--enable-return-routed-experts``), whose last dimension is ``top_k +
  num_fused_shared_experts``: ``Routing experts device buffer allocated. #shape: (N, L, W)``
  (0.5.10.post1, ``sglang/srt/layers/moe/routed_experts_capturer.py``; ``top_k`` from the
  MoE geometry) or ``DeviceCache[routed_experts] allocated: shape=(N, L, W)`` beside
  ``HostCache[routed_experts] allocated: shape=(T, L, K)`` (0.5.23,
  ``sglang/srt/state_capturer/base.py``); a refusal is always logged, so a complete boot
  log (``Load weight end. ... type=Glm4MoeForCausalLM``) with no refusal line and the
  flag off shows the model kept fusion; and in 0.5.10.post1 the scheduler's copy of the
  flag in ``/server_info`` ``internal_states``, which a refusing model flips to ``true``
  (``determine_num_fused_shared_experts`` in ``glm4_moe.py``/``deepseek_v2.py``).
- ``<reason> Shared experts fusion optimization is disabled.``: the model refused
  (0.5.10.post1: ``determine_num_fused_shared_experts``; 0.5.23:
  ``resolve_shared_experts_config`` in ``sglang/srt/layers/moe/utils.py``): OFF.
- automatic disables, e.g. ``FlashInfer TRTLLM MoE is enabled.
  --disable-shared-experts-fusion is automatically set.`` (0.5.10.post1
  ``sglang/srt/server_args.py``; 0.5.23 ``sglang/srt/arg_groups/overrides.py``), which also
  set ``disable_shared_experts_fusion: true`` in ``/server_info``: OFF.
- Qwen2-MoE/Qwen3-MoE (``Qwen2MoeForCausalLM``, ``Qwen3MoeForCausalLM``) never fuse in
  either version (no fusion hook; ``qwen2_moe.py`` fuses only for Qwen3.5/Qwen3-Next): OFF.

In 0.5.23 a model's refusal no longer writes the server arguments: ``internal_states``
is the resolved server arguments (``sglang/srt/managers/scheduler_components/internal_state.py``),
so there ``disable_shared_experts_fusion: false`` says nothing about the model. In no
version does the flag alone prove ON. vLLM logs no fusion state. States: ``ON``,
``OFF``, ``UNKNOWN`` (nothing decides); :class:`FusionEngagement` ``decided_by`` names the
evidence that decided.

``GET /server_info`` is SGLang's server arguments at top level plus scheduler facts,
``internal_states`` and, in 0.5.23, ``startup_time``, ``launch_command``, ``kv_events``,
``version``, ``frontend`` (``sglang/srt/entrypoints/http_server.py`` ``server_info``,
``build_server_info`` in ``sglang/srt/utils/common.py``); vLLM's (only with
``VLLM_SERVER_DEV_MODE=1``: ``vllm/entrypoints/serve/dev/server_info/api_router.py``) is
``{"vllm_config", "vllm_env", "system_env"}``, ``vllm_config`` a ``str(VllmConfig)``
line unless asked ``?config_format=json``. :func:`server_args_from_info` reads each.

What a folder shows of two sides' servers is decided here too, from what is on disk:
:func:`recorded_args_diff` (the summary's ``server_args_diff``, else the diff of the
transcripts' ``/server_info``) and :func:`recorded_fusion_warning` (the fusion warning from
the sides' recorded engagement when the summary carries none); the report reads them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from harness.client.target import server_root
from harness.redaction import redact_data, redact_url
from harness.server.process import read_lines

__all__ = [
    "FusionDecision",
    "FusionEngagement",
    "FusionState",
    "args_diff_pairs",
    "collect_engagement",
    "decide_engagement",
    "decide_fusion",
    "fusion_warning",
    "recorded_args_diff",
    "recorded_fusion_warning",
    "server_args_diff",
    "server_args_from_info",
    "server_kind",
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
#: the routed-experts capture buffer's allocation: 0.5.10.post1, then 0.5.23
DEVICE_BUFFER = re.compile(
    r"(?:Routing experts device buffer allocated\. #shape: |"
    r"DeviceCache\[routed_experts\] allocated: shape=)\((\d+), (\d+), (\d+)\)"
)
HOST_BUFFER = re.compile(r"HostCache\[routed_experts\] allocated: shape=\((\d+), (\d+), (\d+)\)")
#: ``Load weight end. elapsed=..., type=<model class>, ...`` (``model_runner.py``)
LOAD_END = re.compile(r"Load weight end\..*?\btype=(\w+)")
FLAG = "disable_shared_experts_fusion"
#: model classes that fuse their shared expert without logging it (SGLang 0.5.10.post1, 0.5.23)
SILENT_FUSERS = frozenset({"Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM"})
#: model classes with no shared-experts fusion in SGLang (0.5.10.post1, 0.5.23)
NEVER_FUSE = frozenset({"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"})
#: SGLang versions whose refusing model flips ``internal_states`` (read in their code)
FLIPS_INTERNAL_STATE = frozenset({"0.5.10.post1"})
#: top-level /server_info keys that are not server arguments (0.5.23 adds the last five)
_NOT_ARGS = frozenset(
    {"internal_states", "status", "server_args"}
    | {"startup_time", "launch_command", "kv_events", "version", "frontend"}
)
#: arguments that differ between any two servers without meaning anything; also every
#: key named ``port`` or ending in ``_port`` (see :func:`server_args_diff`)
IGNORED_DIFF_KEYS = frozenset(
    {"host", "dist_init_addr", "url", "base_url", "instance_id", "startup_time"}
    | {"launch_command", "kv_events", "version", "frontend"}
)

Decider = Literal[
    "log: enabled line",
    "log: capture buffer width",
    "log: refusal or automatic-disable line",
    "log: no refusal before Load weight end",
    "server_info: disable_shared_experts_fusion",
    "server_info.internal_states",
    "architecture",
    "conflict",
    "none",
]


class FusionDecision(BaseModel):
    """A fusion verdict: ``state``, one-line ``reason``, the ``evidence`` quoted (log lines,
    ``server_info: key=value``), and ``decided_by``, the kind of evidence that decided."""

    state: FusionState = "UNKNOWN"
    reason: str = ""
    evidence: list[str] = Field(default_factory=list)
    decided_by: Decider = "none"


class FusionEngagement(BaseModel):
    """What a server says about shared-experts fusion, and the verdict drawn from it.

    ``server``: ``"sglang"``, ``"vllm"`` or ``None`` (from the shape of ``/server_info``);
    ``server_version``: the version it reports; ``architecture``: the model class
    (``/model_info`` ``architectures``, else the log's ``Load weight end ... type=``).
    """

    schema_version: int = 1
    state: FusionState = "UNKNOWN"
    reason: str = ""  # one line: why this state
    evidence: list[str] = Field(default_factory=list)  # log lines / "server_info: key=value"
    decided_by: str = "none"
    server: str | None = None
    server_version: str | None = None
    architecture: str | None = None
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


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    return parts + ["".join(cur)]


def _config_line(text: str) -> dict[str, Any]:
    """vLLM's ``str(VllmConfig)`` (``model='m', tensor_parallel_size=1, ...``) as
    ``{key: value text}``; a value's nested reprs are kept whole."""
    out: dict[str, Any] = {}
    for part in _split_top(text):
        key, sep, value = part.strip().partition("=")
        if sep and re.fullmatch(r"\w+", key):
            out[key] = value.strip()
    return out


def _flatten(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """vLLM's JSON ``vllm_config``: ``{"parallel_config": {"tensor_parallel_size": 1}}`` ->
    ``{"parallel_config.tensor_parallel_size": 1}`` (one level; deeper values kept whole)."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if isinstance(value, dict) and not prefix:
            out |= _flatten(value, f"{key}.")
        else:
            out[prefix + key] = value
    return out


def _vllm_args(info: dict[str, Any]) -> dict[str, Any]:
    cfg = info.get("vllm_config")
    args = _flatten(cfg) if isinstance(cfg, dict) else {}
    args |= _config_line(cfg) if isinstance(cfg, str) else {}
    env = info.get("vllm_env")
    if isinstance(env, dict):
        args |= {f"env.{k}": v for k, v in env.items()}
    return args


def server_kind(info: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """``(server, version)`` from a ``/server_info`` body: vLLM's dev-mode shape
    (``vllm_config``; version from ``system_env.vllm_version``), SGLang's (its
    ``version``), else ``(None, None)``."""
    if not isinstance(info, dict):
        return None, None
    if "vllm_config" in info:
        env = info.get("system_env")
        version = env.get("vllm_version") if isinstance(env, dict) else None
        return "vllm", str(version) if version is not None else None
    if "model_path" in info or "internal_states" in info:
        version = info.get("version")
        return "sglang", str(version) if version is not None else None
    return None, None


def server_args_from_info(info: dict[str, Any] | None) -> dict[str, Any]:
    """Server arguments from a ``/server_info`` body, per server.

    SGLang: the top-level keys (``asdict(server_args)``, 0.5.23's ``resolved_dict()``)
    without ``internal_states``, ``status`` and the facts that are not arguments
    (``startup_time``, ``launch_command``, ``kv_events``, ``version``, ``frontend``), merged
    with a nested ``server_args`` dict if any. vLLM (dev mode): ``vllm_config`` flattened
    to ``section.key`` (JSON form) or its ``key=value`` text, plus ``env.VLLM_*`` from
    ``vllm_env``; ``system_env`` (the machine) is not an argument. ``{}`` for no body.
    """
    if not info:
        return {}
    if "vllm_config" in info:
        return _vllm_args(info)
    args = {k: v for k, v in info.items() if k not in _NOT_ARGS}
    nested = info.get("server_args")
    if isinstance(nested, dict):
        args.update(nested)
    return args


def _capture_width(lines: list[str], top_k: int | None) -> tuple[int, list[str]] | None:
    """``(fused shared experts, the lines)`` from the capture buffer's allocation lines:
    device width minus the host width (0.5.23) or minus ``top_k`` (0.5.10.post1); None
    without a device line or a width to subtract."""
    dev = next(((m, ln) for ln in lines if (m := DEVICE_BUFFER.search(ln))), None)
    if dev is None:
        return None
    host = next(((m, ln) for ln in lines if (m := HOST_BUFFER.search(ln))), None)
    routed = int(host[0].group(3)) if host is not None else top_k
    if routed is None:
        return None
    quoted = [dev[1]] + ([host[1]] if host is not None else [])
    return int(dev[0].group(3)) - routed, quoted


def _architecture(lines: list[str], model_info: dict[str, Any] | None) -> str | None:
    archs = (model_info or {}).get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    found = next((m.group(1) for ln in lines if (m := LOAD_END.search(ln))), None)
    return found


def _silent_fuser(
    arch: str, lines: list[str], info: dict[str, Any] | None, args: dict[str, Any]
) -> FusionDecision:
    """GLM-4.5/4.6-like models: fused without an ``enabled`` line (the caller has seen no
    refusal, no flag set and no capture-buffer line)."""
    _, version = server_kind(info)
    sched = _scheduler_flags(info or {})
    if version in FLIPS_INTERNAL_STATE and sched and not any(sched):
        return FusionDecision(
            state="ON",
            reason=f"{arch} fuses without an 'enabled' line; SGLang {version}'s scheduler "
            f"would set {FLAG}=true had the model refused, and it is false",
            evidence=[f"server_info.internal_states: {FLAG}=false", f"architecture: {arch}"],
            decided_by="server_info.internal_states",
        )
    load_end = next((ln for ln in lines if LOAD_END.search(ln)), None)
    flag_off = args.get(FLAG) is False or any(f"{FLAG}=False" in ln for ln in lines)
    if load_end is not None and flag_off:
        return FusionDecision(
            state="ON",
            reason=f"{arch} fuses without an 'enabled' line (n_shared_experts > 0, as in "
            "GLM-4.5/4.6) and logs any refusal before its weights load: the log has none "
            f"before 'Load weight end', and {FLAG}=false",
            evidence=[load_end, f"{FLAG}=false"],
            decided_by="log: no refusal before Load weight end",
        )
    return FusionDecision(
        reason=f"{arch} fuses without an 'enabled' line; give the complete boot log (or "
        "start with --enable-return-routed-experts: the capture buffer's width shows it)",
        evidence=[f"architecture: {arch}"],
    )


def _off(lines_off: list[str], args: dict[str, Any], sched: list[bool]) -> FusionDecision | None:
    """OFF from a refusal/automatic-disable line or a flag set, else None."""
    flag_ev = [f"server_info: {FLAG}=true"] if args.get(FLAG) is True else []
    flag_ev += [f"server_info.internal_states: {FLAG}=true"] if any(sched) else []
    if lines_off:
        return FusionDecision(
            state="OFF",
            reason="the log says fusion is disabled",
            evidence=lines_off + flag_ev,
            decided_by="log: refusal or automatic-disable line",
        )
    if args.get(FLAG) is True:
        return FusionDecision(
            state="OFF",
            reason=f"the server arguments say {FLAG}=true",
            evidence=flag_ev,
            decided_by="server_info: disable_shared_experts_fusion",
        )
    if any(sched):
        return FusionDecision(
            state="OFF",
            reason=f"the scheduler says {FLAG}=true",
            evidence=flag_ev,
            decided_by="server_info.internal_states",
        )
    return None


def decide_fusion(
    log_lines: list[str],
    server_info: dict[str, Any] | None,
    *,
    model_info: dict[str, Any] | None = None,
    top_k: int | None = None,
) -> FusionDecision:
    """Pure decision from log lines, a ``/server_info`` body, a ``/model_info`` body and the
    model's ``top_k`` (for 0.5.10.post1's capture line), in this order of evidence:
    conflicting proofs (UNKNOWN); the ``enabled`` line or a capture buffer wider than
    top-k (ON); a refusal or automatic-disable line, the flag set at top level or in
    ``internal_states`` (OFF); a capture buffer exactly top-k wide (OFF); an architecture
    that never fuses (OFF); a silent fuser's evidence (:data:`SILENT_FUSERS`); else UNKNOWN.
    """
    on, off = _scan_log(log_lines)
    args = server_args_from_info(server_info)
    sched = _scheduler_flags(server_info or {})
    cap = _capture_width(log_lines, top_k)
    if cap is not None:
        on, off = (on + cap[1], off) if cap[0] > 0 else (on, off + cap[1])
    decided = _off(off, args, sched)
    if on and decided is not None:
        ev = on + decided.evidence
        why = "conflicting: fusion shown enabled and disabled"
        return FusionDecision(reason=why, evidence=ev, decided_by="conflict")
    if on:
        by_line = any(p.search(ln) for ln in on for p in ENABLED_PATTERNS)
        why = (
            "the log says fusion is enabled"
            if by_line
            else (
                f"the capture buffer is {cap[0] if cap else '?'} column(s) wider than top-k: "
                "the shared expert is fused"
            )
        )
        by: Decider = "log: enabled line" if by_line else "log: capture buffer width"
        return FusionDecision(state="ON", reason=why, evidence=on, decided_by=by)
    if decided is not None:
        refused = any(p.search(ln) for ln in decided.evidence for p in DISABLED_PATTERNS)
        if cap is not None and cap[1][0] in decided.evidence and not refused:
            decided.reason = "the capture buffer is exactly top-k wide: no fused shared expert"
            decided.decided_by = "log: capture buffer width"
        return decided
    return _undecided(log_lines, server_info, model_info, args)


def _undecided(
    lines: list[str],
    info: dict[str, Any] | None,
    model_info: dict[str, Any] | None,
    args: dict[str, Any],
) -> FusionDecision:
    """No proof either way in the log or the flags: the architecture may decide."""
    arch = _architecture(lines, model_info)
    if arch in NEVER_FUSE:
        return FusionDecision(
            state="OFF",
            reason=f"{arch} has no shared-experts fusion in SGLang",
            evidence=[f"architecture: {arch}"],
            decided_by="architecture",
        )
    if arch in SILENT_FUSERS:
        return _silent_fuser(arch, lines, info, args)
    if server_kind(info)[0] == "vllm":
        return FusionDecision(reason="vLLM logs no shared-experts fusion state")
    if args.get(FLAG) is False:
        why = f"{FLAG}=false, but no log line proves fusion engaged (the model may refuse it)"
        return FusionDecision(reason=why, evidence=[f"server_info: {FLAG}=false"])
    return FusionDecision(reason="no fusion line in the log and no fusion flag in /server_info")


def decide_engagement(
    log_lines: list[str], server_info: dict[str, Any] | None, **kw: Any
) -> tuple[FusionState, str, list[str]]:
    """:func:`decide_fusion` as ``(state, reason, evidence)`` (``kw``: its keywords)."""
    d = decide_fusion(log_lines, server_info, **kw)
    return d.state, d.reason, d.evidence


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
    lines = (log_text or "").splitlines()
    if log_path is not None:  # its start and end within a cap, lines cut
        lines += read_lines(Path(log_path))
    return lines


def _top_k(client: httpx.Client, root: str, lines: list[str], model_path: str | None) -> int | None:
    """The model's top-k, asked only when a 0.5.10.post1 capture line needs it."""
    if not any(DEVICE_BUFFER.search(ln) for ln in lines):
        return None
    if any(HOST_BUFFER.search(ln) for ln in lines):
        return None
    from harness.server.experts import find_moe_shape

    shape, _ = find_moe_shape(client, root, model_path=model_path)
    return shape.top_k if shape is not None else None


def _fetch(
    base_url: str,
    timeout_s: float,
    lines: list[str],
    endpoints: dict[str, str],
    model_path: str | None,
) -> tuple[Any, Any, Any, int | None]:
    """``(/server_info, /model_info, /v1/models, top_k)`` bodies; ``?config_format=json``
    makes vLLM's dev-mode ``/server_info`` answer its config as JSON (SGLang ignores it)."""
    root = server_root(base_url)
    with httpx.Client(timeout=timeout_s) as client:
        info = _get_json(client, root + "/server_info?config_format=json", endpoints)
        if not isinstance(info, dict):
            info = _get_json(client, root + "/get_server_info", endpoints)
        model_info = _get_json(client, root + "/model_info", endpoints)
        models = _get_json(client, root + "/v1/models", endpoints)
        top_k = _top_k(client, root, lines, model_path)
    return info, model_info, models, top_k


def collect_engagement(
    base_url: str | None,
    *,
    log_path: str | Path | None = None,
    log_text: str | None = None,
    timeout_s: float = 10.0,
    model_path: str | None = None,
    top_k: int | None = None,
) -> FusionEngagement:
    """Ask the server at ``base_url`` (root, ``/v1`` stripped) and scan its log.

    GETs ``/server_info`` (falling back to ``/get_server_info``), ``/model_info`` and
    ``/v1/models`` with httpx (and, for a 0.5.10.post1 capture line, the model's
    geometry: :func:`harness.server.experts.find_moe_shape`, ``model_path`` the launch
    command's model, unless ``top_k`` is given); an endpoint that fails is recorded in
    ``endpoints``, never raised. ``base_url=None`` judges from the log alone.
    """
    endpoints: dict[str, str] = {}
    lines = _read_log(log_path, log_text)
    info = model_info = models = None
    if base_url:
        fetched = _fetch(base_url, timeout_s, lines if top_k is None else [], endpoints, model_path)
        # the server's own keys (api_key, admin_api_key, launch_command --api-key) out
        info, model_info, models = (redact_data(x) for x in fetched[:3])
        top_k = top_k if top_k is not None else fetched[3]
    info = info if isinstance(info, dict) else None
    model_info = model_info if isinstance(model_info, dict) else None
    d = decide_fusion(lines, info, model_info=model_info, top_k=top_k)
    server, version = server_kind(info)
    return FusionEngagement(
        state=d.state,
        reason=d.reason,
        evidence=d.evidence,
        decided_by=d.decided_by,
        server=server,
        server_version=version,
        architecture=_architecture(lines, model_info),
        server_args=server_args_from_info(info),
        model_info=model_info,
        models=models,
        endpoints=endpoints,
        base_url=redact_url(base_url) if base_url else None,  # no key written to disk
        log_path=str(log_path) if log_path is not None else None,
    )


def _ignored(key: str, ignore: frozenset[str]) -> bool:
    last = key.rsplit(".", 1)[-1]
    return key in ignore or last in ignore or last == "port" or last.endswith("_port")


def server_args_diff(
    a: dict[str, Any], b: dict[str, Any], *, ignore: frozenset[str] = IGNORED_DIFF_KEYS
) -> dict[str, dict[str, Any]]:
    """Server arguments whose values differ: ``{key: {"baseline": a[key], "candidate": b[key]}}``.

    A key absent on one side shows as ``None`` there; keys in ``ignore`` (hosts, ids,
    SGLang 0.5.23's ``startup_time``/``launch_command``/...; a dotted vLLM key by its last
    part) and every key named ``port`` or ending in ``_port`` are skipped. Sorted by key.
    Empty when either side reports no server arguments at all (no ``/server_info``:
    nothing to compare, not a difference per key).
    """
    if not a or not b:
        return {}
    keys = sorted(k for k in set(a) | set(b) if not _ignored(k, ignore))
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


def args_diff_pairs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[Any]]:
    """:func:`server_args_diff` as ``summary.json`` records it (``Summary.server_args_diff``):
    ``{arg: [baseline value, candidate value]}``, sorted by argument (``{}`` when either
    side reports no server arguments)."""
    return {k: [v["baseline"], v["candidate"]] for k, v in server_args_diff(a, b).items()}


def recorded_args_diff(
    recorded: dict[str, list[Any]] | None, server_infos: Sequence[dict[str, Any] | None]
) -> dict[str, list[Any]]:
    """The server arguments that differ between a folder's two sides, from its files.

    Args:
        recorded: the summary's ``server_args_diff`` (None: not recorded, or no summary).
        server_infos: each side's ``/server_info`` as its transcripts carry it
            (``TargetInfo.server_info``; None when not reported), baseline first.

    Returns:
        A copy of ``recorded`` when there is one; else, for exactly two sides that both
        reported ``/server_info`` (a matrix of two deployments, a folder without
        ``summary.json``, a comparison whose engagement probe failed), their
        :func:`args_diff_pairs`; else ``{}``.
    """
    if recorded is not None:
        return dict(recorded)
    if len(server_infos) != 2 or not all(server_infos):
        return {}
    a, b = (server_args_from_info(info) for info in server_infos)
    return args_diff_pairs(a, b)


def recorded_fusion_warning(
    warnings: Sequence[str], states: Sequence[dict[str, Any] | None]
) -> str | None:
    """The fusion warning of a folder's two sides from their recorded engagement, for a
    folder whose summary carries none (an A/A comparison's summary leaves it out, a
    matrix's never has one).

    Args:
        warnings: the summary's warnings (``Summary.warnings``).
        states: each side's recorded engagement (``SideInfo.fusion``, a
            :class:`FusionEngagement` as JSON; None when not collected), baseline first.

    Returns:
        :func:`fusion_warning` of the two states when there are exactly two, both
        recorded, and no warning in ``warnings`` is about fusion already; else None.
    """
    if len(states) != 2 or not all(states) or any("fusion" in w for w in warnings):
        return None
    return fusion_warning(*(FusionEngagement.model_validate(s) for s in states))
