"""MoE side of the reference server: boot log, /server_info, /model_info, routed experts.

Mirrors SGLang (formats from its source, see :mod:`harness.server.fusion` and
:mod:`harness.server.experts`):

- boot log: ``Shared experts fusion optimization enabled.`` (``fusion="on"``),
  ``Config not support fused shared expert(s). Shared experts fusion optimization is
  disabled.`` (``"off"``: the model refused), neither (``"unknown"``); with capture the
  ``Routing experts device buffer allocated. #shape: (...)`` line of
  ``routed_experts_capturer.py``, whose last dimension is top_k + 1 when fusion is on;
- ``/server_info``: server arguments at top level (``disable_shared_experts_fusion`` is
  ``false`` in every profile, as in SGLang's tokenizer-side copy) and
  ``internal_states`` (the scheduler's copy, which a refusing model flips to ``true``);
- ``/model_info``: SGLang's fields plus the HF config's MoE geometry
  (:data:`MOE_CONFIG`: 4 layers, the first dense, 16 routed experts, top-k 4, 1 shared);
- routed experts: base64 of little-endian int32 ``[rows, 4, 4]``, ``rows =
  prompt_tokens + completion_tokens - 1 - start_len``; healthy rows hold 4 distinct ids
  in ``[0, 16)``, dense-layer rows zeros; ``routed_experts_fault`` writes the shared
  expert's id (16) into the last two columns (a real routed expert dropped);
- ``crash_traceback``: with ``capture_crash`` and capture on, the CUDA-graph-capture
  crash ``RuntimeError: The expanded size of the tensor (5) must match the existing
  size (4) ...`` (PyTorch's wording for a ``[bs, 4]`` copy into a ``[bs, 5]`` slice).
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import numpy as np

from harness.sim.profiles import SimProfile

__all__ = [
    "MOE_CONFIG",
    "boot_log_lines",
    "crash_traceback",
    "model_info",
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
_TOPK = int(MOE_CONFIG["num_experts_per_tok"])
_EXPERTS = int(MOE_CONFIG["n_routed_experts"])
_LAYERS = int(MOE_CONFIG["num_hidden_layers"])
_DENSE = int(MOE_CONFIG["first_k_dense_replace"])
_PKG = "/sgl-workspace/sglang/python/sglang/srt"
_CAPTURE_BS = 160


def _ts(rank: str = " TP0") -> str:
    return f"[{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}{rank}]"


def _fusion_line(profile: SimProfile) -> list[str]:
    if profile.fusion == "on":
        return [f"{_ts()} Shared experts fusion optimization enabled."]
    if profile.fusion == "off":
        return [
            f"{_ts()} Config not support fused shared expert(s). "
            "Shared experts fusion optimization is disabled."
        ]
    return []


def _capture_lines(profile: SimProfile) -> list[str]:
    width = _TOPK + (1 if profile.fusion == "on" else 0)
    mb = 8192 * _LAYERS * width * 4 / 2**20
    return [
        f"{_ts()} Routing experts device buffer allocated. "
        f"#shape: (8192, {_LAYERS}, {width}), size: {mb:.2f} MB",
        f"{_ts()} Routing experts host buffer allocated. #tokens: 65536, size: 0.00 GB",
    ]


def boot_log_lines(profile: SimProfile, *, capture: bool) -> list[str]:
    """Log lines the server prints while starting (SGLang-like).

    Ends with ``The server is fired up and ready to roll!`` unless the profile crashes
    (then it stops at ``Capture cuda graph begin``; :func:`crash_traceback` follows).
    """
    lines = [
        f"{_ts('')} server_args=ServerArgs(model_path='{MODEL_PATH}', tp_size=1, "
        f"disable_shared_experts_fusion=False, enable_return_routed_experts={capture}, "
        "disable_cuda_graph=False)",
        f"{_ts()} Load weight begin. avail mem=63.50 GB",
        *_fusion_line(profile),
        f"{_ts()} Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=62.10 GB, mem usage=1.40 GB.",
        *(_capture_lines(profile) if capture else []),
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


def server_info(profile: SimProfile, *, capture: bool) -> dict[str, Any]:
    """Body of GET /server_info (and /get_server_info): SGLang's layout.

    Server arguments at top level; ``internal_states`` holds the scheduler's copy of
    ``disable_shared_experts_fusion`` (``true`` when the model refused fusion, profile
    ``"off"``); the ``"unknown"`` profile reports no scheduler state.
    """
    info: dict[str, Any] = {
        "model_path": MODEL_PATH,
        "tokenizer_path": MODEL_PATH,
        "served_model_name": MODEL_PATH,
        "tp_size": 1,
        "ep_size": 1,
        "dtype": "auto",
        "moe_runner_backend": "auto",
        "disable_cuda_graph": False,
        "chunked_prefill_size": 8192,
        "disable_shared_experts_fusion": False,
        "enable_return_routed_experts": bool(capture),
        "version": "0.0.0+sim",
    }
    if profile.fusion != "unknown":
        info["internal_states"] = [
            {
                "disable_shared_experts_fusion": profile.fusion == "off",
                "enable_return_routed_experts": bool(capture),
                "last_gen_throughput": 0.0,
            }
        ]
    return info


def model_info(profile: SimProfile) -> dict[str, Any]:
    """Body of GET /model_info: SGLang's fields plus :data:`MOE_CONFIG` at top level."""
    return {
        "model_path": MODEL_PATH,
        "tokenizer_path": MODEL_PATH,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        **MOE_CONFIG,
    }


def routed_experts_array(profile: SimProfile, *, rows: int, seed: int) -> np.ndarray:
    """int32 ``[rows, num_layers, top_k]``: distinct ids per MoE row, zeros in dense layers."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, max(rows, 0)])
    ids = rng.random((max(rows, 0), _LAYERS, _EXPERTS)).argsort(axis=2)[:, :, :_TOPK]
    ids = ids.astype(np.int32)
    ids[:, :_DENSE, :] = 0
    if profile.routed_experts_fault:
        ids[:, _DENSE:, _TOPK - 2 :] = _EXPERTS  # shared expert id in two columns
    return ids


def routed_experts_payload(
    profile: SimProfile,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    seed: int,
    start_len: int = 0,
) -> dict[str, Any]:
    """Fields to add for return_routed_experts: ``{"routed_experts": <base64>, ...}``.

    ``rows = prompt_tokens + completion_tokens - 1 - start_len`` (at least 0);
    ``routed_experts_start_len`` is included when ``start_len`` is not 0.
    """
    rows = max(prompt_tokens + completion_tokens - 1 - start_len, 0)
    arr = routed_experts_array(profile, rows=rows, seed=seed)
    out: dict[str, Any] = {
        "routed_experts": base64.b64encode(arr.astype("<i4").tobytes()).decode("ascii")
    }
    if start_len:
        out["routed_experts_start_len"] = start_len
    return out
