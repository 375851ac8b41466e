"""Teacher-forced token log-probabilities of the reference server (vLLM and SGLang shapes).

The reference server has a deterministic toy "model": a tokenizer (:func:`tokenize`:
ChatML specials, up to 6 letters with an optional leading space, one digit, one other
character; token id = CRC-32 of the text, 30 bits) and, per position, a next-token
distribution that depends only on the previous 3 token ids and the token fed at that
position (:func:`_position`): 31 virtual tokens (ids >= 2^30, texts a word and a number)
with logits ~ N(0, 2), the fed token with a logit ~ N(1.5, 1.5), and 2% of the mass in
the unlisted rest of the vocabulary. Every server computes the same distribution for the
same tokens, whatever its ``--seed``; on top of it:

- every profile: batch-nondeterminism noise, logits + N(0, 0.005) drawn per request;
- routed-experts fault (``fused-regression``, ``experts-dup-shared``): what dropping one of
  the top-k routed experts does, a fixed shift of every position's logits, N(0, 0.25)
  (small everywhere) and, at 10% of positions, N(0, 2) more (large on some tokens);
- ``kv-cache-quant``: a tiny fixed shift N(0, 0.04) (like a KV-cache quantisation): real,
  far below the tolerance, not a regression;
- ``logprobs-nan``: healthy, but NaN at 2% of positions (a kernel-bug symptom);
- ``decode-fault``: prefill (teacher-forced) healthy, generation shifted as the routed-experts
  fault shifts it: a decode-only kernel fault (paged decode attention, a CUDA graph).

Endpoints (response shapes: :mod:`harness.numerics.adapters`, which cites each server's
source): ``POST /tokenize`` (vLLM), ``POST /v1/completions`` with ``prompt_logprobs``
(vLLM) or ``echo`` + ``logprobs`` (OpenAI legacy: llama-cpp-python, SGLang),
``POST /generate`` with ``return_logprob`` (SGLang), ``POST /v1/chat/completions`` with
``logprobs: true`` (a greedy reply of the same model: each step's distribution is that of
the end-of-turn token fed at the next position; the OpenAI ``logprobs.content`` shape).
Prompts longer than
:data:`MAX_MODEL_LEN` tokens get HTTP 400 (vLLM's context-length message).
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import time
import uuid
import zlib
from typing import Any

import numpy as np
from starlette.responses import Response

from harness.sim.flavours import Flavour, get_flavour
from harness.sim.infra import error_response
from harness.sim.profiles import SimProfile
from harness.sim.templates import NOT_JINJA, render

__all__ = [
    "MAX_MODEL_LEN",
    "completions",
    "generate",
    "numerics_of",
    "tokenize",
    "tokenize_endpoint",
]

MAX_MODEL_LEN = 32768
REFERENCE = get_flavour(None)
NOISE_SIGMA = 0.005
FUSED_SMALL, FUSED_LARGE, FUSED_LARGE_RATE = 0.25, 2.0, 0.10
BENIGN_SIGMA = 0.04
NAN_RATE = 0.02
_CANDIDATES = 31
_LISTED_MASS = np.log(0.98)
_VIRTUAL = 1 << 30
_WORDS = [" the", " of", " and", " to", " a", " in", " is", " that", " for", " it", ",", "."]
#: special tokens of the chat templates (:mod:`harness.sim.templates`), one token each
_SPECIAL = r"<\|[a-z_]+\|>|<｜[^｜]{1,40}｜>|\]~!?b\[|\]~b\]|\[e~\[|</?minimax:tool_call>"
_TOKEN = re.compile(_SPECIAL + r"| ?[A-Za-z]{1,6}| ?[0-9]| ?[^\sA-Za-z0-9]|\s")
_names: dict[int, str] = {}


def numerics_of(profile: SimProfile, *, decode: bool = False) -> str:
    """The profile's numerics: ``healthy``, ``fused``, ``benign`` or ``nan``; for
    generation (``decode``), ``decode-fault`` is ``fused`` (its prefill is healthy: a
    fault in a decode-only kernel, which teacher forcing cannot see)."""
    if profile.routed_experts_fault:
        return "fused"
    if profile.name == "decode-fault":
        return "fused" if decode else "healthy"
    return {"kv-cache-quant": "benign", "logprobs-nan": "nan"}.get(profile.name, "healthy")


def tokenize(text: str) -> list[int]:
    """Token ids of ``text`` (module docstring); the texts are remembered for display."""
    ids = []
    for piece in _TOKEN.findall(text):
        tid = zlib.crc32(piece.encode("utf-8")) & (_VIRTUAL - 1)
        _names.setdefault(tid, piece)
        ids.append(tid)
    return ids


def _text(tid: int) -> str:
    if tid >= _VIRTUAL:  # virtual tokens: distinct texts (text-keyed shapes stay exact)
        return f"{_WORDS[tid % len(_WORDS)]}{tid % 99991}"
    return _names.get(tid, f"<{tid}>")


@functools.lru_cache(maxsize=500_000)
def _position(
    ctx: tuple[int, ...], fed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Candidate ids (fed token last), logits, the fused shift and the benign shift."""
    rng = np.random.default_rng(zlib.crc32(repr((ctx, fed)).encode()))
    ids = np.append(rng.integers(_VIRTUAL, 2 * _VIRTUAL, _CANDIDATES), fed)
    z = np.append(rng.normal(0.0, 2.0, _CANDIDATES), rng.normal(1.5, 1.5))
    fused = FUSED_SMALL * rng.normal(size=ids.size)
    if rng.random() < FUSED_LARGE_RATE:
        fused += FUSED_LARGE * rng.normal(size=ids.size)
    return ids, z, fused, BENIGN_SIGMA * rng.normal(size=ids.size)


def _logprobs(ids: list[int], numerics: str, rng: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """Positions 1..n-1: candidate ids (n-1, 32) and their logprobs (n-1, 32), fed last."""
    rows = [_position(tuple(ids[max(0, i - 3) : i]), ids[i]) for i in range(1, len(ids))]
    if not rows:
        return np.zeros((0, _CANDIDATES + 1), dtype=np.int64), np.zeros((0, _CANDIDATES + 1))
    cand = np.stack([r[0] for r in rows])
    z = np.stack([r[1] for r in rows])
    if numerics in ("fused", "benign"):
        z = z + np.stack([r[2] if numerics == "fused" else r[3] for r in rows])
    z = z + np.random.default_rng(rng.getrandbits(64)).normal(0.0, NOISE_SIGMA, z.shape)
    top = z.max(axis=1, keepdims=True)
    lp = z - (top + np.log(np.exp(z - top).sum(axis=1, keepdims=True))) + _LISTED_MASS
    if numerics == "nan":
        bad = np.array([zlib.crc32(repr(r[0][-1]).encode()) % 50 == 0 for r in rows])
        lp[bad, -1] = np.nan
    return cand, lp


def _nulled(v: Any) -> Any:
    """``v`` with every non-finite float replaced by ``None`` (what orjson writes)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _nulled(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_nulled(x) for x in v]
    return v


def _json(body: dict[str, Any], flavour: Flavour = REFERENCE) -> Response:
    """JSON as the flavour's server writes non-finite floats: a bare ``NaN`` (reference:
    Python's json, as a server that lets one through), ``null`` (SGLang: orjson), or an
    error answer instead (vLLM: Starlette's ``JSONResponse`` refuses them, and vLLM's
    ``ValueError`` handler answers HTTP 400 ``BadRequestError``)."""
    if flavour.nonfinite == "null":
        return Response(json.dumps(_nulled(body)), media_type="application/json")
    if flavour.nonfinite == "refused":
        try:
            text = json.dumps(body, allow_nan=False)
        except ValueError as exc:
            return _vllm_error(400, str(exc))
        return Response(text, media_type="application/json")
    return Response(json.dumps(body, allow_nan=True), media_type="application/json")


def _sglang_error(code: int, message: str) -> Response:
    """SGLang's flat error body (``sglang==0.5.10.post1``
    ``sglang/srt/entrypoints/http_server.py`` ``validation_exception_handler``)."""
    body = {
        "object": "error",
        "message": message,
        "type": "Bad Request",
        "param": None,
        "code": code,
    }
    return Response(json.dumps(body), status_code=code, media_type="application/json")


def _vllm_error(code: int, message: str, *, param: str | None = None) -> Response:
    """vLLM's error body (``vllm==0.33.0``
    ``vllm/entrypoints/serve/exception_handling/error_response.py``; a
    ``VLLMValidationError`` names its parameter, ``vllm/exceptions.py``)."""
    kind = "BadRequestError" if code == 400 else "InternalServerError"
    err = {"message": message, "type": kind, "param": param, "code": code}
    return Response(json.dumps({"error": err}), status_code=code, media_type="application/json")


def _ids_of(body: dict[str, Any], key: str) -> list[int] | None:
    """Token ids of a request: a list of ints under ``key``, else the tokenized text."""
    value = body.get(key)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    ):
        return list(value)
    if isinstance(value, str) and value:
        return tokenize(value)
    return None


def _overflow(n: int) -> Response | None:
    if n + 1 <= MAX_MODEL_LEN:
        return None
    return error_response(
        400,
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you "
        f"requested {n + 1} tokens ({n} in the messages, 1 in the completion).",
    )


def tokenize_endpoint(
    body: dict[str, Any], *, flavour: Flavour = REFERENCE, template: str = "chatml"
) -> Response:
    """``POST /tokenize``: ``{"prompt"}`` or ``{"messages"}`` (rendered by the server's
    chat template ``template``; ``add_generation_prompt`` as asked, default true as for a
    chat completion) -> ``{"count", "max_model_len", "tokens"}`` (vLLM's and SGLang's
    ``TokenizeResponse``). A flavour whose ``/tokenize`` takes no ``messages`` (SGLang
    0.5.10) answers HTTP 400, as its request validation does."""
    messages = body.get("messages")
    if messages is not None and not flavour.tokenize_messages:
        err = {"loc": ("body", "prompt"), "msg": "Field required", "type": "missing"}
        return _sglang_error(400, f"1 validation error:\n  {err}\n [{err}]")
    if (
        messages is not None
        and flavour.server == "sglang"
        and template in NOT_JINJA
        and "add_generation_prompt" in body
    ):  # sglang==0.5.23 sglang/srt/entrypoints/openai/serving_tokenize.py
        return _sglang_error(
            400, "add_generation_prompt is supported only with a Jinja chat template."
        )
    if isinstance(messages, list):
        if not all(isinstance(m, dict) for m in messages):
            return error_response(400, "'messages' must be a list of objects")
        gen = body.get("add_generation_prompt")
        ids = tokenize(render(template, messages, add_generation_prompt=gen is not False))
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return error_response(400, "'prompt' (a string) or 'messages' is required")
        ids = tokenize(prompt)
    out: dict[str, Any] = {"count": len(ids), "max_model_len": MAX_MODEL_LEN, "tokens": ids}
    if flavour.server != "sglang":
        out["token_strs"] = None
    return _json(out, flavour)


def apply_template_endpoint(body: dict[str, Any], *, template: str = "chatml") -> Response:
    """llama.cpp's ``POST /apply-template``: ``{"messages"}`` -> ``{"prompt"}``, the
    conversation in the server's chat template with the generation prompt (upstream
    ``tools/server/server.cpp``)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return error_response(400, "'messages' must be a list of objects")
    gen = body.get("add_generation_prompt") is not False
    return _json({"prompt": render(template, messages, add_generation_prompt=gen)})


def _order(lp: np.ndarray) -> np.ndarray:
    """Per position, column indices from the most to the least likely (NaN last)."""
    return np.argsort(-np.nan_to_num(lp, nan=-np.inf), axis=1, kind="stable")


def _vllm_choice(ids: list[int], cand: np.ndarray, lp: np.ndarray, k: int) -> dict[str, Any]:
    plp: list[Any] = [None]
    order, fed = _order(lp), lp.shape[1] - 1
    for i in range(len(ids) - 1):
        row = order[i].tolist()
        cols = row[:k] if fed in row[:k] else [*row[:k], fed]
        plp.append({
            str(int(cand[i, j])): {"logprob": float(lp[i, j]), "rank": row.index(j) + 1,
                                   "decoded_token": _text(int(cand[i, j]))}
            for j in cols
        })  # fmt: skip
    return {"index": 0, "text": _WORDS[0], "logprobs": None, "finish_reason": "length",
            "stop_reason": None, "prompt_logprobs": plp}  # fmt: skip


def _echo_choice(ids: list[int], cand: np.ndarray, lp: np.ndarray, k: int) -> dict[str, Any]:
    tokens = [_text(t) for t in ids] + [_WORDS[0]]
    offsets = list(np.cumsum([0] + [len(t) for t in tokens[:-1]]).tolist())
    token_lps: list[Any] = [None]
    tops: list[Any] = [None]
    order = _order(lp)[:, :k].tolist()
    for i in range(len(ids) - 1):
        token_lps.append(float(lp[i, -1]))
        top = {_text(int(cand[i, j])): float(lp[i, j]) for j in order[i]}
        top[tokens[i + 1]] = float(lp[i, -1])
        tops.append(top)
    token_lps.append(-0.5)
    tops.append({_WORDS[0]: -0.5})
    logprobs = {
        "tokens": tokens,
        "text_offset": offsets,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
    }
    return {"index": 0, "text": "".join(tokens), "logprobs": logprobs, "finish_reason": "length"}


def completions(
    profile: SimProfile, rng: random.Random, body: dict[str, Any], model: str,
    *, flavour: Flavour = REFERENCE,
) -> Response:  # fmt: skip
    """``POST /v1/completions`` with ``prompt_logprobs`` (vLLM) or ``echo`` + ``logprobs``."""
    ids = _ids_of(body, "prompt")
    if ids is None:
        return error_response(400, "'prompt' must be a non-empty string or list of token ids")
    over = _overflow(len(ids))
    if over is not None:
        return over
    cand, lp = _logprobs(ids, numerics_of(profile), rng)
    if body.get("prompt_logprobs") is not None:
        k = body.get("prompt_logprobs")
        k = k if isinstance(k, int) and not isinstance(k, bool) and k >= 0 else 1
        if flavour.max_logprobs is not None and k > flavour.max_logprobs:
            return _vllm_error(
                400, f"Requested prompt logprobs of {k}, which is greater than max allowed: "
                f"{flavour.max_logprobs} (parameter=prompt_logprobs, value={k})",
                param="prompt_logprobs",
            )  # fmt: skip
        choice = _vllm_choice(ids, cand, lp, min(k, 20))
    else:
        k = body.get("logprobs")
        choice = _echo_choice(ids, cand, lp, min(k if isinstance(k, int) else 1, 20))
    return _json({
        "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion",
        "created": int(time.time()), "model": model, "choices": [choice],
        "usage": {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1},
    }, flavour)  # fmt: skip


def generate(
    profile: SimProfile, rng: random.Random, body: dict[str, Any], *,
    flavour: Flavour = REFERENCE, experts: dict[str, Any] | None = None,
) -> Response:  # fmt: skip
    """SGLang ``POST /generate`` with ``return_logprob`` over ``text`` or ``input_ids``;
    ``experts``: ``meta_info`` fields of the routed experts (the caller's, when asked for)."""
    ids = _ids_of(body, "input_ids") or _ids_of(body, "text")
    if ids is None:
        return error_response(400, "'text' or 'input_ids' is required")
    over = _overflow(len(ids))
    if over is not None:
        return over
    k = body.get("top_logprobs_num") or 0
    k = (min(k, 20) if flavour.server == "reference" else k) if isinstance(k, int) else 0
    start = body.get("logprob_start_len", -1)
    cand, lp = _logprobs(ids, numerics_of(profile), rng)
    text = bool(body.get("return_text_in_logprobs"))
    tokens: list[Any] = [[None, ids[0], _text(ids[0]) if text else None]]
    tops: list[Any] = [None]
    order = _order(lp)[:, :k].tolist()
    for i in range(len(ids) - 1):
        tokens.append([float(lp[i, -1]), ids[i + 1], _text(ids[i + 1]) if text else None])
        tops.append([[float(lp[i, j]), int(cand[i, j]), _text(int(cand[i, j])) if text else None]
                     for j in order[i]])  # fmt: skip
    first = max(start, 0) if isinstance(start, int) and start >= 0 else len(ids) - 1
    meta = {"id": uuid.uuid4().hex, "prompt_tokens": len(ids), "completion_tokens": 0,
            "finish_reason": {"type": "length", "length": 0}, "cached_tokens": 0,
            "input_token_logprobs": tokens[first:], "input_top_logprobs": tops[first:],
            "output_token_logprobs": [], "output_top_logprobs": []}  # fmt: skip
    meta |= experts or {}
    return _json({"text": "", "output_ids": [], "meta_info": meta}, flavour)


#: the "fed token" slot of a generation step: the end of the turn (<|im_end|>) when greedy
_END = zlib.crc32(b"<|im_end|>") & (_VIRTUAL - 1)


def _step(
    prompt: int, ctx: list[int], numerics: str, rng: random.Random
) -> tuple[np.ndarray, np.ndarray]:
    """One generation step: candidate ids and logprobs of the next token after ``ctx`` (the
    prompt's hash stands in for the context beyond the last 2 tokens)."""
    cand, lp = _logprobs([prompt, *ctx[-2:], _END], numerics, rng)
    return cand[-1], lp[-1]


def _greedy(ids: list[int], n: int, numerics: str, rng: random.Random) -> list[dict[str, Any]]:
    """Up to ``n`` greedy tokens after ``ids`` in the OpenAI ``logprobs.content`` shape."""
    out: list[dict[str, Any]] = []
    ctx, prompt = list(ids), zlib.crc32(repr(ids).encode())
    for _ in range(n):
        cand, lp = _step(prompt, ctx, numerics, rng)
        order = np.argsort(-np.nan_to_num(lp, nan=-np.inf), kind="stable").tolist()
        tid = int(cand[order[0]])
        tops = [{"token": _text(int(cand[j])), "logprob": float(lp[j])} for j in order[:5]]
        text = "<|im_end|>" if tid == _END else _text(tid)
        out.append({"token": text, "logprob": float(lp[order[0]]),
                    "bytes": list(text.encode()), "top_logprobs": tops})  # fmt: skip
        if tid == _END:
            break
        ctx.append(tid)
    return out


def chat(
    profile: SimProfile, rng: random.Random, body: dict[str, Any], model: str, *,
    flavour: Flavour = REFERENCE, template: str = "chatml",
) -> Response:  # fmt: skip
    """``POST /v1/chat/completions`` with ``logprobs: true``: a greedy reply of the toy model
    with ``choices[0].logprobs.content`` (generation-aligned comparisons), the prompt
    rendered by the chat template ``template``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return error_response(400, "'messages' must be a list of objects")
    limit = body.get("max_tokens") or 16
    ids = tokenize(render(template, messages, add_generation_prompt=True))
    content = _greedy(ids, min(int(limit), 256), numerics_of(profile, decode=True), rng)
    k = body.get("top_logprobs") or 0
    for e in content:
        e["top_logprobs"] = e["top_logprobs"][: min(int(k), 5)]
    done = content[-1]["token"] == "<|im_end|>"
    text = "".join(e["token"] for e in content if e["token"] != "<|im_end|>")
    choice = {"index": 0, "message": {"role": "assistant", "content": text},
              "logprobs": {"content": content}, "finish_reason": "stop" if done else "length"}  # fmt: skip
    return _json({
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
        "created": int(time.time()), "model": model, "choices": [choice],
        "usage": {"prompt_tokens": len(ids), "completion_tokens": len(content),
                  "total_tokens": len(ids) + len(content)},
    }, flavour)  # fmt: skip
