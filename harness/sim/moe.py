"""MoE side of the reference server: boot log, /server_info, /model_info, routed experts.

Plays each server flavour (:mod:`harness.sim.flavours`) as the released code does (the
harness's readers: :mod:`harness.server.fusion`, :mod:`harness.server.experts`):

- simulated models (:data:`MOE_MODELS`, ``moe_model``): ``deepseek-v3``
  (``DeepseekV3ForCausalLM``, logs ``Shared experts fusion optimization enabled.``) and
  ``glm-4.5`` (``Glm4MoeForCausalLM``, fuses without that line: ``sglang==0.5.23``
  ``sglang/srt/models/glm4_moe.py``); both 4 layers (the first dense), 16 routed experts,
  top-k 4, 1 shared expert.
- boot log: the fusion line per profile (``"on"``: the ``enabled`` line, for a model that
  logs it; ``"off"``: the model's refusal, ``<reason> Shared experts fusion optimization is
  disabled.``; ``"unknown"``: neither, and no capture-buffer lines, a log that tells
  nothing); ``Load weight end. elapsed=..., type=<model class>, ...``; with capture the
  buffer lines, whose device width is top_k + 1 when fusion is on: the reference and
  ``sglang-0.5.10.post1`` write ``Routing experts device buffer allocated. #shape: (...)``
  (``sglang==0.5.10.post1`` ``sglang/srt/layers/moe/routed_experts_capturer.py``),
  ``sglang-0.5.23`` ``HostCache[routed_experts] allocated: shape=(...)`` and
  ``DeviceCache[routed_experts] allocated: shape=(...)`` (``sglang==0.5.23``
  ``sglang/srt/state_capturer/base.py``), ``vllm-0.33`` ``RoutedExpertsCapturer:
  allocating buffer with ...`` (``vllm==0.33.0``
  ``vllm/model_executor/layers/fused_moe/routed_experts_capturer.py``) and no fusion line.
- ``/server_info``: the reference's idealised body; SGLang 0.5.10.post1's
  ``asdict(server_args)`` + scheduler info + ``internal_states`` (whose flag a refusing
  model flips) + ``version``; SGLang 0.5.23's resolved arguments + ``launch_command`` +
  scheduler info + ``kv_events`` + ``startup_time`` + ``internal_states`` (the resolved
  arguments: a refusal does not flip them) + ``version`` + ``frontend``
  (``sglang/srt/entrypoints/http_server.py`` ``server_info``); vLLM's dev-mode
  ``{"vllm_config", "vllm_env", "system_env"}`` (``vllm/entrypoints/serve/dev/server_info/
  api_router.py``; ``vllm_config`` a ``str(VllmConfig)`` line, JSON with
  ``?config_format=json``).
- ``/model_info``: the reference adds the HF config's MoE geometry; SGLang's fields only
  (``model_type``, ``architectures``; ``hf_config`` is commented out in both versions);
  vLLM has no ``/model_info`` (``None``: HTTP 404).
- routed experts (:func:`routed_experts_fields`): SGLang (and the reference) base64 of
  little-endian int32 ``[rows, 4, 4]`` in ``sglext``/``meta_info``, on request
  (``return_routed_experts``) with capture on, rows from the request's
  ``routed_experts_start_len`` (0.5.10.post1 ignores it: always from 0); vLLM base64 ``.npy`` (``uint8``: 16 experts <= 256) per
  choice, whenever capture is on, rows from ``routed_experts_prompt_start``. ``rows =
  prompt_tokens + completion_tokens - 1 - start``; healthy rows hold 4 distinct ids in
  ``[0, 16)``, a deterministic function of (token id, position, layer)
  (:func:`routed_experts_array`: two healthy servers route the same tokens alike),
  dense-layer rows zeros; ``routed_experts_fault`` writes the shared expert's
  id (16) into the last ``routed_experts_replaced`` columns (each a real routed expert
  dropped: two, or one for ``experts-drop-one``).
- ``crash_traceback``: with ``capture_crash`` and capture on, the CUDA-graph-capture
  crash ``RuntimeError: The expanded size of the tensor (5) must match the existing
  size (4) ...`` (PyTorch's wording for a ``[bs, 4]`` copy into a ``[bs, 5]`` slice).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from harness.sim.flavours import Flavour, get_flavour
from harness.sim.profiles import SimProfile

__all__ = [
    "MOE_CONFIG",
    "MOE_MODELS",
    "boot_log_lines",
    "crash_traceback",
    "model_config",
    "model_info",
    "routed_experts_fields",
    "routed_experts_payload",
    "server_info",
]

MODEL_PATH = "sim/deepseek-moe-tiny"
#: HF-config MoE geometry of the simulated model (DeepSeek-V3 key names)
MOE_CONFIG: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_routed_experts": 16,
    "num_experts_per_tok": 4,
    "n_shared_experts": 1,
}
#: the simulated models: name -> (model path, HF config)
MOE_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-v3": (MODEL_PATH, MOE_CONFIG),
    "glm-4.5": (
        "sim/glm-moe-tiny",
        {**MOE_CONFIG, "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe"},
    ),
}
#: model classes that log ``Shared experts fusion optimization enabled.``
_LOGS_ENABLED = {"DeepseekV3ForCausalLM"}
_TOPK = int(MOE_CONFIG["num_experts_per_tok"])
_EXPERTS = int(MOE_CONFIG["n_routed_experts"])
_LAYERS = int(MOE_CONFIG["num_hidden_layers"])
_DENSE = int(MOE_CONFIG["first_k_dense_replace"])
_PKG = "/sgl-workspace/sglang/python/sglang/srt"
_CAPTURE_BS = 160
_CHUNK = 8192  # chunked_prefill_size: the device buffer's rows
_HOST_TOKENS = 65536


def model_config(moe_model: str = "deepseek-v3") -> tuple[str, dict[str, Any]]:
    """``(model path, HF config.json body)`` of a simulated model.

    Raises:
        KeyError: an unknown name (the message lists them).
    """
    try:
        return MOE_MODELS[moe_model]
    except KeyError:
        raise KeyError(
            f"unknown MoE model {moe_model!r}; one of: {', '.join(MOE_MODELS)}"
        ) from None


def _arch(moe_model: str) -> str:
    return str(model_config(moe_model)[1]["architectures"][0])


def _ts(rank: str = " TP0") -> str:
    return f"[{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}{rank}]"


def _refusal(fl: Flavour, arch: str) -> str:
    """The model's refusal reason, as its class words it."""
    if fl.name == "reference":
        return "Config not support fused shared expert(s)."
    if arch.startswith("Glm4Moe"):  # glm4_moe.py, an Ampere-less device
        return (
            "Only GLM-4.5 on NV-platform with capability >= 80 or AMD-platform with "
            "capability >= gfx942(MI30x) can use shared experts fusion optimization."
        )
    return "Config does not support fused shared expert(s)."  # deepseek_v2.py


def _fusion_line(profile: SimProfile, fl: Flavour, arch: str) -> list[str]:
    if fl.server == "vllm":
        return []
    if profile.fusion == "on" and (fl.name == "reference" or arch in _LOGS_ENABLED):
        return [f"{_ts()} Shared experts fusion optimization enabled."]
    if profile.fusion == "off":
        return [f"{_ts()} {_refusal(fl, arch)} Shared experts fusion optimization is disabled."]
    return []


def _capture_lines(profile: SimProfile, fl: Flavour, moe_model: str) -> list[str]:
    if profile.fusion == "unknown":
        return []
    width = _TOPK + (1 if profile.fusion == "on" else 0)
    mb = _CHUNK * _LAYERS * width * 4 / 2**20
    gb = _HOST_TOKENS * _LAYERS * _TOPK * 4 / 2**30
    if fl.server == "vllm":
        kind = str(model_config(moe_model)[1]["model_type"])
        stamp = datetime.now().strftime("%m-%d %H:%M:%S")
        return [
            f"INFO {stamp} [routed_experts_capturer.py:71] RoutedExpertsCapturer: "
            f"allocating buffer with max_tokens={_CHUNK}, num_layers={_LAYERS}, "
            f"num_experts_per_tok={_TOPK} (hf_config.model_type={kind})"
        ]
    if fl.fusion_log == "sglang-0.5.23":
        return [
            f"{_ts()} HostCache[routed_experts] allocated: shape=({_HOST_TOKENS}, {_LAYERS}, "
            f"{_TOPK}), size={gb:.2f} GB",
            f"{_ts()} DeviceCache[routed_experts] allocated: shape=({_CHUNK}, {_LAYERS}, "
            f"{width}), size={mb:.2f} MB",
        ]
    return [
        f"{_ts()} Routing experts device buffer allocated. "
        f"#shape: ({_CHUNK}, {_LAYERS}, {width}), size: {mb:.2f} MB",
        f"{_ts()} Routing experts host buffer allocated. #tokens: {_HOST_TOKENS}, "
        f"size: {gb:.2f} GB",
    ]


def boot_log_lines(
    profile: SimProfile,
    *,
    capture: bool,
    flavour: str | Flavour | None = None,
    moe_model: str = "deepseek-v3",
) -> list[str]:
    """Log lines the server prints while starting, as ``flavour`` does.

    Ends with ``The server is fired up and ready to roll!`` (vLLM: ``Application startup
    complete.``, and no crash) unless the profile crashes (then it stops at ``Capture cuda graph
    begin``; :func:`crash_traceback` follows).

    Raises:
        KeyError: an unknown flavour or model.
    """
    fl, arch = get_flavour(flavour), _arch(moe_model)
    if fl.server == "vllm":
        return _vllm_boot(profile, capture=capture, moe_model=moe_model)
    path = model_config(moe_model)[0]
    lines = [
        f"{_ts('')} server_args=ServerArgs(model_path='{path}', tp_size=1, "
        f"disable_shared_experts_fusion=False, enable_return_routed_experts={capture}, "
        "disable_cuda_graph=False)",
        f"{_ts()} Load weight begin. avail mem=63.50 GB",
        *_fusion_line(profile, fl, arch),
        f"{_ts()} Load weight end. elapsed=0.42 s, type={arch}, avail mem=62.10 GB, "
        "mem usage=1.40 GB.",
        *(_capture_lines(profile, fl, moe_model) if capture else []),
        f"{_ts()} Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=61.90 GB",
    ]
    if crash_traceback(profile, capture=capture) is not None:
        return lines
    return lines + [
        f"{_ts()} Capture cuda graph end. Time elapsed: 1.02 s. mem usage=0.12 GB. "
        "avail mem=61.78 GB.",
        f"{_ts('')} The server is fired up and ready to roll!",
    ]


def _vllm_boot(profile: SimProfile, *, capture: bool, moe_model: str) -> list[str]:
    """vLLM-like start (only the capturer's line is vLLM's exact wording): no fusion line."""
    path = model_config(moe_model)[0]
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    extra = ", 'enable_return_routed_experts': True" if capture else ""
    return [
        f"INFO {stamp} [api_server.py] vLLM API server version 0.33.0",
        f"INFO {stamp} [utils.py] non-default args: {{'model': '{path}'{extra}}}",
        f"INFO {stamp} [gpu_model_runner.py] Starting to load model {path}...",
        f"INFO {stamp} [gpu_model_runner.py] Model loading took 1.40 GiB memory",
        *(_capture_lines(profile, get_flavour("vllm-0.33"), moe_model) if capture else []),
        f"INFO {stamp} [launcher.py] Application startup complete.",
    ]


_FRAMES = [
    (
        "managers/scheduler.py",
        2890,
        "run_scheduler_process",
        "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
    ),
    ("managers/tp_worker.py", 86, "__init__", "self.model_runner = ModelRunner("),
    ("model_executor/model_runner.py", 338, "initialize", "self.init_device_graphs()"),
    (
        "model_executor/model_runner.py",
        1702,
        "init_device_graphs",
        "self.graph_runner = graph_runners[self.device](self)",
    ),
    ("model_executor/cuda_graph_runner.py", 380, "__init__", "self.capture()"),
    (
        "model_executor/cuda_graph_runner.py",
        499,
        "capture",
        ") = self.capture_one_batch_size(bs, forward)",
    ),
    (
        "model_executor/cuda_graph_runner.py",
        637,
        "run_once",
        "logits_output_or_pp_proxy_tensors = forward(",
    ),
    (
        "models/deepseek_v2.py",
        2420,
        "forward",
        "hidden_states = self.model(input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)",
    ),
    (
        "models/deepseek_v2.py",
        1215,
        "forward_normal",
        "topk_output = self.topk(hidden_states, router_logits)",
    ),
    (
        "layers/moe/topk.py",
        250,
        "forward_cuda",
        "get_global_experts_capturer().capture(layer_id=self.layer_id, topk_ids=topk_ids)",
    ),
    (
        "layers/moe/routed_experts_capturer.py",
        41,
        "capture_fwd_routed_experts",
        "self.buffer[:batch, layer_id, :] = topk_ids",
    ),
]


def crash_traceback(profile: SimProfile, *, capture: bool) -> str | None:
    """An SGLang-like Python traceback if this profile crashes at boot, else None.

    Crashes only when ``profile.capture_crash`` and routed-experts capture is on: the
    capture buffer is top_k + 1 = 5 wide (fused shared expert), the top-k ids 4.
    """
    if not (profile.capture_crash and capture):
        return None
    frames = [
        f'  File "{_PKG}/{path}", line {line}, in {func}\n    {code}'
        for path, line, func, code in _FRAMES
    ]
    bs = _CAPTURE_BS
    return "\n".join(
        [
            f"{_ts()} Scheduler hit an exception: Traceback (most recent call last):",
            *frames,
            f"RuntimeError: The expanded size of the tensor ({_TOPK + 1}) must match the existing "
            f"size ({_TOPK}) at non-singleton dimension 1.  Target sizes: [{bs}, {_TOPK + 1}].  "
            f"Tensor sizes: [{bs}, {_TOPK}]",
            "",
            f"{_ts('')} Received sigquit from a child process. It usually means the child failed.",
        ]
    )


def _sglang_args(path: str, capture: bool) -> dict[str, Any]:
    """A few of SGLang's server arguments (the ones the harness reads, and some that
    differ between builds)."""
    return {
        "model_path": path,
        "tokenizer_path": path,
        "served_model_name": path,
        "host": "127.0.0.1",
        "port": 30000,
        "tp_size": 1,
        "ep_size": 1,
        "dtype": "auto",
        "moe_runner_backend": "auto",
        "disable_cuda_graph": False,
        "chunked_prefill_size": _CHUNK,
        "disable_shared_experts_fusion": False,
        "enable_return_routed_experts": bool(capture),
    }


def _memory() -> dict[str, Any]:
    return {"weight": 1.4, "kvcache": 2.1, "token_capacity": _HOST_TOKENS, "graph": 0.12}


def _sglang_0510(profile: SimProfile, args: dict[str, Any]) -> dict[str, Any]:
    """``sglang==0.5.10.post1``: ``{**asdict(server_args), **scheduler_info,
    "internal_states", "version"}``; ``internal_states`` is ``vars(server_args)`` of the
    scheduler, where a refusing model set the flag (``determine_num_fused_shared_experts``)."""
    state = {**args, "disable_shared_experts_fusion": profile.fusion == "off"}
    state |= {"last_gen_throughput": 0.0, "memory_usage": _memory()}
    state["effective_max_running_requests_per_dp"] = 48
    sched = {"status": "ready", "max_total_num_tokens": _HOST_TOKENS, "max_req_input_len": 32762}
    return {**args, **sched, "internal_states": [state], "version": "0.5.10.post1"}


def _sglang_0523(args: dict[str, Any], path: str) -> dict[str, Any]:
    """``sglang==0.5.23``: ``build_server_info`` (resolved arguments, ``launch_command``,
    scheduler info, ``kv_events``) + ``startup_time``, ``internal_states`` (the resolved
    arguments: a refusal no longer shows), ``version``, ``frontend``."""
    started: dict[str, Any] = {
        "load_weight": 0.42,
        "kv_cache_allocation": 0.1,
        "scheduler_e2e": 1.9,
    }
    started["cuda_graph"] = {"target": 1.02}
    launch = f"python -m sglang.launch_server --model-path {path} --port 30000"
    launch += " --enable-return-routed-experts" if args["enable_return_routed_experts"] else ""
    sched = {"status": "ready", "max_total_num_tokens": _HOST_TOKENS, "max_req_input_len": 32762}
    sched |= {"startup_time": started, "hicache_object_layout": {"enabled": False}}
    state = {**args, "world_size": 1, "startup_time": started, "last_gen_throughput": 0.0}
    state |= {"effective_max_running_requests_per_dp": 48, "memory_usage": _memory()}
    return {
        **args,
        "launch_command": launch,
        **sched,
        "kv_events": None,
        "startup_time": started,
        "internal_states": [state],
        "version": "0.5.23",
        "frontend": "python",
    }


def _vllm(path: str, capture: bool, config_format: str) -> dict[str, Any]:
    """``vllm==0.33.0`` dev mode: ``vllm_config`` (text: ``str(VllmConfig)``; json:
    ``PydanticVllmConfig.dump_python``), ``vllm_env`` (set ``VLLM_*``), ``system_env``."""
    aux = {"enable_return_routed_experts": bool(capture)}
    if config_format == "json":
        config: Any = {
            "model_config": {"model": path, "dtype": "bfloat16", "max_model_len": 32768},
            "parallel_config": {"tensor_parallel_size": 1, "master_port": 29501},
            "aux_output_config": aux,
            "instance_id": "a1b2c3",
        }
    else:
        config = (
            f"model={path!r}, speculative_config=None, tokenizer={path!r}, "
            "dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, "
            f"aux_output_config=AuxOutputConfig(enable_return_routed_experts={capture}), "
            "compilation_config={'level': None, 'mode': 3}"
        )
    return {
        "vllm_config": config,
        "vllm_env": {"VLLM_SERVER_DEV_MODE": True},
        "system_env": {"vllm_version": "0.33.0", "torch_version": "2.10.0", "os": "Linux"},
    }


def server_info(
    profile: SimProfile,
    *,
    capture: bool,
    flavour: str | Flavour | None = None,
    moe_model: str = "deepseek-v3",
    config_format: str = "text",
) -> dict[str, Any]:
    """Body of GET /server_info (and /get_server_info), as ``flavour`` answers it.

    The reference: server arguments at top level, ``internal_states`` with the
    scheduler's copy of ``disable_shared_experts_fusion`` (``true`` when the model refused
    fusion, profile ``"off"``; none for ``"unknown"``). The real flavours: see the module
    docstring (``config_format``: vLLM's query parameter).
    """
    fl = get_flavour(flavour)
    path = model_config(moe_model)[0]
    if fl.server_info == "vllm":
        return _vllm(path, capture, config_format)
    args = _sglang_args(path, capture)
    if fl.server_info == "sglang-0.5.10":
        return _sglang_0510(profile, args)
    if fl.server_info == "sglang-0.5.23":
        return _sglang_0523(args, path)
    info = {k: v for k, v in args.items() if k not in ("host", "port")}
    info["version"] = "0.0.0+sim"
    if profile.fusion != "unknown":
        info["internal_states"] = [
            {
                "disable_shared_experts_fusion": profile.fusion == "off",
                "enable_return_routed_experts": bool(capture),
                "last_gen_throughput": 0.0,
            }
        ]
    return info


def model_info(
    profile: SimProfile, *, flavour: str | Flavour | None = None, moe_model: str = "deepseek-v3"
) -> dict[str, Any] | None:
    """Body of GET /model_info: SGLang's fields (``model_type``, ``architectures``), plus
    the HF config's MoE geometry for the reference only; None for vLLM (no such route)."""
    fl = get_flavour(flavour)
    path, cfg = model_config(moe_model)
    if fl.server == "vllm":
        return None
    info: dict[str, Any] = {
        "model_path": path,
        "tokenizer_path": path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
    }
    if fl.server_info == "sglang-0.5.23":  # http_server.py model_info, 0.5.23's order
        info = {"model_path": path, "served_model_name": path, **info}
        info |= {"load_format": "auto", "reasoning_parser": None, "tool_call_parser": None}
        info["disaggregation_mode"] = "null"
    if fl.server != "reference":
        info["has_audio_understanding"] = False
    info |= {"model_type": cfg["model_type"], "architectures": cfg["architectures"]}
    return {**info, **cfg} if fl.moe_in_model_info else info


#: odd 64-bit constants of the routing hash (splitmix64's finaliser and mixers)
_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93)


def _hash64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise over uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(_MIX[1])
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(_MIX[2])
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def routed_experts_array(
    profile: SimProfile, *, rows: int, tokens: Sequence[int] | None = None
) -> np.ndarray:
    """int32 ``[rows, num_layers, top_k]``: distinct ids per MoE row, zeros in dense layers.

    A deterministic function of (token id, position, layer), whatever the server's seed or
    the request: row ``i`` routes token ``tokens[i]`` (a row past ``tokens``, or every row
    when ``tokens`` is None, as token -1), each expert's router score a hash of (token,
    position, layer, expert), the top_k highest kept in score order. Two healthy servers
    given the same tokens route alike. ``routed_experts_fault`` writes the shared expert's
    id (16) into the last ``routed_experts_replaced`` columns of every MoE row (two by
    default; ``experts-drop-one``: one).
    """
    n = max(rows, 0)
    known = list(tokens or ())[:n]
    tid = np.full(n, -1, dtype=np.int64)
    tid[: len(known)] = known
    key = (
        tid.astype(np.uint64)[:, None, None] * np.uint64(_MIX[0])
        + np.arange(n, dtype=np.uint64)[:, None, None] * np.uint64(_MIX[3])
        + np.arange(_LAYERS, dtype=np.uint64)[None, :, None] * np.uint64(_MIX[1])
        + np.arange(_EXPERTS, dtype=np.uint64)[None, None, :] * np.uint64(_MIX[2])
    )
    with np.errstate(over="ignore"):
        scores = _hash64(key)
    ids = np.argsort(scores, axis=2, kind="stable")[:, :, ::-1][:, :, :_TOPK].astype(np.int32)
    ids[:, :_DENSE, :] = 0
    if profile.routed_experts_fault:
        drop = profile.routed_experts_replaced  # the lowest-scored routed experts dropped
        ids[:, _DENSE:, _TOPK - drop :] = _EXPERTS  # the shared expert's id in their place
    return ids


def routed_experts_payload(
    profile: SimProfile,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    tokens: Sequence[int] | None = None,
    start_len: int = 0,
    encoding: str = "int32",
) -> dict[str, Any]:
    """``{"routed_experts": <base64>}`` of ``rows = prompt_tokens + completion_tokens - 1 -
    start_len`` rows (at least 0; the start is the request's, never echoed).

    ``tokens``: the request's token ids where known (row ``i`` is token ``start_len + i``);
    ``encoding``: ``"int32"`` (SGLang: the raw little-endian bytes) or ``"npy"`` (vLLM:
    ``np.save`` bytes, ``uint8`` for up to 256 experts, as ``numpy2base64``).
    """
    rows = max(prompt_tokens + completion_tokens - 1 - start_len, 0)
    arr = routed_experts_array(profile, rows=rows + start_len, tokens=tokens)[start_len:]
    if encoding == "npy":
        buf = io.BytesIO()
        np.save(buf, arr.astype(np.uint8 if _EXPERTS <= 256 else np.uint16), allow_pickle=False)
        raw = buf.getvalue()
    else:
        raw = arr.astype("<i4").tobytes()
    return {"routed_experts": base64.b64encode(raw).decode("ascii")}


def _start(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def routed_experts_fields(
    profile: SimProfile,
    body: dict[str, Any],
    *,
    capture: bool,
    flavour: str | Flavour | None,
    prompt_tokens: int,
    completion_tokens: int,
    tokens: Sequence[int] | None = None,
    native: bool = False,
) -> tuple[str, dict[str, Any]] | None:
    """Where the routed experts go in an answer to ``body``, and what: ``("sglext",
    {...})`` (SGLang and the reference: on request, ``return_routed_experts``, start
    ``routed_experts_start_len``), ``("choice", {...})`` (vLLM: every choice, whatever the
    request, start ``routed_experts_prompt_start``); None when capture is off or (SGLang)
    not asked for. ``sglang-0.5.10.post1`` ignores the start (``GenerateReqInput`` takes
    ``routed_experts_start_len``, but ``routed_experts_capturer.py`` ``get_routed_experts``
    reads rows ``[0, seqlen - 1)``). ``native``: SGLang's ``/generate`` (no choices)."""
    fl = get_flavour(flavour)
    if not capture:
        return None
    npy = fl.routed_experts == "choice-npy"
    if not npy and not body.get("return_routed_experts"):
        return None
    start = _start(body, "routed_experts_prompt_start" if npy else "routed_experts_start_len")
    if fl.name == "sglang-0.5.10.post1":
        start = 0  # accepted on /generate, never used: the capturer reads [0, seqlen - 1)
    fields = routed_experts_payload(
        profile,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        tokens=tokens,
        start_len=start,
        encoding="npy" if npy else "int32",
    )
    return ("choice" if npy else "sglext"), fields
