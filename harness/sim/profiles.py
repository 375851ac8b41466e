"""Fault profiles of the reference server (``harness sim --profile NAME``).

A :class:`SimProfile` is a frozen bundle of model faults (:class:`~harness.sim.faults.Fault`),
MoE-side behaviour (fusion, routed experts, capture crash), GSM8K accuracy, noise
rates and an optional infrastructure fault. Fields other modules rely on keep
their names and meanings: ``name``, ``fusion`` (``"on" | "off" | "unknown"``),
``capture_crash`` (bool: boot crash when routed-experts capture is enabled),
``routed_experts_fault`` (bool: shared expert id written into two columns),
``gsm8k_accuracy`` (probability a GSM8K answer is right).

Profiles (:data:`PROFILES`); a single-fault profile is named after its fault's
:class:`harness.kinds.FailureKind` (``_`` as ``-``: ``repeat-loop`` injects ``repeat_loop``),
with a suffix for a variant of it (``tool-call-in-content-pythonic``):

=========================  ==============================================================
name                       behaviour
=========================  ==============================================================
``healthy``                follows every scenario; fusion off; GSM8K 0.88
``healthy-reasoning``      healthy, plus ``reasoning_content`` on every message
``fused-regression``       the motivating case: repeat loop (never answers), arguments
                           decay (turn 0 containers as strings, turn 1 zeros, then empty
                           strings), GSM8K 0.81, routed experts with a duplicated shared
                           id, boot crash with capture, fusion on
``repeat-loop``            re-issues the segment's calls instead of answering
``container-as-string``    ``{"values": "[0.5, 0.25, 0.25]"}``
``scalar-as-string``       ``"42"``, ``"true"``, ``"null"``
``collapse``               correct, then zeros from turn 1, then empty strings from turn 2
``dropped-keys``           first required key missing
``unexpected-keys``        extra key ``unexpected_option``
``malformed-json``         ``arguments`` missing the final brace
``markup-in-content``      ``<tool_call>...</tool_call>`` in content, no tool_calls, stop
``finish-reason-mismatch`` ``stop`` with tool calls, ``tool_calls`` without
``repeated-ids``           tool_call ids of turn 0 reused every turn
``stream-truncated-args``  streaming: last arguments delta of each call lost
``reasoning-leak``         reasoning model whose reasoning lands in ``content``
``reasoning-leak-args``    reasoning model whose reasoning is prefixed to ``arguments``
``empty-arguments``        streaming: a ``{}`` call's arguments dropped (assembles to ``""``)
``index-offset``           streaming: tool_call delta indices start at 1
``string-as-scalar``       ``"007"`` -> ``7``, ``"1e5"`` -> ``100000.0``, ``"true"`` -> ``true``
``enum-violation``         string arguments capitalised (``"celsius"`` -> ``"Celsius"``)
``int-as-float``           integer arguments sent as floats (``4.0``)
``spurious-calls``         one needless call (first tool, ``{}``) before each answer
``missing-call-id``        tool calls without ``id``
``object-not-string``      ``arguments`` sent as a JSON object, not a string
``empty-stop``             every reply is empty: no content, no tool calls, ``stop``
``tool-call-in-content``   calls written into content as ``{"name", "arguments"}`` JSON,
                           no tool_calls, ``stop``; ``tool-call-in-content-<dialect>`` the
                           same in another dialect: ``json-list``, ``openai``,
                           ``pythonic``, ``tokens``, ``fenced``, ``prose``
                           (:data:`harness.sim.faults.LEAK_DIALECTS`)
``tool-call-in-content-late``  the first turn's calls are sent right, later ones leak (JSON)
``tool-call-in-content-after-calls``  every expected call sent right, then one needless
                           call (first tool, ``{}``) written into content where the
                           answer should be
``tool-call-in-content-stream``  calls leak (JSON) on streamed requests only
``missing-call-index``     streaming: ``tool_calls`` deltas without ``index``
``shared-call-index``      streaming: every call of a message on index 0 (two ids, one index)
``length-with-tool-calls`` arguments cut in half, finish_reason ``length``
``repeated-empty-name``    streaming: ``"name": ""`` repeated in every arguments delta
                           (tolerated: a transcript note, no failure)
``tool-call-in-reasoning`` reasoning model whose calls land in ``reasoning_content`` as
                           ``<tool_call>`` JSON, no tool_calls, empty content, ``stop``
``call-syntax-in-reasoning``  look-alike: reasoning that spells the call's ``<tool_call>``
                           syntax, the call sent right in tool_calls (no failure)
``markup-in-arguments``    ``<|im_end|>`` left at the end of every string argument;
                           ``markup-in-arguments-<format>`` a parser format's closing
                           delimiters instead (``qwen3-xml``: ``</parameter></function>``,
                           ``glm45``, ``minimax-m2``, ``mistral``, ...:
                           :data:`harness.scoring.markup.CALL_MARKUP`)
``ambiguous-call-deltas``  streaming: every arguments delta repeats the call's ``id`` and
                           ``name`` (the SDK reads ``get_weatherget_weather``)
``split-call-name``        streaming: the call's name sent in two deltas (a first-fragment
                           client reads half of it)
``calls-under-tool-choice-none``  calls a tool under ``tool_choice: "none"``
``parallel-calls-when-disabled``  ``parallel_tool_calls: false`` ignored
``named-tool-choice-ignored``  a named ``tool_choice`` answered with another offered tool
``required-tool-choice-ignored``  ``tool_choice: "required"`` answered with text
``max-tokens-exceeded``    reasoning model whose reasoning is outside the ``max_tokens``
                           budget but counted in ``usage.completion_tokens``
``n-not-honoured``         one choice whatever ``n`` asks (healthy: ``n`` identical ones)
``stop-string-in-output``  ``stop`` strings left in content
``finish-reason-repeated`` streaming: the chunk carrying the finish_reason sent twice
``usage-with-choices``     streaming: ``usage`` on every chunk with choices, not only on the
                           ``"choices": []`` one
``content-restates-arguments``  beside its calls the model narrates them in content
                           (``Let me call get_weather for Oslo.``): information, a failure
                           only where a scenario targets it
``null-name-continuation`` look-alike, streaming: ``"name": null`` in every arguments delta
                           after a call's first (no failure, no note)
``sampling-ignored``       temperature and seed ignored: every request decoded greedily
                           (the same run every repeat; the contract pre-flight says so)
``seed-ignored``           look-alike: the seed ignored, temperature honoured (every sample
                           new: not reproducible, still independent trials)
``reasoning-required``     reasoning model answering HTTP 400 when an assistant turn with
                           tool_calls comes back without its ``reasoning_content``
                           (DeepSeek's thinking mode)
``reasoning-refused``      reasoning model answering HTTP 400 when an assistant turn comes
                           back with ``reasoning_content`` (deepseek-reasoner)
``malformed-json-history-refused``  turn 0's calls lose their final brace, and every later
                           request whose history holds one is HTTP 400 naming the decoder
                           error (vLLM re-parses earlier calls: :mod:`harness.sim.history`)
``named-choice-stop``      healthy; a call forced by a named ``tool_choice`` ends with
                           finish_reason ``stop``, as the OpenAI API and vLLM answer it
``call-signatures``        an opaque ``extra_content.google.thought_signature`` on each
                           tool call; a later request without it, or with it changed, is
                           HTTP 400 with a JSON-list error body (Gemini)
``gsm8k-drop``             GSM8K accuracy 0.81, nothing else
``kv-cache-quant``         healthy; token logprobs shifted a tiny, benign amount (like a
                           KV-cache quantisation; :mod:`harness.sim.logprobs`)
``logprobs-nan``           healthy; NaN token logprobs at 2% of positions
``decode-fault``           healthy prefill logprobs; generation (decode) logits shifted, as a
                           decode-only kernel fault (teacher forcing cannot see it)
``experts-dup-shared``     routed experts: shared expert id in two columns (fusion on)
``experts-drop-one``       routed experts: a fused path that drops one routed expert and
                           writes the shared expert's id in its place (fusion on)
``capture-crash``          boot crash when capture is enabled (fusion on)
``fusion-on``              healthy, fusion reported and logged on
``fusion-unknown``         healthy, fusion state not reported
``http-500``               infrastructure: every POST answers HTTP 500
``http-400``               infrastructure: every POST answers HTTP 400 (the server refuses the
                           request; not transient, so a client must not retry it)
``no-tool-parser``         infrastructure: vLLM launched without ``--enable-auto-tool-choice
                           --tool-call-parser``: HTTP 400 with vLLM's message to every
                           request that offers tools (``tool_choice`` auto or required)
``flaky-500``              infrastructure: the first try of each conversation's first
                           request (and of each distinct completions prompt) answers 500
``slow``                   infrastructure: every POST sleeps ``delay_s`` (3 s) first
``invalid-json``           infrastructure: 200 with a body that is not JSON
``no-choices``             infrastructure: 200 with ``"choices": []``
``connection-drop``        infrastructure: 200, headers and the first bytes of the body,
                           then the connection is closed (streaming too)
``endless``, ``cut-stream``, ``bad-utf8``, ``rate-limit``, ``huge``, ``error-200``
                           infrastructure: transport faults, see :mod:`harness.sim.misbehave`
=========================  ==============================================================

Single-fault profiles are named after their fault (``_`` as ``-``), and the fault after
the :class:`~harness.kinds.FailureKind` it shows (``empty-stop`` is named after the
termination it causes). What the rest of the runner tests need is an option, not a
profile: ``latency_ms`` (``--latency-ms``, a delay before every POST answer), the
request's own ``max_tokens`` (finish_reason ``length`` past it) and ``gsm8k_faults``
(``--gsm8k-fault INDEX=FAULT``, repeatable): the GSM8K question at ``INDEX`` (0-based line
of the ``--gsm8k`` file, as ``harness gsm8k`` numbers questions) is answered with the
infrastructure fault ``FAULT`` (a name of :data:`INFRA_FAULTS`) instead of the profile's,
every time it is asked: ``--gsm8k-fault 7=http-500`` fails question 7 on every retry,
``--gsm8k-fault 0=slow`` delays question 0 by ``delay_s``, the others answer as usual.

Noise (temperature > 0 only, see :mod:`harness.sim.model`): ``noise_optional_rate``
(0.25), ``noise_reorder_rate`` (0.1), ``noise_failure_rate`` (0.02 per run).
Custom profiles: ``dataclasses.replace(get_profile("healthy"), faults=(Fault(...),))``.

Realistic faults (what power curves need): any profile with faults can be named with a
rate and/or scenarios, ``NAME@RATE`` and ``NAME@ID[,ID...]``: ``repeat-loop@0.1`` loops
in 10% of runs (drawn per run from its nonce, so sampled repeats differ),
``repeat-loop@enum_units`` loops in every run of scenario ``enum_units`` only,
``repeat-loop@0.5@enum_units`` both (``harness sim --profile repeat-loop --fault-rate
0.1 --fault-scenario enum_units`` says the same; :meth:`SimProfile.with_faults`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from harness.errors import OptionValueError, UnknownProfileError
from harness.kinds import FailureKind
from harness.scoring.markup import CALL_MARKUP
from harness.sim.faults import LEAK_DIALECTS, Fault

__all__ = [
    "INFRA_FAULTS",
    "PROFILES",
    "InfraFault",
    "SimProfile",
    "UnknownProfileError",
    "get_profile",
    "gsm8k_fault",
    "infra_fault",
]

InfraFault = Literal[
    "http-500", "http-400", "flaky-500", "slow", "invalid-json", "no-choices", "connection-drop",
    "no-tool-parser", "endless", "cut-stream", "bad-utf8", "rate-limit", "huge", "error-200",
]  # fmt: skip
INFRA_FAULTS: tuple[str, ...] = InfraFault.__args__  # type: ignore[attr-defined]


def infra_fault(name: str) -> InfraFault:
    """``name`` as an infrastructure fault (one of :data:`INFRA_FAULTS`).

    Raises:
        OptionValueError: (a ValueError) an unknown name; the message lists the known ones.
    """
    if name not in INFRA_FAULTS:
        known = ", ".join(INFRA_FAULTS)
        raise OptionValueError(f"unknown infrastructure fault {name!r}; choose one of: {known}")
    return name  # type: ignore[return-value]


def gsm8k_fault(value: str) -> tuple[int, InfraFault]:
    """``"INDEX=FAULT"`` (``--gsm8k-fault``) as ``(index, fault)``: ``"7=http-500"`` ->
    ``(7, "http-500")``.

    Raises:
        OptionValueError: not ``INDEX=FAULT``, an index below 0, or an unknown fault.
    """
    index, sep, name = value.partition("=")
    if not sep or not index.strip().isdigit():
        raise OptionValueError(
            f"{value!r} is not INDEX=FAULT (a GSM8K question index >= 0, e.g. 7=http-500)"
        )
    return int(index), infra_fault(name.strip())


@dataclass(frozen=True)
class SimProfile:
    """One behaviour of the reference server (see the module docstring for the table)."""

    name: str = "healthy"
    fusion: str = "off"
    capture_crash: bool = False
    routed_experts_fault: bool = False
    #: routed-experts columns the fault writes the shared expert's id into (each a routed
    #: expert dropped)
    routed_experts_replaced: int = 2
    gsm8k_accuracy: float = 0.88
    description: str = ""
    faults: tuple[Fault, ...] = ()
    reasoning: bool = False  # a reasoning model: emits reasoning_content
    #: what the server demands of earlier assistant turns' reasoning in a request:
    #: ``"required"`` (HTTP 400 when a turn with tool_calls lacks its ``reasoning_content``,
    #: as DeepSeek's thinking mode), ``"refused"`` (HTTP 400 when any carries one, as
    #: deepseek-reasoner), None (either is fine)
    reasoning_history: str | None = None
    #: earlier assistant calls' ``arguments`` parsed as JSON, as vLLM does for the chat
    #: template: HTTP 400 naming the decoder's error while the history holds one that does not
    #: parse (:mod:`harness.sim.history`)
    reparse_history: bool = False
    #: an opaque ``extra_content.google.thought_signature`` on each tool call, required back
    #: unchanged (HTTP 400 with a JSON-list body otherwise, as Gemini; :mod:`harness.sim.history`)
    call_signatures: bool = False
    #: the finish_reason of a call forced by a named ``tool_choice``: ``"tool_calls"``, or
    #: ``"stop"`` as the OpenAI API and vLLM answer it
    named_choice_finish_reason: str = "tool_calls"
    #: temperature and seed ignored: every request decoded greedily (repeats are copies)
    ignores_sampling: bool = False
    #: the request's seed ignored, temperature honoured (samples never reproducible, still
    #: independent: not copies)
    ignores_seed: bool = False
    infra: InfraFault | None = None
    delay_s: float = 3.0  # for infra == "slow"
    noise_optional_rate: float = 0.25
    noise_reorder_rate: float = 0.1
    noise_failure_rate: float = 0.02

    def for_scenario(self, scenario_id: str | None) -> SimProfile:
        """This profile as it plays ``scenario_id``: without the faults restricted to other
        scenarios (``Fault.scenarios``); itself when nothing is left out."""
        kept = tuple(f for f in self.faults if not f.scenarios or scenario_id in f.scenarios)
        return self if len(kept) == len(self.faults) else replace(self, faults=kept)

    def with_faults(self, rate: float | None = None, scenarios: Sequence[str] = ()) -> SimProfile:
        """Every fault shown by a ``rate`` share of runs (None: each fault's own) and only
        in ``scenarios`` (empty: each fault's own); ``harness sim --fault-rate P
        --fault-scenario ID``. The name says so: ``repeat-loop@0.1``, ``repeat-loop@s1``.

        Raises:
            ValueError: ``rate`` outside [0, 1].
        """
        faults = tuple(
            replace(
                f,
                rate=f.rate if rate is None else rate,
                scenarios=tuple(scenarios) or f.scenarios,
            )
            for f in self.faults
        )
        tag = "".join(
            [
                f"@{rate:g}" if rate is not None else "",
                f"@{','.join(scenarios)}" if scenarios else "",
            ]
        )
        return replace(self, name=self.name + tag, faults=faults)


def _single(name: str, kind: FailureKind | str, description: str, **kw: object) -> SimProfile:
    return SimProfile(name=name, description=description, faults=(Fault(kind),), **kw)  # type: ignore[arg-type]


def _leak_profiles() -> list[SimProfile]:
    """``tool-call-in-content`` in each dialect, later turns only, after every expected
    call, and on streamed requests only."""
    leak = FailureKind.TOOL_CALL_IN_CONTENT
    out = [_single("tool-call-in-content", leak, "calls written into content as JSON")]
    out += [
        SimProfile(
            name=f"tool-call-in-content-{d.replace('_', '-')}",
            faults=(Fault(leak, dialect=d),),
            description=f"calls written into content ({d})",
        )
        for d in LEAK_DIALECTS
        if d != "json"
    ]
    return [
        *out,
        SimProfile(
            name="tool-call-in-content-late",
            faults=(Fault(leak, start_turn=1),),
            description="turn 0 calls sent right, later calls written into content",
        ),
        SimProfile(
            name="tool-call-in-content-after-calls",
            faults=(Fault(FailureKind.SPURIOUS_CALLS), Fault(leak, start_turn=1)),
            description="expected calls sent right, then a call written where the answer goes",
        ),
        SimProfile(
            name="tool-call-in-content-stream",
            faults=(Fault(leak, stream=True),),
            description="calls written into content on streamed requests only",
        ),
    ]


def _contract_profiles() -> list[SimProfile]:
    """Contract profiles: calls in the reasoning channel, markup in arguments, call deltas two
    clients assemble differently, and request constraints not honoured."""
    k = FailureKind
    return [
        _single("tool-call-in-reasoning", k.TOOL_CALL_IN_REASONING, "calls in reasoning",
                reasoning=True),
        _single("call-syntax-in-reasoning", "call_syntax_in_reasoning",
                "reasoning spells the call; the call is sent right", reasoning=True),
        _single("markup-in-arguments", k.MARKUP_IN_ARGUMENTS, "<|im_end|> in string arguments"),
        *(SimProfile(name=f"markup-in-arguments-{m.name.replace('_', '-')}",
                     faults=(Fault(k.MARKUP_IN_ARGUMENTS, markup=m.name),),
                     description=f"{m.name}'s left-over {m.left_over.strip()!r} in string "
                     "arguments") for m in CALL_MARKUP),
        _single("ambiguous-call-deltas", k.AMBIGUOUS_CALL_DELTAS,
                "streaming: id and name repeated in every arguments delta"),
        _single("split-call-name", "split_call_name", "streaming: the name in two deltas"),
        _single("calls-under-tool-choice-none", k.CALLS_UNDER_TOOL_CHOICE_NONE,
                'calls under tool_choice "none"'),
        _single("parallel-calls-when-disabled", k.PARALLEL_CALLS_WHEN_DISABLED,
                "parallel_tool_calls false ignored"),
        _single("named-tool-choice-ignored", k.NAMED_TOOL_CHOICE_IGNORED,
                "a named tool_choice answered with another tool"),
        _single("required-tool-choice-ignored", k.REQUIRED_TOOL_CHOICE_IGNORED,
                'tool_choice "required" answered with text'),
        _single("max-tokens-exceeded", k.MAX_TOKENS_EXCEEDED,
                "reasoning outside the max_tokens budget, counted in usage", reasoning=True),
        _single("n-not-honoured", k.N_NOT_HONOURED, "one choice whatever n asks"),
        _single("stop-string-in-output", k.STOP_STRING_IN_OUTPUT, "stop strings left in content"),
        _single("finish-reason-repeated", k.FINISH_REASON_REPEATED,
                "streaming: the finish_reason chunk sent twice"),
        _single("usage-with-choices", k.USAGE_WITH_CHOICES,
                "streaming: usage on every chunk with choices"),
        _single("content-restates-arguments", k.CONTENT_RESTATES_ARGUMENTS,
                "calls narrated in content beside them (information)"),
        _single("null-name-continuation", "null_name_continuation",
                'streaming: "name": null in continuation deltas (no failure)'),
        SimProfile(name="sampling-ignored", ignores_sampling=True,
                   description="temperature and seed ignored: every request greedy"),
        SimProfile(name="seed-ignored", ignores_seed=True,
                   description="the seed ignored, temperature honoured (still independent)"),
        SimProfile(name="reasoning-required", reasoning=True, reasoning_history="required",
                   description="HTTP 400 when a tool-call turn's reasoning_content is not sent "
                   "back"),
        SimProfile(name="reasoning-refused", reasoning=True, reasoning_history="refused",
                   description="HTTP 400 when an assistant turn's reasoning_content is sent "
                   "back"),
        SimProfile(name="malformed-json-history-refused", reparse_history=True,
                   faults=(Fault(k.MALFORMED_JSON, end_turn=1),),
                   description="turn 0's calls lose their final brace; every later request "
                   "holding one is HTTP 400 naming the decoder error (as vLLM)"),
        SimProfile(name="named-choice-stop", named_choice_finish_reason="stop",
                   description='a call forced by a named tool_choice ends with finish_reason '
                   '"stop", as the OpenAI API and vLLM answer it (correct)'),
        SimProfile(name="call-signatures", call_signatures=True,
                   description="an opaque signature on each tool call, required back "
                   "(HTTP 400 with a JSON-list body otherwise, as Gemini)"),
    ]  # fmt: skip


_LIST: list[SimProfile] = [
    SimProfile(name="healthy", description="follows every scenario; fusion off"),
    SimProfile(
        name="healthy-reasoning", reasoning=True, description="healthy with reasoning_content"
    ),
    SimProfile(
        name="fused-regression",
        fusion="on",
        capture_crash=True,
        routed_experts_fault=True,
        gsm8k_accuracy=0.81,
        faults=(
            Fault(FailureKind.REPEAT_LOOP),
            Fault(FailureKind.CONTAINER_AS_STRING, start_turn=0, end_turn=1),
            Fault(FailureKind.COLLAPSE, start_turn=1),
        ),
        description="loop + argument decay + GSM8K 0.81 + capture crash + fusion on",
    ),
    _single("repeat-loop", FailureKind.REPEAT_LOOP, "re-issues earlier calls, never answers"),
    _single(
        "container-as-string", FailureKind.CONTAINER_AS_STRING, "arrays/objects sent as JSON text"
    ),
    _single("scalar-as-string", FailureKind.SCALAR_AS_STRING, 'scalars sent as strings ("42")'),
    SimProfile(
        name=FailureKind.COLLAPSE,
        faults=(Fault(FailureKind.COLLAPSE, start_turn=1),),
        description="correct, then zeros, then empty strings",
    ),
    _single("dropped-keys", FailureKind.DROPPED_KEYS, "first required key left out"),
    _single("unexpected-keys", FailureKind.UNEXPECTED_KEYS, "extra key unexpected_option"),
    _single("malformed-json", FailureKind.MALFORMED_JSON, "arguments lose the final brace"),
    _single("markup-in-content", FailureKind.MARKUP_IN_CONTENT, "<tool_call> markup in content"),
    _single(
        "finish-reason-mismatch", FailureKind.FINISH_REASON_MISMATCH, "finish_reason contradicts"
    ),
    _single("repeated-ids", FailureKind.REPEATED_IDS, "tool_call ids reused across turns"),
    _single(
        "stream-truncated-args", FailureKind.STREAM_TRUNCATED_ARGS, "last arguments delta lost"
    ),
    _single("reasoning-leak", FailureKind.REASONING_LEAK, "reasoning in content", reasoning=True),
    _single(
        "reasoning-leak-args", FailureKind.REASONING_LEAK_ARGS, "reasoning in args", reasoning=True
    ),
    _single("empty-arguments", FailureKind.EMPTY_ARGUMENTS, 'streaming: "{}" arguments dropped'),
    _single("index-offset", FailureKind.INDEX_OFFSET, "streaming: tool_call indices start at 1"),
    _single(
        "string-as-scalar",
        FailureKind.STRING_AS_SCALAR,
        'numeric-looking strings decoded ("007" -> 7)',
    ),
    _single(
        "enum-violation", FailureKind.ENUM_VIOLATION, 'string arguments capitalised ("Celsius")'
    ),
    _single("int-as-float", FailureKind.INT_AS_FLOAT, "integer arguments sent as floats (4.0)"),
    _single(
        "spurious-calls", FailureKind.SPURIOUS_CALLS, "a needless tool call before a plain answer"
    ),
    _single("missing-call-id", FailureKind.MISSING_CALL_ID, "tool calls without an id"),
    _single("object-not-string", FailureKind.OBJECT_NOT_STRING, "arguments sent as an object"),
    _single("empty-stop", "empty_stop", "every reply is empty (no content, no tool calls)"),
    *_leak_profiles(),
    _single("missing-call-index", FailureKind.MISSING_CALL_INDEX, "streaming: deltas lack index"),
    _single("shared-call-index", FailureKind.SHARED_CALL_INDEX, "streaming: calls share index 0"),
    _single(
        "length-with-tool-calls", FailureKind.LENGTH_WITH_TOOL_CALLS, "arguments cut by length"
    ),
    _single("repeated-empty-name", "repeated_empty_name", 'streaming: "name": "" repeated'),
    *_contract_profiles(),
    SimProfile(name="gsm8k-drop", gsm8k_accuracy=0.81, description="GSM8K accuracy 0.81"),
    SimProfile(name="kv-cache-quant", description="healthy; logprobs shifted slightly (benign)"),
    SimProfile(name="logprobs-nan", description="healthy; NaN logprobs at 2% of positions"),
    SimProfile(
        name="decode-fault",
        description="healthy prefill; generation logits shifted (a decode-only kernel fault)",
    ),
    SimProfile(
        name="experts-dup-shared",
        fusion="on",
        routed_experts_fault=True,
        description="shared expert id in two routed-experts columns",
    ),
    SimProfile(
        name="experts-drop-one",
        fusion="on",
        routed_experts_fault=True,
        routed_experts_replaced=1,
        description="fused path: one routed expert dropped, the shared expert's id in its place",
    ),
    SimProfile(
        name="capture-crash",
        fusion="on",
        capture_crash=True,
        description="boot crash with --enable-return-routed-experts",
    ),
    SimProfile(name="fusion-on", fusion="on", description="healthy, fusion on"),
    SimProfile(name="fusion-unknown", fusion="unknown", description="healthy, fusion unreported"),
    SimProfile(name="http-500", infra="http-500", description="every POST answers 500"),
    SimProfile(name="http-400", infra="http-400", description="every POST answers 400"),
    SimProfile(
        name="no-tool-parser",
        infra="no-tool-parser",
        description="vLLM launched without --tool-call-parser: 400 to every request with tools",
    ),  # fmt: skip
    SimProfile(name="flaky-500", infra="flaky-500", description="first try answers 500"),
    SimProfile(name="slow", infra="slow", description="every POST sleeps delay_s first"),
    SimProfile(name="invalid-json", infra="invalid-json", description="200 with a non-JSON body"),
    SimProfile(name="no-choices", infra="no-choices", description='200 with "choices": []'),
    SimProfile(
        name="connection-drop",
        infra="connection-drop",
        description="200, part of the body, then the connection closes",
    ),
    SimProfile(name="endless", infra="endless", description="200 that never ends (trickles)"),
    SimProfile(name="cut-stream", infra="cut-stream", description="body ends early, cleanly"),
    SimProfile(name="bad-utf8", infra="bad-utf8", description="200 with bytes that are not UTF-8"),
    SimProfile(name="rate-limit", infra="rate-limit", description="429 Retry-After: 1, once"),
    SimProfile(name="huge", infra="huge", description="200 with 10 MB of content"),
    SimProfile(name="error-200", infra="error-200", description="200 with an error object"),
]

#: Profiles by name.
PROFILES: dict[str, SimProfile] = {p.name: p for p in _LIST}


def get_profile(name: str | SimProfile) -> SimProfile:
    """The profile called ``name`` (a :class:`SimProfile` is returned unchanged).

    Raises:
        UnknownProfileError: (a KeyError and ValueError) an unknown name; the
            message lists the known names.
    """
    if isinstance(name, SimProfile):
        return name
    base, *parts = name.split("@")
    try:
        found = PROFILES[base]
    except KeyError:
        known = ", ".join(PROFILES)
        raise UnknownProfileError(f"unknown sim profile {name!r}; choose one of: {known}") from None
    return _variant(found, parts, name) if parts else found


def _variant(profile: SimProfile, parts: list[str], name: str) -> SimProfile:
    """``NAME@RATE`` / ``NAME@ID[,ID...]`` (either or both): :meth:`SimProfile.with_faults`."""
    rate: float | None = None
    scenarios: list[str] = []
    for part in parts:
        try:
            rate = float(part)
        except ValueError:
            scenarios += [p for p in part.split(",") if p]
    if (rate is not None and not 0.0 <= rate <= 1.0) or not profile.faults:
        raise UnknownProfileError(
            f"sim profile {name!r}: @RATE must be in [0, 1] and the profile must have faults "
            "(e.g. repeat-loop@0.1, repeat-loop@enum_units)"
        )
    return profile.with_faults(rate, scenarios)
