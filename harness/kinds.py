"""The failure-kind vocabulary: every way a run can fail, its label and what it means.

This module owns the names. Scoring (:mod:`harness.scoring`) reports them in
``RunScore.failures``, the decision rule (:mod:`harness.stats`) tests their rates, the
console and the report label them with :func:`label`, a scenario's ``targets:`` are
checked against them at load time, and the reference server's fault profiles
(:mod:`harness.sim.faults`) are named after them where one exists. A new failure kind
is one member of :class:`FailureKind` (name, family, label, description) and the
scoring code that finds it; nothing else has a list to update.

Families (:class:`Family`): ``call`` (a call's arguments cannot be used as sent),
``drift`` (usable but different from what the tool or the reference wants),
``sequence`` (the calls made against the calls expected), ``answer`` (the final answer),
``protocol`` (an invariant of the OpenAI chat-completions wire format) and
``information`` (a finding a reviewer reads, not a failure: it is kept in
``RunScore.information`` and counts as a failure only in a scenario whose ``targets:``
name it).

Besides the failure kinds, the tables show a few *metrics* (per-run counts and success
rates) and *terminations* (how a run ended); their labels live here too
(:data:`METRIC_LABELS`, :data:`TERMINATION_LABELS`), so every view names a row the
same way. :data:`VerdictName` is the one set of verdicts of every comparison (scenario
A/B and GSM8K).
"""

from __future__ import annotations

import difflib
from enum import Enum
from typing import Literal

__all__ = [
    "COUNT_METRICS",
    "METRIC_LABELS",
    "STREAM_ONLY_KINDS",
    "SUCCESS_METRICS",
    "TERMINATION_LABELS",
    "VERDICTS",
    "VerdictName",
    "FailureKind",
    "Family",
    "did_you_mean",
    "failure_kind",
    "is_failure_kind",
    "label",
    "plural",
]


#: the verdict of a comparison of two sides (scenario A/B, GSM8K paired)
VerdictName = Literal["REGRESSION", "IMPROVEMENT", "NO CHANGE", "INCONCLUSIVE"]
VERDICTS: tuple[VerdictName, ...] = ("REGRESSION", "IMPROVEMENT", "NO CHANGE", "INCONCLUSIVE")


class Family(str, Enum):
    """What part of a run a failure kind is about."""

    CALL = "call"
    DRIFT = "drift"
    SEQUENCE = "sequence"
    ANSWER = "answer"
    PROTOCOL = "protocol"
    INFORMATION = "information"


class FailureKind(str, Enum):
    """One way a run can fail. The value is the name used on disk and in scenario files.

    Each member carries ``family`` (:class:`Family`), ``label`` (what a table row says)
    and ``description`` (one sentence for ``harness list`` and the report).
    """

    family: Family
    label: str
    description: str

    def __new__(cls, value: str, family: Family, label: str, description: str) -> FailureKind:
        """A member from its value and its family, label and description."""
        member = str.__new__(cls, value)
        member._value_ = value
        member.family = family
        member.label = label
        member.description = description
        return member

    def __str__(self) -> str:
        return str(self.value)

    # ---- calls: arguments that cannot be used as sent
    REPEAT_LOOP = (
        "repeat_loop",
        Family.CALL,
        "repeat loop (identical calls)",
        "more identical calls (same tool, same canonical arguments) than the scenario expects",
    )
    MALFORMED_JSON = (
        "malformed_json",
        Family.CALL,
        "arguments are not valid JSON",
        "a call's arguments string does not parse as JSON",
    )
    STREAM_TRUNCATED_ARGS = (
        "stream_truncated_args",
        Family.CALL,
        "streamed arguments cut off",
        "streamed arguments that end early (the last delta lost)",
    )
    REASONING_LEAK_ARGS = (
        "reasoning_leak_args",
        Family.CALL,
        "reasoning leaked into arguments",
        "<think> text before the JSON of a call's arguments",
    )
    OBJECT_NOT_STRING = (
        "object_not_string",
        Family.CALL,
        "object sent where a JSON string is required",
        "arguments sent as a JSON object, not as a string holding one",
    )
    NOT_AN_OBJECT = (
        "not_an_object",
        Family.CALL,
        "arguments are not a JSON object",
        "arguments that parse, but to an array, string or number",
    )
    EMPTY_ARGUMENTS = (
        "empty_arguments",
        Family.CALL,
        'arguments "" instead of "{}"',
        'an empty arguments string where "{}" is meant (a streamed call with no arguments delta)',
    )
    TOOL_CALL_REFUSED_IN_HISTORY = (
        "tool_call_refused_in_history",
        Family.CALL,
        "server refused the call sent back",
        "a later request refused (HTTP 4xx) over an earlier call whose arguments do not parse",
    )
    UNKNOWN_TOOL = (
        "unknown_tool",
        Family.CALL,
        "unknown tool",
        "a call to a tool the request did not offer",
    )
    SCHEMA_VIOLATION = (
        "schema_violation",
        Family.CALL,
        "schema violation",
        "arguments that break the tool's JSON Schema (parameters)",
    )
    # ---- drift: usable, but not what the tool or the reference wants
    CONTAINER_AS_STRING = (
        "container_as_string",
        Family.DRIFT,
        "array/object sent as a string",
        'an array or object sent as JSON text: {"values": "[0.5, 0.25, 0.25]"}',
    )
    SCALAR_AS_STRING = (
        "scalar_as_string",
        Family.DRIFT,
        "scalar sent as a string",
        'a number, boolean or null sent as a string: "2", "true"',
    )
    STRING_AS_SCALAR = (
        "string_as_scalar",
        Family.DRIFT,
        "string sent as a number/boolean",
        'a string-typed argument decoded as a scalar: "007" arriving as 7',
    )
    INT_AS_FLOAT = (
        "int_as_float",
        Family.DRIFT,
        "integer sent as a float",
        "an integer argument sent as a float (4.0)",
    )
    COLLAPSE = (
        "collapse",
        Family.DRIFT,
        "values collapsed",
        'values collapsed to 0, "", null or [] where the reference is not: [0, 0, 0]',
    )
    DROPPED_KEYS = (
        "dropped_keys",
        Family.DRIFT,
        "required key dropped",
        "a key the schema requires, or the reference sends, is absent",
    )
    UNEXPECTED_KEYS = (
        "unexpected_keys",
        Family.DRIFT,
        "unexpected key",
        "a key the tool's schema does not declare",
    )
    ENUM_VIOLATION = (
        "enum_violation",
        Family.DRIFT,
        "value outside the enum",
        "a value outside the schema's enum",
    )
    VALUE_MISMATCH = (
        "value_mismatch",
        Family.DRIFT,
        "wrong value",
        "well-typed, but not what the scenario's matcher accepts",
    )
    # ---- sequence: the calls made against the calls expected
    MISSING_CALLS = (
        "missing_calls",
        Family.SEQUENCE,
        "expected calls missing",
        "an expected (required) call was never made",
    )
    SPURIOUS_CALLS = (
        "spurious_calls",
        Family.SEQUENCE,
        "calls not expected",
        "calls that match no expected call, or more than the scenario's max_calls",
    )
    ORDER_VIOLATION = (
        "order_violation",
        Family.SEQUENCE,
        "calls out of order",
        "expected calls made out of the scenario's strict order",
    )
    STATE_MISMATCH = (
        "state_mismatch",
        Family.SEQUENCE,
        "tool state differs",
        "after a turn, the tools' state is not the ground truth's (BFCL state check)",
    )
    # ---- answer
    MISSING_FINAL_ANSWER = (
        "missing_final_answer",
        Family.ANSWER,
        "no final answer",
        "a segment ended without a written final answer (turn cap, empty stop, length)",
    )
    WRONG_FINAL_ANSWER = (
        "wrong_final_answer",
        Family.ANSWER,
        "final answer misses the expected content",
        "the final answer lacks what the scenario's final_answer expects",
    )
    # ---- protocol: invariants of the chat-completions wire format
    FINISH_REASON_MISMATCH = (
        "finish_reason_mismatch",
        Family.PROTOCOL,
        "finish_reason does not match tool_calls",
        'finish_reason "tool_calls" without calls, or calls with another (named tool_choice: '
        '"stop" too)',
    )
    MARKUP_IN_CONTENT = (
        "markup_in_content",
        Family.PROTOCOL,
        "tool-call markup in content",
        "a parser's delimiter or template token in content (<tool_call>, [TOOL_CALLS], ...)",
    )
    REPEATED_IDS = (
        "repeated_ids",
        Family.PROTOCOL,
        "tool_call ids repeated",
        "a tool_call id used again later in the run",
    )
    MISSING_CALL_ID = (
        "missing_call_id",
        Family.PROTOCOL,
        "tool_call id missing",
        "a tool call without an id",
    )
    REASONING_LEAK = (
        "reasoning_leak",
        Family.PROTOCOL,
        "reasoning leaked into content",
        "reasoning text (<think>...) in content instead of reasoning_content",
    )
    INDEX_OFFSET = (
        "index_offset",
        Family.PROTOCOL,
        "tool_call indices not 0..n-1",
        "streamed tool_call delta indices that start at 1 or skip a number",
    )
    TOOL_CALL_IN_CONTENT = (
        "tool_call_in_content",
        Family.PROTOCOL,
        "tool call written into content",
        "a call to a declared tool written as text in content (any dialect), not as tool_calls",
    )
    MISSING_CALL_INDEX = (
        "missing_call_index",
        Family.PROTOCOL,
        "tool_call delta without index",
        "a streamed tool_calls delta with no index (a strict client cannot assemble it)",
    )
    SHARED_CALL_INDEX = (
        "shared_call_index",
        Family.PROTOCOL,
        "two tool calls share an index",
        "a second, different tool_call id streamed on an index that is already open",
    )
    LENGTH_WITH_TOOL_CALLS = (
        "length_with_tool_calls",
        Family.PROTOCOL,
        "tool calls cut by max_tokens",
        'finish_reason "length" on a response that carries tool calls (arguments cut short)',
    )
    TOOL_CALL_IN_REASONING = (
        "tool_call_in_reasoning",
        Family.PROTOCOL,
        "tool call written into reasoning",
        "a call to a declared tool written into reasoning_content/reasoning, with no tool_calls",
    )
    MARKUP_IN_ARGUMENTS = (
        "markup_in_arguments",
        Family.PROTOCOL,
        "template markup in an argument value",
        "a parser's delimiter or template token (</parameter>, <|im_end|>, ...) in a string "
        "argument",
    )
    FINISH_REASON_REPEATED = (
        "finish_reason_repeated",
        Family.PROTOCOL,
        "finish_reason sent twice in a stream",
        "a streamed choice whose finish_reason arrives in more than one chunk",
    )
    USAGE_WITH_CHOICES = (
        "usage_with_choices",
        Family.PROTOCOL,
        "usage on a chunk with choices",
        'streamed usage on a chunk with choices, not the last (the OpenAI API: "choices": [])',
    )
    AMBIGUOUS_CALL_DELTAS = (
        "ambiguous_call_deltas",
        Family.PROTOCOL,
        "streamed call assembles differently per client",
        "a streamed id or name split or repeated: SDK and first-fragment clients differ",
    )
    # ---- information: read by a reviewer, a failure only where a scenario targets it
    CONTENT_RESTATES_ARGUMENTS = (
        "content_restates_arguments",
        Family.INFORMATION,
        "content only restates the call",
        "text beside a tool call that only repeats its argument values (information)",
    )
    # ---- protocol: request constraints not honoured
    CALLS_UNDER_TOOL_CHOICE_NONE = (
        "calls_under_tool_choice_none",
        Family.PROTOCOL,
        'tool calls under tool_choice "none"',
        'tool calls returned for a request with tool_choice "none"',
    )
    PARALLEL_CALLS_WHEN_DISABLED = (
        "parallel_calls_when_disabled",
        Family.PROTOCOL,
        "parallel calls under parallel_tool_calls: false",
        "more than one tool call in a message for a request with parallel_tool_calls false",
    )
    NAMED_TOOL_CHOICE_IGNORED = (
        "named_tool_choice_ignored",
        Family.PROTOCOL,
        "named tool_choice not followed",
        "a request naming one function in tool_choice answered with another tool, or no call",
    )
    REQUIRED_TOOL_CHOICE_IGNORED = (
        "required_tool_choice_ignored",
        Family.PROTOCOL,
        'tool_choice "required" answered with text',
        'a request with tool_choice "required" answered without a tool call',
    )
    MAX_TOKENS_EXCEEDED = (
        "max_tokens_exceeded",
        Family.PROTOCOL,
        "max_tokens exceeded",
        "usage.completion_tokens above the request's max_tokens / max_completion_tokens",
    )
    N_NOT_HONOURED = (
        "n_not_honoured",
        Family.PROTOCOL,
        "n not honoured",
        "a number of choices other than the request's n (1 when not sent)",
    )
    STOP_STRING_IN_OUTPUT = (
        "stop_string_in_output",
        Family.PROTOCOL,
        "stop string in the output",
        "one of the request's stop strings present in content (generation did not stop there)",
    )


#: per-run counts shown in the tables (metric -> label); they are shown, not tested
COUNT_METRICS: dict[str, str] = {
    "tool_calls": "tool calls",
    "repeated_calls": "repeated identical calls",
    "malformed_args": "malformed arguments",
    "drift": "drifted arguments",
    "schema_violations": "schema violations",
    "turns": "turns",
}
#: success rates (metric -> label); their failures are what the tests count
SUCCESS_METRICS: dict[str, str] = {
    "passed": "passed",
    "final_answer": "reached a final answer",
}
#: the failure kinds only a streamed run can show (they are about SSE deltas): under
#: ``--stream both`` a repeat's unit takes these from its streamed run, the rest from its
#: non-streamed run (:mod:`harness.stats.aggregate`)
STREAM_ONLY_KINDS: frozenset[str] = frozenset({
    FailureKind.STREAM_TRUNCATED_ARGS.value, FailureKind.INDEX_OFFSET.value,
    FailureKind.MISSING_CALL_INDEX.value, FailureKind.SHARED_CALL_INDEX.value,
    FailureKind.AMBIGUOUS_CALL_DELTAS.value, FailureKind.FINISH_REASON_REPEATED.value,
    FailureKind.USAGE_WITH_CHOICES.value})  # fmt: skip
#: every metric's label (counts and success rates)
METRIC_LABELS: dict[str, str] = {**COUNT_METRICS, **SUCCESS_METRICS}
#: how a run ended (``RunScore.termination``) -> label
TERMINATION_LABELS: dict[str, str] = {
    "final_answer": "final answer",
    "turn_cap": "turn cap",
    "length": "cut off by max_tokens",
    "empty_stop": "empty response",
    "malformed": "malformed calls",
    "error": "infrastructure error",
}

_KINDS = {k.value: k for k in FailureKind}


def is_failure_kind(name: str) -> bool:
    """Whether ``name`` is the value of a :class:`FailureKind`."""
    return name in _KINDS


def failure_kind(name: str) -> FailureKind:
    """The :class:`FailureKind` whose value is ``name`` (a member is returned as it is).

    Raises:
        ValueError: no failure kind has that name; the message suggests the closest.
    """
    kind = _KINDS.get(name)
    if kind is None:
        raise ValueError(f"{name!r} is not a failure kind{did_you_mean(name)}")
    return kind


def label(name: str) -> str:
    """What a table row, badge or legend calls ``name``: a failure kind, a metric or a
    termination (in that order); any other name with its underscores as spaces."""
    kind = _KINDS.get(name)
    if kind is not None:
        return kind.label
    return METRIC_LABELS.get(name) or TERMINATION_LABELS.get(name) or name.replace("_", " ")


def did_you_mean(name: str) -> str:
    """`` (did you mean 'collapse'?)`` for the closest failure kind, or ``""``."""
    close = difflib.get_close_matches(name, list(_KINDS), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 scenario``, ``17 scenarios`` (``many`` for an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"
