"""Server flavours of the reference server: what a released server version really sends.

The reference server's default flavour (``reference``) is the harness's own idealised
server. A flavour makes it answer as one released server does, in every detail the
harness reads, so a test that passes against the flavour passes against the real server.
Each difference is taken from the released package's code (cited as
``package==version`` and the file path) and pinned by a conformance fixture in
``tests/conformance/fixtures/<flavour>/`` that the tests replay against the flavour.

Flavours (``harness sim --server-flavour NAME``):

- ``reference``: the harness's idealised server (NaN written as a bare ``NaN``, every
  endpoint, MoE geometry in ``/model_info``).
- ``sglang-0.5.23`` (``sglang==0.5.23``): ``/tokenize`` takes ``messages`` +
  ``add_generation_prompt`` (``sglang/srt/entrypoints/openai/protocol.py``
  ``TokenizeRequest``), answers ``{"tokens", "count", "max_model_len"}``; non-finite floats
  written as ``null`` (orjson, ``ORJSONResponse``); no ``prompt_logprobs``.
- ``sglang-0.5.10.post1`` (``sglang==0.5.10.post1``): as 0.5.23, but ``/tokenize`` takes a
  ``prompt`` only (no ``messages``: HTTP 400 on a conversation).
- ``vllm-0.33`` (``vllm==0.33.0``): no ``/generate``; ``prompt_logprobs`` above
  ``max_logprobs`` (20) refused with HTTP 400 (``vllm/sampling_params.py``); a NaN in an
  answer cannot be encoded (Starlette's ``JSONResponse`` renders with ``allow_nan=False``
  inside the endpoint, ``vllm/entrypoints/openai/completion/api_router.py``), and the
  ``ValueError`` is answered by vLLM's fallback handler as HTTP 400 ``BadRequestError``
  "Out of range float values are not JSON compliant"
  (``vllm/entrypoints/serve/exception_handling/register.py``, ``error_response.py``);
  ``-inf`` prompt logprobs sent as ``-9999.0``
  (``vllm/entrypoints/generate/base/serving.py`` ``clamp_prompt_logprobs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FLAVOURS", "Flavour", "get_flavour"]

#: how a server writes a non-finite float (NaN, +-inf) in a JSON answer
NonFinite = Literal["nan", "null", "refused"]


@dataclass(frozen=True)
class Flavour:
    """One server version's wire behaviour, as the reference server plays it.

    ``server``: ``"reference"``, ``"sglang"`` or ``"vllm"``; ``version``: the released
    version (``""`` for the reference); ``nonfinite``: how a NaN/inf reaches the client (``nan``: a bare ``NaN``
    token; ``null``; ``refused``: the answer is an error instead);
    ``tokenize_messages``: ``/tokenize`` renders ``messages`` with the chat template;
    ``generate``: SGLang's native ``/generate`` exists; ``prompt_logprobs``: vLLM's
    ``prompt_logprobs`` on ``/v1/completions``; ``max_logprobs``: the most top-k a request
    may ask (``None``: clamped silently, the reference's behaviour); ``moe_in_model_info``:
    ``/model_info`` carries the HF config's MoE geometry (only the reference does);
    ``routed_experts``: where routed experts are returned (``"sglext"``: SGLang's
    per-request ``return_routed_experts``, base64 int32; ``"choice-npy"``: vLLM's
    per-choice base64 ``.npy`` with ``routed_experts_prompt_start``, server flag only);
    ``server_info``: the shape of ``/server_info`` (``"reference"``, ``"sglang-0.5.23"``,
    ``"sglang-0.5.10"``, ``"vllm"``); ``fusion_log``: the fusion log lines' version.
    """

    name: str
    server: Literal["reference", "sglang", "vllm"]
    version: str = ""
    nonfinite: NonFinite = "nan"
    tokenize_messages: bool = True
    generate: bool = True
    prompt_logprobs: bool = True
    max_logprobs: int | None = None
    moe_in_model_info: bool = True
    routed_experts: Literal["sglext", "choice-npy"] = "sglext"
    server_info: str = "reference"
    fusion_log: str = "reference"


FLAVOURS: dict[str, Flavour] = {
    f.name: f
    for f in (
        Flavour("reference", "reference"),
        Flavour(
            "sglang-0.5.23",
            "sglang",
            "0.5.23",
            nonfinite="null",
            prompt_logprobs=False,
            moe_in_model_info=False,
            server_info="sglang-0.5.23",
            fusion_log="sglang-0.5.23",
        ),  # fmt: skip
        Flavour(
            "sglang-0.5.10.post1",
            "sglang",
            "0.5.10.post1",
            nonfinite="null",
            tokenize_messages=False,
            prompt_logprobs=False,
            moe_in_model_info=False,
            server_info="sglang-0.5.10",
            fusion_log="sglang-0.5.10",
        ),  # fmt: skip
        Flavour(
            "vllm-0.33",
            "vllm",
            "0.33.0",
            nonfinite="refused",
            generate=False,
            max_logprobs=20,
            moe_in_model_info=False,
            routed_experts="choice-npy",
            server_info="vllm",
            fusion_log="vllm",
        ),  # fmt: skip
    )
}


def get_flavour(name: str | Flavour | None) -> Flavour:
    """The flavour called ``name`` (``None``: ``reference``).

    Raises:
        KeyError: an unknown name (the message lists the flavours).
    """
    if isinstance(name, Flavour):
        return name
    try:
        return FLAVOURS[name or "reference"]
    except KeyError:
        raise KeyError(f"unknown server flavour {name!r}; one of: {', '.join(FLAVOURS)}") from None
