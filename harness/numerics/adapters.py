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
  included beside the top-k (``vllm==0.33.0``: ``vllm/entrypoints/serve/tokenize/protocol.py``
  ``TokenizeResponse``; ``vllm/entrypoints/openai/completion/protocol.py``
  ``CompletionResponseChoice.prompt_logprobs``; ``vllm/logprobs.py`` ``Logprob``; ``-inf``
  is sent as ``-9999.0`` by ``vllm/entrypoints/generate/base/serving.py``
  ``clamp_prompt_logprobs``, read back as ``-inf`` here).
- ``sglang`` (:class:`SGLangAdapter`): ``POST /tokenize`` (``{"messages"}``, the server's
  chat template, SGLang 0.5.23 on; or ``{"prompt"}``), then ``POST /generate`` with
  ``input_ids`` (ChatML ``text`` only where the server renders no template, with a note),
  ``sampling_params.max_new_tokens: 0``, ``return_logprob: true``,
  ``logprob_start_len: 0``, ``top_logprobs_num: k``, ``return_text_in_logprobs: true`` ->
  ``meta_info.input_token_logprobs``: ``[[logprob|null, id, text], ...]`` and
  ``meta_info.input_top_logprobs``: ``[null, [[logprob, id, text], ...], ...]``
  (``sglang==0.5.23`` ``sglang/srt/managers/tokenizer_manager.py``:
  ``detokenize_logprob_tokens``; serialised by orjson, NaN and +-inf as ``null``).
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
import re
import threading
import time
from typing import Any, ClassVar, TypeVar

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
    "answers",
    "chatml",
    "comparable",
    "detect",
    "make_adapter",
]

_Cut = TypeVar("_Cut", str, list[Any], list[int])
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
    r"""A conversation as ChatML text (``<|im_start|>role\ncontent<|im_end|>\n``), tool
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


#: a logprob above this (nats) is impossible (a log-probability is at most 0; the margin
#: absorbs the rounding of a probability of 1): the answer is malformed
LOGPROB_MAX = 0.01
#: a top-k list whose probabilities sum above this is impossible: the answer is malformed
TOP_MASS_MAX = 1.01


def _logprob(v: Any, where: str, server: str) -> float:
    """A logprob as received, read as a float.

    ``null`` is a non-finite value: SGLang's JSON encoder (orjson, ``ORJSONResponse``;
    pydantic's ``model_dump_json`` likewise) writes NaN and +-inf as ``null``, so a
    ``null`` where a complete answer has a number is NaN here (a finding, never a
    truncation). vLLM's ``-9999.0`` is ``-inf`` (``clamp_prompt_logprobs``).

    Raises:
        LogprobsError: not a number, or an impossible one (above :data:`LOGPROB_MAX`:
            a log-probability is at most 0), naming the server and the position.
    """
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise LogprobsError(
            f"{server}: {where} is {str(v)[:40]!r}, not a number (a malformed answer)"
        )
    x = float(v)
    if math.isnan(x) or x == math.inf:
        return x
    if x > LOGPROB_MAX:
        raise LogprobsError(
            f"{server}: {where} is {x:g}, an impossible log-probability (above 0): a malformed "
            "answer"
        )
    return -math.inf if x <= VLLM_NEG_INF else x


def _check_mass(top: dict[str, float], where: str, server: str) -> None:
    """Raises :class:`LogprobsError` when a top-k list's probabilities sum above
    :data:`TOP_MASS_MAX` (impossible: a malformed answer)."""
    mass = math.fsum(math.exp(v) for v in top.values() if math.isfinite(v))
    if mass > TOP_MASS_MAX:
        raise LogprobsError(
            f"{server}: the top-{len(top)} at {where} sums to probability {mass:.3g} (above "
            "1): a malformed answer"
        )


#: the most bytes read of one logprobs answer (a prompt of 4,096 tokens with top-20
#: lists is about 2 MB as JSON)
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def bounded_request(
    client: httpx.Client, method: str, url: str, *, json: Any = None
) -> httpx.Response:
    """One request with a total deadline (the client's read timeout, from sending to the
    last byte, the response headers included: a server that sends its headers or body
    slowly or forever cannot hang the caller) and at most :data:`MAX_ANSWER_BYTES` read.
    The request runs on a worker thread; past the deadline it is abandoned: a body still
    arriving is dropped at its next chunk, but a server that keeps trickling its headers
    keeps that thread and its connection until it stops or the client is closed (every
    caller closes its client when it is done; detection stops at the first timeout).

    Raises :class:`httpx.TimeoutException` past the deadline and
    :class:`httpx.DecodingError` past the size cap (both :class:`httpx.HTTPError`).
    """
    deadline_s = client.timeout.read or 120.0
    start = time.monotonic()
    box: dict[str, Any] = {}
    late = threading.Event()

    def work() -> None:
        try:
            with client.stream(method, url, json=json) as r:
                body = bytearray()
                for chunk in r.iter_bytes():
                    body += chunk
                    if late.is_set() or time.monotonic() - start > deadline_s:
                        raise httpx.ReadTimeout(f"no complete answer within {deadline_s:g} s")
                    if len(body) > MAX_ANSWER_BYTES:
                        raise httpx.DecodingError(f"answer over {MAX_ANSWER_BYTES} bytes")
            headers = {k: v for k, v in r.headers.items() if k.lower() != "content-encoding"}
            box["response"] = httpx.Response(
                r.status_code, headers=headers, content=bytes(body), request=r.request
            )
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="harness-logprobs-request", daemon=True)
    worker.start()
    worker.join(deadline_s + 0.5)
    if worker.is_alive():
        late.set()
        raise httpx.ReadTimeout(f"no complete answer within {deadline_s:g} s (headers included)")
    if "error" in box:
        raise box["error"]
    return box["response"]  # type: ignore[no-any-return]


class Adapter:
    """One server's logprobs API. ``score(seq)`` makes the request(s) and parses them.

    ``notes``: one line per thing the reader must know about how this server was scored
    (a conversation scored as ChatML because the server renders no chat template, a top-k
    capped at the server's limit, a non-finite value the server could not send)."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    #: scores what the server generates (greedy), not given tokens: compared along the
    #: common prefix, never refused as a tokenisation mismatch
    generation: ClassVar[bool] = False
    #: what a position's key is: the token id (``"id"``) or its text (``"text"``); two
    #: sides are compared position by position only when their keys are of one kind
    keyed: ClassVar[str] = "id"

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
        self.notes: list[str] = []
        self._ids: dict[str, list[int]] = {}  # sequence id -> its token ids on this server
        self._templated: bool | None = None  # the server renders its chat template
        self._render_extra: dict[str, Any] = {"add_generation_prompt": False}
        #: HTTP requests sent (refused ones included): a scoring's ``requests``
        self.sent = 0

    @property
    def server(self) -> str:
        """``<url>: <API label>``: how errors name this side."""
        return f"{self.base_url}: {self.label}"

    def note(self, line: str) -> None:
        """Add ``line`` to :attr:`notes` once."""
        if line not in self.notes:
            self.notes.append(line)

    def _chatml_note(self, why: str) -> None:
        self.note(
            f"{self.server}: conversations scored as ChatML ({why}); right for ChatML "
            "models (Qwen, SmolLM2), a format other models never saw"
        )

    def _text(self, seq: Sequence) -> str:
        """The sequence as text (ChatML for a conversation, with a note), cut at
        ``CHARS_PER_TOKEN_BOUND * max_tokens`` characters."""
        text = chatml(seq.messages) if seq.messages is not None else seq.text or ""
        return self._cut(seq, text, CHARS_PER_TOKEN_BOUND * self.max_tokens)

    @staticmethod
    def _cut(seq: Sequence, items: _Cut, n: int) -> _Cut:
        """The part of ``items`` (text, ids, or per-token lists) scored, at most ``n``:
        a conversation's head, a plain prompt's tail (a GSM8K few-shot prompt keeps its
        question and loses the shared preamble: sequences cut inside a shared prefix
        would be counterfeit copies of each other)."""
        return items[-n:] if seq.messages is None and len(items) > n else items[:n]

    def _template_ids(self, seq: Sequence) -> list[int] | None:
        """A conversation's token ids as the server's own chat template renders it:
        ``POST /tokenize`` with ``messages`` and ``add_generation_prompt: false`` (vLLM
        ``vllm==0.33.0`` ``vllm/entrypoints/serve/tokenize/protocol.py``
        ``TokenizeChatRequest``; SGLang from 0.5.23, ``sglang==0.5.23
        sglang/srt/entrypoints/openai/protocol.py`` ``TokenizeRequest``).

        SGLang 0.5.23 refuses ``add_generation_prompt`` for a model rendered by a chat
        encoding or a built-in template rather than Jinja (DeepSeek V3.2/V4, Kimi K3:
        ``serving_tokenize.py``, HTTP 400 "add_generation_prompt is supported only with a
        Jinja chat template"): asked again without it, the conversation is rendered as for
        a chat completion (the model's own format, a generation prompt at its end), with a
        note. ``None`` when the server takes no ``messages`` at all (SGLang 0.5.10's
        validation error naming ``prompt``, or HTTP 404/405), remembered for the next
        sequences.

        Raises:
            LogprobsError: any other refusal (the server's own message: a template error
                is not a reason to score another format), an answer without token ids, or
                a sequence that overflows the context.
        """
        if self._templated is False:
            return None
        body: dict[str, Any] = {"messages": list(seq.messages or ()), **self._render_extra}
        try:
            out = self._post("/tokenize", body)
        except LogprobsError as exc:
            msg = str(exc)
            if JINJA_ONLY in msg and "add_generation_prompt" in body:
                self._render_extra = {}
                self.note(
                    f"{self.server}: the model's chat encoding is not a Jinja template "
                    '("add_generation_prompt is supported only with a Jinja chat template"): '
                    "conversations rendered as for a chat completion, a generation prompt at "
                    "their end"
                )
                return self._template_ids(seq)
            if self._templated is None and _takes_no_messages(msg):
                self._templated = False
                return None
            raise
        self._templated = True
        return self._token_ids(seq, out)

    def _token_ids(self, seq: Sequence, out: dict[str, Any]) -> list[int]:
        ids = out.get("tokens")
        ok = isinstance(ids, list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        )
        if not ok or not ids:
            raise self._bad(f"/tokenize answered no token ids: {str(out)[:120]}")
        ids = self._cut(seq, list(ids), self.max_tokens)
        limit = out.get("max_model_len")
        if isinstance(limit, int) and 0 < limit < len(ids) + 1:
            raise self._bad(
                f"context overflow: sequence {seq.id!r} has {len(ids)} tokens, the server's "
                f"max_model_len is {limit}: score shorter sequences"
            )
        return ids

    def score(self, seq: Sequence) -> ScoredSequence:
        """The server's logprobs of ``seq``'s tokens (each adapter's own API)."""
        raise NotImplementedError

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON; the parsed object, else :class:`LogprobsError`."""
        url = self.base_url + path
        if self.model is not None:
            body = {"model": self.model, **body}
        self.sent += 1
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
        return LogprobsError(f"{self.server}: {what}")

    def _lp(self, v: Any, where: str) -> float:
        return _logprob(v, where, self.server)


def _string_content(messages: Any) -> list[dict[str, Any]]:
    """``messages`` with a ``null`` content (an assistant turn that only calls tools) sent
    as ``""``: llama.cpp's server parses chat messages strictly and answers HTTP 500
    "type must be string, but is null" otherwise (upstream ``tools/server/utils.hpp``
    ``oaicompat_chat_params_parse``). Any other ``null`` field (``tool_call_id`` or
    ``tool_calls`` on a system or user turn, as a scenario's reference conversation holds
    them) is left out, for the same reason."""
    return [
        {**{k: v for k, v in m.items() if v is not None}, "content": m.get("content") or ""}
        for m in messages
    ]


def _client_error(message: str) -> bool:
    """An HTTP 400/404/405/422 answer: the server does not take this request."""
    return re.search(r": HTTP (400|404|405|422):", message) is not None


#: SGLang 0.5.23's refusal of ``add_generation_prompt`` for a non-Jinja chat encoding
JINJA_ONLY = "add_generation_prompt is supported only with a Jinja chat template"


def _takes_no_messages(message: str) -> bool:
    """The server's ``/tokenize`` takes no ``messages``: no such endpoint (HTTP 404/405),
    or a request validation error that the ``prompt`` field is missing (SGLang 0.5.10:
    HTTP 400 from FastAPI's validation, ``'loc': ('body', 'prompt')``; 422 elsewhere)."""
    if re.search(r": HTTP (404|405):", message):
        return True
    return re.search(r": HTTP (400|422):", message) is not None and (
        re.search(r"'body', 'prompt'|\bprompt(\\n|\W){0,6}Field required", message) is not None
    )


#: the message of a JSON encoder refusing a NaN/inf (Python's ``json`` with
#: ``allow_nan=False``, as Starlette's ``JSONResponse`` renders; vLLM answers it as an error)
NONFINITE_JSON = "Out of range float values are not JSON compliant"
#: vLLM's refusal of a top-k above its ``--max-logprobs`` (``vllm==0.33.0``
#: ``vllm/sampling_params.py``: "Requested prompt logprobs of N, which is greater than max
#: allowed: M")
_MAX_LOGPROBS = re.compile(r"greater than max allowed: (\d+)")


class VLLMAdapter(Adapter):
    """vLLM: ``/tokenize`` then ``prompt_logprobs`` (see the module docstring).

    A top-k above the server's ``--max-logprobs`` (vLLM's answer: HTTP 400 "... greater
    than max allowed: M") is asked again at M, with a note. A NaN in the answer cannot be
    sent: vLLM's ``JSONResponse`` refuses it and answers an error carrying
    :data:`NONFINITE_JSON` (``vllm==0.33.0``: HTTP 400 ``BadRequestError`` from
    ``vllm/entrypoints/serve/exception_handling``). Such a sequence is bisected over its
    prefixes to the first position that cannot be sent: that position is NaN (one
    finding), and the pair is compared up to it on every side (the positions after it
    cannot be read: ``ScoredSequence.unreadable_from``), with one summary note."""

    name, label = "vllm", "vLLM prompt_logprobs"

    def __init__(self, client: httpx.Client, base_url: str, **kw: Any) -> None:
        super().__init__(client, base_url, **kw)
        self._unsendable: dict[str, int] = {}  # sequence id -> its first unsendable position

    def _tokenize(self, seq: Sequence) -> list[int]:
        if seq.messages is not None:
            body: dict[str, Any] = {"messages": list(seq.messages), "add_generation_prompt": False}
        else:
            body = {"prompt": seq.text}
        return self._token_ids(seq, self._post("/tokenize", body))

    def score(self, seq: Sequence) -> ScoredSequence:
        """``seq`` tokenised once (``/tokenize``), its logprobs from vLLM's prompt_logprobs."""
        before = self.sent
        ids = self._ids.get(seq.id) or self._tokenize(seq)
        self._ids[seq.id] = ids  # a sequence scored again (A/A) is not tokenised again
        try:
            scored = self._parse(ids, self._prompt_logprobs(ids))
        except LogprobsError as exc:
            if NONFINITE_JSON not in str(exc):
                raise
            scored = self._bisect(seq, ids, str(exc))
        scored.requests = self.sent - before
        return scored

    def _prompt_logprobs(self, ids: list[int]) -> list[Any]:
        body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": self.top_k}
        try:
            out = self._post("/v1/completions", body)
        except LogprobsError as exc:
            m = _MAX_LOGPROBS.search(str(exc))
            if m is None or not 0 < int(m.group(1)) < self.top_k:
                raise
            self.note(
                f"{self.server}: top-{self.top_k} is above the server's --max-logprobs "
                f"({m.group(1)}): scored with the top {m.group(1)} (start vLLM with "
                f"--max-logprobs {self.top_k} for more)"
            )
            self.top_k = int(m.group(1))
            out = self._post("/v1/completions", {**body, "prompt_logprobs": self.top_k})
        try:
            plp = out["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise self._bad("no choices[0].prompt_logprobs in the answer") from None
        if not isinstance(plp, list) or len(plp) != len(ids):
            n = len(plp) if isinstance(plp, list) else 0
            raise self._bad(f"prompt_logprobs has {n} entries for {len(ids)} tokens (truncated)")
        return plp

    def _bisect(self, seq: Sequence, ids: list[int], first: str) -> ScoredSequence:
        """The longest prefix the server can send, then the first position it cannot, as
        NaN; ``unreadable_from`` marks the cut (class docstring)."""
        lo, hi, plp = 1, len(ids), [None]  # ids[:lo] can be sent (trivially), ids[:hi] not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                plp, lo = self._prompt_logprobs(ids[:mid]), mid
            except LogprobsError as exc:
                if NONFINITE_JSON not in str(exc):
                    raise
                hi = mid
        scored = self._parse(ids[:lo], plp)
        scored.keys.append(str(ids[lo]))
        scored.texts.append(f"<{ids[lo]}>")
        scored.logprobs.append(math.nan)
        scored.top.append({str(ids[lo]): math.nan})
        scored.unreadable_from = lo + 1
        self._unsendable.setdefault(seq.id, lo)
        first_id, at = next(iter(self._unsendable.items()))
        self.notes[:] = [n for n in self.notes if "could not send a non-finite value" not in n]
        self.note(
            f'{self.server}: could not send a non-finite value ("{NONFINITE_JSON}") in '
            f"{len(self._unsendable)} sequences (first {first_id!r} at position {at}): each "
            "compared up to its first such position, which counts as NaN"
        )
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
                if not isinstance(v, dict):
                    raise self._bad(f"prompt_logprobs[{i}][{k!r}] is {str(v)[:40]}, not an object")
                top[str(k)] = self._lp(v.get("logprob"), f"prompt_logprobs[{i}][{k!r}]")
                seq.names.setdefault(str(k), str(v.get("decoded_token") or k))
            _check_mass(top, f"prompt_logprobs[{i}]", self.server)
            seq.top.append(top)
            seq.logprobs.append(top[keys[i]])
        seq.texts = [seq.names.get(k, f"<{k}>") for k in keys]
        return seq


class SGLangAdapter(Adapter):
    """SGLang: ``/generate`` with ``return_logprob`` (see the module docstring).

    A conversation is rendered by the server's chat template (``/tokenize`` with
    ``messages``, SGLang 0.5.23 on) and sent as ``input_ids``; where ``/tokenize`` takes no
    ``messages`` (SGLang 0.5.10) it is sent as ChatML ``text``, with a note. A plain prompt
    is tokenised by ``/tokenize`` (``prompt``), cut, and sent as ``input_ids`` too, so both
    sides of a mixed pair condition on the same tokens. A ``null``
    logprob past position 0 of a complete list is NaN (orjson writes NaN and +-inf as
    ``null``), never a truncation."""

    name, label = "sglang", "SGLang /generate return_logprob"

    def score(self, seq: Sequence) -> ScoredSequence:
        """``seq`` tokenised once, its logprobs from SGLang's input-token logprobs."""
        before = self.sent
        ids = self._ids.get(seq.id)
        if ids is None:
            ids = self._template_ids(seq) if seq.messages is not None else self._prompt_ids(seq)
            if ids is None and seq.messages is not None:
                self._chatml_note(
                    "its /tokenize takes no messages, as in SGLang before 0.5.23: upgrade it "
                    "to score the model's own template"
                )
            if ids is not None:
                self._ids[seq.id] = ids
        body: dict[str, Any] = {
            "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": self.top_k,
            "return_text_in_logprobs": True,
        }
        body = {"input_ids": ids, **body} if ids is not None else {"text": self._text(seq), **body}
        out = self._post("/generate", body)
        meta: dict[str, Any] = out["meta_info"] if isinstance(out.get("meta_info"), dict) else {}
        lps, tops = meta.get("input_token_logprobs"), meta.get("input_top_logprobs")
        if not isinstance(lps, list) or not isinstance(tops, list) or not lps:
            raise self._bad("no meta_info.input_token_logprobs / input_top_logprobs")
        if len(tops) != len(lps):
            raise self._bad(f"{len(tops)} top-logprob entries for {len(lps)} tokens (truncated)")
        sent = len(ids) if ids is not None else meta.get("prompt_tokens")
        if isinstance(sent, int) and len(lps) < sent:
            raise self._bad(f"{len(lps)} input_token_logprobs for {sent} prompt tokens (truncated)")
        scored = self._parse(
            self._cut(seq, lps, self.max_tokens), self._cut(seq, tops, self.max_tokens)
        )
        scored.requests = self.sent - before
        return scored

    def _prompt_ids(self, seq: Sequence) -> list[int] | None:
        """A plain prompt's token ids from ``/tokenize`` (``{"prompt"}``), cut at its tail;
        None when the server has no ``/tokenize`` (the text is sent instead)."""
        try:
            out = self._post("/tokenize", {"prompt": seq.text or ""})
        except LogprobsError as exc:
            if re.search(r": HTTP (404|405):", str(exc)):
                return None
            raise
        return self._token_ids(seq, out)

    def _triple(self, e: Any, where: str) -> tuple[float, str, str]:
        if not isinstance(e, (list, tuple)) or len(e) < 2 or not isinstance(e[1], int):
            raise self._bad(f"{where} is {str(e)[:60]}, not [logprob, token_id, text]")
        text = e[2] if len(e) > 2 and isinstance(e[2], str) else f"<{e[1]}>"
        return self._lp(e[0], where), str(e[1]), text

    def _parse(self, lps: list[Any], tops: list[Any]) -> ScoredSequence:
        seq = ScoredSequence([], [], [], [])
        for i, entry in enumerate(lps):
            lp, key, text = self._triple(entry, f"input_token_logprobs[{i}]")
            row = tops[i] if i > 0 else []
            if row is None:
                row = []
            if not isinstance(row, list):
                raise self._bad(f"input_top_logprobs[{i}] is {str(row)[:40]}, not a list")
            top: dict[str, float] = {}
            for j, t in enumerate(row):
                tlp, tkey, ttext = self._triple(t, f"input_top_logprobs[{i}][{j}]")
                top[tkey] = tlp
                seq.names.setdefault(tkey, ttext)
            if i > 0:
                top[key] = lp
                _check_mass(top, f"input_top_logprobs[{i}]", self.server)
            seq.keys.append(key)
            seq.texts.append(text)
            seq.names.setdefault(key, text)
            seq.logprobs.append(lp if i > 0 else None)
            seq.top.append(top)
        return seq


class EchoAdapter(Adapter):
    """OpenAI completions ``echo`` + ``logprobs`` (llama-cpp-python; see the docstring).

    A conversation is rendered by the server's template where the server offers one:
    llama.cpp's ``POST /apply-template`` (``{"messages"}`` -> ``{"prompt"}``, upstream
    ``tools/server/server.cpp``); else it is scored as ChatML, with a note. Keys are token
    texts: two token ids that decode to one text share a key in the server's own
    ``top_logprobs`` object (llama-cpp-python ``llama_cpp/llama.py`` builds it as a dict
    by text), so a top-k row with fewer than k entries besides the prompt token lost
    some: its KL is not computed (the position keeps only the prompt token's logprob),
    with a note."""

    name, label = "llama-cpp", "completions echo+logprobs"
    keyed = "text"

    def __init__(self, client: httpx.Client, base_url: str, **kw: Any) -> None:
        super().__init__(client, base_url, **kw)
        self._merged_rows = 0  # rows that lost entries, over every scoring (one note)

    def _prompt(self, seq: Sequence) -> str:
        if seq.messages is None or self._templated is False:
            if seq.messages is not None:
                self._chatml_note("the server offers no /apply-template")
            return self._text(seq)
        try:
            body = {"messages": _string_content(seq.messages), "add_generation_prompt": False}
            out = self._post("/apply-template", body)
        except LogprobsError as exc:
            if self._templated is None and _client_error(str(exc)):
                self._templated = False
                self._chatml_note("the server offers no /apply-template")
                return self._text(seq)
            raise
        prompt = out.get("prompt")
        if not isinstance(prompt, str):
            raise self._bad(f"/apply-template answered no prompt: {str(out)[:120]}")
        self._templated = True
        return self._cut(seq, prompt, CHARS_PER_TOKEN_BOUND * self.max_tokens)

    def score(self, seq: Sequence) -> ScoredSequence:
        """``seq``'s logprobs from ``/v1/completions`` with ``echo`` and one token generated."""
        before = self.sent
        body = {"prompt": self._prompt(seq), "max_tokens": 1, "temperature": 0, "echo": True}
        out = self._post("/v1/completions", {**body, "logprobs": self.top_k})
        try:
            lp = out["choices"][0]["logprobs"]
            tokens, token_lps, tops = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise self._bad("no choices[0].logprobs.tokens/token_logprobs/top_logprobs") from None
        if not all(isinstance(x, list) for x in (tokens, token_lps, tops)):
            raise self._bad("choices[0].logprobs.tokens/token_logprobs/top_logprobs are not lists")
        usage: dict[str, Any] = out["usage"] if isinstance(out.get("usage"), dict) else {}
        generated = usage.get("completion_tokens", 0)
        n = len(tokens) - (generated if isinstance(generated, int) else 0)
        if not (len(token_lps) == len(tops) == len(tokens)) or n < 1:
            raise self._bad(f"{len(tokens)} tokens, {len(token_lps)} logprobs (truncated)")
        cut = [self._cut(seq, x[:n], self.max_tokens) for x in (tokens, token_lps, tops)]
        scored = self._parse(*cut)
        scored.requests = self.sent - before
        return scored

    def _parse(self, tokens: list[Any], lps: list[Any], tops: list[Any]) -> ScoredSequence:
        keys = [str(t) for t in tokens]
        seq = ScoredSequence(keys, list(keys), [None], [{}], names={k: k for k in keys})
        merged = 0
        for i in range(1, len(keys)):
            lp = self._lp(lps[i], f"token_logprobs[{i}]")
            raw = tops[i] if tops[i] is not None else {}
            if not isinstance(raw, dict):
                raise self._bad(f"top_logprobs[{i}] is {str(raw)[:40]}, not an object")
            top = {str(k): self._lp(v, f"top_logprobs[{i}][{k!r}]") for k, v in raw.items()}
            _check_mass(top, f"top_logprobs[{i}]", self.server)
            if _merged(raw, keys[i], lp, self.top_k):
                merged += 1  # ids that decode alike shared a key: the row lost mass
                top = {}
            top[keys[i]] = lp
            seq.names.update({k: k for k in top})
            seq.logprobs.append(lp)
            seq.top.append(top)
        if merged:
            self._merged_rows += merged
            self.notes[:] = [n for n in self.notes if "top-k rows had fewer than" not in n]
            self.note(
                f"{self.server}: {self._merged_rows} top-k rows had fewer than {self.top_k} "
                "texts: token ids that decode alike share one key in this API, so those "
                "positions are compared by the prompt token's logprob only"
            )
        return seq


def _merged(row: dict[str, Any], token: str, lp: float, k: int) -> bool:
    """A text-keyed top-k row that lost entries to ids decoding alike. llama-cpp-python
    writes the top k by text, then the prompt token's text: a full row has k entries when
    the prompt token is among the top k, else k + 1, so fewer than k entries lost some.
    A row of exactly k entries whose prompt token ranks last is ambiguous (the prompt
    token at rank k, or a merge among the top k with the prompt token added below them):
    it is kept whole, so this check can miss a merge, never invent one."""
    return len(row) < k


class GreedyAdapter(Adapter):
    """Generation-aligned, for servers that only return logprobs of generated tokens:
    ``POST /v1/chat/completions`` at temperature 0 with ``logprobs: true`` and
    ``top_logprobs: k`` -> ``choices[0].logprobs.content``: ``[{"token", "logprob",
    "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]`` (the OpenAI chat
    completions reference; upstream llama-server's OpenAI endpoint answers the same).
    The conversation up to its last assistant message is the prompt, rendered by the
    server's own chat template; the server's greedy reply (at most
    :data:`GENERATED_TOKENS` tokens) is what is compared, along the common greedy prefix
    of the two servers (:func:`~harness.numerics.divergence.align_generated`). Position 0
    of the result is the prompt (no logprob); keys are token texts."""

    name, label = "greedy", "chat logprobs (generation-aligned)"
    generation = True
    keyed = "text"

    def score(self, seq: Sequence) -> ScoredSequence:
        """The logprobs of the server's greedy reply (chat completions, temperature 0) to ``seq`` up
        to its last assistant message."""
        msgs = _string_content(seq.messages or [{"role": "user", "content": seq.text or ""}])
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
            lp = self._lp(e.get("logprob"), f"content[{i}].logprob")
            row = e.get("top_logprobs") or []
            if not isinstance(row, list):
                raise self._bad(f"content[{i}].top_logprobs is {str(row)[:40]}, not a list")
            top = {
                str(t.get("token")): self._lp(t.get("logprob"), f"content[{i}].top_logprobs")
                for t in row if isinstance(t, dict)
            }  # fmt: skip
            _check_mass(top, f"content[{i}].top_logprobs", self.server)
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


def answers(adapter: Adapter) -> bool:
    """The server answers ``adapter``'s request (a 10-word probe) with at least two scored
    positions."""
    try:
        return len(adapter.score(_PROBE)) >= 2
    except LogprobsError:
        return False


def comparable(a: type[Adapter] | Adapter, b: type[Adapter] | Adapter) -> bool:
    """Two adapters' scores can be compared position by position: both teacher-forced or
    both generation-aligned, and keyed alike (token ids, or token texts)."""
    return (a.generation, a.keyed) == (b.generation, b.keyed)


def detect(
    client: httpx.Client, base_url: str, *, model: str | None, top_k: int,
    max_tokens: int = MAX_TOKENS,
) -> Adapter:  # fmt: skip
    """The first adapter of :data:`ADAPTERS` whose probe (a 10-word prompt) parses.
    Detected per server: a pair of different servers (a vLLM baseline, an SGLang
    candidate) each get their own (see :func:`comparable`).

    Raises:
        LogprobsError: no adapter's request parsed; one line listing what was tried and
            how to enable it.
    """
    tried = []
    for cls in ADAPTERS.values():
        adapter = cls(client, base_url, model=model, top_k=top_k, max_tokens=max_tokens)
        try:
            scored = adapter.score(_PROBE)
        except LogprobsError as exc:
            m = re.search(r"HTTP \d{3}|\w+(?:Error|Timeout)\b", str(exc))
            tried.append(f"{cls.label}: {m.group(0) if m else 'no such answer'}")
            if m is not None and m.group(0).endswith("Timeout"):
                break  # a server too slow to answer: asking it other ways only waits more
            continue
        if len(scored) >= 2:
            return adapter
        tried.append(f"{cls.label}: too short")
    raise LogprobsError(
        f"{base_url}: no teacher-forced logprobs API answered (tried {'; '.join(tried)}): {ENABLE_HINT}"
    )
