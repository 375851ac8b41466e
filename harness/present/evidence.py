"""What a failing scenario test prints: thresholds, expected calls, runs, the trace.

Pure functions of the scenario, the scores (:class:`harness.scoring.models.RunScore`) and
the session's :class:`~harness.summary.Summary`; the plugin's ``repr_failure`` prints
their text. The calls of the first failed run are the drifted-argument trace of the
console and the report (:func:`harness.present.views.drift_trace`)::

    turn 0 entropy {"values": "[0.5, 0.25, 0.25]", "base": 2}  <- values: array sent as a string
    turn 1 entropy {"values": [0, 0, 0], "base": 0}  <- values: values collapsed to zeros
    turns 3-11: the same call repeated 9 more times (repeated identical calls)

Model output is shown as text, never evaluated.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

from harness.kinds import plural
from harness.present.views import divergence_lines, drift_trace, metric_rows
from harness.scenario.model import Scenario
from harness.scoring.models import RunScore
from harness.summary import Summary

__all__ = [
    "ARGS_WIDTH",
    "expected_sequence",
    "failure_counts",
    "format_comparison",
    "format_run",
    "run_line",
]

#: widest arguments excerpt in a line (characters)
ARGS_WIDTH = 140


def _cut(text: str, width: int = ARGS_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


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
    """One line per run: ``candidate run 0 [stream]: stop reason turn_cap after 12 turns;
    36 tool calls (33 repeated); no acceptable final answer; failed: repeat_loop, ...``."""
    mode = " [stream]" if score.stream else ""
    head = f"{score.side} run {score.repeat}{mode}"
    if score.infra_error is not None:
        err = score.infra_error
        return f"{head}: infrastructure error ({err.kind}): {_cut(err.message, 160)}"
    parts = [f"stop reason {score.termination} after {score.turns} turns"]
    parts.append(f"{plural(score.tool_calls, 'tool call')} ({score.repeated_calls} repeated)")
    parts.append("final answer ok" if score.final_answer_ok else "no acceptable final answer")
    verdict = "passed" if score.passed else "failed: " + ", ".join(score.failures or ["?"])
    return f"{head}: {'; '.join(parts)}; {verdict}"


def _missing(item: str) -> str:
    """``seg0:entropy`` (the scores' form) as ``entropy (opening)``; ``seg2:x`` as
    ``x (follow-up 2)``: the segments of :meth:`harness.scenario.model.Scenario.segments`."""
    seg, sep, tool = item.partition(":")
    if not sep or not seg.startswith("seg") or not seg[3:].isdigit():
        return item
    n = int(seg[3:])
    return f"{tool} ({'opening' if n == 0 else f'follow-up {n}'})"


def format_run(score: RunScore) -> list[str]:
    """The evidence of one run: how it stopped, its calls turn by turn with their drift
    (:func:`harness.present.views.drift_trace`), missing calls, repeats, schema, protocol,
    a refusal the history explains, information findings, the final answer."""
    if score.infra_error is not None:
        return [run_line(score)]
    lines = [f"  stop reason: {score.termination} after {score.turns} turns"]
    lines.append("  calls, turn by turn:")
    lines += ["    " + t.text() for t in drift_trace(score)] or ["    (none)"]
    seq = score.sequence
    if seq.missing:
        lines.append(f"  missing expected calls: {', '.join(map(_missing, seq.missing))}")
    if not seq.order_kept:
        lines.append("  expected order not kept")
    if score.repeated_calls:
        lines.append(
            f"  repeated identical calls: {score.repeated_calls} "
            f"(longest streak {score.longest_repeat_streak}, scenario allows {score.allowed_repeats})"
        )
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
    refusal = score.history_refusal
    if refusal is not None:
        lines.append(
            f"  refused: turn {refusal.refused_turn} HTTP {refusal.status} over the call of turn "
            f"{refusal.turn} ({refusal.tool}): {_cut(refusal.message, 160)}"
        )
    lines += [f"  information: turn {o.turn} {o.kind}: {o.message}" for o in score.information[:3]]
    if score.final_excerpt:
        lines.append(f"  final answer: {_cut(score.final_excerpt, 160)}")
    return lines


def failure_counts(scores: Iterable[RunScore]) -> str:
    """``repeat_loop x3, container_as_string x2`` over the scored runs."""
    counts = Counter(kind for s in scores for kind in s.failures)
    return ", ".join(f"{k} x{n}" for k, n in counts.most_common()) or "none"


def format_comparison(summary: Summary, scenario_id: str) -> list[str]:
    """The compare verdict of one scenario with its decisive rows (the tables' rows,
    :func:`harness.present.views.metric_rows`) and first divergence."""
    comp = summary.comparison(scenario_id)
    if comp is None:
        return []
    lines = [f"compare verdict: {comp.label}"]
    lines += [f"  {reason}" for reason in comp.reasons]
    names = [summary.side_label(s.side) for s in summary.sides]
    for row in metric_rows(summary, scenario_id):
        if row.decisive or row.significant:
            cells = ", ".join(f"{n} {c}" for n, c in zip(names, row.cells, strict=True))
            adj = f", p adj. (W-Y) {row.p_adjusted}" if row.p_adjusted else ""
            lines.append(f"  {row.label}: {cells} (p one-sided {row.p_value}{adj})")
    for i, text in enumerate(divergence_lines(comp, summary)):
        lines.append(("  " if i == 0 else "    ") + _cut(text))
    return lines
