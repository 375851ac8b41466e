"""Per-call labels for the transcript views: from the runs' scores, or raw facts only.

:class:`SummaryAnnotator` reads :class:`harness.scoring.models.RunScore` (``calls``,
``drift``, ``schema_violations``, ``malformed``) from ``scores.jsonl`` and
``ScenarioComparison.first_divergence``; nothing is re-scored, and failure kinds are
named by :func:`harness.kinds.label`. :class:`FactsAnnotator` is used when a run folder
was never scored: it labels only what is literally on disk (arguments that are not JSON,
an argument string identical to an earlier call's), never a score.
"""

from __future__ import annotations

import json
from typing import Any

from harness.kinds import label
from harness.present.report.view import Badge
from harness.scoring.models import RunScore
from harness.summary import Summary
from harness.transcript import RunRecord

__all__ = ["FactsAnnotator", "SummaryAnnotator"]


def _run_index(rec: RunRecord, turn: int, index: int) -> int:
    """Run-wide 0-based index of call ``index`` of ``turn`` (summary's ``call_index``)."""
    n = 0
    for t in rec.turns[:turn]:
        n += len(t.response.tool_calls) if t.response else 0
    return n + index


def _top_key(path: str) -> str:
    for sep in (".", "["):
        path = path.split(sep, 1)[0]
    return path


class SummaryAnnotator:
    """Labels from the rendered runs' scores (drift, repeats, schema errors) and the
    summary's first divergences."""

    def __init__(self, summary: Summary | None, scores: dict[str, RunScore]) -> None:
        self.summary = summary
        self.scores = scores

    def _turn_of(self, score: RunScore, call_index: int) -> int | None:
        return next((c.turn for c in score.calls if c.call_index == call_index), None)

    def call_badges(self, rec: RunRecord, turn: int, index: int) -> list[Badge]:
        """Labels of call ``index`` of ``turn`` from the run's score (drift, repeats, schema
        errors)."""
        score = self.scores.get(rec.run_key)
        if score is None:
            return []
        ci = _run_index(rec, turn, index)
        out: list[Badge] = []
        for c in score.calls:
            if c.call_index == ci and c.repeat_of is not None:
                t = self._turn_of(score, c.repeat_of)
                where = f"turn {t}" if t is not None else f"call {c.repeat_of}"
                out.append(
                    Badge(f"repeat of {where}", "warn", "same tool, same canonical arguments")
                )
        for m in score.malformed:
            if m.call_index == ci:
                out.append(Badge(label(m.kind), "bad", m.reason))
        for v in score.schema_violations:
            if v.call_index == ci and not v.path:
                out.append(Badge("schema: " + v.message[:80], "bad", v.message))
        return out

    def arg_badges(self, rec: RunRecord, turn: int, index: int) -> dict[str, list[Badge]]:
        """Labels of the call's arguments by key, from the run's score."""
        score = self.scores.get(rec.run_key)
        out: dict[str, list[Badge]] = {}
        if score is None:
            return out
        ci = _run_index(rec, turn, index)
        for d in score.drift:
            if d.call_index == ci:
                title = f"{d.kind} at {d.path}" + (f"; expected {d.expected}" if d.expected else "")
                out.setdefault(_top_key(d.path), []).append(Badge(d.phrase, "bad", title))
        for v in score.schema_violations:
            if v.call_index != ci or not v.path:
                continue
            key = _top_key(v.path)
            if key in out:  # the drift badge names it already; keep the message as a tooltip
                out[key][0].title += f"; schema: {v.message}"
            else:
                out[key] = [Badge("schema: " + v.message[:60], "warn", f"{v.path}: {v.message}")]
        return out

    def run_badges(self, rec: RunRecord) -> list[Badge]:
        """Labels of the whole run: passed or failed and each failure kind, or not scored (an
        infrastructure error)."""
        score = self.scores.get(rec.run_key)
        if score is None:
            return []
        if score.infra_error is not None:
            return [Badge("infrastructure error (not scored)", "muted", score.infra_error.message)]
        out = [
            Badge("passed", "good")
            if score.passed
            else Badge("failed", "bad", ", ".join(score.failures))
        ]
        out += [Badge(label(k), "bad") for k in score.failures]
        return out

    def first_divergence(self, scenario_id: str, repeat: int) -> int | None:
        """The turn where the run first parts from the other side, from the summary; else None."""
        comp = self.summary.comparison(scenario_id) if self.summary else None
        if comp is None or comp.first_divergence is None:
            return None
        d = comp.first_divergence
        keys = (d.baseline_run, d.candidate_run)
        if any(f"/{scenario_id}/{repeat}/" in k for k in keys) or not any(keys):
            return d.turn
        return None


class FactsAnnotator:
    """Labels of raw facts only (no summary.json): unparseable arguments, identical strings."""

    def call_badges(self, rec: RunRecord, turn: int, index: int) -> list[Badge]:
        """Labels from the call's raw facts: arguments that are not JSON, a call identical to an
        earlier one."""
        out: list[Badge] = []
        call = rec.turns[turn].response.tool_calls[index]  # type: ignore[union-attr]
        if isinstance(call.arguments, str):
            try:
                json.loads(call.arguments)
            except ValueError:
                out.append(Badge("arguments are not valid JSON", "bad"))
        earlier = _earlier_identical(rec, turn, index)
        if earlier is not None:
            out.append(
                Badge(
                    f"same as a call at turn {earlier}",
                    "warn",
                    "identical tool name and argument string (raw fact, not a score)",
                )
            )
        return out

    def arg_badges(self, rec: RunRecord, turn: int, index: int) -> dict[str, list[Badge]]:
        """None without a summary: an empty mapping."""
        return {}

    def run_badges(self, rec: RunRecord) -> list[Badge]:
        """None without a summary: an empty list."""
        return []

    def first_divergence(self, scenario_id: str, repeat: int) -> int | None:
        """Not known without a summary: None."""
        return None


def _call_key(call: Any) -> str:
    args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    return f"{call.name}\x00{args}"


def _earlier_identical(rec: RunRecord, turn: int, index: int) -> int | None:
    """Turn of the first earlier call with the same name and argument string, if any."""
    entries = [
        (t.index, i, _call_key(c))
        for t in rec.turns
        if t.response is not None
        for i, c in enumerate(t.response.tool_calls)
    ]
    pos = next(p for p, (t, i, _) in enumerate(entries) if (t, i) == (turn, index))
    return next((t for t, _, k in entries[:pos] if k == entries[pos][2]), None)
