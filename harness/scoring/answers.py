"""Final answers: each segment's last response, when it has no calls and real content,
against what the segment's ``final_answer`` expects (missing, or not what it expects).
Pure.

A response whose ``content`` holds a leaked call or template markup is never a final
answer, whatever else it says.
"""

from __future__ import annotations

import re

from harness.kinds import FailureKind
from harness.scenario.model import Scenario
from harness.scoring.contract import reasoning_calls
from harness.scoring.leaks import ToolParams, find_leaks, markup_tokens
from harness.transcript import RunRecord, TurnRecord

__all__ = ["final_answers", "leaked_in_content"]


def _segment_turns(record: RunRecord) -> dict[int, list[TurnRecord]]:
    out: dict[int, list[TurnRecord]] = {}
    for t in record.turns:
        out.setdefault(t.segment, []).append(t)
    return out


def leaked_in_content(content: str | None, tools: ToolParams) -> bool:
    """Whether ``content`` holds template markup or a call to a declared tool (``tools``)."""
    return bool(content and (markup_tokens(content) or find_leaks(content, tools)))


def _final_text(turns: list[TurnRecord], tools: ToolParams) -> str | None:
    """The segment's final answer: the last response, if it has no calls and real content
    (neither a leaked call nor template markup)."""
    last = turns[-1].response if turns else None
    if last is None or last.tool_calls or last.finish_reason == "length":
        return None
    text = (last.content or "").strip()
    if not text or leaked_in_content(text, tools) or reasoning_calls(last, tools):
        return None
    return text


def final_answers(
    record: RunRecord, sc: Scenario, tools: ToolParams
) -> tuple[bool, bool, str | None, set[FailureKind]]:
    """Each segment's final answer against its ``final_answer`` expectation.

    ``tools``: the declared tools (a leaked call to one is not an answer).

    Returns:
        ``(every required answer reached, all meet expectations, last answer, failure
        kinds)``: ``missing_final_answer``, ``wrong_final_answer``.
    """
    by_seg = _segment_turns(record)
    reached = ok = True
    kinds: set[FailureKind] = set()
    last: str | None = None
    for si, seg in enumerate(sc.segments()):
        text = _final_text(by_seg.get(si, []), tools)
        fa = seg.final_answer
        if text is None:
            if fa.required:
                reached = ok = False
                kinds.add(FailureKind.MISSING_FINAL_ANSWER)
            continue
        last = text
        good = all(s.lower() in text.lower() for s in fa.contains) and (
            fa.regex is None or re.search(fa.regex, text, re.IGNORECASE | re.DOTALL) is not None
        )
        if not good:
            ok = False
            kinds.add(FailureKind.WRONG_FINAL_ANSWER)
    return reached, ok and reached, last, kinds
