"""Routed-experts probe: ask the server which experts each token was routed to, and check.

Format (SGLang, ``--enable-return-routed-experts``; see
``python/sglang/srt/layers/moe/routed_experts_capturer.py`` and
``entrypoints/openai/protocol.py``):

- request: ``"return_routed_experts": true``, a top-level field on ``POST /generate``
  and an extra body field on ``/v1/chat/completions`` and ``/v1/completions``;
- response: ``meta_info.routed_experts`` on ``/generate``, ``sglext.routed_experts``
  (response level, ``SglExt`` model; some builds put it on the choice) on the OpenAI
  endpoints: base64 of the flattened little-endian int32 array of shape
  ``[rows, num_hidden_layers, num_experts_per_tok]`` (a ``routed_experts_dtype``
  field, when present, overrides int32);
- rows cover token positions ``[routed_experts_start_len, seqlen - 1)``, i.e.
  ``rows = prompt_tokens + completion_tokens - 1 - start_len`` (the last sampled
  token is never forwarded);
- the capture buffer is ``torch.zeros``, so layers without routing (dense layers,
  e.g. DeepSeek's ``first_k_dense_replace``) stay all zero;
- with shared-experts fusion the shared expert is routed expert number
  ``n_routed_experts`` (``mlp.shared_experts`` renamed ``mlp.experts.{n_routed_experts}``
  in ``deepseek_v2.py``), so that id must never appear among the top-k routed ids.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
from pydantic import BaseModel, Field

from harness.client.target import server_root
from harness.kinds import plural

__all__ = [
    "ExpertsProbeResult",
    "MoeShape",
    "Violation",
    "check_routed_experts",
    "decode_routed_experts",
    "load_model_config",
    "moe_shape_from_config",
    "probe_routed_experts",
]

Endpoint = Literal["generate", "chat", "completions"]
ViolationKind = Literal[
    "shape", "rows", "out_of_range", "shared_expert_id", "duplicate", "dense_nonzero", "missing"
]

_LAYERS = ("num_hidden_layers", "num_layers", "n_layers")
_TOPK = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k", "moe_k")
_EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_CONFIG_KEYS = ("hf_config", "config", "model_config", "hf_text_config", "text_config")


class MoeShape(BaseModel):
    """Geometry needed to check routed experts; ``dense_layers`` carry no routing."""

    num_layers: int
    top_k: int
    num_routed_experts: int
    dense_layers: list[int] = Field(default_factory=list)
    source: str = ""  # where the numbers came from


class Violation(BaseModel):
    """One broken rule, at absolute token position ``token`` and layer ``layer``."""

    kind: ViolationKind
    token: int | None = None
    layer: int | None = None
    detail: str

    def line(self) -> str:
        where = "" if self.token is None else f"token {self.token}, layer {self.layer}: "
        return f"{where}{self.detail}"


class ExpertsProbeResult(BaseModel):
    """Outcome of one probe request: ``ok`` only if the field came back and every rule held."""

    endpoint: str
    ok: bool = False
    error: str | None = None  # infrastructure problem (HTTP status, timeout, bad JSON)
    shape: MoeShape | None = None
    rows: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    start_len: int = 0
    dtype: str = "int32"
    violation_count: int = 0
    violation_kinds: dict[str, int] = Field(default_factory=dict)  # kind -> count, all of them
    violations: list[Violation] = Field(default_factory=list)  # first ``max_violations``

    def summary(self) -> str:
        """One line: ``<endpoint>: N violations (kind: n, ...); first: token t, layer l: ...``
        (a failure's one-line reason names the first violation)."""
        if self.error:
            return f"{self.endpoint}: {self.error}"
        if self.ok:
            layers = self.shape.num_layers if self.shape else "?"
            return f"{self.endpoint}: {self.rows} token rows x {layers} layers OK"
        counts = ", ".join(f"{k}: {n}" for k, n in self.violation_kinds.items())
        first = self.violations[0].line() if self.violations else "?"
        many = plural(self.violation_count, "violation")
        return f"{self.endpoint}: {many} ({counts}); first: {first}"


def _first_int(cfg: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool):
            return int(cfg[k])
    return None


def _dense_layers(cfg: dict[str, Any], num_layers: int) -> list[int]:
    """DeepSeek ``first_k_dense_replace``/``moe_layer_freq``; Qwen ``mlp_only_layers``."""
    dense = set(range(min(int(cfg.get("first_k_dense_replace") or 0), num_layers)))
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, int) and freq > 1:
        dense |= {i for i in range(num_layers) if i % freq != 0}
    only = cfg.get("mlp_only_layers")
    if isinstance(only, list):
        dense |= {int(i) for i in only if isinstance(i, int)}
    return sorted(dense)


def moe_shape_from_config(cfg: dict[str, Any] | None, *, source: str = "config") -> MoeShape | None:
    """MoE geometry from a HF-style config (or a /model_info body that holds one).

    Looks at the dict itself, then nested ``hf_config``/``config``/... . Returns None
    when num_layers, top_k or the routed-expert count is missing.
    """
    if not isinstance(cfg, dict):
        return None
    candidates = [cfg] + [cfg[k] for k in _CONFIG_KEYS if isinstance(cfg.get(k), dict)]
    for c in candidates:
        layers, topk, experts = (
            _first_int(c, _LAYERS),
            _first_int(c, _TOPK),
            _first_int(c, _EXPERTS),
        )
        if layers and topk and experts:
            return MoeShape(
                num_layers=layers,
                top_k=topk,
                num_routed_experts=experts,
                dense_layers=_dense_layers(c, layers),
                source=source,
            )
    return None


def decode_routed_experts(payload: str, *, dtype: str | None = None) -> np.ndarray:
    """base64 -> flat array of expert ids, shape ``[n]``, returned as int64.

    The bytes are read as little-endian int32 unless ``dtype`` says otherwise
    (numpy/torch names: ``"int16"``, ``"torch.int32"``).
    Raises ValueError on a payload that is not a base64 string, bad base64, an unknown
    dtype, or a byte count that does not divide by the item size.
    """
    if not isinstance(payload, str):
        raise ValueError(f"routed_experts must be a base64 string, not {type(payload).__name__}")
    name = (dtype or "int32").removeprefix("torch.")
    try:
        dt = np.dtype(name).newbyteorder("<")
    except TypeError as exc:
        raise ValueError(f"unknown routed_experts_dtype {dtype!r}") from exc
    if dt.kind not in "iu":
        raise ValueError(f"routed_experts_dtype {dtype!r} is not an integer type")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"routed_experts is not valid base64: {exc}") from exc
    if len(raw) % dt.itemsize:
        raise ValueError(f"{len(raw)} bytes do not divide into {dt.itemsize}-byte {name} items")
    return np.frombuffer(raw, dtype=dt).astype(np.int64)


def _violations_at(
    mask: np.ndarray, kind: ViolationKind, start_len: int, what: str, arr: np.ndarray
) -> list[Violation]:
    out = []
    for row, layer in zip(*np.nonzero(mask), strict=True):
        ids = arr[row, layer].tolist()
        out.append(
            Violation(
                kind=kind, token=int(row) + start_len, layer=int(layer), detail=f"{what}: ids {ids}"
            )
        )
    return out


def _row_rules(arr: np.ndarray, shape: MoeShape, start_len: int) -> list[Violation]:
    moe = np.ones(shape.num_layers, dtype=bool)
    moe[[i for i in shape.dense_layers if 0 <= i < shape.num_layers]] = False
    shared = shape.num_routed_experts
    bad_range = ((arr < 0) | (arr > shared)).any(axis=2) & moe
    has_shared = (arr == shared).any(axis=2) & moe
    srt = np.sort(arr, axis=2)
    dup = (np.diff(srt, axis=2) == 0).any(axis=2) & moe
    dense_nz = (arr != 0).any(axis=2) & ~moe
    return (
        _violations_at(bad_range, "out_of_range", start_len, f"id outside [0, {shared})", arr)
        + _violations_at(
            has_shared,
            "shared_expert_id",
            start_len,
            f"shared expert id {shared} among the routed experts",
            arr,
        )
        + _violations_at(dup, "duplicate", start_len, f"{shape.top_k} distinct ids expected", arr)
        + _violations_at(dense_nz, "dense_nonzero", start_len, "dense layer not all zero", arr)
    )


def check_routed_experts(
    flat: np.ndarray,
    shape: MoeShape,
    *,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    start_len: int = 0,
) -> tuple[int | None, list[Violation]]:
    """Check a decoded flat array; returns ``(rows, violations)`` sorted by token, layer.

    Rules: size divides by ``num_layers * top_k``; ``rows == prompt_tokens +
    completion_tokens - 1 - start_len`` (when both counts are given); in MoE layers
    ids in ``[0, num_routed_experts)``, never the shared id, ``top_k`` distinct per
    row; dense layers all zero. Token indices are absolute (``start_len + row``).
    """
    per_row = shape.num_layers * shape.top_k
    if flat.size % per_row:
        return None, [
            Violation(
                kind="shape",
                detail=(
                    f"{flat.size} ids do not divide by num_layers x top_k = "
                    f"{shape.num_layers} x {shape.top_k} = {per_row}"
                ),
            )
        ]
    rows = flat.size // per_row
    out: list[Violation] = []
    if prompt_tokens is not None and completion_tokens is not None:
        want = prompt_tokens + completion_tokens - 1 - start_len
        if rows != want:
            out.append(
                Violation(
                    kind="rows",
                    detail=(
                        f"{rows} rows, expected prompt_tokens + completion_tokens - 1 - start_len = "
                        f"{prompt_tokens} + {completion_tokens} - 1 - {start_len} = {want}"
                    ),
                )
            )
    arr = flat.reshape(rows, shape.num_layers, shape.top_k)
    found = _row_rules(arr, shape, start_len)
    found.sort(key=lambda v: (v.token or 0, v.layer or 0))
    return rows, out + found


def _request(
    endpoint: Endpoint, prompt: str, max_tokens: int, model: str
) -> tuple[str, dict[str, Any]]:
    if endpoint == "generate":
        return "/generate", {
            "text": prompt,
            "return_routed_experts": True,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
        }
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "return_routed_experts": True,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def _extract(endpoint: Endpoint, data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(holder of routed_experts, token counts)`` from a response body."""
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return {}, {}
    if endpoint == "generate":
        meta = data.get("meta_info") or {}
        return meta, meta
    usage = data.get("usage") or {}
    ext = data.get("sglext") or {}
    if not ext.get("routed_experts"):
        choices = data.get("choices") or [{}]
        ext = (choices[0] or {}).get("sglext") or ext
    return ext, usage


def load_model_config(path: str | Path) -> dict[str, Any] | None:
    """A HF ``config.json`` (or the one in directory ``path``), else None if unreadable."""
    p = Path(path)
    p = p / "config.json" if p.is_dir() else p
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fetch_shape(client: httpx.Client, root: str) -> MoeShape | None:
    """From ``/model_info``, the local ``config.json`` of its ``model_path``, ``/server_info``."""
    for path in ("/model_info", "/server_info", "/get_server_info"):
        try:
            r = client.get(root + path)
            info = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            info = None
        shape = moe_shape_from_config(info, source=path)
        if shape is None and isinstance(info, dict) and isinstance(info.get("model_path"), str):
            cfg = load_model_config(info["model_path"])
            shape = moe_shape_from_config(cfg, source=f"{info['model_path']}/config.json")
        if shape is not None:
            return shape
    return None


def _model_name(client: httpx.Client, root: str) -> str:
    try:
        data = client.get(root + "/v1/models").json()["data"]
        return str(data[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return "default"


def _verdict(
    res: ExpertsProbeResult, found: list[Violation], max_violations: int
) -> ExpertsProbeResult:
    kinds: dict[str, int] = {}
    for v in found:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    return res.model_copy(
        update={
            "violations": found[:max_violations],
            "violation_count": len(found),
            "violation_kinds": kinds,
            "ok": not found,
        }
    )


def _judge(
    endpoint: str,
    holder: dict[str, Any],
    counts: dict[str, Any],
    shape: MoeShape,
    max_violations: int,
) -> ExpertsProbeResult:
    res = ExpertsProbeResult(
        endpoint=endpoint,
        shape=shape,
        prompt_tokens=counts.get("prompt_tokens"),
        completion_tokens=counts.get("completion_tokens"),
        start_len=int(holder.get("routed_experts_start_len") or 0),
        dtype=str(holder.get("routed_experts_dtype") or "int32"),
    )
    payload = holder.get("routed_experts")
    if not isinstance(payload, str) or not payload:
        v = Violation(
            kind="missing",
            detail="the response has no routed_experts field "
            "(is the server started with --enable-return-routed-experts?)",
        )
        return _verdict(res, [v], max_violations)
    try:
        flat = decode_routed_experts(payload, dtype=res.dtype)
    except ValueError as exc:
        return _verdict(res, [Violation(kind="shape", detail=str(exc))], max_violations)
    rows, found = check_routed_experts(
        flat,
        shape,
        prompt_tokens=res.prompt_tokens,
        completion_tokens=res.completion_tokens,
        start_len=res.start_len,
    )
    res.rows = rows
    return _verdict(res, found, max_violations)


def probe_routed_experts(
    base_url: str,
    *,
    endpoint: Endpoint = "generate",
    shape: MoeShape | None = None,
    prompt: str = "Name three prime numbers.",
    max_tokens: int = 8,
    model: str | None = None,
    timeout_s: float = 60.0,
    max_violations: int = 50,
) -> ExpertsProbeResult:
    """Send one request with ``return_routed_experts: true`` to ``base_url`` and check it.

    ``shape`` (num_layers, top_k, expert count, dense layers) defaults to what
    ``/model_info`` tells (or the ``config.json`` in its ``model_path``, if local; or
    ``/server_info``); :func:`load_model_config` + :func:`moe_shape_from_config` build
    one from a config file. An HTTP error, timeout or non-JSON body
    sets ``error`` (an infrastructure problem); a response without the field is a
    ``missing`` violation. Never raises for server misbehaviour.
    """
    root = server_root(base_url)
    with httpx.Client(timeout=timeout_s) as client:
        shape = shape or _fetch_shape(client, root)
        if shape is None:
            return ExpertsProbeResult(
                endpoint=endpoint,
                error=(
                    "MoE geometry unknown: /model_info gives no num_hidden_layers/"
                    "num_experts_per_tok/n_routed_experts; pass the model's config.json "
                    "or the numbers as flags"
                ),
            )
        path, body = _request(
            endpoint,
            prompt,
            max_tokens,
            model or (_model_name(client, root) if endpoint != "generate" else ""),
        )
        try:
            r = client.post(root + path, json=body)
            data = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            return ExpertsProbeResult(
                endpoint=endpoint, shape=shape, error=f"POST {path}: {type(exc).__name__}: {exc}"
            )
        if data is None:
            return ExpertsProbeResult(
                endpoint=endpoint,
                shape=shape,
                error=f"POST {path}: HTTP {r.status_code}: {r.text[:200]}",
            )
    holder, counts = _extract(endpoint, data)
    return _judge(endpoint, holder, counts, shape, max_violations)
