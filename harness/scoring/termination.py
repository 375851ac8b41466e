"""A run's termination as scored (``final_answer``, ``turn_cap``, ``length``,
``empty_stop``, ``malformed``, ``error``). Pure.
"""

from __future__ import annotations

from harness.scoring.answers import leaked_in_content
from harness.scoring.calls import ParsedCall
from harness.scoring.contract import reasoning_calls
from harness.scoring.leaks import ToolParams
from harness.scoring.models import Termination
from harness.transcript import RunRecord

__all__ = ["termination"]


def termination(
    record: RunRecord, calls: list[ParsedCall], tools: ToolParams, *, refused: bool = False
) -> Termination:
    """How the run ended, as scored: the record's ``stop_reason``, except ``error`` for an
    infrastructure error and ``malformed`` for a last response whose content holds a leaked
    call or template markup (or calls in its reasoning), or, short of a final answer, whose
    calls all have unusable arguments (``calls``: :func:`~harness.scoring.calls.parse_calls`; ``tools``: the
    declared tools; ``refused``: the server refused a later request over the model's
    unreadable call, :func:`~harness.scoring.calls.history_refusal`: ``malformed``)."""
    if refused:
        return "malformed"
    if record.is_infra_error:
        return "error"
    last = next((t.response for t in reversed(record.turns) if t.response is not None), None)
    if (
        last is not None
        and not last.tool_calls
        and (leaked_in_content(last.content, tools) or reasoning_calls(last, tools))
    ):
        return "malformed"
    last_turn = record.turns[-1].index if record.turns else -1
    tail = [c for c in calls if c.turn == last_turn]
    if (
        record.stop_reason != "final_answer"
        and tail
        and all(c.malformed and c.args is None for c in tail)
    ):
        return "malformed"
    return record.stop_reason
