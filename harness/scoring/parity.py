"""Stream/non-stream parity: do the streamed and the non-streamed runs assemble the same calls?

``--stream both`` runs every scenario and repeat twice against a target, once with
``stream: false`` and once with SSE streaming. A correct server assembles the same
assistant messages either way; servers have shipped streaming tool-call parsers that
drop the last brace of ``arguments``, drop empty ``arguments`` (``""`` for ``"{}"``),
or number ``tool_calls`` deltas from 1. :func:`parity_report` pairs the two runs of
each (target, scenario, repeat) and lists where they differ.

Compared per turn, in order (the OpenAI chat-completions ``message.tool_calls`` and the
``chat.completion.chunk`` ``delta.tool_calls`` assembled by ``index``, as
:mod:`harness.client.completions` records them):

- ``finish_reason`` of the turn;
- ``content``: whether the turn has a written answer (non-blank ``content`` that is not a
  leaked call);
- ``leak``: the calls to declared tools written into ``content``
  (:func:`harness.scoring.leaks.find_leaks`: tool names, in order), so a server whose
  parser fails only when streaming shows here;
- ``calls``: the number of tool calls (when it differs, indices and ids are not compared);
- per call (over the calls both have): ``name``; ``arguments`` (equal when both parse to the same JSON value, else
  the raw strings must be identical); ``index`` (the record's ``index``, the position
  for non-streamed messages that carry none); ``id``: presence and distinctness within
  the message only, since most servers draw ids at random per request.

Only the first turn that differs is reported for a pair: later turns answer different
tool results, so their differences are consequences. A different ``stop_reason`` is
reported too (``turn`` None). Runs with an infrastructure error, and runs without a
partner in the other mode, are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel

from harness.scoring.drift import canonical_json
from harness.scoring.leaks import ToolParams, find_leaks, tool_params
from harness.transcript import ResponseRecord, RunRecord, ToolCallRecord

__all__ = ["ParityDiff", "ParityField", "pair_diffs", "pair_runs", "parity_report"]

#: What differs between the stream and the nostream run.
ParityField = Literal[
    "finish_reason", "content", "leak", "calls", "name", "arguments", "index", "id", "stop_reason"
]

_EXCERPT = 120


class ParityDiff(BaseModel):
    """One difference between the streamed and the non-streamed run of the same work.

    ``target``: the run's side (or label); ``turn``: 0-based turn index (None for
    ``stop_reason``); ``call_index``: 0-based position of the call in the turn's
    ``tool_calls`` (None for turn-level fields); ``stream``/``nostream``: what each run
    had, as JSON text cut to 120 characters; ``message``: one line for a reviewer.
    """

    target: str
    scenario_id: str
    repeat: int
    turn: int | None
    call_index: int | None = None
    field: ParityField
    stream: str
    nostream: str
    message: str


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


def pair_runs(records: Iterable[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """``(stream run, nostream run)`` per (target, scenario, repeat) that has both.

    A later record with the same ``run_key`` replaces an earlier one; runs with an
    infrastructure error are left out. Sorted by target, scenario and repeat.
    """
    latest = {r.run_key: r for r in records if not r.is_infra_error}
    by: dict[tuple[str, str, int], dict[bool, RunRecord]] = {}
    for r in latest.values():
        key = (r.side, r.scenario_id, r.repeat)
        by.setdefault(key, {})[r.stream] = r
    return [(m[True], m[False]) for _, m in sorted(by.items()) if len(m) == 2]


def _arguments_equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        pa = json.loads(a) if isinstance(a, str) else a
        pb = json.loads(b) if isinstance(b, str) else b
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(a, str) == isinstance(b, str) and canonical_json(pa) == canonical_json(pb)


def _id_shape(calls: list[ToolCallRecord]) -> str:
    """``missing`` (some call has no id), ``repeated`` (ids not distinct) or ``ok``."""
    ids = [c.id for c in calls]
    if any(not i for i in ids):
        return "missing"
    return "repeated" if len(set(ids)) < len(ids) else "ok"


def _indices(calls: list[ToolCallRecord]) -> list[int | None]:
    return [c.index if c.index is not None else i for i, c in enumerate(calls)]


def _leaked(r: ResponseRecord, tools: ToolParams) -> list[str]:
    """``"tool (dialect)"`` per call to a declared tool written into the content."""
    return [f"{x.tool} ({x.dialect})" for x in find_leaks(r.content, tools)]


def _written(r: ResponseRecord, leaks: list[str]) -> str:
    """Whether the turn has a written answer: non-blank content that is not a leaked call."""
    return "written answer" if (r.content or "").strip() and not leaks else "no written answer"


def _turn_diffs(
    s: ResponseRecord, n: ResponseRecord, tools: ToolParams
) -> list[tuple[ParityField, int | None, Any, Any]]:
    """``(field, call index, stream value, nostream value)`` for one turn."""
    out: list[tuple[ParityField, int | None, Any, Any]] = []
    if s.finish_reason != n.finish_reason:
        out.append(("finish_reason", None, s.finish_reason, n.finish_reason))
    leaks_s, leaks_n = _leaked(s, tools), _leaked(n, tools)
    if _written(s, leaks_s) != _written(n, leaks_n):
        out.append(("content", None, _written(s, leaks_s), _written(n, leaks_n)))
    if leaks_s != leaks_n:
        out.append(("leak", None, ", ".join(leaks_s) or "none", ", ".join(leaks_n) or "none"))
    if len(s.tool_calls) != len(n.tool_calls):
        out.append(("calls", None, len(s.tool_calls), len(n.tool_calls)))
    elif _indices(s.tool_calls) != _indices(n.tool_calls):
        out.append(("index", None, _indices(s.tool_calls), _indices(n.tool_calls)))
    if len(s.tool_calls) == len(n.tool_calls) and _id_shape(s.tool_calls) != _id_shape(
        n.tool_calls
    ):
        out.append(("id", None, _id_shape(s.tool_calls), _id_shape(n.tool_calls)))
    for i, (cs, cn) in enumerate(zip(s.tool_calls, n.tool_calls, strict=False)):
        if cs.name != cn.name:
            out.append(("name", i, cs.name, cn.name))
        if not _arguments_equal(cs.arguments, cn.arguments):
            out.append(("arguments", i, cs.arguments, cn.arguments))
    return out


_MESSAGES: dict[str, str] = {
    "finish_reason": "finish_reason differs",
    "content": "one wrote an answer, the other did not",
    "leak": "tool calls written into content differ",
    "calls": "number of tool calls differs",
    "index": "tool_call indices differ",
    "id": "tool_call ids differ in presence or distinctness",
    "name": "function name differs",
    "arguments": "arguments differ",
    "stop_reason": "the runs ended differently",
}


def _diff(
    run: RunRecord, turn: int | None, idx: int | None, field: ParityField, sv: Any, nv: Any
) -> ParityDiff:
    where = "end of run" if turn is None else f"turn {turn}"
    where += f" call {idx}" if idx is not None else ""
    return ParityDiff(
        target=run.side,
        scenario_id=run.scenario_id,
        repeat=run.repeat,
        turn=turn,
        call_index=idx,
        field=field,
        stream=_text(sv),
        nostream=_text(nv),
        message=f"{where}: {_MESSAGES[field]}",
    )


def pair_diffs(s: RunRecord, n: RunRecord) -> list[ParityDiff]:
    """The differences of one pair: the streamed run ``s`` and the non-streamed run ``n``."""
    out: list[ParityDiff] = []
    tools = tool_params(s.tools or s.scenario.get("tools") or [])
    for ts, tn in zip(s.turns, n.turns, strict=False):
        if ts.response is None or tn.response is None:
            break
        found = _turn_diffs(ts.response, tn.response, tools)
        out += [_diff(s, ts.index, idx, f, sv, nv) for f, idx, sv, nv in found]
        if found:
            break
    if s.stop_reason != n.stop_reason:
        out.append(_diff(s, None, None, "stop_reason", s.stop_reason, n.stop_reason))
    return out


def parity_report(records: Iterable[RunRecord]) -> list[ParityDiff]:
    """Every stream/non-stream difference in ``records`` (pure; see the module docstring).

    Returns an empty list when every pair agrees, or when no run has a partner in the
    other stream mode (e.g. a run made with only one mode).
    """
    return [d for s, n in pair_runs(records) for d in pair_diffs(s, n)]
