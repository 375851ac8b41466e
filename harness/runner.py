r"""The multi-turn agent loop: run scenarios against a server and record transcripts.

One run (:func:`run_scenario`) sends the scenario's opening messages and tools; while
the assistant answers with ``tool_calls`` it appends that assistant message and one
``tool`` message per call (matching ``tool_call_id``; results from
:func:`harness.scenario.tools.simulate`; for a suite's task (BFCL's), from the suite's
backends, which also check each segment as it ends: :class:`harness.scenario.suites.Referee`)
and asks again.
A message without tool calls ends the segment: the next follow-up user message is
sent if any remain, else the run stops
with ``final_answer``. Other stops: ``length`` (finish_reason ``length``),
``empty_stop`` (no content and no tool calls), ``turn_cap`` (``max_turns`` requests
made) and ``error`` (an infrastructure error, kept apart from model behaviour).

Requests go through the openai SDK (``AsyncOpenAI``, any base URL; its ``post`` to
``/chat/completions``, the body sent as built here: see :mod:`harness.client.completions`),
non-streaming or streaming (SSE ``tool_calls`` deltas assembled by ``index``: ``id``
and ``name`` from the first delta that has them, ``arguments`` concatenated, as the
OpenAI Python SDK's stream helpers do; see :mod:`harness.client.completions`). The raw
response body (or the list of chunk objects) is kept, and tool-call ``arguments`` are
recorded exactly as received.
The reasoning an assistant turn produced (``reasoning_content``, or vLLM's ``reasoning``)
goes back to the server in later requests as :data:`REASONING_HISTORY` says (``keep``,
``drop``, ``auto``; :func:`reasoning_kept`); the mode is recorded in
``RunRecord.reasoning_history``. Every other field of an assistant message and of each of
its calls goes back as it came (``as-received``, as the SDK's ``messages.append(message)``),
or only the known ones (``known``): :data:`HISTORY_FIELDS`, ``RunRecord.history_fields``.
A history the server refuses (HTTP 400 on a later turn
after a turn with reasoning) names that setting as the likely cause in its error line.
Transient failures (HTTP 408/429/5xx, timeouts, reset connections) are retried with
exponential backoff; what still fails becomes :class:`harness.transcript.InfraError`.

:func:`run_many` runs scenarios x repeats x targets (x stream modes) concurrently and
appends each finished :class:`~harness.transcript.RunRecord` to
the run folder's transcripts as it ends; with ``resume`` it skips ``run_key``\ s
already there, so a killed run can be finished later without losing or repeating work.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from openai import AsyncOpenAI
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.client.completions import ConversationBody, RequestFailed, post_completion
from harness.client.target import TargetConfig, fetch_target_info, make_client
from harness.runfolder import RunFolder
from harness.scenario.model import Scenario
from harness.scenario.tools import ToolOutcome, render, simulate
from harness.transcript import (
    InfraError,
    ResponseRecord,
    RetryRecord,
    RunRecord,
    StateCheck,
    StopReason,
    TargetInfo,
    ToolCallRecord,
    ToolResultRecord,
    TurnRecord,
)

if TYPE_CHECKING:
    from harness.scenario.suites import Referee

__all__ = [
    "HISTORY_FIELDS",
    "REASONING_HISTORY",
    "HistoryFields",
    "ReasoningHistory",
    "SamplingPolicy",
    "StreamMode",
    "run_key",
    "run_many",
    "run_many_sync",
    "run_scenario",
    "reasoning_kept",
    "run_seed",
]

#: ``stream`` argument of :func:`run_many`: one mode, or ``"both"`` (each run twice).
StreamMode = bool | Literal["both"]


def run_key(target: TargetConfig, scenario_id: str, repeat: int, stream: bool) -> str:
    """``"<side or label>/<scenario id>/<repeat>/<stream|nostream>"``: unique per run folder."""
    return f"{target.name}/{scenario_id}/{repeat}/{'stream' if stream else 'nostream'}"


async def _request(
    client: AsyncOpenAI,
    params: dict[str, Any],
    target: TargetConfig,
    rec: TurnRecord,
    content: bytes | None = None,
) -> ResponseRecord | InfraError:
    """One request with retries of transient failures (exponential backoff, or the
    server's ``Retry-After`` when longer, capped: :meth:`TargetConfig.retry_delay_s`);
    each retried attempt is added to ``rec.retries`` with the wait. ``content``:
    ``params``' body already encoded (:class:`ConversationBody`), or ``None``."""
    attempts, limits = 0, target.limits()
    while True:
        attempts += 1
        try:
            return await post_completion(client, params, content, limits)
        except RequestFailed as f:
            kind: Any = f.kind
            if not f.transient or attempts > target.max_retries:
                return InfraError(
                    kind=kind, message=f.message, status=f.status, turn=rec.index,
                    attempts=attempts,
                )  # fmt: skip
            wait = target.retry_delay_s(attempts, f.retry_after_s)
            rec.retries.append(
                RetryRecord(
                    attempt=attempts, kind=kind, message=f.message[:300], status=f.status,
                    waited_s=round(wait, 3), retry_after_s=f.retry_after_s,
                )
            )  # fmt: skip
            await asyncio.sleep(wait)


# ---------------------------------------------------------------- reasoning sent back

#: what later requests carry of the reasoning an assistant turn produced
ReasoningHistory = Literal["keep", "drop", "auto"]

#: the modes, and what each sends back (``--reasoning-history``, a scenario's
#: ``reasoning_history``; the command line's wins, then the scenario's, then ``auto``).
#: What the servers document, and so what ``auto`` does:
#:
#: - DeepSeek's API, thinking mode (api-docs.deepseek.com/guides/thinking_mode, "Tool
#:   calls"): the ``reasoning_content`` of a turn that made tool calls must be passed back
#:   in every later request, else HTTP 400 ("The reasoning_content in the thinking mode must
#:   be passed back to the API"); the reasoning of a turn that answered is not needed
#:   (deepseek-reasoner's guide, "Multi-round conversation": the CoT of earlier rounds is
#:   not concatenated into the context; that model answered HTTP 400 to a
#:   ``reasoning_content`` in its input).
#: - vLLM (docs/features/reasoning_outputs.md): its multi-turn example sends back only
#:   ``content``; since its interleaved-thinking support (PR #33635) an assistant message's
#:   ``reasoning`` reaches the chat template (``chat_utils._parse_chat_message_content``),
#:   where templates such as Qwen3's render the reasoning of the turns after the last user
#:   message; ``reasoning_content`` on input is not read (issue #38488), so ``keep`` also
#:   sends it as ``reasoning`` when the server is vLLM.
#: - SGLang (docs/advanced_features/separate_reasoning.md): the reasoning parser splits
#:   ``reasoning_content`` out of the answer; an assistant message's ``reasoning_content``
#:   is accepted on input and its use is the chat template's.
#: - llama.cpp's server (``--reasoning-format``, tools/server/README.md): returns
#:   ``reasoning_content`` and accepts it on input assistant messages
#:   (``common_chat_msgs_parse_oaicompat``); models such as gpt-oss and MiniMax-M2 need it
#:   in a tool loop (mistral-vibe PR #123).
#:
#: So ``auto`` keeps the reasoning of turns that called tools (a tool loop) and drops that
#: of turns that answered (before the next user message): what DeepSeek requires and what
#: the three servers' templates render; ``keep`` sends all of it back; ``drop`` none (the
#: OpenAI SDK's own message objects, re-sent, carry no reasoning field).
REASONING_HISTORY: tuple[ReasoningHistory, ...] = ("keep", "drop", "auto")


def reasoning_kept(mode: ReasoningHistory, *, called_tools: bool) -> bool:
    """Whether an assistant turn's reasoning is sent back under ``mode``: always under
    ``keep``, never under ``drop``, under ``auto`` when the turn called tools."""
    return mode == "keep" or (mode == "auto" and called_tools)


def _reasoning_mode(scenario: Scenario, policy: SamplingPolicy | None) -> ReasoningHistory:
    """The mode of a run: the command's, else the scenario's, else ``auto``."""
    if policy is not None and policy.reasoning_history is not None:
        return policy.reasoning_history
    return scenario.reasoning_history or "auto"


def _is_vllm(info: TargetInfo | None) -> bool:
    """Whether ``GET /v1/models`` says vLLM (its models are ``owned_by: vllm``)."""
    data = (
        (info.models or {}).get("data")
        if info is not None and isinstance(info.models, dict)
        else None
    )
    return any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in data or [])


def _refused_history(
    error: InfraError, turns: Sequence[TurnRecord], mode: ReasoningHistory
) -> InfraError:
    """``error`` with, when the server refused a later turn's history (HTTP 400 on a turn
    after one with reasoning), the likely cause and the flag that changes it."""
    had = any(t.response is not None and t.response.reasoning_content for t in turns[:-1])
    if error.status != 400 or error.turn in (None, 0) or not had:
        return error
    other = "drop" if mode == "keep" else "keep"
    sent = {"keep": "sent back", "drop": "left out", "auto": "sent back on tool-call turns only"}[
        mode
    ]
    hint = (
        f" (likely cause: earlier turns' reasoning {sent} (reasoning_history {mode}); "
        f"this server may require or refuse it: try --reasoning-history {other})"
    )
    return error.model_copy(update={"message": error.message + hint})


# ---------------------------------------------------------------- fields sent back

#: which fields of an assistant message later requests carry
HistoryFields = Literal["as-received", "known"]

#: the modes (``--history-fields``): ``as-received`` (the default) sends every field of the
#: message and of each tool call back as it came (``ResponseRecord.extra``,
#: ``ToolCallRecord.extra`` / ``function_extra``), as an OpenAI SDK user's
#: ``messages.append(completion.choices[0].message)`` does (the SDK serialises the message
#: model with every field it received, its extras included): a server's opaque field
#: (Gemini's ``extra_content.google.thought_signature`` on each call, required back in a
#: tool loop) survives; ``known`` sends ``role``, ``content`` and each call's ``id``,
#: ``type`` and ``function.name``/``arguments`` only, for servers that refuse unknown
#: fields (vLLM with a Mistral tokenizer validates messages strictly). The reasoning goes
#: back as :data:`REASONING_HISTORY` says in both modes.
HISTORY_FIELDS: tuple[HistoryFields, ...] = ("as-received", "known")


def _history_mode(policy: SamplingPolicy | None) -> HistoryFields:
    return (policy.history_fields if policy is not None else None) or "as-received"


# ---------------------------------------------------------------- the loop


@dataclass(frozen=True)
class SamplingPolicy:
    """What a command asks of every run's sampling: ``temperature`` unless the scenario
    sets its own (None: the scenario's), a request seed per run derived from
    ``seed`` unless the scenario sets its own (None: no seed sent), and the reasoning
    sent back in later requests (:data:`REASONING_HISTORY`; over the scenario's)."""

    temperature: float | None = None
    seed: int | None = None
    #: the reasoning sent back in later requests (None: each scenario's, else ``auto``)
    reasoning_history: ReasoningHistory | None = None
    #: the fields of earlier assistant messages sent back (None: ``as-received``;
    #: :data:`HISTORY_FIELDS`)
    history_fields: HistoryFields | None = None


def run_seed(base: int, side: str, scenario_id: str, repeat: int) -> int:
    """The request seed of one run: the first 31 bits of
    ``sha256("<base>:<side>:<scenario id>:<repeat>")``, so every run of every side gets its
    own seed (a scenario's own ``seed`` gives ``seed + repeat`` instead, on both sides)."""
    digest = hashlib.sha256(f"{base}:{side}:{scenario_id}:{repeat}".encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF


def _sampling(
    scenario: Scenario, repeat: int, side: str = "", policy: SamplingPolicy | None = None
) -> dict[str, Any]:
    s = scenario.sampling.model_dump()
    own = scenario.sampling.model_fields_set
    if policy is not None and policy.temperature is not None and "temperature" not in own:
        s["temperature"] = policy.temperature
    if s.get("seed") is not None:
        s["seed"] = s["seed"] + repeat
    elif policy is not None and policy.seed is not None:
        s["seed"] = run_seed(policy.seed, side, scenario.id, repeat)
    return {k: v for k, v in s.items() if v is not None}


def _params(
    scenario: Scenario,
    target: TargetConfig,
    model: str,
    repeat: int,
    stream: bool,
    policy: SamplingPolicy | None = None,
) -> dict[str, Any]:
    """Every request field but ``messages``, for the openai SDK's ``create``."""
    sampling = _sampling(scenario, repeat, target.name, policy)
    p: dict[str, Any] = {"model": model, **sampling, "stream": stream}
    if scenario.tools:
        p["tools"] = [t.openai_spec() for t in scenario.tools_at(0)]
        if scenario.tool_choice is not None:
            p["tool_choice"] = scenario.tool_choice
        if scenario.parallel_tool_calls is not None:
            p["parallel_tool_calls"] = scenario.parallel_tool_calls
    if stream:
        p["stream_options"] = {"include_usage": True}
    extra = {**scenario.extra_body, **target.extra_body}
    if extra:
        p["extra_body"] = extra
    return p


class _Loop:
    """State of one run: the conversation so far, turns, and per-tool call counts."""

    def __init__(
        self,
        scenario: Scenario,
        client: AsyncOpenAI,
        target: TargetConfig,
        params: dict[str, Any],
        reasoning: ReasoningHistory = "auto",
        vllm: bool = False,
        fields: HistoryFields = "as-received",
    ) -> None:
        self.scenario, self.client, self.target, self.params = scenario, client, target, params
        self.reasoning, self.vllm, self.as_received = reasoning, vllm, fields == "as-received"
        self.messages: list[dict[str, Any]] = [m.wire() for m in scenario.messages]
        self.pending: list[dict[str, Any]] = list(self.messages)
        self.body = ConversationBody(params, self.messages)  # each message encoded once
        self.turns: list[TurnRecord] = []
        self.calls_per_tool: Counter[str] = Counter()
        self.segment = 0
        self.recorded_params = {k: v for k, v in params.items() if k != "tools"}
        self.referee = _referee(scenario)
        self.state_checks: list[StateCheck] = []

    async def run(self) -> tuple[StopReason, str | None, InfraError | None]:
        for turn in range(self.scenario.max_turns):
            self._after_result()
            rec = TurnRecord(
                index=turn,
                segment=self.segment,
                new_messages=self.pending,
                request_params=self.recorded_params,
            )
            self.turns.append(rec)
            self.pending = []
            params = {**self.params, "messages": list(self.messages)}
            result = await _request(self.client, params, self.target, rec, self.body.content())
            if isinstance(result, InfraError):
                result = _refused_history(result, self.turns, self.reasoning)
                rec.error = result
                return "error", None, result
            rec.response = result
            try:
                stop = await self._after(rec, result)
            except Exception as exc:  # a harness bug ends this run only, recorded
                err = InfraError(kind="other", message=f"harness error: {exc!r}", turn=turn)
                rec.error = err
                return "error", None, err
            if stop is not None:
                return stop[0], stop[1], None
        return "turn_cap", None, None

    async def _after(
        self, rec: TurnRecord, resp: ResponseRecord
    ) -> tuple[StopReason, str | None] | None:
        """Continue the conversation after a response; a stop reason ends the run."""
        if resp.finish_reason == "length":
            return "length", resp.content
        if resp.tool_calls:
            await self._answer_tools(rec, resp)
            return None
        if not (resp.content or "").strip():
            return "empty_stop", resp.content
        if self.segment < len(self.scenario.followups):
            user = self.scenario.followups[self.segment].user
            self._append(self._assistant(resp, {"role": "assistant", "content": resp.content}))
            self._append({"role": "user", "content": user})
            self.check_segment()
            self.segment += 1
            self._offer_tools()
            return None
        return "final_answer", resp.content

    def check_segment(self) -> None:
        """A suite's task: the suite's check of the segment that just ended (:class:`Referee`)."""
        if self.referee is not None and len(self.state_checks) <= self.segment:
            self.state_checks.append(self.referee.check(self.segment))

    def _offer_tools(self) -> None:
        """Offer the tools of the new segment when they change (a suite's held-out tools:
        BFCL ``miss_func``)."""
        if self.scenario.task is None or not self.scenario.tools:
            return
        tools = [t.openai_spec() for t in self.scenario.tools_at(self.segment)]
        if tools != self.params.get("tools"):
            self.params = {**self.params, "tools": tools}
            self.body = ConversationBody(self.params, self.messages)

    def _after_result(self) -> None:
        """Switch to ``tool_choice_after_result`` once a tool result has been appended."""
        choice = self.scenario.tool_choice_after_result
        if choice is None or self.params.get("tool_choice") == choice or not self.scenario.tools:
            return
        if any(m.get("role") == "tool" for m in self.messages):
            self.params = {**self.params, "tool_choice": choice}
            self.body = ConversationBody(self.params, self.messages)
            self.recorded_params = {k: v for k, v in self.params.items() if k != "tools"}

    def _assistant(self, resp: ResponseRecord, msg: dict[str, Any]) -> dict[str, Any]:
        """The assistant message sent back: its other fields as received unless the mode is
        ``known`` (:data:`HISTORY_FIELDS`), with its reasoning when the mode keeps it
        (:func:`reasoning_kept`; vLLM reads it as ``reasoning``)."""
        if self.as_received and resp.extra:
            msg.update({k: v for k, v in resp.extra.items() if k not in msg})
        called = bool(msg.get("tool_calls"))
        if resp.reasoning_content and reasoning_kept(self.reasoning, called_tools=called):
            msg["reasoning_content"] = resp.reasoning_content
            if self.vllm:
                msg["reasoning"] = resp.reasoning_content
        return msg

    def _append(self, msg: dict[str, Any]) -> None:
        self.messages.append(msg)
        self.pending.append(msg)

    async def _answer_tools(self, rec: TurnRecord, resp: ResponseRecord) -> None:
        """Append the assistant message as received and one ``tool`` message per call.

        A call without an id is answered under a synthetic id ``synthetic_<turn>_<i>``
        (its :class:`ToolCallRecord` keeps ``id=None``, so the gap stays visible).
        Non-string arguments are echoed back as compact JSON (``None`` as ``"{}"``).
        """
        wire_calls = []
        names = {t.name for t in self.scenario.tools}
        for i, call in enumerate(resp.tool_calls):
            # a name the stream's assembly doubled or cut is dispatched as the tool it names
            call = call.model_copy(update={"name": call.name_among(names)})
            call_id = call.id or f"synthetic_{rec.index}_{i}"
            args = call.arguments
            wire_args = args if isinstance(args, str) else render(args if args is not None else {})
            wire_calls.append(self._wire_call(call, call_id, wire_args))
            outcome = await self._simulate(call)
            rec.tool_results.append(
                ToolResultRecord(
                    tool_call_id=call_id,
                    name=call.name,
                    content=outcome.content,
                    error=outcome.error,
                )
            )
        # content "" rather than null: OpenAI accepts both with tool_calls, but
        # llama-cpp-python's server answers 500 to the null it sends itself (and to no key)
        content = resp.content if resp.content is not None else ""
        msg = {"role": "assistant", "content": content, "tool_calls": wire_calls}
        self._append(self._assistant(resp, msg))
        for res in rec.tool_results:
            self._append({"role": "tool", "tool_call_id": res.tool_call_id, "content": res.content})

    def _wire_call(self, call: ToolCallRecord, call_id: str, args: str) -> dict[str, Any]:
        """A call sent back: ``id``, ``type``, ``function`` (``name``, ``arguments``), and
        under ``as-received`` the entry's and the function's other fields as they came."""
        fn: dict[str, Any] = {"name": call.name or "", "arguments": args}
        entry: dict[str, Any] = {"id": call_id, "type": "function", "function": fn}
        if self.as_received:
            fn.update({k: v for k, v in (call.function_extra or {}).items() if k not in fn})
            entry.update({k: v for k, v in (call.extra or {}).items() if k not in entry})
        return entry

    async def _simulate(self, call: ToolCallRecord) -> ToolOutcome:
        if self.referee is not None:  # a suite's task: its backends answer
            return await self.referee.answer(call.name, call.arguments)
        tool = self.scenario.tool(call.name or "")
        if tool is None:
            names = ", ".join(t.name for t in self.scenario.tools) or "none"
            return ToolOutcome(f"Error: unknown tool {call.name!r}; available tools: {names}", True)
        index = self.calls_per_tool[tool.name]
        self.calls_per_tool[tool.name] += 1
        return simulate(tool, call.arguments, index)


def _referee(scenario: Scenario) -> Referee | None:
    """A suite's task: its suite's :class:`~harness.scenario.suites.Referee` (fresh
    backends), else ``None``."""
    if scenario.task is None:
        return None
    from harness.scenario.suites import get_suite

    return get_suite(scenario.task.suite).referee(scenario)


def _scenario_facts(scenario: Scenario) -> tuple[str, dict[str, Any]]:
    """``(content_hash(), model_dump(mode="json"))``: what every record of it carries."""
    return scenario.content_hash(), scenario.model_dump(mode="json")


async def run_scenario(
    scenario: Scenario,
    target: TargetConfig,
    *,
    repeat: int,
    stream: bool,
    client: AsyncOpenAI,
    info: TargetInfo | None = None,
    facts: tuple[str, dict[str, Any]] | None = None,
    sampling: SamplingPolicy | None = None,
) -> RunRecord:
    """Run ``scenario`` once against ``target`` and return its transcript.

    ``info`` (from :func:`harness.client.target.fetch_target_info`) is stored in the record and
    supplies the model name when ``target.model`` is ``None`` (else ``"default"``).
    ``facts`` is ``(scenario.content_hash(), scenario.model_dump(mode="json"))`` when the
    caller has them (:func:`run_many` computes them once per scenario, not once per run).
    ``sampling``: the command's temperature, seed and reasoning history
    (:class:`SamplingPolicy`); the record's ``sampling`` holds what was sent, its
    ``reasoning_history`` the mode applied. Server failures do not raise: they end the
    run with ``stop_reason="error"``.
    """
    info = info or TargetInfo(
        label=target.label, side=target.side, base_url=target.base_url, model=target.model
    )
    model = target.model or info.model or "default"
    params = _params(scenario, target, model, repeat, stream, sampling)
    started = datetime.now(timezone.utc).isoformat()
    t0 = time.perf_counter()
    mode = _reasoning_mode(scenario, sampling)
    fields = _history_mode(sampling)
    loop = _Loop(scenario, client, target, params, mode, _is_vllm(info), fields)
    stop, final, error = await loop.run()
    if stop != "error":
        loop.check_segment()
    scenario_hash, scenario_json = facts or _scenario_facts(scenario)
    return RunRecord(
        run_key=run_key(target, scenario.id, repeat, stream),
        scenario_id=scenario.id,
        scenario_hash=scenario_hash,
        scenario=scenario_json,
        repeat=repeat,
        stream=stream,
        target=info,
        sampling=_sampling(scenario, repeat, target.name, sampling),
        reasoning_history=mode,
        history_fields=fields,
        tools=params.get("tools", []),
        turns=loop.turns,
        stop_reason=stop,
        final_content=final,
        error=error,
        state_checks=loop.state_checks,
        started_at=started,
        duration_s=time.perf_counter() - t0,
    )


# ---------------------------------------------------------------- many runs


def _progress(enabled: bool) -> Progress:
    console = Console(stderr=True)
    return Progress(
        TextColumn("[bold]runs"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        disable=not (enabled and console.is_terminal),
    )


async def run_many(
    scenarios: Sequence[Scenario],
    targets: Sequence[TargetConfig],
    *,
    repeats: int | None = None,
    stream: StreamMode = False,
    concurrency: int = 8,
    out_dir: RunFolder | str | Path,
    resume: bool = True,
    progress: bool = True,
    keep: bool = True,
    sampling: SamplingPolicy | None = None,
) -> list[RunRecord]:
    r"""Run every scenario x repeat x target (x stream mode) and record each run.

    Args:
        scenarios: the scenarios to run.
        targets: the servers to run them on (each a side of the run folder).
        repeats: runs per scenario (default: each scenario's ``repeats``).
        stream: ``False``, ``True`` or ``"both"`` (each run in both modes).
        concurrency: runs in flight at once (one request each).
        out_dir: the run folder (a :class:`~harness.runfolder.RunFolder` or its path);
            each record is appended to its transcripts as the run ends, and the targets'
            self-description is added to its manifest.
        resume: skip ``run_key``\ s already recorded there.
        progress: show a rich progress bar on a terminal (stderr).
        keep: return the records; ``False`` keeps none in memory once written (a long
            run's records are read back from the folder, one at a time).
        sampling: temperature and per-run seed (:class:`SamplingPolicy`; None: each
            scenario's own sampling).

    Returns:
        The records of the runs made now (not those skipped on resume); ``[]`` with
        ``keep=False``.
    """
    folder = out_dir if isinstance(out_dir, RunFolder) else RunFolder(out_dir)
    folder.path.mkdir(parents=True, exist_ok=True)
    done = folder.finished_keys() if resume else set()
    infos = list(await asyncio.gather(*(fetch_target_info(t) for t in targets)))
    folder.add_targets(infos)
    jobs = _jobs(scenarios, targets, repeats, stream, done)
    clients = [make_client(t) for t in targets]
    facts = {id(sc): _scenario_facts(sc) for sc in scenarios}
    sem = asyncio.Semaphore(max(1, concurrency))
    try:
        with _progress(progress) as bar:
            task = bar.add_task("", total=len(jobs))

            async def one(ti: int, sc: Scenario, r: int, m: bool) -> RunRecord | None:
                async with sem:
                    rec = await run_scenario(
                        sc,
                        targets[ti],
                        repeat=r,
                        stream=m,
                        client=clients[ti],
                        info=infos[ti],
                        facts=facts[id(sc)],
                        sampling=sampling,
                    )
                folder.append_record(rec)
                bar.update(task, advance=1, description=f"{rec.run_key} {rec.stop_reason}")
                return rec if keep else None

            done_now = await asyncio.gather(*(one(*j) for j in jobs))
            return [r for r in done_now if r is not None]
    finally:
        for c in clients:
            await c.close()


def _jobs(
    scenarios: Sequence[Scenario],
    targets: Sequence[TargetConfig],
    repeats: int | None,
    stream: StreamMode,
    done: set[str],
) -> list[tuple[int, Scenario, int, bool]]:
    """``(target index, scenario, repeat, stream)`` of every run not recorded yet."""
    modes = [False, True] if stream == "both" else [bool(stream)]
    return [
        (ti, sc, r, m)
        for ti, t in enumerate(targets)
        for sc in scenarios
        for r in range(repeats if repeats is not None else sc.repeats)
        for m in modes
        if run_key(t, sc.id, r, m) not in done
    ]


def run_many_sync(
    scenarios: Sequence[Scenario], targets: Sequence[TargetConfig], **kwargs: Any
) -> list[RunRecord]:
    """:func:`run_many`, blocking (``asyncio.run``); same arguments."""
    return asyncio.run(run_many(scenarios, targets, **kwargs))
