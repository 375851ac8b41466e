"""Convert a GGUF file into a Hugging Face safetensors folder that vLLM can serve.

Run with the vLLM venv's Python (``scripts/install-vllm.sh`` does; it needs transformers,
torch and gguf, none of which the project's venv holds)::

    python e2e/convert_gguf.py MODEL.gguf OUT_DIR

transformers dequantises every tensor of the GGUF (``AutoModelForCausalLM.from_pretrained
(folder, gguf_file=name)``; Q4_1 blocks become float32 weights) and rebuilds the tokenizer
from the GGUF's vocabulary. The weights go to ``model.safetensors``
(a tied ``lm_head`` is left out: it is the embedding), the config and the
tokenizer with ``save_pretrained`` (``config.json``, ``tokenizer.json``, ...). The folder is written beside ``OUT_DIR`` and
renamed into place at the end, so a folder at ``OUT_DIR`` is always complete.

Exit: 0 converted; 2 bad arguments, no torch/transformers/gguf here, or the conversion
failed (one line on stderr).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` into the safetensors folder ``out`` (float32 weights, tokenizer).

    Raises:
        FileNotFoundError: ``gguf`` is not a file.
        FileExistsError: ``out`` exists already.
    """
    import safetensors.torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf}: no such GGUF file")
    if out.exists():
        raise FileExistsError(f"{out}: exists already; remove it to convert again")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        folder, name = str(gguf.parent), gguf.name
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        # transformers marks a model read from GGUF as quantised and will not save_pretrained
        # it, though its weights are plain float32 by now: the config (without the GGUF
        # quantisation entry) and the weights are written as save_pretrained would
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(work)
        if model.generation_config is not None:
            model.generation_config.save_pretrained(work)
        # a tied lm_head is the embedding itself: stored once, under the embedding's name
        # (safetensors.torch.save_model would keep lm_head.weight, which vLLM skips when
        # the embeddings are tied, leaving them empty: every logit equal)
        tied = bool(getattr(config, "tie_word_embeddings", False))
        state = {k: v.contiguous() for k, v in model.state_dict().items()
                 if not (tied and k == "lm_head.weight")}  # fmt: skip
        safetensors.torch.save_file(state, str(work / "model.safetensors"), {"format": "pt"})
        AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(work)
        work.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python e2e/convert_gguf.py MODEL.gguf OUT_DIR", file=sys.stderr)
        return 2
    try:
        convert(Path(argv[0]), Path(argv[1]))
    except (OSError, ValueError, ImportError) as exc:
        print(f"convert_gguf: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
