"""What a failing scenario test prints: thresholds, call sequences, repeats, drift by turn.

Pure functions of the scenario, the run records and their scores
(:class:`harness.summary.RunScore`); the plugin's ``repr_failure`` prints their text.
The drift trace has the shape reviewers write by hand (issue 4)::

    turn 0 {"values": "[0.5, 0.25, 0.25]", "base": 2}  <- array sent as a string
    turn 1 {"values": [0, 0, 0], "base": 2}  <- values collapsed to zeros

Arguments are shown as received (the raw ``arguments`` string), cut to
:data:`ARGS_WIDTH` characters. Model output is shown as text, never evaluated.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from harness.scenario.model import Scenario
from harness.summary import RunScore, ScenarioComparison
from harness.transcript import RunRecord

__all__ = [
    "ARGS_WIDTH",
    "MAX_CALL_LINES",
    "drift_trace",
    "expected_sequence",
    "format_comparison",
    "format_run",
    "run_line",
]

#: widest arguments excerpt in a line (characters)
ARGS_WIDTH = 140
#: most calls listed per run before the rest are summarised
MAX_CALL_LINES = 8


def _cut(text: str, width: int = ARGS_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _args_text(raw: Any) -> str:
    if isinstance(raw, str):
        return _cut(raw)
    return _cut(json.dumps(raw, ensure_ascii=False))


def raw_arguments(record: RunRecord | None) -> list[str]:
    """The arguments of every call of ``record`` as received, in call order."""
    if record is None:
        return []
    return [_args_text(call.arguments) for _turn, call in record.all_tool_calls()]


def expected_sequence(scenario: Scenario) -> list[str]:
    """``tool {arguments}`` per expected call, all segments in order (optional ones marked)."""
    out: list[str] = []
    for seg_index, seg in enumerate(scenario.segments()):
        for call in seg.calls:
            args = json.dumps(call.arguments, ensure_ascii=False)
            mark = " (optional)" if call.optional else ""
            seg_note = f"[follow-up {seg_index}] " if seg_index else ""
            out.append(f"{seg_note}{call.tool} {_cut(args)}{mark}")
    return out


def run_line(score: RunScore) -> str:
    """One line per run: ``run 0 [stream]: turn_cap after 12 turns, 36 calls (33 repeated) ...``."""
    mode = " [stream]" if score.stream else ""
    head = f"{score.side} run {score.repeat}{mode}"
    if score.infra_error is not None:
        err = score.infra_error
        return f"{head}: infrastructure error ({err.kind}): {_cut(err.message, 160)}"
    parts = [f"stop reason {score.termination} after {score.turns} turns"]
    parts.append(f"{score.tool_calls} tool calls ({score.repeated_calls} repeated)")
    parts.append("final answer ok" if score.final_answer_ok else "no acceptable final answer")
    verdict = "passed" if score.passed else "failed: " + ", ".join(score.failures or ["?"])
    return f"{head}: {'; '.join(parts)}; {verdict}"


def _call_lines(score: RunScore, raw: Sequence[str]) -> list[str]:
    lines: list[str] = []
    for call in score.calls[:MAX_CALL_LINES]:
        args = raw[call.call_index] if call.call_index < len(raw) else _cut(call.arguments)
        notes = [f"repeat of call {call.repeat_of}"] if call.repeat_of is not None else []
        notes += call.kinds
        tail = f"  <- {', '.join(notes)}" if notes else ""
        lines.append(f"turn {call.turn:<2} {call.tool} {args}{tail}")
    rest = score.calls[MAX_CALL_LINES:]
    if rest:
        repeats = sum(1 for c in rest if c.repeat_of is not None)
        lines.append(f"... {len(rest)} more calls ({repeats} of them repeats of earlier calls)")
    return lines


def drift_trace(score: RunScore, raw: Sequence[str]) -> list[str]:
    """``turn t {arguments}  <- phrase`` per drifted call; identical consecutive lines folded."""
    by_call: dict[int, list[str]] = {}
    turns: dict[int, int] = {}
    for finding in score.drift:
        phrases = by_call.setdefault(finding.call_index, [])
        phrase = f"{finding.phrase.strip()} ({finding.path})" if finding.path else finding.phrase
        if phrase not in phrases:
            phrases.append(phrase)
        turns[finding.call_index] = finding.turn
    entries: list[tuple[int, str]] = []
    for index in sorted(by_call):
        args = raw[index] if index < len(raw) else _call_args(score, index)
        entries.append((turns[index], f"{args}  <- {'; '.join(by_call[index])}"))
    lines = _fold(entries)
    if len(lines) > MAX_CALL_LINES:
        rest = len(lines) - MAX_CALL_LINES
        lines = [*lines[:MAX_CALL_LINES], f"... {rest} more lines of drifted calls"]
    return lines


def _call_args(score: RunScore, index: int) -> str:
    call = next((c for c in score.calls if c.call_index == index), None)
    return _cut(call.arguments) if call is not None else "?"


def _fold(entries: Iterable[tuple[int, str]]) -> list[str]:
    """Fold runs of identical text on successive turns into ``turns 3-11``."""
    groups: list[list[Any]] = []  # [first_turn, last_turn, text, count]
    for turn, text in entries:
        if groups and groups[-1][2] == text:
            groups[-1][1] = turn
            groups[-1][3] += 1
        else:
            groups.append([turn, turn, text, 1])
    out = []
    for first, last, text, count in groups:
        where = f"turn {first}" if count == 1 else f"turns {first}-{last} ({count} calls)"
        out.append(f"{where} {text}")
    return out


def format_run(score: RunScore, record: RunRecord | None) -> list[str]:
    """The detailed evidence of one run: calls made, missing calls, drift, answer."""
    raw = raw_arguments(record)
    lines = [f"  stop reason: {score.termination} after {score.turns} turns"]
    if score.infra_error is not None:
        return [run_line(score)]
    lines.append("  actual calls:")
    lines += ["    " + line for line in _call_lines(score, raw)] or ["    (none)"]
    seq = score.sequence
    if seq.missing:
        lines.append(f"  missing expected calls: {', '.join(seq.missing)}")
    if not seq.order_kept:
        lines.append("  expected order not kept")
    if score.repeated_calls:
        lines.append(
            f"  repeated identical calls: {score.repeated_calls} "
            f"(longest streak {score.longest_repeat_streak}, scenario allows {score.allowed_repeats})"
        )
    trace = drift_trace(score, raw)
    if trace:
        lines.append("  drifted arguments by turn:")
        lines += ["    " + line for line in trace]
    lines += [
        f"  schema: turn {v.turn} {v.tool} {v.path or '(arguments)'}: {v.message}"
        for v in score.schema_violations[:3]
    ]
    lines += [
        f"  malformed: turn {m.turn} {m.kind}: {_cut(m.raw, 80)}" for m in score.malformed[:3]
    ]
    lines += [
        f"  protocol: turn {p.turn} {p.kind}: {p.message}" for p in score.protocol_violations[:3]
    ]
    if score.final_excerpt:
        lines.append(f"  final answer: {_cut(score.final_excerpt, 160)}")
    return lines


def failure_counts(scores: Iterable[RunScore]) -> str:
    """``repeat_loop x3, container_as_string x2`` over the scored runs."""
    counts = Counter(kind for s in scores for kind in s.failures)
    return ", ".join(f"{k} x{n}" for k, n in counts.most_common()) or "none"


def format_comparison(comparison: ScenarioComparison) -> list[str]:
    """The compare verdict of one scenario with its decisive rows and first divergence."""
    lines = [f"compare verdict: {comparison.verdict}"]
    lines += [f"  {reason}" for reason in comparison.reasons]
    for row in comparison.rows:
        if row.decisive or row.significant:
            p = f"p={row.p_value:.3g}" if row.p_value is not None else "p=n/a"
            lines.append(
                f"  {row.label}: baseline {row.baseline_text} -> candidate "
                f"{row.candidate_text} ({row.test}, {p})"
            )
    div = comparison.first_divergence
    if div is not None:
        lines.append(f"  first divergence at turn {div.turn}:")
        lines += [f"    baseline:  {_cut(x)}" for x in div.baseline[:4]]
        lines += [f"    candidate: {_cut(x)}" for x in div.candidate[:4]]
    return lines
