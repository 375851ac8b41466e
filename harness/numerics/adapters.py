"""Server adapters: one teacher-forced scoring request per sequence, parsed as received.

Every adapter turns a :class:`~harness.numerics.models.Sequence` into a
:class:`~harness.numerics.models.ScoredSequence` (per position: the token, its logprob,
the server's top-k). Response shapes, with their sources:

- ``vllm`` (:class:`VLLMAdapter`): ``POST /tokenize`` (``{"messages"}``: the server's own
  chat template, ``add_generation_prompt: false``; or ``{"prompt"}``) ->
  ``{"count", "max_model_len", "tokens": [id, ...]}``, then ``POST /v1/completions`` with
  ``prompt: [ids]``, ``max_tokens: 1`` and ``prompt_logprobs: k`` ->
  ``choices[0].prompt_logprobs``: ``[null, {"<id>": {"logprob", "rank",
  "decoded_token"}, ...}, ...]``, one entry per prompt token, the prompt token's own entry
  included beside the top-k (vLLM ``vllm/entrypoints/openai/protocol.py``
  ``TokenizeResponse``, ``CompletionResponseChoice.prompt_logprobs``; ``vllm/logprobs.py``
  ``Logprob``; ``-inf`` is sent as ``-9999.0`` by ``clamp_prompt_logprobs``, read back as
  ``-inf`` here).
- ``sglang`` (:class:`SGLangAdapter`): ``POST /generate`` with ``text`` (conversations
  rendered as ChatML), ``sampling_params.max_new_tokens: 0``, ``return_logprob: true``,
  ``logprob_start_len: 0``, ``top_logprobs_num: k``, ``return_text_in_logprobs: true`` ->
  ``meta_info.input_token_logprobs``: ``[[logprob|null, id, text], ...]`` and
  ``meta_info.input_top_logprobs``: ``[null, [[logprob, id, text], ...], ...]`` (SGLang
  ``python/sglang/srt/managers/tokenizer_manager.py``: ``detokenize_logprob_tokens``).
- ``llama-cpp`` (:class:`EchoAdapter`): ``POST /v1/completions`` with ``prompt`` (text),
  ``echo: true``, ``logprobs: k``, ``max_tokens: 1`` -> the OpenAI legacy
  ``choices[0].logprobs``: ``{"tokens": [str], "token_logprobs": [null, ...],
  "top_logprobs": [null, {"<text>": logprob}, ...], "text_offset"}`` covering the prompt
  then ``usage.completion_tokens`` generated tokens (dropped here). Keys are token texts
  (no ids in this shape). llama-cpp-python ``llama_cpp/llama.py`` ``_create_completion``
  (0.3.36; the server must run with ``--logits_all true``); SGLang's OpenAI completions
  ``echo`` path returns the same shape.
- ``greedy`` (:class:`GreedyAdapter`): servers that only give logprobs of generated
  tokens: chat completions at temperature 0, compared along the common greedy prefix.

Errors: an HTTP error, a connection failure, a body without the fields above or a list
shorter than the tokens (truncated) raise :class:`~harness.errors.LogprobsError` (one line,
naming the server and the fix); a prompt longer than the server's context too.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, ClassVar

import httpx

from harness.errors import LogprobsError
from harness.numerics.models import ScoredSequence, Sequence

__all__ = [
    "ADAPTERS",
    "Adapter",
    "MAX_TOKENS",
    "EchoAdapter",
    "GreedyAdapter",
    "SGLangAdapter",
    "VLLMAdapter",
    "chatml",
    "detect",
    "make_adapter",
]

#: positions scored per sequence at most (longer sequences are cut: the same cut on both
#: sides, so the same tokens are compared)
MAX_TOKENS = 512
#: text-in adapters cut the text at this many characters per token of MAX_TOKENS before
#: sending it (English BPE averages ~4 characters a token), then the tokens at MAX_TOKENS
CHARS_PER_TOKEN_BOUND = 4
#: vLLM writes -inf as this (clamp_prompt_logprobs); read back as -inf
VLLM_NEG_INF = -9999.0
ENABLE_HINT = (
    "vLLM and SGLang answer as they are; start llama-cpp-python with --logits_all true; "
    "or skip with --no-logprobs"
)


def chatml(messages: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> str:
    """A conversation as ChatML text (``<|im_start|>role\\ncontent<|im_end|>\\n``), tool
    calls as ``<tool_call>{json}</tool_call>`` (Qwen/Hermes style; SmolLM2's template is
    ChatML). Used for servers without a chat-template tokenize endpoint."""
    out = []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else ""
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            body = json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")})
            text += f"\n<tool_call>\n{body}\n</tool_call>"
        out.append(f"<|im_start|>{m.get('role', 'user')}\n{text}<|im_end|>\n")
    return "".join(out)


def _finite_or_neg_inf(v: Any, where: str, server: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise LogprobsError(f"{server}: {where} is {v!r}, not a number (a malformed answer)")
    return -math.inf if v <= VLLM_NEG_INF else float(v)


#: the most bytes read of one logprobs answer (a prompt of 4,096 tokens with top-20
#: lists is about 2 MB as JSON)
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def bounded_request(
    client: httpx.Client, method: str, url: str, *, json: Any = None
) -> httpx.Response:
    """One request with a total deadline (the client's read timeout, from sending to the
    last byte: a server that sends its body slowly or forever cannot hang the caller) and
    at most :data:`MAX_ANSWER_BYTES` read.

    Raises :class:`httpx.TimeoutException` past the deadline and
    :class:`httpx.DecodingError` past the size cap (both :class:`httpx.HTTPError`).
    """
    deadline_s = client.timeout.read or 120.0
    start = time.monotonic()
    with client.stream(method, url, json=json) as r:
        body = bytearray()
        for chunk in r.iter_bytes():
            body += chunk
            if time.monotonic() - start > deadline_s:
                raise httpx.ReadTimeout(f"no complete answer within {deadline_s:g} s")
            if len(body) > MAX_ANSWER_BYTES:
                raise httpx.DecodingError(f"answer over {MAX_ANSWER_BYTES} bytes")
    headers = {k: v for k, v in r.headers.items() if k.lower() != "content-encoding"}
    return httpx.Response(r.status_code, headers=headers, content=bytes(body), request=r.request)


class Adapter:
    """One server's logprobs API. ``score(seq)`` makes the request(s) and parses them."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    #: scores what the server generates (greedy), not given tokens: compared along the
    #: common prefix, never refused as a tokenisation mismatch
    generation: ClassVar[bool] = False

    def __init__(
        self,
        client: httpx.Client,
        base_url: str,
        *,
        model: str | None,
        top_k: int,
        max_tokens: int = MAX_TOKENS,
    ) -> None:
        self.client, self.base_url = client, base_url.rstrip("/")
        self.model, self.top_k, self.max_tokens = model, top_k, max_tokens

    def _text(self, seq: Sequence) -> str:
        """The sequence as text (ChatML for a conversation), cut at
        ``CHARS_PER_TOKEN_BOUND * max_tokens`` characters."""
        text = chatml(seq.messages) if seq.messages is not None else seq.text or ""
        return text[: CHARS_PER_TOKEN_BOUND * self.max_tokens]

    def score(self, seq: Sequence) -> ScoredSequence:
        raise NotImplementedError

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON; the parsed object, else :class:`LogprobsError`."""
        url = self.base_url + path
        if self.model is not None:
            body = {"model": self.model, **body}
        try:
            r = bounded_request(self.client, "POST", url, json=body)
        except httpx.HTTPError as exc:
            raise LogprobsError(f"{url}: {type(exc).__name__}: {exc}") from None
        if r.status_code >= 400:
            text = r.text.replace("\n", " ")[:300]
            hint = " (context overflow: score shorter sequences)" if "context" in text else ""
            raise LogprobsError(f"{url}: HTTP {r.status_code}: {text}{hint}")
        try:
            out = r.json()
        except ValueError:
            raise LogprobsError(f"{url}: the answer is not JSON: {r.text[:120]!r}") from None
        if not isinstance(out, dict):
            raise LogprobsError(f"{url}: the answer is not a JSON object")
        return out

    def _bad(self, what: str) -> LogprobsError:
        return LogprobsError(f"{self.base_url}: {self.label}: {what}")


class VLLMAdapter(Adapter):
    """vLLM: ``/tokenize`` then ``prompt_logprobs`` (see the module docstring)."""

    name, label = "vllm", "vLLM prompt_logprobs"

    def __init__(self, client: httpx.Client, base_url: str, **kw: Any) -> None:
        super().__init__(client, base_url, **kw)
        self._ids: dict[str, list[int]] = {}  # sequence id -> its token ids on this server

    def _tokenize(self, seq: Sequence) -> list[int]:
        body: dict[str, Any] = (
            {"messages": list(seq.messages), "add_generation_prompt": False}
            if seq.messages is not None
            else {"prompt": seq.text}
        )
        out = self._post("/tokenize", body)
        ids = out.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids) or not ids:
            raise self._bad(f"/tokenize answered no token ids: {str(out)[:120]}")
        ids = ids[: self.max_tokens]
        limit = out.get("max_model_len")
        if isinstance(limit, int) and len(ids) + 1 > limit:
            raise self._bad(
                f"context overflow: sequence {seq.id!r} has {len(ids)} tokens, the server's "
                f"max_model_len is {limit}: score shorter sequences"
            )
        return ids

    def score(self, seq: Sequence) -> ScoredSequence:
        cached = seq.id in self._ids
        ids = self._ids.get(seq.id) or self._tokenize(seq)
        self._ids[seq.id] = ids  # a sequence scored again (A/A) is not tokenised again
        body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": self.top_k}
        out = self._post("/v1/completions", body)
        try:
            plp = out["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise self._bad("no choices[0].prompt_logprobs in the answer") from None
        if not isinstance(plp, list) or len(plp) != len(ids):
            n = len(plp) if isinstance(plp, list) else 0
            raise self._bad(f"prompt_logprobs has {n} entries for {len(ids)} tokens (truncated)")
        scored = self._parse(ids, plp)
        scored.requests = 1 if cached else 2
        return scored

    def _parse(self, ids: list[int], plp: list[Any]) -> ScoredSequence:
        keys = [str(i) for i in ids]
        seq = ScoredSequence(keys, [""] * len(ids), [None], [{}])
        for i in range(1, len(ids)):
            entry = plp[i]
            if not isinstance(entry, dict) or keys[i] not in entry:
                raise self._bad(f"prompt_logprobs[{i}] lacks the prompt token {ids[i]}")
            top: dict[str, float] = {}
            for k, v in entry.items():
                v = v if isinstance(v, dict) else {}
                top[str(k)] = _finite_or_neg_inf(v.get("logprob"), f"logprob at {i}", self.label)
                seq.names.setdefault(str(k), str(v.get("decoded_token") or k))
            seq.top.append(top)
            seq.logprobs.append(top[keys[i]])
        seq.texts = [seq.names.get(k, f"<{k}>") for k in keys]
        return seq


class SGLangAdapter(Adapter):
    """SGLang: ``/generate`` with ``return_logprob`` (see the module docstring)."""

    name, label = "sglang", "SGLang /generate return_logprob"

    def score(self, seq: Sequence) -> ScoredSequence:
        body = {
            "text": self._text(seq),
            "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": self.top_k,
            "return_text_in_logprobs": True,
        }
        out = self._post("/generate", body)
        meta: dict[str, Any] = out["meta_info"] if isinstance(out.get("meta_info"), dict) else {}
        lps, tops = meta.get("input_token_logprobs"), meta.get("input_top_logprobs")
        if not isinstance(lps, list) or not isinstance(tops, list) or not lps:
            raise self._bad("no meta_info.input_token_logprobs / input_top_logprobs")
        if len(tops) != len(lps):
            raise self._bad(f"{len(tops)} top-logprob entries for {len(lps)} tokens (truncated)")
        return self._parse(lps[: self.max_tokens], tops[: self.max_tokens])

    def _triple(self, e: Any, where: str) -> tuple[float | None, str, str]:
        if not isinstance(e, (list, tuple)) or len(e) < 2 or not isinstance(e[1], int):
            raise self._bad(f"{where} is {e!r}, not [logprob, token_id, text]")
        lp = None if e[0] is None else _finite_or_neg_inf(e[0], where, self.label)
        text = e[2] if len(e) > 2 and isinstance(e[2], str) else f"<{e[1]}>"
        return lp, str(e[1]), text

    def _parse(self, lps: list[Any], tops: list[Any]) -> ScoredSequence:
        seq = ScoredSequence([], [], [], [])
        for i, entry in enumerate(lps):
            lp, key, text = self._triple(entry, f"input_token_logprobs[{i}]")
            if i > 0 and lp is None:
                raise self._bad(f"input_token_logprobs[{i}] has no logprob (truncated)")
            top: dict[str, float] = {}
            for j, t in enumerate((tops[i] or []) if i > 0 else []):
                tlp, tkey, ttext = self._triple(t, f"input_top_logprobs[{i}][{j}]")
                top[tkey] = -math.inf if tlp is None else tlp
                seq.names.setdefault(tkey, ttext)
            if i > 0:
                top[key] = lp  # type: ignore[assignment]
            seq.keys.append(key)
            seq.texts.append(text)
            seq.names.setdefault(key, text)
            seq.logprobs.append(lp if i > 0 else None)
            seq.top.append(top)
        return seq


class EchoAdapter(Adapter):
    """OpenAI completions ``echo`` + ``logprobs`` (llama-cpp-python; see the docstring)."""

    name, label = "llama-cpp", "completions echo+logprobs"

    def score(self, seq: Sequence) -> ScoredSequence:
        body = {"prompt": self._text(seq), "max_tokens": 1, "temperature": 0, "echo": True}
        out = self._post("/v1/completions", {**body, "logprobs": self.top_k})
        try:
            lp = out["choices"][0]["logprobs"]
            tokens, token_lps, tops = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise self._bad("no choices[0].logprobs.tokens/token_logprobs/top_logprobs") from None
        usage: dict[str, Any] = out["usage"] if isinstance(out.get("usage"), dict) else {}
        generated = usage.get("completion_tokens", 0)
        n = len(tokens) - (generated if isinstance(generated, int) else 0)
        if not (len(token_lps) == len(tops) == len(tokens)) or n < 1:
            raise self._bad(f"{len(tokens)} tokens, {len(token_lps)} logprobs (truncated)")
        n = min(n, self.max_tokens)
        return self._parse(tokens[:n], token_lps[:n], tops[:n])

    def _parse(self, tokens: list[Any], lps: list[Any], tops: list[Any]) -> ScoredSequence:
        keys = [str(t) for t in tokens]
        seq = ScoredSequence(keys, list(keys), [None], [{}], names={k: k for k in keys})
        for i in range(1, len(keys)):
            lp = _finite_or_neg_inf(lps[i], f"token_logprobs[{i}]", self.label)
            raw = tops[i] if isinstance(tops[i], dict) else {}
            top = {
                str(k): _finite_or_neg_inf(v, f"top_logprobs[{i}]", self.label)
                for k, v in raw.items()
            }
            top[keys[i]] = lp
            seq.names.update({k: k for k in top})
            seq.logprobs.append(lp)
            seq.top.append(top)
        return seq


class GreedyAdapter(Adapter):
    """Generation-aligned, for servers that only return logprobs of generated tokens:
    ``POST /v1/chat/completions`` at temperature 0 with ``logprobs: true`` and
    ``top_logprobs: k`` -> ``choices[0].logprobs.content``: ``[{"token", "logprob",
    "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]`` (the OpenAI chat
    completions reference; upstream llama-server's OpenAI endpoint answers the same).
    The conversation up to its last assistant message is the prompt; the server's greedy
    reply (at most :data:`GENERATED_TOKENS` tokens) is what is compared, along the common
    greedy prefix of the two servers (:func:`~harness.numerics.divergence.align_generated`).
    Position 0 of the result is the prompt (no logprob); keys are token texts."""

    name, label = "greedy", "chat logprobs (generation-aligned)"
    generation = True

    def score(self, seq: Sequence) -> ScoredSequence:
        msgs = list(seq.messages or [{"role": "user", "content": seq.text or ""}])
        while len(msgs) > 1 and msgs[-1].get("role") == "assistant":
            msgs.pop()
        body = {"messages": msgs, "temperature": 0, "seed": 0, "logprobs": True,
                "top_logprobs": self.top_k, "max_tokens": min(self.max_tokens, GENERATED_TOKENS)}  # fmt: skip
        out = self._post("/v1/chat/completions", body)
        try:
            content = out["choices"][0]["logprobs"]["content"]
        except (KeyError, IndexError, TypeError):
            raise self._bad("no choices[0].logprobs.content (logprobs: true)") from None
        if not isinstance(content, list) or not content:
            raise self._bad("choices[0].logprobs.content is empty")
        seq_out = ScoredSequence(["<prompt>"], ["<prompt>"], [None], [{}], names={})
        for i, e in enumerate(content):
            if not isinstance(e, dict) or not isinstance(e.get("token"), str):
                raise self._bad(f"logprobs.content[{i}] is {str(e)[:80]}, not a token entry")
            lp = _finite_or_neg_inf(e.get("logprob"), f"content[{i}].logprob", self.label)
            top = {
                str(t.get("token")): _finite_or_neg_inf(t.get("logprob"), f"top at {i}", self.label)
                for t in e.get("top_logprobs") or [] if isinstance(t, dict)
            }  # fmt: skip
            top[e["token"]] = lp
            seq_out.keys.append(e["token"])
            seq_out.texts.append(e["token"])
            seq_out.logprobs.append(lp)
            seq_out.top.append(top)
            seq_out.names.update({k: k for k in top})
        return seq_out


#: generated tokens compared at most by :class:`GreedyAdapter`
GENERATED_TOKENS = 64
#: adapters by ``--logprobs-api`` name, in auto-detection order
ADAPTERS: dict[str, type[Adapter]] = {
    a.name: a for a in (VLLMAdapter, SGLangAdapter, EchoAdapter, GreedyAdapter)
}
_PROBE = Sequence(id="probe", source="probe", text="The quick brown fox jumps over the lazy dog.")


def make_adapter(
    name: str, client: httpx.Client, base_url: str, *, model: str | None, top_k: int,
    max_tokens: int = MAX_TOKENS,
) -> Adapter:  # fmt: skip
    """The adapter called ``name`` (a key of :data:`ADAPTERS`), or, for ``"auto"``,
    :func:`detect`'s. Raises :class:`LogprobsError` (none answers)."""
    if name == "auto":
        return detect(client, base_url, model=model, top_k=top_k, max_tokens=max_tokens)
    return ADAPTERS[name](client, base_url, model=model, top_k=top_k, max_tokens=max_tokens)


def detect(
    client: httpx.Client, base_url: str, *, model: str | None, top_k: int,
    max_tokens: int = MAX_TOKENS,
) -> Adapter:  # fmt: skip
    """The first adapter of :data:`ADAPTERS` whose probe (a 10-word prompt) parses.

    Raises:
        LogprobsError: no adapter's request parsed; one line listing what was tried and
            how to enable it.
    """
    for cls in ADAPTERS.values():
        adapter = cls(client, base_url, model=model, top_k=top_k, max_tokens=max_tokens)
        try:
            scored = adapter.score(_PROBE)
        except LogprobsError:
            continue
        if len(scored) >= 2:
            return adapter
    tried = ", ".join(a.label for a in ADAPTERS.values())
    raise LogprobsError(
        f"{base_url}: no teacher-forced logprobs API answered (tried {tried}): {ENABLE_HINT}"
    )
