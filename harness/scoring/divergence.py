r"""First divergence: the first turn at which a baseline run and a candidate run differ.

Pure functions of two :class:`~harness.transcript.RunRecord`\ s. Calls within a turn
compare as a set of ``tool canonical-arguments``; two final answers compare equal
whatever their text (the models may word them differently); a call written into
``content`` (:func:`harness.scoring.leaks.find_leaks`) is neither a call nor an answer,
and shows as ``written into content: tool {args}``; a run that has ended
compares as ``(ended: <stop reason>)``. :func:`pick_pair` chooses which two runs of a
scenario to compare: the lowest repeat scored on both sides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from harness.scoring.drift import canonical_json, excerpt
from harness.scoring.leaks import ToolParams, find_leaks, tool_params
from harness.scoring.models import Divergence
from harness.transcript import RunRecord, TurnRecord

__all__ = ["first_divergence", "pick_pair", "turn_calls"]

#: call identities longer than this are kept as a digest (they are only compared)
_IDENT_LIMIT = 96


def _ident(text: str) -> str:
    if len(text) <= _IDENT_LIMIT:
        return text
    return "#" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def turn_calls(turn: TurnRecord, tools: ToolParams | None = None) -> list[tuple[str, str]]:
    """``(identity, shown)`` per call of a turn: identity is tool + canonical arguments
    (compared), shown is ``tool {args}`` cut to 160 characters, ``final answer: ...`` or,
    for a call to one of ``tools`` written into content, ``written into content: ...``."""
    r = turn.response
    if r is None:
        return [("(no response)", "(no response)")]
    leaks = find_leaks(r.content, tools or {}) if not r.tool_calls else []
    if leaks:
        return [
            (_ident(f"(leak) {x.tool} {canonical_json(x.arguments)}"),
             f"written into content: {x.tool} {excerpt(json.dumps(x.arguments), 140)}")
            for x in leaks
        ]  # fmt: skip
    if not r.tool_calls:
        text = (r.content or "").strip()
        return [("(answer)", f"final answer: {excerpt(text, 80)}" if text else "(empty answer)")]
    out = []
    for c in r.tool_calls:
        try:
            args = json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments
            ident, shown = canonical_json(args), json.dumps(args, ensure_ascii=False)
        except (json.JSONDecodeError, RecursionError):
            ident = shown = str(c.arguments)
        out.append((_ident(f"{c.name} {ident}"), f"{c.name} {excerpt(shown, 160)}"))
    return out


def pick_pair(baseline: Mapping[int, int], candidate: Mapping[int, int]) -> tuple[int, int] | None:
    """The two runs to compare: ``(baseline key, candidate key)`` of the lowest repeat
    scored on both sides, else the lowest repeat of each; None if a side has none.

    ``baseline``/``candidate``: repeat -> any key of that run (an offset, an index)."""
    if not baseline or not candidate:
        return None
    common = sorted(set(baseline) & set(candidate))
    if common:
        return baseline[common[0]], candidate[common[0]]
    return baseline[min(baseline)], candidate[min(candidate)]


def first_divergence(base: RunRecord, cand: RunRecord) -> Divergence | None:
    """The first turn where the two runs' calls differ, or None when they agree."""
    tools = tool_params(base.tools or base.scenario.get("tools") or [])
    tb_all = [turn_calls(t, tools) for t in base.turns]
    tc_all = [turn_calls(t, tools) for t in cand.turns]
    for i in range(max(len(tb_all), len(tc_all))):
        tb = tb_all[i] if i < len(tb_all) else [_ended(base)]
        tc = tc_all[i] if i < len(tc_all) else [_ended(cand)]
        if sorted(x for x, _ in tb) != sorted(x for x, _ in tc):
            return Divergence(
                turn=i,
                baseline_run=base.run_key,
                candidate_run=cand.run_key,
                baseline=[y for _, y in tb],
                candidate=[y for _, y in tc],
            )
    return None


def _ended(r: RunRecord) -> tuple[str, str]:
    text = f"(ended: {r.stop_reason})"
    return text, text
