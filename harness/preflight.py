"""The contract pre-flight: what a server honours of a request, checked before any scenario.

:func:`check_contract` sends :data:`REQUESTS` small chat requests (at most, each within the
target's request deadline, :data:`PARALLEL` at once, the whole within
:data:`TOTAL_DEADLINE_S` times that deadline) and returns a
:class:`~harness.summary.SideContract`, one :class:`~harness.summary.ContractCheck` each:

- ``temperature``: three requests at temperature 0.7 with different seeds asking for
  twelve words at random; one output for all three means the server ignores temperature
  and seed, and its repeats are copies, not trials (``SideContract.sampling_ignored``:
  the verdict then counts its repeats once per scenario, as greedy scenarios are,
  :mod:`harness.stats.family`). Three identical samples from a sampling server would
  need a 12-word text whose probability at 0.7 is near one: not seen in practice.
- ``seed``: the first of those sent again with the same seed; the same output is ``ok``,
  another is ``unsupported`` (a note: per-request seeds are optional in vLLM, SGLang and
  llama.cpp, and batch composition can change a seeded sample); ``unsupported`` too when
  temperature is ignored (nothing to reproduce).
- ``temperature 0``: two greedy requests give one output (else ``failed``).
- ``stream``: a streamed greedy request assembles to the non-streamed output (judged only
  when temperature 0 is repeatable).
- ``usage``: ``prompt_tokens + completion_tokens == total_tokens``, the streamed usage
  (``stream_options.include_usage``) present with the same ``prompt_tokens``.
- ``max_tokens``: ``max_tokens: 4`` gives at most 4 completion tokens (``usage``), else
  at most 4 words when no usage is sent.
- ``n``: ``n: 2`` gives two choices (identical choices are a legitimate repeat).
- ``stop``: the greedy output's third word as ``stop`` is absent from the output.
- ``tool_choice none`` / ``required`` / ``named`` and ``parallel_tool_calls false``:
  no call; at least one call; only the named tool; at most one call.

A refused request (HTTP 4xx) is ``unsupported`` for its check, a failed one ``error``;
neither stops the others. Model output is read as untrusted text: compared, counted, never
interpreted. The checks follow what vendor verifiers check first (MoonshotAI's
K2-Vendor-Verifier: tool_choice and the request's limits) and the OpenAI API reference
for each field.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from harness.client.completions import RequestFailed, post_completion
from harness.client.target import TargetConfig, fetch_target_info, make_client
from harness.runfolder import RunFolder
from harness.summary import ContractCheck, SideContract, SideInfo
from harness.transcript import ResponseRecord

__all__ = [
    "CHECKS",
    "PROBE_SYSTEM",
    "REQUESTS",
    "TOOLS",
    "check_contract",
    "check_contract_sync",
    "ContractReport",
    "check_sides",
    "differences",
]

#: the system message of every pre-flight request (the reference server recognises it)
PROBE_SYSTEM = "Contract pre-flight: answer exactly as the user asks."
#: the text request: a sampled answer differs from run to run
WORDS_PROMPT = "Write twelve English words chosen at random, separated by spaces, nothing else."
#: the tool request: two cities, two calls when parallel calls are allowed
TOOL_PROMPT = "What is the local time in Paris and in Tokyo? Look up each city with a tool."
#: the tools offered with :data:`TOOL_PROMPT`
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The current local {what} in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    for name, what in (("get_time", "time"), ("get_date", "date"))
]
#: the checks, in the order shown
CHECKS = (
    "temperature",
    "seed",
    "temperature 0",
    "stream",
    "usage",
    "max_tokens",
    "n",
    "stop",
    "tool_choice none",
    "tool_choice required",
    "tool_choice named",
    "parallel_tool_calls false",
)
#: requests per side at most
REQUESTS = 14
#: requests in flight at once per side
PARALLEL = 4
#: the whole pre-flight's bound, in request deadlines
TOTAL_DEADLINE_S = 4
SEEDS = (11, 22, 33)
MAX_TOKENS = 4


def _text(resp: ResponseRecord) -> str:
    return (resp.content or "").strip()


def _short(text: str, limit: int = 40) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= limit else one[: limit - 3] + "...")


class _Probe:
    """One side's requests: each sent once, no retry, within the target's deadline."""

    def __init__(self, target: TargetConfig, model: str) -> None:
        self.target, self.model = target, model
        self.client = make_client(target)
        self.sem = asyncio.Semaphore(PARALLEL)
        self.sent = 0

    async def ask(self, prompt: str = WORDS_PROMPT, **fields: Any) -> ResponseRecord | str:
        """The response, or one line saying why there is none (``HTTP 400: ...``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": PROBE_SYSTEM},
                {"role": "user", "content": prompt},
            ],
            "max_tokens": 48,
            **fields,
        }
        if params.get("stream"):
            params["stream_options"] = {"include_usage": True}
        if self.target.extra_body:
            params["extra_body"] = dict(self.target.extra_body)
        async with self.sem:
            self.sent += 1
            try:
                return await post_completion(self.client, params, None, self.target.limits())
            except RequestFailed as f:
                status = f"HTTP {f.status}" if f.status else f.kind
                return f"{status}: {' '.join(f.message.split())[:120]}"


def _unanswered(name: str, *answers: ResponseRecord | str) -> ContractCheck | None:
    """``unsupported`` (refused: HTTP 4xx) or ``error`` for the first request that failed."""
    for a in answers:
        if isinstance(a, str):
            refused = a.startswith("HTTP 4")
            return ContractCheck(name=name, status="unsupported" if refused else "error", detail=a)
    return None


def _sampling(
    sampled: list[ResponseRecord | str], again: ResponseRecord | str
) -> list[ContractCheck]:
    bad = _unanswered("temperature", *sampled)
    if bad is not None:
        return [bad, ContractCheck(name="seed", status=bad.status, detail=bad.detail)]
    texts = [_text(r) for r in sampled if isinstance(r, ResponseRecord)]
    distinct = len(set(texts))
    if distinct == 1:
        temp = ContractCheck(
            name="temperature", status="failed",
            detail=f"{len(texts)} requests at temperature 0.7 with seeds "
            f"{', '.join(map(str, SEEDS))} gave one output ({_short(texts[0])}): temperature "
            "and seed ignored, repeats are copies, not trials",
        )  # fmt: skip
        seed = ContractCheck(name="seed", status="unsupported", detail="temperature ignored")
        return [temp, seed]
    temp = ContractCheck(
        name="temperature", status="ok",
        detail=f"{distinct} outputs from {len(texts)} seeds at temperature 0.7",
    )  # fmt: skip
    bad = _unanswered("seed", again)
    if bad is not None:
        return [temp, bad]
    same = isinstance(again, ResponseRecord) and _text(again) == texts[0]
    seed = ContractCheck(
        name="seed", status="ok" if same else "unsupported",
        detail=f"seed {SEEDS[0]} twice: "
        + ("the same output" if same else "two outputs (seeded samples not reproducible)"),
    )  # fmt: skip
    return [temp, seed]


def _greedy(
    first: ResponseRecord | str, second: ResponseRecord | str, streamed: ResponseRecord | str
) -> list[ContractCheck]:
    bad = _unanswered("temperature 0", first, second)
    if bad is not None:
        return [bad, ContractCheck(name="stream", status=bad.status, detail=bad.detail)]
    assert isinstance(first, ResponseRecord) and isinstance(second, ResponseRecord)
    same = _text(first) == _text(second)
    zero = ContractCheck(
        name="temperature 0", status="ok" if same else "failed",
        detail="two greedy requests, one output" if same else
        f"two greedy requests, two outputs: {_short(_text(first))} and {_short(_text(second))}",
    )  # fmt: skip
    bad = _unanswered("stream", streamed)
    if bad is not None:
        return [zero, bad]
    assert isinstance(streamed, ResponseRecord)
    if not same:
        return [zero, ContractCheck(name="stream", status="unsupported",
                                    detail="not judged: temperature 0 not repeatable")]  # fmt: skip
    equal = _text(streamed) == _text(first)
    stream = ContractCheck(
        name="stream", status="ok" if equal else "failed",
        detail="streamed and not, one answer" if equal else
        f"streamed {_short(_text(streamed))}, not streamed {_short(_text(first))}",
    )  # fmt: skip
    return [zero, stream]


def _usage(plain: ResponseRecord | str, streamed: ResponseRecord | str) -> ContractCheck:
    bad = _unanswered("usage", plain, streamed)
    if bad is not None:
        return bad
    assert isinstance(plain, ResponseRecord) and isinstance(streamed, ResponseRecord)
    u, s = plain.usage or {}, streamed.usage or {}
    parts = [u.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]
    problems = []
    if not all(isinstance(x, int) for x in parts):
        problems.append(f"usage {u or 'absent'}")
    elif parts[0] + parts[1] != parts[2]:  # type: ignore[operator]
        problems.append(f"prompt {parts[0]} + completion {parts[1]} != total {parts[2]}")
    if not s:
        problems.append("no usage in the stream (stream_options.include_usage)")
    elif s.get("prompt_tokens") != u.get("prompt_tokens"):
        problems.append(
            f"prompt_tokens {u.get('prompt_tokens')} not streamed, {s.get('prompt_tokens')} streamed"
        )
    if problems:
        return ContractCheck(name="usage", status="failed", detail="; ".join(problems))
    return ContractCheck(name="usage", status="ok", detail=f"{parts[0]} + {parts[1]} = {parts[2]}")


def _max_tokens(resp: ResponseRecord | str) -> ContractCheck:
    bad = _unanswered("max_tokens", resp)
    if bad is not None:
        return bad
    assert isinstance(resp, ResponseRecord)
    used = (resp.usage or {}).get("completion_tokens")
    if isinstance(used, int):
        ok, seen = used <= MAX_TOKENS, f"{used} completion tokens"
    else:
        words = len(_text(resp).split())
        ok, seen = words <= MAX_TOKENS, f"{words} words (no usage)"
    return ContractCheck(
        name="max_tokens", status="ok" if ok else "failed",
        detail=f"max_tokens {MAX_TOKENS}: {seen}, finish_reason {resp.finish_reason}",
    )  # fmt: skip


def _n(resp: ResponseRecord | str) -> ContractCheck:
    bad = _unanswered("n", resp)
    if bad is not None:
        return bad
    assert isinstance(resp, ResponseRecord)
    ok = resp.choices == 2
    return ContractCheck(
        name="n", status="ok" if ok else "failed", detail=f"n 2: {resp.choices} choices"
    )


def _stop(word: str | None, resp: ResponseRecord | str | None) -> ContractCheck:
    if word is None or resp is None:
        return ContractCheck(
            name="stop", status="unsupported", detail="not judged: a greedy output of < 4 words"
        )
    bad = _unanswered("stop", resp)
    if bad is not None:
        return bad
    assert isinstance(resp, ResponseRecord)
    ok = word not in (resp.content or "")
    return ContractCheck(
        name="stop", status="ok" if ok else "failed",
        detail=f"stop {word!r}: " + ("absent from the output" if ok else
                                     f"in the output {_short(_text(resp))}"),
    )  # fmt: skip


def _tools(
    none: ResponseRecord | str,
    required: ResponseRecord | str,
    named: ResponseRecord | str,
    single: ResponseRecord | str,
) -> list[ContractCheck]:
    out = []
    rules: list[tuple[str, ResponseRecord | str, Callable[[list[str]], bool], str]] = [
        ("tool_choice none", none, lambda c: not c, "no call"),
        ("tool_choice required", required, lambda c: bool(c), "at least one call"),
        ("tool_choice named", named, lambda c: bool(c) and set(c) == {"get_date"},
         "only get_date"),
        ("parallel_tool_calls false", single, lambda c: len(c) <= 1, "at most one call"),
    ]  # fmt: skip
    for name, resp, rule, wanted in rules:
        bad = _unanswered(name, resp)
        if bad is not None:
            out.append(bad)
            continue
        assert isinstance(resp, ResponseRecord)
        calls = [c.name or "" for c in resp.tool_calls]
        seen = f"{len(calls)} call(s)" + (f": {', '.join(sorted(set(calls)))}" if calls else "")
        out.append(
            ContractCheck(
                name=name,
                status="ok" if rule(calls) else "failed",
                detail=f"wanted {wanted}; {seen}",
            )  # fmt: skip
        )
    return out


async def check_contract(target: TargetConfig) -> SideContract:
    """The contract pre-flight of ``target`` (module docstring): at most :data:`REQUESTS`
    requests, bounded by ``TOTAL_DEADLINE_S x target.timeout_s``; a server that does not
    answer in time gives ``error`` checks, never an exception."""
    t0 = time.perf_counter()
    info = await fetch_target_info(target)
    probe = _Probe(target, target.model or info.model or "default")
    try:
        checks = await asyncio.wait_for(_all(probe.ask), TOTAL_DEADLINE_S * target.timeout_s)
    except asyncio.TimeoutError:
        checks = [
            ContractCheck(
                name=n,
                status="error",
                detail=f"the pre-flight did not finish in {TOTAL_DEADLINE_S * target.timeout_s:g} s",
            )  # fmt: skip
            for n in CHECKS
        ]
    finally:
        await probe.client.close()
    return SideContract(
        checks=checks, requests=probe.sent, duration_s=round(time.perf_counter() - t0, 3)
    )


async def _all(ask: Callable[..., Awaitable[ResponseRecord | str]]) -> list[ContractCheck]:
    tool = {"prompt": TOOL_PROMPT, "tools": TOOLS, "temperature": 0}
    named = {"type": "function", "function": {"name": "get_date"}}
    (s1, s2, s3, again, g1, g2, gs, cut, n2, t_none, t_req, t_named, t_one) = await asyncio.gather(
        *(ask(temperature=0.7, seed=s) for s in SEEDS),
        ask(temperature=0.7, seed=SEEDS[0]),
        ask(temperature=0),
        ask(temperature=0),
        ask(temperature=0, stream=True),
        ask(temperature=0, max_tokens=MAX_TOKENS),
        ask(temperature=0.7, n=2),
        ask(**tool, tool_choice="none"),
        ask(**tool, tool_choice="required"),
        ask(**tool, tool_choice=named),
        ask(**tool, tool_choice="auto", parallel_tool_calls=False),
    )
    words = _text(g1).split() if isinstance(g1, ResponseRecord) else []
    word = words[2] if len(words) >= 4 else None
    stopped = await ask(temperature=0, stop=[word]) if word else None
    checks = [
        *_sampling([s1, s2, s3], again),
        *_greedy(g1, g2, gs),
        _usage(g1, gs),
        _max_tokens(cut),
        _n(n2),
        _stop(word, stopped),
        *_tools(t_none, t_req, t_named, t_one),
    ]
    order = {n: i for i, n in enumerate(CHECKS)}
    return sorted(checks, key=lambda c: order[c.name])


def check_contract_sync(target: TargetConfig) -> SideContract:
    """:func:`check_contract`, blocking (``asyncio.run``)."""
    return asyncio.run(check_contract(target))


def differences(sides: list[SideInfo]) -> list[str]:
    """The checks whose status differs between the sides that ran the pre-flight, one line
    each (``temperature: baseline ok, candidate failed``): a difference is itself a finding."""
    ran = [s for s in sides if s.contract is not None]
    if len(ran) < 2:
        return []
    out = []
    for name in CHECKS:
        found = [(s.label, s.contract.check(name)) for s in ran]  # type: ignore[union-attr]
        statuses = {c.status if c else "not run" for _, c in found}
        if len(statuses) > 1:
            out.append(
                f"{name}: "
                + ", ".join(f"{label} {c.status if c else 'not run'}" for label, c in found)
            )
    return out


class ContractReport(BaseModel):
    """``contract.json`` of a run folder: each side's pre-flight (side -> its checks) and
    the checks whose status differs between the sides (:func:`differences`)."""

    sides: dict[str, SideContract] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    differences: list[str] = Field(default_factory=list)


def check_sides(
    folder: RunFolder, sides: dict[str, SideInfo], live: dict[str, TargetConfig]
) -> list[str]:
    """Run the pre-flight of every live side (``live``: side -> target) whose
    ``SideInfo.contract`` is not known yet (a recorded side brings its own), store each in
    its ``SideInfo``, write ``contract.json`` into ``folder`` and return the differences
    between the sides, one line each. A side the folder's ``contract.json`` already holds
    (a resumed run: its pre-flight finished before the kill) is not checked again."""
    done = folder.read_model(RunFolder.CONTRACT, ContractReport)
    for name, target in live.items():
        if sides[name].contract is None:
            kept = done.sides.get(name) if done is not None else None
            sides[name].contract = kept if kept is not None else check_contract_sync(target)
    found = differences(list(sides.values()))
    ran = {n: s.contract for n, s in sides.items() if s.contract is not None}
    if ran:
        report = ContractReport(
            sides=ran, labels={n: sides[n].label for n in ran}, differences=found
        )
        folder.write_model(RunFolder.CONTRACT, report)
    return found
