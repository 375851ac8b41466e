"""View models every renderer shares: table rows, drifted-argument traces, verdict lines.

The console (:mod:`harness.present.console`), the HTML and Markdown report
(:mod:`harness.present.report`) and pytest's failure text
(:mod:`harness.present.evidence`) all show the same few things; each is built here once,
from :class:`~harness.summary.Summary` and :class:`~harness.scoring.models.RunScore`, and
only *drawn* by the renderers:

- :class:`TableRow` / :func:`metric_rows`: one metric of one scenario, a cell per side
  (``15 (3 each)``, ``0/5``) and, with two sides, the test's p-values;
- :class:`ScenarioRow` / :func:`scenario_rows`: one line per scenario of the compact
  table (pass rate per side, the failure kinds only one side shows, the verdict);
- :class:`TraceLine` / :func:`drift_trace`: a drifting run call by call, turns that
  repeat the previous turn folded into one line;
- :class:`ContractRow` / :func:`contract_rows`: one check of the contract pre-flight, a
  status per side (a difference between the sides marked);
- :func:`divergence_lines`, :func:`ending_text`, :func:`p_legend`: sentences.

Nothing here scores or tests: views only arrange what the summary and scores hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from harness.kinds import COUNT_METRICS, label, plural
from harness.scoring.models import CallScore, RunScore
from harness.stats.aggregate import unit_count_stat, unit_rate
from harness.stats.tests import format_p
from harness.summary import Aggregate, ScenarioComparison, Summary, scenario_name

__all__ = [
    "KEY_METRICS",
    "MAX_REASONS",
    "TRACE_WIDTH",
    "candidate_outcome",
    "ContractRow",
    "contract_rows",
    "ScenarioRow",
    "TableRow",
    "Trace",
    "TraceLine",
    "divergence_lines",
    "drift_trace",
    "ending_text",
    "first_drift",
    "headline",
    "format_p",
    "metric_rows",
    "p_legend",
    "scenario_name",
    "scenario_rows",
    "unit_noun",
    "units_note",
]

#: verdict reasons shown before "N more" (console, report.html, report.md alike)
MAX_REASONS = 6

#: the rows of the compact tables, in this order (then the failure kinds seen)
KEY_METRICS = ["tool_calls", "repeated_calls", "malformed_args", "drift", "final_answer", "passed"]
#: longest line of a drifted-argument trace (longer ones end with "…")
TRACE_WIDTH = 160


# ------------------------------------------------------------------ contract pre-flight


@dataclass
class ContractRow:
    """One check of the contract pre-flight: ``(label, status, detail)`` per side that ran
    it (``"-"``: not run on that side); ``differs``: the sides' statuses differ (itself a
    finding); ``bad``: some side did not honour it (``failed`` or ``error``)."""

    name: str
    cells: list[tuple[str, str, str]]
    differs: bool
    bad: bool


def contract_rows(summary: Summary) -> list[ContractRow]:
    """Every pre-flight check of the sides that ran it, in :data:`harness.preflight.CHECKS`
    order; ``[]`` when no side did (``--skip-contract``, or an older folder)."""
    ran = [s for s in summary.sides if s.contract is not None]
    names: list[str] = []
    for s in ran:
        names += [c.name for c in s.contract.checks if c.name not in names]  # type: ignore[union-attr]
    rows = []
    for name in names:
        cells = []
        for s in ran:
            c = s.contract.check(name)  # type: ignore[union-attr]
            cells.append((s.label, c.status if c else "-", c.detail if c else ""))
        statuses = {st for _, st, _ in cells}
        bad = bool(statuses & {"failed", "error"})
        rows.append(ContractRow(name, cells, len(ran) > 1 and len(statuses) > 1, bad))
    return rows


# ------------------------------------------------------------------ metric tables


@dataclass
class TableRow:
    """One metric of one scenario: a cell per side and, with two sides, the test.

    ``key``: shown in the compact tables (the :data:`KEY_METRICS` and the failure kinds
    some run showed); the others only in full tables. ``p_adjusted`` ends with ``" *"``
    when significant.
    """

    metric: str
    label: str
    cells: list[str]
    p_value: str = ""
    p_adjusted: str = ""
    significant: bool = False
    worse: bool | None = None
    decisive: bool = False
    key: bool = True


def _cell(agg: Aggregate | None, metric: str) -> str:
    """A rate or a count over the units the tests count (repeats under ``--stream
    both``, else runs: :func:`~harness.stats.aggregate.unit_rate`,
    :func:`~harness.stats.aggregate.unit_count_stat`)."""
    if agg is None:
        return "-"
    if metric in COUNT_METRICS:
        stat = unit_count_stat(agg, metric)
        return stat.text() if stat is not None else "-"
    return unit_rate(agg, metric).text()


def unit_noun(agg: Aggregate | None) -> str:
    """What a rate of ``agg`` counts: ``"repeats"`` under ``--stream both`` (a repeat's
    streamed and non-streamed runs one unit, :attr:`~harness.summary.Aggregate.units`),
    else ``"runs"``."""
    return "repeats" if agg is not None and agg.units else "runs"


def units_note(summary: Summary) -> str:
    """The sentence saying that rates count repeats, when some aggregate does (``--stream
    both``); ``""`` otherwise."""
    if not any(a.units for a in summary.aggregates):
        return ""
    return (
        "rates and counts count repeats: a repeat's streamed and non-streamed runs are one "
        "unit (the non-streamed run's outcomes and counts, the streamed run's stream-only "
        "kinds)"
    )


def _metrics(aggs: Sequence[Aggregate | None]) -> list[str]:
    kinds = sorted({k for a in aggs if a is not None for k in a.failing_kinds()})
    rest = [m for m in COUNT_METRICS if m not in KEY_METRICS]
    return [*KEY_METRICS, *kinds, *rest]


def metric_rows(
    summary: Summary, scenario_id: str, sides: Sequence[str] | None = None
) -> list[TableRow]:
    """The rows of ``scenario_id`` (``"*"``: pooled), one cell per side (``sides``: the
    columns' side keys in order; default the summary's sides).

    Order: :data:`KEY_METRICS`, the failure kinds any side showed, the other counts.
    With a comparison, each row carries its test (p one-sided, Westfall-Young adjusted p).
    """
    keys = list(sides) if sides is not None else [s.side for s in summary.sides]
    aggs = [summary.aggregate(side, scenario_id) for side in keys]
    comp = summary.comparison(scenario_id)
    tested = {r.metric: r for r in comp.rows} if comp else {}
    out = []
    for metric in _metrics(aggs):
        row = TableRow(metric, label(metric), [_cell(a, metric) for a in aggs])
        row.key = metric in KEY_METRICS or metric not in COUNT_METRICS
        t = tested.get(metric)
        if t is not None:
            row.p_value = format_p(t.p_value)
            row.p_adjusted = format_p(t.p_adjusted) + (" *" if t.significant else "")
            row.significant, row.worse, row.decisive = t.significant, t.worse, t.decisive
        out.append(row)
    return out


def _alpha(summary: Summary) -> float:
    """The level the verdict was decided at: ``alpha``, or a sequential look's share."""
    from harness.stats.sequential import look_alpha

    s = summary.settings
    return look_alpha(s.alpha, s.look, s.rounds) if s.sequential and s.look else s.alpha


def p_legend(summary: Summary) -> str:
    """The one-line legend of the p columns and of ``*`` (console, HTML and Markdown),
    with :func:`units_note` when rates count repeats."""
    family = max((c.holm_tests or 0 for c in summary.comparisons), default=0)
    over = f" over the {plural(family, 'test')} that decide the verdict" if family else ""
    units = units_note(summary)
    return (
        "p (one-sided): Fisher's exact test for rates (pooled: exact, stratified by "
        "scenario), Mann-Whitney U for counts; "
        f"p adj. (W-Y): Westfall-Young adjusted{over} (blank: not among them); "
        f"* significant at alpha {_alpha(summary):g}" + (f"; {units}" if units else "")
    )


# ------------------------------------------------------------------ the compact table


@dataclass
class ScenarioRow:
    """One scenario in the compact table: passed runs per side (``5/5``), the failure
    kinds only one side showed (``fused: collapse, repeat_loop``; without a comparison,
    each side's kinds and their runs), and the verdict label (``WORSE (not significant
    alone)``; ``""`` without a comparison)."""

    scenario_id: str
    passed: list[str]
    only: str
    verdict: str
    differs: bool  # the verdict is not NO CHANGE: traces and divergence are shown


def _kinds_text(a: Aggregate | None) -> str:
    """A side's failure kinds with the runs showing each, most first (``collapse 2``)."""
    if a is None:
        return ""
    counted = {k: unit_rate(a, k).k for k in a.failing_kinds()}
    ranked = sorted(counted, key=lambda k: (-counted[k], k))
    return ", ".join(f"{k} {counted[k]}" for k in ranked)


def _only(summary: Summary, aggs: Sequence[Aggregate | None]) -> str:
    """In a comparison, the kinds only one side showed (``fused: collapse``); else each
    side's kinds with their runs (``collapse 2``, prefixed by the side's label when there
    are several sides)."""
    if summary.kind != "compare":
        texts = [(s.label, _kinds_text(a)) for s, a in zip(summary.sides, aggs, strict=True)]
        if len(texts) == 1:
            return texts[0][1]
        return "; ".join(f"{label}: {t}" for label, t in texts if t)
    kinds = [set(a.failing_kinds()) if a else set() for a in aggs]
    parts = []
    for i, s in enumerate(summary.sides):
        others = set().union(*(k for j, k in enumerate(kinds) if j != i))
        mine = sorted(kinds[i] - others)
        if mine:
            parts.append(f"{s.label}: {', '.join(mine)}")
    return "; ".join(parts)


def scenario_rows(summary: Summary) -> list[ScenarioRow]:
    """One :class:`ScenarioRow` per scenario (the pool ``"*"`` left out), in order."""
    out = []
    for sid in summary.scenario_ids():
        if sid == "*":
            continue
        aggs = [summary.aggregate(s.side, sid) for s in summary.sides]
        comp = summary.comparison(sid)
        out.append(
            ScenarioRow(
                scenario_id=sid,
                passed=[_cell(a, "passed") for a in aggs],
                only=_only(summary, aggs),
                verdict=comp.label if comp else "",
                differs=comp is not None and comp.verdict != "NO CHANGE",
            )
        )
    return out


def ending_text(agg: Aggregate) -> str:
    """``15 passed, 70 failed (65 turn cap, 5 final answer), 2 infrastructure errors``: how
    a side's runs ended, by passed or not, then the stop reasons of the failed runs (most
    first); infrastructure errors apart, as they are left out of every rate."""
    failed = {k: n for k, n in agg.termination_failed.items() if k != "error"}
    total = sum(failed.values())
    why = ", ".join(
        f"{n} {k.replace('_', ' ')}" for k, n in sorted(failed.items(), key=lambda x: -x[1])
    )
    text = f"{agg.scored - total} passed" + (f", {total} failed ({why})" if total else "")
    if agg.infra_errors:
        text += f", {plural(agg.infra_errors, 'infrastructure error')}"
    return text


def headline(summary: Summary) -> tuple[str, str]:
    """``(banner, message)`` of a summary, as the console and the report show it: the
    comparison's verdict (``TOO MANY INFRASTRUCTURE ERRORS`` when a side could not be
    judged and nothing regressed), else the one-sided run's ``PASSED``/``FAILED``."""
    v, o = summary.verdict, summary.outcome
    if v is not None:
        message = v.message.removeprefix(v.verdict).lstrip(": ")
        if v.infra_limited and v.verdict != "REGRESSION":
            return _INFRA, _after_infra(message)
        return v.verdict, message
    if o is not None:
        if o.passed:
            return "PASSED", o.message
        return (_INFRA, _after_infra(o.message)) if o.infra_limited else ("FAILED", o.message)
    return "NOT JUDGED", "no comparison and no outcome"


_INFRA = "TOO MANY INFRASTRUCTURE ERRORS"


def _after_infra(message: str) -> str:
    """``message`` without the words the banner already says (``too many infrastructure
    errors (fused 3/10 runs; ...)`` -> ``fused 3/10 runs; ...``)."""
    rest = message.removeprefix("too many infrastructure errors").strip()
    if rest.startswith("(") and ")" in rest:
        inner, _, after = rest[1:].partition(")")
        rest = inner + after
    return rest or message


def candidate_outcome(summary: Summary) -> str | None:
    """The candidate's own tests beside a comparison's verdict (the pytest plugin with a
    baseline): ``candidate tests: PASSED (every scenario ...)``, or None."""
    o = summary.outcome
    if summary.verdict is None or o is None:
        return None
    return f"candidate tests: {'PASSED' if o.passed else 'FAILED'} ({o.message})"


# ------------------------------------------------------------------ traces


@dataclass
class TraceLine:
    """One line of a drifted-argument trace.

    A call: ``turn``, ``tool``, ``arguments`` (as the scores show them), ``notes`` (drift
    phrases with their argument path, malformed kinds), ``count`` identical calls in a row
    within the turn (parallel calls). A fold (``last_turn`` set): turns
    ``turn``..``last_turn`` repeat the turn before them exactly, ``calls`` calls each,
    ``times`` more times. ``more`` (> 0): the trace was cut, that many calls not shown.
    """

    turn: int = 0
    tool: str = ""
    arguments: str = ""
    notes: list[str] = field(default_factory=list)
    count: int = 1
    last_turn: int | None = None
    calls: int = 0
    times: int = 0
    more: int = 0

    @property
    def where(self) -> str:
        """``turn 3`` or ``turns 3-11``."""
        if self.last_turn is None or self.last_turn == self.turn:
            return f"turn {self.turn}"
        return f"turns {self.turn}-{self.last_turn}"

    def text(self, width: int = TRACE_WIDTH) -> str:
        """The line as the console and pytest print it (cut to ``width`` characters)."""
        if self.more:
            return f"... {self.more} more calls"
        if self.last_turn is not None:
            what = "the same call" if self.calls == 1 else f"the same {self.calls} calls"
            again = "again" if self.times == 1 else f"repeated {self.times} more times"
            return f"{self.where}: {what} {again} (repeated identical calls)"
        times = f"  ×{self.count}" if self.count > 1 else ""
        tail = f"  <- {'; '.join(self.notes)}" if self.notes else ""
        line = f"turn {self.turn} {self.tool} {self.arguments}{times}{tail}"
        return line if len(line) <= width else line[: width - 1] + "…"


def _notes(run: RunScore) -> dict[int, list[str]]:
    notes: dict[int, list[str]] = {}
    for d in run.drift:
        notes.setdefault(d.call_index, []).append(f"{d.path}: {d.phrase}" if d.path else d.phrase)
    for m in run.malformed:
        notes.setdefault(m.call_index, []).append(m.kind.replace("_", " "))
    return {i: list(dict.fromkeys(n)) for i, n in notes.items()}


def _by_turn(run: RunScore) -> list[tuple[int, list[CallScore]]]:
    turns: dict[int, list[CallScore]] = {}
    for c in run.calls:
        turns.setdefault(c.turn, []).append(c)
    return list(turns.items())


def _same(a: list[CallScore], b: list[CallScore]) -> bool:
    """``b`` repeats ``a`` exactly: the same tools and arguments, each a repeated call."""
    return len(a) == len(b) and all(
        x.tool == y.tool and x.arguments == y.arguments and y.repeat_of is not None
        for x, y in zip(a, b, strict=True)
    )


def drift_trace(run: RunScore, limit: int = 12) -> list[TraceLine]:
    """The calls of a drifting run, turn by turn, at most ``limit`` lines.

    Every call is a line with its drift notes; turns that repeat the previous turn's calls
    exactly are folded into one line (``turns 4-9: the same 2 calls repeated 6 more
    times``); a last ``... N more calls`` line says what ``limit`` cut.
    """
    notes = _notes(run)
    lines: list[TraceLine] = []
    turns, i, shown = _by_turn(run), 0, 0
    while i < len(turns) and len(lines) < limit:
        turn, calls = turns[i]
        for c in calls:
            line = TraceLine(turn, c.tool or "", c.arguments, notes.get(c.call_index, []))
            last = lines[-1] if lines else None
            if (
                last is not None
                and last.last_turn is None
                and (
                    (last.turn, last.tool, last.arguments, last.notes)
                    == (line.turn, line.tool, line.arguments, line.notes)
                )
            ):
                last.count += 1
            else:
                lines.append(line)
        j = i
        while j + 1 < len(turns) and _same(calls, turns[j + 1][1]):
            j += 1
        if j > i:
            lines.append(
                TraceLine(turns[i + 1][0], last_turn=turns[j][0], calls=len(calls), times=j - i)
            )
        shown += sum(len(c) for _, c in turns[i : j + 1])
        i = j + 1
    if shown < len(run.calls):
        lines.append(TraceLine(more=len(run.calls) - shown))
    return lines


@dataclass
class Trace:
    r"""The drifted-argument trace of one run: its ``run_key``, (repeat, stream) and its
    :class:`TraceLine`\ s."""

    run_key: str
    lines: list[TraceLine]
    key: tuple[int, bool] = (0, False)


def first_drift(scores: Iterable[RunScore], limit: int = 40) -> dict[tuple[str, str], Trace]:
    """(side, scenario id) -> the trace of its lowest drifting repeat (non-streamed
    first), whatever order the runs finished in (one pass over ``scores``, e.g.
    ``scores.jsonl`` streamed; only the lines are kept, at most ``limit`` per run)."""
    out: dict[tuple[str, str], Trace] = {}
    for s in scores:
        key, at = (s.repeat, s.stream), (s.side, s.scenario_id)
        if s.drift and (at not in out or key < out[at].key):
            out[at] = Trace(s.run_key, drift_trace(s, limit), key)
    return out


def divergence_lines(comp: ScenarioComparison | None, summary: Summary) -> list[str]:
    """``first divergence at turn 1:`` then one line per side (``unfused: add {...}``);
    empty when the sides never diverge."""
    d = comp.first_divergence if comp else None
    if d is None:
        return []
    return [
        f"first divergence at turn {d.turn}:",
        f"{summary.side_label('baseline')}: {' | '.join(d.baseline)}",
        f"{summary.side_label('candidate')}: {' | '.join(d.candidate)}",
    ]
