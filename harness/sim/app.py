"""The reference server as a Starlette ASGI app (served by uvicorn, see ``server.py``).

Endpoints (shapes: the OpenAI API reference; SGLang's native ones from
``sglang/srt/entrypoints/http_server.py``):

- ``POST /v1/chat/completions``: non-streaming and SSE streaming (:mod:`harness.sim.wire`).
  Honours ``tools``, ``tool_choice``, ``parallel_tool_calls``, ``max_tokens`` /
  ``max_completion_tokens`` (finish_reason ``length`` past it), ``stop``, ``n`` (identical
  choices, at most 16), ``temperature``, ``seed``, ``stream_options.include_usage``, and
  the extra body field ``return_routed_experts`` (non-streaming: ``sglext.routed_experts``;
  only when the server runs with capture, as SGLang's ``--enable-return-routed-experts``; the
  ``vllm-0.33`` flavour puts a base64 ``.npy`` on every choice whenever capture is on:
  :func:`harness.sim.moe.routed_experts_fields`).
- ``POST /v1/completions``: GSM8K few-shot prompts (:mod:`harness.sim.gsm8k_model`);
  ``stop`` strings and ``max_tokens`` (no default limit); streaming supported.
- ``POST /generate``: SGLang native ``{"text", "sampling_params": {"max_new_tokens",
  "stop"}, "return_routed_experts"}`` -> ``{"text", "meta_info": {"id",
  "prompt_tokens", "completion_tokens", "finish_reason", "routed_experts"?...}}``.
- Teacher-forced logprobs (:mod:`harness.sim.logprobs`): ``POST /tokenize`` (vLLM),
  ``/v1/completions`` with ``prompt_logprobs`` or ``echo`` + ``logprobs``, ``/generate``
  with ``return_logprob`` or ``input_ids`` (with the routed experts of those tokens when
  asked and capture is on), ``/v1/chat/completions`` with ``logprobs: true``
  (a greedy reply with ``logprobs.content``).
- ``GET /v1/models``, ``GET /health``, ``GET /server_info`` and ``/get_server_info``,
  ``GET /model_info`` (bodies from :mod:`harness.sim.moe`, in the flavour's shape; the
  ``vllm-0.33`` flavour has no ``/model_info``, and its ``/server_info`` is vLLM's dev-mode
  one, ``?config_format=json`` honoured).
- ``GET /sim/stats``: the reference server's own, no inference server has it: what it
  has seen since it started (:class:`harness.sim.stats.SimStats`: POST requests per
  path, the most answered at once, infrastructure faults served, requests per GSM8K
  question, the last request bodies).
- ``GET /sim/gsm8k.jsonl``: the reference server's own: the GSM8K file it answers from
  (``--gsm8k``, else the harness cache), byte for byte, so a client can download the
  split from it (``load_dataset(url=...)``); 404 when there is none.

Infrastructure faults (``profile.infra``, and per GSM8K question ``gsm8k_faults``;
their answers: :mod:`harness.sim.infra`) apply to the POST endpoints only, so a boot
check still sees the server come up. Token counts: :mod:`harness.sim.tokens`.
Malformed requests get HTTP 400 with an OpenAI-shaped ``{"error": {...}}`` body.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from typing_extensions import Unpack

from harness.errors import HarnessError
from harness.gsm8k.data import cache_path
from harness.kinds import FailureKind
from harness.sim import gsm8k_model, moe
from harness.sim import logprobs as sim_logprobs
from harness.sim.faults import (
    active_fault,
    call_ids,
    corrupt_arguments,
    misread_request,
    render,
    should_loop,
    spurious_call,
)
from harness.sim.flavours import Flavour, get_flavour
from harness.sim.history import call_extra, history_refusal
from harness.sim.infra import ConnectionDropped, error_response, infra_response
from harness.sim.model import (
    UNKNOWN_ANSWER,
    Conversation,
    Decision,
    PlannedCall,
    RequestOptions,
    ScenarioIndex,
    beyond_opening,
    call_id,
    decide,
    nonce_for,
    plan_for,
)
from harness.sim.probe import is_probe, probe_reply
from harness.sim.profiles import InfraFault, SimProfile, get_profile, infra_fault
from harness.sim.stats import STATS_PATH, SimStats
from harness.sim.templates import check_template
from harness.sim.tokens import count_tokens, prompt_tokens, truncate_tokens
from harness.sim.wire import Reply, WireCall, completion_body, sse, stream_events

__all__ = [
    "GSM8K_DATA_PATH",
    "MODEL_NAME",
    "UNKNOWN_SCENARIO",
    "ConnectionDropped",
    "SimState",
    "UnknownScenario",
    "create_app",
]

#: The model id the server reports and answers as (any requested model is accepted).
MODEL_NAME = "harness-sim"
GENERIC_TEXT = " I am the harness reference server and have no answer for this prompt.\n\n"
RELOAD_CHECK_S = 1.0
#: where the server hands out the GSM8K file it answers from
GSM8K_DATA_PATH = "/sim/gsm8k.jsonl"


class BadRequest(HarnessError):
    """A request the server rejects with HTTP 400."""


#: the message of :class:`UnknownScenario` (the harness's infrastructure error quotes it)
UNKNOWN_SCENARIO = "the reference server does not know this scenario"


class UnknownScenario(HarnessError):
    """A tool-calling conversation no scenario file opens with, while the server refuses
    those (``refuse_unknown``): answered HTTP 404 ``unknown_scenario``, which the harness
    records as an infrastructure error, never as the model's reply."""


@dataclass
class SimState:
    """Everything the app needs, built once by :func:`create_app`."""

    profile: SimProfile
    index: ScenarioIndex
    gsm8k_path: str | None = None
    gsm8k_faults: dict[int, InfraFault] = field(default_factory=dict)
    latency_ms: float = 0
    seed: int = 0
    capture: bool = False
    flavour: Flavour = field(default_factory=lambda: get_flavour(None))
    moe_model: str = "deepseek-v3"
    chat_template: str = "chatml"
    rng: random.Random = field(default_factory=random.Random)
    refuse_unknown: bool = False
    flaky_seen: set[str] = field(default_factory=set)
    stats: SimStats = field(default_factory=SimStats)
    scenarios_dir: str | Path | None = None
    fingerprint: tuple[tuple[str, int, int], ...] = ()
    checked_at: float = 0.0

    def scenarios(self) -> ScenarioIndex:
        """The scenario index, re-read when a file under ``scenarios_dir`` changed
        (checked at most every :data:`RELOAD_CHECK_S` seconds)."""
        now = time.monotonic()
        if self.scenarios_dir is not None and now - self.checked_at >= RELOAD_CHECK_S:
            self.checked_at = now
            fp = ScenarioIndex.fingerprint(self.scenarios_dir)
            if fp != self.fingerprint:
                self.index, self.fingerprint = ScenarioIndex.from_dir(self.scenarios_dir), fp
        return self.index


# ------------------------------------------------------------------ helpers


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest("request body is not valid JSON") from None
    except ClientDisconnect:  # the client went away mid-request: nobody to answer, no traceback
        raise BadRequest("client disconnected before sending its request") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _stops(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [s for s in value or [] if isinstance(s, str) and s]


def _cut(text: str, stops: list[str], max_tokens: int | None) -> tuple[str, str, str | None]:
    """``text`` cut at the first stop string, then at ``max_tokens``: (text, finish, matched)."""
    hits = [(text.find(s), s) for s in stops if s in text]
    matched = None
    if hits:
        pos, matched = min(hits)
        text = text[:pos]
    if max_tokens is not None and count_tokens(text) > max_tokens:
        return truncate_tokens(text, max_tokens), "length", None
    return text, "stop", matched


def _completion_tokens(reply: Reply) -> int:
    calls = sum(count_tokens(c.name) + count_tokens(c.arguments) for c in reply.tool_calls)
    return count_tokens(reply.content) + count_tokens(reply.reasoning) + calls


def _limit(reply: Reply, max_tokens: int | None) -> Reply:
    """Cut the reply at ``max_tokens`` completion tokens (finish_reason ``length``)."""
    if max_tokens is None or _completion_tokens(reply) <= max_tokens:
        return reply
    budget = max(0, max_tokens - count_tokens(reply.reasoning))
    content = truncate_tokens(reply.content, budget) if reply.content else reply.content
    budget -= count_tokens(content)
    calls: list[WireCall] = []
    for c in reply.tool_calls:
        if budget <= 0:
            break
        args = truncate_tokens(c.arguments, budget - count_tokens(c.name))
        calls.append(WireCall(c.id, c.name, args))
        budget -= count_tokens(c.name) + count_tokens(args)
    return replace(reply, content=content, tool_calls=calls, finish_reason="length")


def _int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"'{name}' must be a non-negative integer")
    return value


# ---------------------------------------------------------------- the model


def _request_options(body: dict[str, Any]) -> RequestOptions:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be a list")
    names = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}"
            )
        names.append(fn["name"])
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, (int, float)):
        raise BadRequest("'temperature' must be a number")
    return RequestOptions(
        tools=names,
        tool_choice=body.get("tool_choice"),
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        temperature=float(temperature) if temperature is not None else None,
        seed=_int_or_none(body.get("seed"), "seed"),
    )


def check_history(state: SimState, messages: list[Any]) -> None:
    """The profile's demand on earlier turns' reasoning (``SimProfile.reasoning_history``),
    worded as DeepSeek's API words it.

    Raises:
        BadRequest: a tool-call turn without its ``reasoning_content`` (``required``), or
            an assistant turn with one (``refused``).
    """
    demand = state.profile.reasoning_history
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        has = bool(m.get("reasoning_content"))
        if demand == "required" and m.get("tool_calls") and not has:
            raise BadRequest(
                f"Missing `reasoning_content` field in the assistant message at message index "
                f"{i}: the reasoning_content in the thinking mode must be passed back to the API"
            )
        if demand == "refused" and has:
            raise BadRequest(
                f"The `reasoning_content` field in the assistant message at message index {i} "
                "is not accepted in the input messages"
            )


def _required_keys(body: dict[str, Any], name: str) -> list[str]:
    for tool in body.get("tools") or []:
        fn = tool.get("function") or {}
        if fn.get("name") == name:
            required = (fn.get("parameters") or {}).get("required") or []
            return [k for k in required if isinstance(k, str)]
    return []


def _unscripted(state: SimState, body: dict[str, Any]) -> Decision:
    """A conversation no scenario matches: a GSM8K answer if it is one, else a polite reply
    (or, with ``refuse_unknown`` and ``tools`` in the request, :class:`UnknownScenario`)."""
    prompt = gsm8k_model.prompt_from_messages(body["messages"])
    text = gsm8k_model.answer(state.profile, prompt, seed=state.seed, gsm8k_path=state.gsm8k_path)
    if text is not None:
        return Decision(content=text.strip(), reasoning="A math word problem; I work it out.")
    if state.refuse_unknown and body.get("tools"):
        where = state.scenarios_dir if state.scenarios_dir is not None else "(none)"
        raise UnknownScenario(
            f"{UNKNOWN_SCENARIO}: no scenario file under {where} opens with this "
            f"conversation ({len(state.index)} scenarios loaded); start harness sim with "
            "--scenarios DIR holding the scenario files you run"
        )
    return Decision(content=UNKNOWN_ANSWER, reasoning="No tool is needed; I reply directly.")


def chat_reply(state: SimState, body: dict[str, Any]) -> Reply:
    """The assistant reply to a chat request, faults applied.

    Raises:
        BadRequest: malformed ``messages``, ``tools`` or sampling fields.
    """
    try:
        conv = Conversation.parse(body.get("messages"))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    req = _request_options(body)
    sc = state.scenarios().match(conv)
    conv = beyond_opening(sc, conv) if sc is not None else conv
    profile = state.profile.for_scenario(sc.id if sc else None)
    # turn: assistant messages beyond the scenario's opening (few-shot ones do not count)
    turn = conv.turn - (sum(m.role == "assistant" for m in sc.messages) if sc else 0)
    if profile.ignores_sampling:  # temperature and seed ignored: every request greedy
        req = replace(req, temperature=0.0, seed=None)
    elif profile.ignores_seed:
        req = replace(req, seed=None)
    nonce = nonce_for(conv, req, server_seed=state.seed, rng=state.rng)
    req = misread_request(profile, req, nonce=nonce, turn=turn)
    if sc is None and is_probe(conv):
        decision = probe_reply(req, nonce)
    elif sc is None:
        decision = _unscripted(state, body)
    else:
        plan = plan_for(sc, conv, req, nonce, profile)
        decision = decide(sc, conv, req, plan, loop=should_loop(profile, nonce, turn))
        if plan is not None:
            first = conv.position == len(plan.steps)
            decision = spurious_call(
                profile, decision, tools=req.tools, first_answer=first, nonce=nonce, turn=turn
            )
    decision.calls = [
        PlannedCall(
            c.name,
            corrupt_arguments(
                profile, c.arguments, required=_required_keys(body, c.name), nonce=nonce, turn=turn
            ),
        )
        for c in decision.calls
    ]
    id_turn = 0 if active_fault(profile, FailureKind.REPEATED_IDS, nonce, turn) else turn
    ids = [call_id(nonce, id_turn, i) for i in range(len(decision.calls))]
    wire_ids = call_ids(profile, ids, nonce=nonce, turn=turn)
    stream = bool(body.get("stream"))
    reply = render(profile, decision, nonce=nonce, turn=turn, ids=wire_ids, stream=stream)
    if isinstance(body.get("tool_choice"), dict) and reply.finish_reason == "tool_calls":
        reply.finish_reason = profile.named_choice_finish_reason

    def on(kind: FailureKind) -> bool:
        return active_fault(profile, kind, nonce, turn, stream) is not None

    stops = _stops(body.get("stop"))
    if (
        reply.content
        and stops
        and not reply.tool_calls
        and not on(FailureKind.STOP_STRING_IN_OUTPUT)
    ):
        reply.content = _cut(reply.content, stops, None)[0]
    limit = _int_or_none(body.get("max_completion_tokens", body.get("max_tokens")), "max_tokens")
    reply.choices = 1 if on(FailureKind.N_NOT_HONOURED) else _choices(body)
    if on(FailureKind.MAX_TOKENS_EXCEEDED):  # the budget spent without the reasoning
        return replace(_limit(replace(reply, reasoning=None), limit), reasoning=reply.reasoning)
    return _limit(reply, limit)


#: the most choices (``n``) one request may ask for
MAX_CHOICES = 16


def _choices(body: dict[str, Any]) -> int:
    """The request's ``n`` (1 when not sent): identical choices, a legitimate repeat.

    Raises:
        BadRequest: ``n`` not an integer in 1..16.
    """
    n = body.get("n")
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise BadRequest(f"'n' must be an integer from 1 to {MAX_CHOICES}")
    return n


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


# ---------------------------------------------------------------- endpoints


def _state(request: Request) -> SimState:
    state: SimState = request.app.state.sim
    return state


async def _prelude(request: Request, obj: str) -> tuple[SimState, dict[str, Any], Response | None]:
    """The state, the request body, and the response of an infrastructure fault if one
    answers this request (the question's ``gsm8k_faults`` entry, else the profile's)."""
    state = _state(request)
    body = await _json_body(request)
    question = gsm8k_model.question_index(gsm8k_model.request_prompt(body), state.gsm8k_path)
    state.stats.record(request.url.path, body, question)
    if state.latency_ms:
        await asyncio.sleep(state.latency_ms / 1000)
    infra = state.profile.infra
    if question is not None:
        infra = state.gsm8k_faults.get(question, infra)
    fault = await infra_response(
        infra,
        body,
        obj=obj,
        model=MODEL_NAME,
        flaky_seen=state.flaky_seen,
        delay_s=state.profile.delay_s,
    )
    if fault is not None:
        state.stats.faults_served += 1
    return state, body, fault


def _experts(
    state: SimState, body: dict[str, Any], prompt: int, completion: int, out: dict[str, Any],
    tokens: list[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Routed experts as the flavour returns them (:func:`harness.sim.moe.routed_experts_fields`):
    put on every choice of ``out`` (vLLM), or returned for ``sglext``/``meta_info`` (SGLang,
    the reference; ``{}`` when not asked for or capture is off). ``tokens``: the request's
    token ids where known (routing is a function of them)."""
    found = moe.routed_experts_fields(
        state.profile, body, capture=state.capture, flavour=state.flavour,
        prompt_tokens=prompt, completion_tokens=completion, tokens=tokens,
        native="choices" not in out,
    )  # fmt: skip
    if found is None:
        return {}
    if found[0] == "choice":
        for choice in out.get("choices") or []:
            choice.update(found[1])
        return {}
    return found[1]


async def _events(events: Iterator[str]) -> AsyncIterator[str]:
    for event in events:
        yield event
        await asyncio.sleep(0)


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    state, body, fault = await _prelude(request, "chat.completion")
    if fault is not None:
        return fault
    if body.get("logprobs") is True and not body.get("stream"):  # generation-aligned numerics
        return sim_logprobs.chat(
            state.profile, state.rng, body, MODEL_NAME,
            flavour=state.flavour, template=state.chat_template,
        )  # fmt: skip
    if state.profile.reasoning_history and isinstance(body.get("messages"), list):
        check_history(state, body["messages"])
    refused = history_refusal(state.profile, body.get("messages"))
    if refused is not None:
        return refused
    reply = chat_reply(state, body)
    if state.profile.call_signatures:
        reply.tool_calls = [
            replace(c, extra=call_extra(state.profile, c.id, c.name)) for c in reply.tool_calls
        ]
    n = reply.choices
    prompt = prompt_tokens(body["messages"], body.get("tools"))
    usage = _usage(prompt, _completion_tokens(reply))
    meta = {"req_id": _new_id("chatcmpl"), "model": MODEL_NAME, "created": int(time.time())}
    if body.get("stream"):
        include = bool((body.get("stream_options") or {}).get("include_usage"))
        events = stream_events(reply, usage=usage if include else None, n=n, **meta)  # type: ignore[arg-type]
        return StreamingResponse(_events(events), media_type="text/event-stream")
    out = completion_body(reply, usage=usage, n=n, **meta)  # type: ignore[arg-type]
    experts = _experts(state, body, prompt, usage["completion_tokens"], out)
    if experts:
        out["sglext"] = experts
    return JSONResponse(out)


def _text_answer(state: SimState, prompt: str) -> str:
    text = gsm8k_model.answer(state.profile, prompt, seed=state.seed, gsm8k_path=state.gsm8k_path)
    return GENERIC_TEXT if text is None else text


async def completions(request: Request) -> Response:
    """``POST /v1/completions`` (one prompt, or a list of prompts: one choice each)."""
    state, body, fault = await _prelude(request, "text_completion")
    if fault is not None:
        return fault
    asks_prompt = body.get("prompt_logprobs") is not None and state.flavour.prompt_logprobs
    if asks_prompt or (body.get("echo") and body.get("logprobs")):
        return sim_logprobs.completions(
            state.profile, state.rng, body, MODEL_NAME, flavour=state.flavour
        )
    prompts = body.get("prompt")
    prompts = [prompts] if isinstance(prompts, str) else prompts
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts) or not prompts:
        raise BadRequest("'prompt' must be a string or a non-empty list of strings")
    limit = _int_or_none(body.get("max_tokens"), "max_tokens")
    choices, used, ptoks = [], 0, 0
    for i, prompt in enumerate(prompts):
        text, finish, _ = _cut(_text_answer(state, prompt), _stops(body.get("stop")), limit)
        choices.append({"index": i, "text": text, "finish_reason": finish, "logprobs": None})
        used, ptoks = used + count_tokens(text), ptoks + count_tokens(prompt)
    base = {"id": _new_id("cmpl"), "object": "text_completion", "created": int(time.time())}
    base["model"] = MODEL_NAME
    if body.get("stream"):
        return StreamingResponse(_completion_events(base, choices), media_type="text/event-stream")
    out = {**base, "choices": choices, "usage": _usage(ptoks, used)}
    experts = _experts(state, body, ptoks, used, out)
    if experts:
        out["sglext"] = experts
    return JSONResponse(out)


async def _completion_events(
    base: dict[str, Any], choices: list[dict[str, Any]]
) -> AsyncIterator[str]:
    for choice in choices:
        for piece in [choice["text"][i : i + 16] for i in range(0, len(choice["text"]), 16)]:
            delta = {"index": choice["index"], "text": piece, "finish_reason": None}
            yield sse({**base, "choices": [delta]})
        last = {"index": choice["index"], "text": "", "finish_reason": choice["finish_reason"]}
        yield sse({**base, "choices": [last]})
    yield sse("[DONE]")


async def generate(request: Request) -> Response:
    """``POST /generate`` (SGLang native, one prompt)."""
    state, body, fault = await _prelude(request, "generate")
    if fault is not None:
        return fault
    if not state.flavour.generate:
        return error_response(404, "Not Found")
    if body.get("return_logprob") or "input_ids" in body:
        return sim_logprobs.generate(
            state.profile,
            state.rng,
            body,
            flavour=state.flavour,
            experts=_forced_experts(state, body),
        )
    prompt, params = body.get("text"), body.get("sampling_params") or {}
    if not isinstance(prompt, str) or not isinstance(params, dict):
        raise BadRequest("'text' must be a string and 'sampling_params' an object")
    limit = _int_or_none(params.get("max_new_tokens", 128), "sampling_params.max_new_tokens")
    text, finish, matched = _cut(_text_answer(state, prompt), _stops(params.get("stop")), limit)
    ptoks, ctoks = count_tokens(prompt), count_tokens(text)
    reason: dict[str, Any] = (
        {"type": "length", "length": limit}
        if finish == "length"
        else {"type": "stop", "matched": matched}
    )
    meta = {"id": uuid.uuid4().hex, "finish_reason": reason, "prompt_tokens": ptoks}
    meta |= {"completion_tokens": ctoks, "cached_tokens": 0}
    meta |= _experts(state, body, ptoks, ctoks, {}, tokens=sim_logprobs.tokenize(prompt))
    return JSONResponse({"text": text, "meta_info": meta})


def _forced_experts(state: SimState, body: dict[str, Any]) -> dict[str, Any]:
    """Routed experts of a teacher-forced ``/generate`` (``input_ids`` or ``text``): one row
    per prompt token, plus the generated ones but the last (``max_new_tokens``, at most 1:
    the forced path generates no more)."""
    ids, text = body.get("input_ids"), body.get("text")
    if isinstance(ids, list) and all(type(i) is int for i in ids):
        tokens = list(ids)
    else:
        tokens = sim_logprobs.tokenize(text if isinstance(text, str) else "")
    params = body.get("sampling_params")
    new = params.get("max_new_tokens", 0) if isinstance(params, dict) else 0
    completion = 1 if isinstance(new, int) and new >= 1 else 0
    return _experts(state, body, len(tokens), completion, {}, tokens=tokens)


async def tokenize(request: Request) -> Response:
    """``POST /tokenize`` (vLLM; :mod:`harness.sim.logprobs`)."""
    state, body, fault = await _prelude(request, "tokenize")
    if fault is not None:
        return fault
    return sim_logprobs.tokenize_endpoint(body, flavour=state.flavour, template=state.chat_template)


async def apply_template(request: Request) -> Response:
    """``POST /apply-template`` (llama.cpp's server; the reference flavour only)."""
    state, body, fault = await _prelude(request, "apply-template")
    if fault is not None:
        return fault
    if state.flavour.server != "reference":
        return error_response(404, "Not Found")
    return sim_logprobs.apply_template_endpoint(body, template=state.chat_template)


async def models(request: Request) -> Response:
    """``GET /v1/models``."""
    card = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "harness"}
    card |= {"root": MODEL_NAME, "max_model_len": 32768}
    return JSONResponse({"object": "list", "data": [card]})


async def health(request: Request) -> Response:
    """``GET /health``: 200 with an empty body (as SGLang once ready)."""
    return Response(status_code=200)


async def server_info(request: Request) -> Response:
    """``GET /server_info`` and ``/get_server_info`` (the flavour's shape; vLLM's
    ``?config_format=json``)."""
    state = _state(request)
    fmt = request.query_params.get("config_format", "text")
    info = moe.server_info(
        state.profile, capture=state.capture, flavour=state.flavour,
        moe_model=state.moe_model, config_format=fmt,
    )  # fmt: skip
    return JSONResponse(info)


async def model_info(request: Request) -> Response:
    """``GET /model_info`` (404 where the flavour has none: vLLM)."""
    state = _state(request)
    info = moe.model_info(state.profile, flavour=state.flavour, moe_model=state.moe_model)
    return error_response(404, "Not Found") if info is None else JSONResponse(info)


async def sim_stats(request: Request) -> Response:
    """``GET /sim/stats`` (the reference server's own; see :mod:`harness.sim.stats`)."""
    return JSONResponse(_state(request).stats.model_dump(mode="json"))


async def gsm8k_data(request: Request) -> Response:
    """``GET /sim/gsm8k.jsonl``: the GSM8K file the server answers from, or 404."""
    path = _state(request).gsm8k_path
    file = Path(path) if path is not None else cache_path()
    if not file.is_file():
        return error_response(404, f"no GSM8K file at {file}: start the server with --gsm8k FILE")
    return Response(file.read_bytes(), media_type="application/jsonl")


class _CountPosts:
    """ASGI middleware: counts POST requests from arrival to the last byte sent
    (``SimStats.requests``, ``in_flight``, ``max_in_flight``)."""

    def __init__(self, app: Any, stats: SimStats) -> None:
        self.app, self.stats = app, stats

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        self.stats.started(scope["path"])
        try:
            await self.app(scope, receive, send)
        finally:
            self.stats.finished()


async def _bad_request(request: Request, exc: Exception) -> Response:
    return error_response(400, str(exc))


async def _unknown_scenario(request: Request, exc: Exception) -> Response:
    return error_response(404, str(exc), "unknown_scenario")


#: The endpoints (see the module docstring).
ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/generate", generate, methods=["POST"]),
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/apply-template", apply_template, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
    Route("/server_info", server_info, methods=["GET"]),
    Route("/get_server_info", server_info, methods=["GET"]),
    Route("/model_info", model_info, methods=["GET"]),
    Route(STATS_PATH, sim_stats, methods=["GET"]),
    Route(GSM8K_DATA_PATH, gsm8k_data, methods=["GET"]),
]


class SimOptions(TypedDict, total=False):
    """How a reference server runs, besides its profile (every key optional).

    ``scenarios_dir``: scenario files to play (indexed at start, re-read when a file
    changes; a missing directory = no scenarios; default ``scenarios``).
    ``gsm8k_path``: GSM8K jsonl for the completions endpoint (default: harness cache).
    ``gsm8k_faults``: GSM8K question index (0-based, in ``gsm8k_path``) -> the
    infrastructure fault that answers it instead of the profile's, every time
    (``{7: "http-500", 0: "slow"}``; names from :data:`~harness.sim.profiles.INFRA_FAULTS`).
    ``latency_ms``: added delay before every POST response, in milliseconds.
    ``seed``: server seed (noise draws, GSM8K correctness).
    ``capture``: routed-experts capture on (``--enable-return-routed-experts``).
    ``refuse_unknown``: a tool-calling conversation no scenario opens with is answered
    HTTP 404 "the reference server does not know this scenario" (:class:`UnknownScenario`)
    instead of a generic reply (default False; ``harness sim`` turns it on).
    ``flavour``: the released server whose wire behaviour to play (a name of
    :data:`~harness.sim.flavours.FLAVOURS`; default ``reference``).
    ``chat_template``: the chat template ``/tokenize`` and chat logprobs render
    conversations with (a name of :data:`~harness.sim.templates.TEMPLATES`; default
    ``chatml``).
    ``moe_model``: the simulated MoE model (a name of :data:`~harness.sim.moe.MOE_MODELS`:
    ``deepseek-v3``, default, or ``glm-4.5``, which fuses without logging it).
    """

    scenarios_dir: str | Path | None
    gsm8k_path: str | Path | None
    gsm8k_faults: Mapping[int, str] | None
    latency_ms: float
    seed: int
    capture: bool
    refuse_unknown: bool
    flavour: str | Flavour | None
    chat_template: str
    moe_model: str


def create_app(profile: str | SimProfile = "healthy", **options: Unpack[SimOptions]) -> Starlette:
    """The ASGI app of the reference server.

    ``profile``: a profile name (see :data:`harness.sim.profiles.PROFILES`) or a profile;
    ``options``: :class:`SimOptions`.

    Raises:
        KeyError: an unknown profile, flavour, chat template or MoE model name (the
            message lists the names).
        OptionValueError: (a ValueError) an unknown fault in ``gsm8k_faults``.
    """
    scenarios_dir = options.get("scenarios_dir", "scenarios")
    gsm8k_path = options.get("gsm8k_path")
    seed = options.get("seed", 0)
    prof = get_profile(profile)
    moe.model_config(options.get("moe_model") or "deepseek-v3")  # KeyError: an unknown model
    state = SimState(
        profile=prof,
        index=ScenarioIndex.from_dir(scenarios_dir),
        scenarios_dir=scenarios_dir,
        fingerprint=ScenarioIndex.fingerprint(scenarios_dir),
        checked_at=time.monotonic(),
        gsm8k_path=str(gsm8k_path) if gsm8k_path is not None else None,
        gsm8k_faults={
            int(i): infra_fault(f) for i, f in (options.get("gsm8k_faults") or {}).items()
        },
        latency_ms=options.get("latency_ms", 0),
        seed=seed,
        capture=options.get("capture", False),
        refuse_unknown=options.get("refuse_unknown", False),
        flavour=get_flavour(options.get("flavour")),
        chat_template=check_template(options.get("chat_template") or "chatml"),
        moe_model=options.get("moe_model") or "deepseek-v3",
        rng=random.Random(seed),
    )
    app = Starlette(
        routes=ROUTES,
        exception_handlers={BadRequest: _bad_request, UnknownScenario: _unknown_scenario},
        middleware=[Middleware(_CountPosts, stats=state.stats)],
    )
    app.state.sim = state
    return app
