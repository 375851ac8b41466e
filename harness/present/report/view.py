"""Transcript views: what the report shows for each scenario, side and turn.

Built from :class:`harness.transcript.RunRecord` (raw facts) plus the per-call
annotations of an :class:`Annotator` (drift names, repeats, schema errors), which
come from ``summary.json`` when present (see :mod:`harness.present.report.annotate`).
Nothing here scores a run; the views only arrange what is on disk.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from harness.present.report.select import LIST_LIMIT, RunFacts
from harness.transcript import RunManifest, RunRecord, TargetInfo, TurnRecord

if TYPE_CHECKING:
    from harness.present.report.load import ReportInput

__all__ = [
    "Annotator",
    "ArgView",
    "Badge",
    "CallView",
    "PairView",
    "RunLine",
    "RunList",
    "RunView",
    "ScenarioView",
    "SideView",
    "TurnView",
    "build_scenario",
    "build_sides",
    "fold",
    "pretty_json",
    "runs_by_scenario",
]

#: characters of a raw JSON block shown before it is cut (the file keeps everything)
RAW_LIMIT = 60_000
#: characters of a tool result shown before the rest is folded
RESULT_PREVIEW = 400
_ROLE_ORDER = {"baseline": 0, "candidate": 1}


@dataclass
class Badge:
    """A short label on a call, turn or run. ``tone``: bad, warn, good, info, muted."""

    text: str
    tone: str = "bad"
    title: str = ""


@dataclass
class ArgView:
    """One top-level argument of a call: key, JSON value, and its drift badges."""

    key: str
    value: str
    badges: list[Badge] = field(default_factory=list)


@dataclass
class CallView:
    """One tool call as shown: name, arguments by key (or raw text) and labels."""

    index: int
    name: str
    args: list[ArgView]  # empty when the arguments are not a JSON object
    raw: str  # the arguments as received (string shown verbatim)
    parsed: bool
    badges: list[Badge] = field(default_factory=list)


@dataclass
class ResultView:
    name: str
    preview: str
    rest: str  # "" unless the content is longer than RESULT_PREVIEW
    error: bool


@dataclass
class TurnView:
    """One turn as shown: the user messages, the reply's content, reasoning, calls and results."""

    index: int
    segment: int
    user_messages: list[str]
    content: str | None
    reasoning: str | None
    calls: list[CallView]
    results: list[ResultView]
    finish_reason: str | None
    latency_s: float | None
    tokens: str
    error: str | None
    raw_request: str
    raw_response: str
    badges: list[Badge] = field(default_factory=list)
    divergence: bool = False


@dataclass
class RunView:
    """One run as shown: its side, key, turns, final answer, error and labels."""

    side: str
    label: str
    run_key: str
    repeat: int
    stream: bool
    stop_reason: str
    final_content: str | None
    n_calls: int
    turns: list[TurnView]
    error: str | None
    badges: list[Badge] = field(default_factory=list)
    tools_json: str = ""  # the ``tools`` request field, sent with every request


@dataclass
class PairView:
    """One repeat of a scenario on every side, aligned turn by turn."""

    title: str
    runs: list[RunView | None]
    rows: list[list[TurnView | None]]
    first_divergence: int | None = None


@dataclass
class SideView:
    """One column of the report: a side's key, label, role and server."""

    key: str  # "baseline" / "candidate" / a target label
    label: str
    role: str | None
    target: TargetInfo | None
    css: str  # "a", "b", "c", ... (colour slot)


@dataclass
class ScenarioView:
    """One scenario as shown: its pairs of runs rendered turn by turn and the runs only listed."""

    id: str
    description: str
    kinds: list[str]
    opening: list[dict[str, str]]
    pairs: list[PairView]
    runs_by_side: dict[str, list[RunFacts]]
    summary: Any = None  # the summary's per-scenario entry, if any
    listed: list[RunList] = field(default_factory=list)  # runs not rendered turn by turn
    total_keys: int = 0  # (repeat, mode) keys of the scenario, rendered or not


class Annotator(Protocol):
    """Source of per-call/turn/run labels (summary.json, or raw facts only)."""

    def call_badges(self, rec: RunRecord, turn: int, index: int) -> list[Badge]:
        """Labels of call ``index`` of turn ``turn`` of ``rec``."""

    def arg_badges(self, rec: RunRecord, turn: int, index: int) -> dict[str, list[Badge]]:
        """Labels of that call's arguments, by argument key."""

    def run_badges(self, rec: RunRecord) -> list[Badge]:
        """Labels of the whole run."""

    def first_divergence(self, scenario_id: str, repeat: int) -> int | None:
        """The turn where repeat ``repeat`` of the scenario first parts between sides, or None."""


def pretty_json(value: Any, *, limit: int = RAW_LIMIT, indent: int | None = 2) -> str:
    """JSON text of ``value`` (non-ASCII kept), cut at ``limit`` characters with a note."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… cut: {len(text) - limit} more characters in transcripts.jsonl"
    return text


def fold(text: str | None, limit: int = RAW_LIMIT) -> str | None:
    """``text`` up to ``limit`` characters, the rest folded into a note with its size (a
    model's or server's text can be megabytes; the report stays bounded)."""
    if text is None or len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n… folded: {len(text) - limit:,} more characters "
        f"({len(text):,} in all) in transcripts.jsonl"
    )


def build_sides(
    records: Iterable[RunRecord | RunFacts], manifest: RunManifest | None
) -> list[SideView]:
    """Columns in display order: baseline, candidate, then other labels as first seen."""
    seen: dict[str, TargetInfo] = {}
    for t in manifest.targets if manifest else []:
        seen.setdefault(t.key, t)
    for r in records:
        seen.setdefault(r.side, r.target)
    keys = sorted(seen, key=lambda k: (_ROLE_ORDER.get(k, 2), list(seen).index(k)))
    return [
        SideView(
            key=k, label=seen[k].label, role=seen[k].side, target=seen[k], css="abcdefgh"[i % 8]
        )
        for i, k in enumerate(keys)
    ]


def _call_view(rec: RunRecord, turn: int, index: int, ann: Annotator) -> CallView:
    call = rec.turns[turn].response.tool_calls[index]  # type: ignore[union-attr]
    raw_args = call.arguments
    parsed: Any = raw_args
    ok = False
    if isinstance(raw_args, str):
        try:
            parsed, ok = json.loads(raw_args), True
        except ValueError:
            parsed = None
    raw = (
        (fold(raw_args) or "") if isinstance(raw_args, str) else pretty_json(raw_args, indent=None)
    )
    marks = ann.arg_badges(rec, turn, index)
    args: list[ArgView] = []
    if isinstance(parsed, dict):
        for k, v in parsed.items():
            args.append(
                ArgView(str(k), pretty_json(v, indent=None, limit=2000), marks.pop(str(k), []))
            )
    for k, badges in marks.items():  # findings about keys that are absent (dropped keys)
        args.append(ArgView(k, "(absent)", badges))
    return CallView(
        index,
        call.name or "(no name)",
        args,
        raw,
        ok and isinstance(parsed, dict),
        ann.call_badges(rec, turn, index),
    )


def _raw_request(rec: RunRecord, t: TurnRecord) -> str:
    body: dict[str, Any] = dict(t.request_params)
    body["messages"] = rec.request_messages(t.index)
    if len(json.dumps(body["messages"], default=str)) > RAW_LIMIT:
        body["messages"] = t.new_messages
        body["_note"] = "messages since the previous request only (the full list is long)"
    if rec.tools:  # identical in every request: shown once, in the run's header
        body["tools"] = f"(the {len(rec.tools)} tools shown under 'tools' in this run's header)"
    return _request_text(body)


def _dump(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, default=str)


def _request_text(body: dict[str, Any]) -> str:
    """JSON of a request body, indented, with one message per line (compact and readable)."""
    items = []
    for k, v in body.items():
        if k == "messages" and isinstance(v, list):
            inner = ",\n".join(f"    {_dump(m)}" for m in v)
            items.append(f'  "messages": [\n{inner}\n  ]')
        else:
            items.append(f"  {_dump(k)}: {_dump(v)}")
    text = "{\n" + ",\n".join(items) + "\n}"
    if len(text) > RAW_LIMIT:
        text = (
            text[:RAW_LIMIT]
            + f"\n… cut: {len(text) - RAW_LIMIT} more characters in transcripts.jsonl"
        )
    return text


def _tokens(usage: dict[str, Any] | None) -> str:
    if not usage:
        return ""
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return f"{p} → {c} tokens" if p is not None and c is not None else ""


def _turn_view(rec: RunRecord, t: TurnRecord, ann: Annotator) -> TurnView:
    resp = t.response
    users = [
        fold(str(m.get("content", ""))) or "" for m in t.new_messages if m.get("role") == "user"
    ]
    results = [
        ResultView(r.name or "", r.content[:RESULT_PREVIEW], r.content[RESULT_PREVIEW:], r.error)
        for r in t.tool_results
    ]
    calls = [_call_view(rec, t.index, i, ann) for i in range(len(resp.tool_calls))] if resp else []
    err = t.error.message if t.error else None
    return TurnView(
        index=t.index,
        segment=t.segment,
        user_messages=users if t.index > 0 else [],
        content=fold(resp.content) if resp else None,
        reasoning=fold(resp.reasoning_content) if resp else None,
        calls=calls,
        results=results,
        finish_reason=resp.finish_reason if resp else None,
        latency_s=resp.latency_s if resp else None,
        tokens=_tokens(resp.usage if resp else None),
        error=err,
        raw_request=_raw_request(rec, t),
        raw_response=pretty_json(resp.raw) if resp is not None else "(no response)",
    )


def _run_view(rec: RunRecord, ann: Annotator) -> RunView:
    return RunView(
        side=rec.side,
        label=rec.target.label,
        run_key=rec.run_key,
        repeat=rec.repeat,
        stream=rec.stream,
        stop_reason=rec.stop_reason,
        final_content=fold(rec.final_content),
        n_calls=sum(1 for _ in rec.all_tool_calls()),
        turns=[_turn_view(rec, t, ann) for t in rec.turns],
        error=rec.error.message if rec.error else None,
        badges=ann.run_badges(rec),
        tools_json=pretty_json(rec.tools) if rec.tools else "",
    )


def _pair(title: str, recs: list[RunRecord | None], ann: Annotator, sid: str, rep: int) -> PairView:
    runs = [_run_view(r, ann) if r is not None else None for r in recs]
    depth = max((len(r.turns) for r in runs if r is not None), default=0)
    rows = [
        [r.turns[i] if r is not None and i < len(r.turns) else None for r in runs]
        for i in range(depth)
    ]
    div = ann.first_divergence(sid, rep)
    for row in rows if div is not None else []:
        for cell in row:
            if cell is not None and cell.index == div:
                cell.divergence = True
    return PairView(title, runs, rows, div)


@dataclass
class RunLine:
    """A run listed compactly (not rendered turn by turn)."""

    run_key: str
    stop_reason: str
    n_calls: int
    passed: bool | None  # None: not scored (no summary, or an infrastructure error)


@dataclass
class RunList:
    """One side's runs of a scenario that are not rendered turn by turn."""

    side: SideView
    lines: list[RunLine]
    more: int  # runs beyond ``lines`` (see transcripts.jsonl)


def _run_lists(
    runs: list[RunFacts], shown: set[tuple[int, bool]], sides: list[SideView]
) -> list[RunList]:
    out = []
    for s in sides:
        rest = sorted(
            (r for r in runs if r.side == s.key and r.key not in shown), key=lambda r: r.key
        )
        lines = [RunLine(r.run_key, r.stop_reason, r.n_calls, r.passed) for r in rest[:LIST_LIMIT]]
        if rest:
            out.append(RunList(s, lines, len(rest) - len(lines)))
    return out


def runs_by_scenario(rf: ReportInput) -> dict[str, list[RunFacts]]:
    """Scenario id (sorted) -> the facts of its runs."""
    by_sid: dict[str, list[RunFacts]] = {}
    for f in rf.runs:
        by_sid.setdefault(f.scenario_id, []).append(f)
    return dict(sorted(by_sid.items()))


def build_scenario(
    rf: ReportInput,
    sides: list[SideView],
    ann: Annotator,
    sid: str,
    runs: list[RunFacts],
    records: dict[tuple[str, str, int, bool], RunRecord],
) -> ScenarioView:
    """The view of scenario ``sid`` of a :class:`~harness.present.report.load.ReportInput`.

    One :class:`PairView` per (repeat, mode) key in ``rf.shown`` (the runs rendered turn
    by turn, from ``records``: (scenario, side, repeat, stream) -> record); every other
    run goes to a compact :class:`RunList`.
    """
    keys = rf.shown.get(sid, [])
    pairs = [
        _pair(
            f"repeat {rep} · {'streaming' if st else 'non-streaming'}",
            [records.get((sid, s.key, rep, st)) for s in sides],
            ann,
            sid,
            rep,
        )
        for rep, st in keys
    ]
    sc = rf.headers.get(sid, {})
    return ScenarioView(
        id=sid,
        description=str(sc.get("description") or ""),
        kinds=[str(k) for k in sc.get("targets") or []],
        opening=[
            {"role": str(m.get("role")), "content": str(m.get("content"))}
            for m in sc.get("messages") or []
        ],
        pairs=pairs,
        runs_by_side={s.key: [r for r in runs if r.side == s.key] for s in sides},
        listed=_run_lists(runs, set(keys), sides),
        total_keys=len({r.key for r in runs}),
    )
