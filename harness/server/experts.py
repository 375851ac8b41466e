"""Routed-experts probe: ask the server which experts each token was routed to, and check.

Formats, per server (read from the released packages):

- SGLang (``--enable-return-routed-experts``; ``sglang==0.5.23``
  ``sglang/srt/state_capturer/routed_experts.py`` and ``state_capturer/base.py``;
  ``sglang==0.5.10.post1`` ``sglang/srt/layers/moe/routed_experts_capturer.py``):
  request ``"return_routed_experts": true`` (a top-level field of ``POST /generate``, an
  extra body field of ``/v1/chat/completions`` and ``/v1/completions``); response
  ``meta_info.routed_experts`` on ``/generate`` and ``sglext.routed_experts`` (response
  level, ``SglExt`` in ``sglang/srt/entrypoints/openai/protocol.py``) on the OpenAI
  endpoints: base64 of the flattened little-endian int32 array
  ``[rows, num_hidden_layers, num_experts_per_tok]`` (``extract_routed_experts_from_meta_info``
  decodes it as ``np.int32``). The rows start at the request's
  ``routed_experts_start_len`` (default 0; a request field of ``GenerateReqInput`` in
  ``sglang/srt/managers/io_struct.py``, and of the OpenAI requests in 0.5.23); the
  response does not repeat it. 0.5.10.post1 accepts the field on ``/generate`` but never
  uses it (``get_routed_experts`` reads rows ``[0, seqlen - 1)``): a probe asking a start
  there gets a ``rows`` violation saying the start was ignored.
- vLLM (``vllm==0.33.0``, server flag ``--enable-return-routed-experts``, no request
  field): ``choices[i].routed_experts`` on ``/v1/chat/completions`` and
  ``/v1/completions`` (``vllm/entrypoints/openai/chat_completion/protocol.py``
  ``ChatCompletionResponseChoice``): base64 of ``.npy`` bytes (``numpy2base64`` in
  ``vllm/utils/serial_utils.py``), shape ``[rows, num_layers, num_experts_per_tok]``,
  dtype ``uint8`` up to 256 experts, else ``uint16``
  (``vllm/model_executor/layers/fused_moe/routed_experts_capturer.py``). The rows start
  at the request's ``routed_experts_prompt_start`` (default 0) and end before the last
  token (``vllm/distributed/aux_output_connector/connector.py``).

Rules, both servers: ``rows = prompt_tokens + completion_tokens - 1 - start`` (the last
sampled token is never forwarded); the capture buffer is zeros, so layers without
routing (dense layers, e.g. DeepSeek's ``first_k_dense_replace``) stay all zero; with
shared-experts fusion the shared expert is routed expert number ``n_routed_experts``,
which must never appear among the top-k routed ids (the capturer keeps only the first
``num_experts_per_tok`` columns).

MoE geometry (:func:`find_moe_shape`): no released server puts it in ``/model_info``
(``sglang==0.5.23`` ``sglang/srt/entrypoints/http_server.py`` ``model_info``: the
``hf_config`` line is commented out), so it is read from the model's ``config.json``:
the launch command's ``--model-path``/``--model``/``vllm serve MODEL``, then the model
path the server reports (``/model_info``, ``/server_info``, ``/v1/models`` ``root``), each
as a local folder or a Hugging Face hub id in the local hub cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``:
``models--ORG--NAME/snapshots/<rev>/config.json``). ``MoeShape.source`` says which.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import re
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
    "check_response",
    "check_routed_experts",
    "decode_routed_experts",
    "decode_routed_experts_array",
    "find_moe_shape",
    "hf_hub_cache",
    "load_model_config",
    "locate_model_config",
    "model_path_from_command",
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
#: the first bytes of a ``.npy`` file (numpy's format, version 1-3)
_NPY_MAGIC = b"\x93NUMPY"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


class MoeShape(BaseModel):
    """Geometry needed to check routed experts; ``dense_layers`` carry no routing.

    ``source``: where the numbers came from (``"/model_info"``, ``"flags"``, ``"launch
    command --model-path: /path/config.json"``, ``"/model_info model_path (hub cache):
    ..."``).
    """

    num_layers: int
    top_k: int
    num_routed_experts: int
    dense_layers: list[int] = Field(default_factory=list)
    source: str = ""


class Violation(BaseModel):
    """One broken rule, at absolute token position ``token`` and layer ``layer``."""

    kind: ViolationKind
    token: int | None = None
    layer: int | None = None
    detail: str

    def line(self) -> str:
        """The violation in one line, its token and layer first when known."""
        where = "" if self.token is None else f"token {self.token}, layer {self.layer}: "
        return f"{where}{self.detail}"


class ExpertsProbeResult(BaseModel):
    """Outcome of one probe request: ``ok`` only if the field came back and every rule held.

    ``field``: where the payload was found (``"meta_info.routed_experts"``,
    ``"sglext.routed_experts"``, ``"choices[0].routed_experts"``); ``encoding``:
    ``"int32"`` (SGLang's raw bytes) or ``"npy"`` (vLLM); ``dtype``: the decoded item type;
    ``start_len``: the first token position, the value the probe itself sent.
    """

    endpoint: str
    ok: bool = False
    error: str | None = None  # infrastructure problem (HTTP status, timeout, bad JSON)
    shape: MoeShape | None = None
    rows: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    start_len: int = 0
    field: str | None = None
    encoding: str | None = None
    dtype: str = "int32"
    violation_count: int = 0
    violation_kinds: dict[str, int] = Field(default_factory=dict)  # kind -> count, all of them
    violations: list[Violation] = Field(default_factory=list)  # first ``max_violations``

    def summary(self) -> str:
        """One line: ``<endpoint>: N violations (kind: n, ...); first: token t, layer l: ...``
        (a failure's one-line reason names the first violation); an OK names the field
        and where the MoE geometry came from."""
        if self.error:
            return f"{self.endpoint}: {self.error}"
        if self.ok:
            layers = self.shape.num_layers if self.shape else "?"
            source = self.shape.source if self.shape else "?"
            return (
                f"{self.endpoint}: {self.rows} token rows x {layers} layers OK "
                f"({self.field}; geometry from {source})"
            )
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

    Looks at the dict itself, then nested ``hf_config``/``config``/``text_config``/... .
    Returns None when num_layers, top_k or the routed-expert count is missing.
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


def _b64(payload: Any) -> bytes:
    if not isinstance(payload, str):
        raise ValueError(f"routed_experts must be a base64 string, not {type(payload).__name__}")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"routed_experts is not valid base64: {exc}") from exc


def _load_npy(raw: bytes) -> np.ndarray:
    """``.npy`` bytes -> array (``allow_pickle=False``: an object array is refused)."""
    try:
        arr = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"routed_experts is not a readable .npy payload: {exc}") from exc
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu":
        raise ValueError(f"routed_experts .npy holds {getattr(arr, 'dtype', '?')}, not integers")
    return arr


def decode_routed_experts_array(payload: Any, *, dtype: str | None = None) -> np.ndarray:
    r"""base64 -> array of expert ids, as the server encoded it.

    ``.npy`` bytes (vLLM, recognised by numpy's magic ``\x93NUMPY``) come back with
    their own shape and dtype (``uint8``/``uint16``); raw bytes (SGLang) come back flat,
    read as little-endian int32 unless ``dtype`` names another integer type (a caller's
    choice; no server sends one).

    Raises:
        ValueError: not a base64 string, bad base64, an unreadable or non-integer
            ``.npy``, an unknown or non-integer ``dtype``, or a byte count that does not
            divide by the item size.
    """
    raw = _b64(payload)
    if raw.startswith(_NPY_MAGIC):
        return _load_npy(raw)
    name = (dtype or "int32").removeprefix("torch.")
    try:
        dt = np.dtype(name).newbyteorder("<")
    except TypeError as exc:
        raise ValueError(f"unknown routed_experts_dtype {dtype!r}") from exc
    if dt.kind not in "iu":
        raise ValueError(f"routed_experts_dtype {dtype!r} is not an integer type")
    if len(raw) % dt.itemsize:
        raise ValueError(f"{len(raw)} bytes do not divide into {dt.itemsize}-byte {name} items")
    return np.frombuffer(raw, dtype=dt)


def decode_routed_experts(payload: Any, *, dtype: str | None = None) -> np.ndarray:
    """base64 -> flat int64 array of expert ids, shape ``[n]`` (see
    :func:`decode_routed_experts_array` for the two encodings and the errors raised)."""
    return decode_routed_experts_array(payload, dtype=dtype).reshape(-1).astype(np.int64)


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
            ignored = start_len and rows == want + start_len
            out.append(
                Violation(
                    kind="rows",
                    detail=(
                        f"{rows} rows, expected prompt_tokens + completion_tokens - 1 - start_len = "
                        f"{prompt_tokens} + {completion_tokens} - 1 - {start_len} = {want}"
                        + (" (the server ignored the requested start)" if ignored else "")
                    ),
                )
            )
    arr = flat.reshape(rows, shape.num_layers, shape.top_k)
    found = _row_rules(arr, shape, start_len)
    found.sort(key=lambda v: (v.token or 0, v.layer or 0))
    return rows, out + found


def _request(
    endpoint: Endpoint, prompt: str, max_tokens: int, model: str, start_len: int
) -> tuple[str, dict[str, Any]]:
    """The probe's request. A non-zero start goes out under both servers' names
    (SGLang ``routed_experts_start_len``, vLLM ``routed_experts_prompt_start``; each
    ignores the other's)."""
    start: dict[str, Any] = {"routed_experts_start_len": start_len} if start_len else {}
    if endpoint == "generate":
        return "/generate", {
            "text": prompt,
            "return_routed_experts": True,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
            **start,
        }
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "return_routed_experts": True,
        **start,
    }
    if start_len:
        body["routed_experts_prompt_start"] = start_len
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def _extract(endpoint: Endpoint, data: Any) -> tuple[Any, str | None, dict[str, Any]]:
    """``(payload, field it was found in, token counts)`` from a response body.

    Looks at ``meta_info`` (``/generate``), then the response's ``sglext`` (SGLang), the
    first choice's ``sglext`` (some SGLang builds) and the first choice's own
    ``routed_experts`` (vLLM).
    """
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return None, None, {}
    if endpoint == "generate":
        meta = data.get("meta_info") or {}
        return meta.get("routed_experts"), "meta_info.routed_experts", meta
    usage = data.get("usage") or {}
    choices = data.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    holders = [
        ("sglext.routed_experts", data.get("sglext")),
        ("choices[0].sglext.routed_experts", choice.get("sglext")),
        ("choices[0].routed_experts", choice),
    ]
    for name, holder in holders:
        if isinstance(holder, dict) and holder.get("routed_experts"):
            return holder["routed_experts"], name, usage
    return None, None, usage


def load_model_config(path: str | Path) -> dict[str, Any] | None:
    """A HF ``config.json`` (or the one in directory ``path``), else None if unreadable."""
    p = Path(path).expanduser()
    p = p / "config.json" if p.is_dir() else p
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, as ``huggingface_hub`` resolves it:
    ``$HF_HUB_CACHE`` (or the older ``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``,
    else ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache`` when unset)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _hub_config(repo_id: str) -> Path | None:
    """``config.json`` of hub model ``ORG/NAME`` in the local cache: the snapshot
    ``refs/main`` names, else the newest snapshot holding one."""
    repo = hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        cfg = repo / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
        if cfg.is_file():
            return cfg
    found = sorted(repo.glob("snapshots/*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def locate_model_config(model: str) -> tuple[Path, str] | None:
    """Where the ``config.json`` of ``model`` is on this machine: ``(path, how)``.

    ``model`` is a local folder (its ``config.json``), a config file, or a hub id
    ``ORG/NAME`` found in :func:`hf_hub_cache` (``how``: ``"local"`` or ``"hub cache"``).
    None when neither exists here.
    """
    p = Path(model).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        return p / "config.json", "local"
    if p.is_file():
        return p, "local"
    if _HUB_ID.fullmatch(model):
        hub = _hub_config(model)
        if hub is not None:
            return hub, "hub cache"
    return None


def model_path_from_command(argv: list[str]) -> str | None:
    """The model a server launch command serves: ``--model-path X`` / ``--model X``
    (SGLang, vLLM; also ``--flag=X``) or vLLM's positional ``vllm serve MODEL``; else None."""
    for i, arg in enumerate(argv):
        for flag in ("--model-path", "--model"):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    for i, arg in enumerate(argv[:-1]):
        if arg == "serve" and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return None


def _get(client: httpx.Client, url: str) -> Any:
    try:
        r = client.get(url)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _reported_models(client: httpx.Client, root: str) -> list[tuple[str, str]]:
    """``(label, model path)`` the server reports: ``/model_info`` and ``/server_info``
    ``model_path`` (SGLang), ``/v1/models`` ``root`` (vLLM: the path it loaded)."""
    out = []
    for path in ("/model_info", "/server_info"):
        info = _get(client, root + path)
        if isinstance(info, dict) and isinstance(info.get("model_path"), str):
            out.append((f"{path} model_path", info["model_path"]))
    models = _get(client, root + "/v1/models")
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        for key in ("root", "id"):
            if isinstance(data[0].get(key), str):
                out.append((f"/v1/models {key}", data[0][key]))
    return out


def find_moe_shape(
    client: httpx.Client, root: str, *, model_path: str | None = None
) -> tuple[MoeShape | None, list[str]]:
    """MoE geometry of the server at ``root``, and what was tried (one line each).

    In order: the geometry in ``/model_info`` itself (only the reference server puts it
    there); the ``config.json`` of ``model_path`` (the launch command's); of the model
    path ``/model_info``, ``/server_info`` or ``/v1/models`` report (local folder or hub
    cache, :func:`locate_model_config`). ``MoeShape.source`` names the one used.
    """
    tried: list[str] = []
    info = _get(client, root + "/model_info")
    shape = moe_shape_from_config(info, source="/model_info")
    if shape is not None:
        return shape, tried
    tried.append("/model_info: no MoE geometry")
    given = [("launch command --model-path", model_path)] if model_path else []
    seen: set[str] = set()
    for label, model in given + _reported_models(client, root):
        if model in seen:
            continue
        seen.add(model)
        found = locate_model_config(model)
        if found is None:
            tried.append(f"{label} {model}: no config.json here or in {hf_hub_cache()}")
            continue
        shape = moe_shape_from_config(
            load_model_config(found[0]), source=f"{label} ({found[1]}): {found[0]}"
        )
        if shape is not None:
            return shape, tried
        tried.append(f"{label}: {found[0]} has no MoE geometry")
    return None, tried


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


_MISSING = (
    "the response has no routed_experts field (SGLang: start the server with "
    "--enable-return-routed-experts; vLLM: --enable-return-routed-experts, the answer's "
    "choices[i].routed_experts)"
)


def _npy_shape_violation(arr: np.ndarray, shape: MoeShape) -> Violation | None:
    """A ``.npy`` array must be ``[rows, num_layers, top_k]``."""
    if arr.ndim == 3 and arr.shape[1:] == (shape.num_layers, shape.top_k):
        return None
    return Violation(
        kind="shape",
        detail=f".npy shape {tuple(arr.shape)}, expected (rows, {shape.num_layers}, "
        f"{shape.top_k}) (num_layers, top_k from {shape.source})",
    )


def check_response(
    endpoint: Endpoint,
    data: Any,
    shape: MoeShape,
    *,
    start_len: int = 0,
    max_violations: int = 50,
) -> ExpertsProbeResult:
    """Judge one answer body of ``endpoint`` (pure): find the payload (SGLang's
    ``meta_info``/``sglext``, vLLM's ``choices[0].routed_experts``), decode it (int32 or
    ``.npy``) and check it against ``shape`` with rows starting at ``start_len``, the
    start the request asked for. Never raises."""
    payload, field, counts = _extract(endpoint, data)
    res = ExpertsProbeResult(
        endpoint=endpoint,
        shape=shape,
        prompt_tokens=counts.get("prompt_tokens"),
        completion_tokens=counts.get("completion_tokens"),
        start_len=start_len,
        field=field,
    )
    if not isinstance(payload, str) or not payload:
        return _verdict(res, [Violation(kind="missing", detail=_MISSING)], max_violations)
    try:
        arr = decode_routed_experts_array(payload)
    except ValueError as exc:
        return _verdict(res, [Violation(kind="shape", detail=str(exc))], max_violations)
    npy = _b64(payload).startswith(_NPY_MAGIC)
    res.encoding, res.dtype = ("npy" if npy else "int32"), str(arr.dtype.name)
    bad_shape = _npy_shape_violation(arr, shape) if npy else None
    if bad_shape is not None:
        return _verdict(res, [bad_shape], max_violations)
    rows, found = check_routed_experts(
        arr.reshape(-1).astype(np.int64),
        shape,
        prompt_tokens=res.prompt_tokens,
        completion_tokens=res.completion_tokens,
        start_len=start_len,
    )
    res.rows = rows
    return _verdict(res, found, max_violations)


def probe_routed_experts(
    base_url: str,
    *,
    endpoint: Endpoint = "generate",
    shape: MoeShape | None = None,
    model_path: str | None = None,
    start_len: int = 0,
    prompt: str = "Name three prime numbers.",
    max_tokens: int = 8,
    model: str | None = None,
    timeout_s: float = 60.0,
    max_violations: int = 50,
) -> ExpertsProbeResult:
    """Send one request with ``return_routed_experts: true`` to ``base_url`` and check it.

    ``shape`` (num_layers, top_k, expert count, dense layers) defaults to
    :func:`find_moe_shape` (``model_path``: the launch command's model, tried first).
    ``start_len``: the first token position asked for (sent as SGLang's
    ``routed_experts_start_len`` and vLLM's ``routed_experts_prompt_start``; the rows are
    checked against it, never against a value in the response). Both servers' answers
    are read (SGLang's int32 ``sglext``/``meta_info``, vLLM's per-choice ``.npy``). An HTTP
    error, timeout, non-JSON body or unknown geometry sets ``error`` (an
    infrastructure problem); a response without the field is a ``missing`` violation.
    Never raises for server misbehaviour.
    """
    root = server_root(base_url)
    with httpx.Client(timeout=timeout_s) as client:
        tried: list[str] = []
        if shape is None:
            shape, tried = find_moe_shape(client, root, model_path=model_path)
        if shape is None:
            return ExpertsProbeResult(
                endpoint=endpoint,
                error="MoE geometry unknown (" + "; ".join(tried) + "); pass the model's "
                "config.json (--model-config) or --num-layers/--top-k/--num-experts",
            )
        name = model or (_model_name(client, root) if endpoint != "generate" else "")
        path, body = _request(endpoint, prompt, max_tokens, name, start_len)
        try:
            r = client.post(root + path, json=body)
            data = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            return ExpertsProbeResult(
                endpoint=endpoint, shape=shape, error=f"POST {path}: {type(exc).__name__}: {exc}"
            )
        if data is None:
            hint = ""
            if endpoint == "generate" and r.status_code == 404:  # vLLM has no /generate
                hint = (
                    " (a server without SGLang's /generate, e.g. vLLM: probe chat or completions)"
                )
            return ExpertsProbeResult(
                endpoint=endpoint,
                shape=shape,
                error=f"POST {path}: HTTP {r.status_code}: {r.text[:200]}{hint}",
            )
    return check_response(endpoint, data, shape, start_len=start_len, max_violations=max_violations)
