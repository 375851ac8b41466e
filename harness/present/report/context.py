"""The template context of a report: one :class:`Report` built from a :class:`RunFolder`.

Scores, verdicts and significance come from ``summary.json`` (:mod:`harness.summary`),
``gsm8k.json`` and ``boot.json`` as written; without a summary, the report shows only
raw facts of the transcripts (runs, calls made, how each run stopped).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.kinds import label as kind_label
from harness.present.report import charts
from harness.present.report.annotate import FactsAnnotator, SummaryAnnotator
from harness.present.report.lean import RunHead
from harness.present.report.load import RunFolder
from harness.present.report.select import RunFacts
from harness.present.report.view import (
    Annotator,
    ScenarioView,
    SideView,
    build_scenarios,
    build_sides,
)
from harness.server.fusion import server_args_diff
from harness.stats.verdict import format_p, p_legend, scenario_name, verdict_label
from harness.summary import Aggregate, RunScore, Summary

__all__ = ["OverviewRow", "Report", "ScenarioBlock", "TraceLine", "build_report"]

#: summary metrics shown in the overview when there is no comparison (one side)
_COUNT_METRICS = ["tool_calls", "malformed_args", "repeated_calls", "drift"]
_RATE_METRICS = ["final_answer", "passed"]


@dataclass
class OverviewRow:
    """One metric of one scenario: a cell per side, and the test when two sides ran."""

    label: str
    cells: list[str]
    p_value: str = ""
    significant: bool = False
    worse: bool | None = None
    decisive: bool = False
    key: bool = True  # shown in the compact table (else under "all metrics")
    p_adjusted: str = ""  # Holm-adjusted p, with " *" when significant ("" if not tested)


#: metrics of the compact overview table, in this order
KEY_METRICS = ["tool_calls", "malformed_args", "repeated_calls", "final_answer", "drift", "passed"]


@dataclass
class OverviewBlock:
    """One table of the overview: a scenario, or all scenarios pooled (``id == "*"``)."""

    id: str
    title: str
    description: str
    verdict: str | None
    rows: list[OverviewRow]
    kinds_by_side: list[list[str]]
    reasons: list[str] = field(default_factory=list)
    label: str | None = None  # what the verdict chip says ("WORSE (not significant alone)")
    note: str | None = None  # why, e.g. the Holm family's size and the repeats needed


@dataclass
class TraceLine:
    """One call of a drifted-argument trace: ``turn 3 {"values": [0,0,0]} <- collapsed``."""

    turn: int
    tool: str
    arguments: str
    phrases: list[str]
    times: int = 1  # identical consecutive calls folded into one line


@dataclass
class ScenarioBlock:
    view: ScenarioView
    overview: OverviewBlock
    calls_chart: charts.Chart
    end_chart: charts.Chart
    traces: list[tuple[str, str, list[TraceLine]]]  # (side label, run key, lines)
    divergence: Any = None  # harness.summary.Divergence


@dataclass
class Report:
    title: str
    run_id: str
    created_at: str
    harness_version: str
    git_revision: str | None
    command: str
    sides: list[SideView]
    provenance: list[dict[str, Any]]
    args_diff: dict[str, list[Any]]
    verdict: str | None
    headline: str  # the verdict, or what stands in its place ("ONE SIDE", "NOT SCORED")
    verdict_message: str
    verdict_reasons: list[str]
    warnings: list[str]
    settings: dict[str, Any]
    scenarios: list[ScenarioBlock]
    pooled: OverviewBlock | None
    end_chart: charts.Chart | None
    summary: Summary | None
    gsm8k: Any
    gsm8k_chart: charts.Chart | None
    boot: Any
    facts_only: bool
    notes: list[str] = field(default_factory=list)
    matrix: Any = None  # harness.matrix.run.MatrixResult (harness matrix)
    kind_title: str = "report"  # "compare report", "run report", "GSM8K report", ...
    p_legend: str = ""  # legend of the p columns and of "*" (comparisons only)


def kind_title(rf: RunFolder) -> str:
    """What the folder is a report of, from the files it holds."""
    if rf.matrix is not None:
        return "isolation matrix"
    if rf.boot is not None:
        return "boot report"
    if rf.gsm8k is not None:
        return "GSM8K report"
    if rf.summary is not None and rf.summary.kind == "compare":
        return "compare report"
    return "run report"


def _headline(rf: RunFolder, verdict: str | None) -> str:
    """The big chip: the verdict, the matrix's outcome (``CARRIER FOUND: fusion``), or
    what stands in its place."""
    if verdict:
        return verdict
    mx = rf.matrix
    if mx is not None:
        if mx.outcome == "CARRIER" and mx.carriers:
            return f"CARRIER FOUND: {', '.join(mx.carriers)}"
        return str(mx.outcome)
    return "ONE SIDE" if rf.summary is not None else "NOT SCORED"


def _reason(text: str) -> str:
    """A summary reason for reading: the pooled scenario ``*`` (older summaries) in words."""
    return f"{scenario_name('*')}: " + text[3:] if text.startswith("*: ") else text


def _agg_rows(summary: Summary, sides: list[SideView], sid: str) -> list[OverviewRow]:
    aggs: list[Aggregate | None] = [summary.aggregate(s.key, sid) for s in sides]
    rows: list[OverviewRow] = []
    for m in _COUNT_METRICS:
        cells = [
            f"{a.counts[m].mean:.1f} (total {a.counts[m].total})"
            if a and m in a.counts and a.counts[m].mean is not None
            else "–"
            for a in aggs
        ]
        rows.append(
            OverviewRow(kind_label(m) if m != "tool_calls" else "tool calls per run", cells)
        )
    for m in _RATE_METRICS:
        cells = [f"{a.rates[m].k}/{a.rates[m].n}" if a and m in a.rates else "–" for a in aggs]
        rows.append(OverviewRow(kind_label(m), cells))
    return rows


def _pass_k_row(summary: Summary | None, sides: list[SideView], sid: str) -> OverviewRow | None:
    if summary is None:
        return None
    aggs = [summary.aggregate(s.key, sid) for s in sides]
    ks = sorted({int(k) for a in aggs if a for k in a.pass_hat_k}, reverse=True)
    if not ks:
        return None
    k = str(ks[0])
    return OverviewRow(
        f"pass^{k}", [f"{a.pass_hat_k[k]:.2f}" if a and k in a.pass_hat_k else "–" for a in aggs]
    )


def _fact_rows(runs_by_side: dict[str, list[RunFacts]], sides: list[SideView]) -> list[OverviewRow]:
    runs = [runs_by_side.get(s.key, []) for s in sides]

    def per(fn: Any) -> list[str]:
        return [fn(rs) if rs else "–" for rs in runs]

    calls = per(lambda rs: f"{sum(r.n_calls for r in rs) / len(rs):.1f}")
    final = per(lambda rs: f"{sum(r.stop_reason == 'final_answer' for r in rs)}/{len(rs)}")
    errors = per(lambda rs: str(sum(r.is_infra_error for r in rs)))
    return [
        OverviewRow("runs", per(lambda rs: str(len(rs)))),
        OverviewRow("tool calls per run", calls),
        OverviewRow("stopped with a final answer", final),
        OverviewRow("infrastructure errors", errors),
    ]


def _rank(metric: str) -> int:
    return KEY_METRICS.index(metric) if metric in KEY_METRICS else len(KEY_METRICS)


def _rows(
    summary: Summary | None,
    sides: list[SideView],
    sid: str,
    runs_by_side: dict[str, list[RunFacts]],
) -> list[OverviewRow]:
    """Metric rows of scenario ``sid`` (``"*"``: pooled): the comparison's, else per side."""
    if summary is None:
        return _fact_rows(runs_by_side, sides)
    comp = summary.comparison(sid)
    if comp is not None and len(sides) == 2:
        rows = [
            OverviewRow(
                kind_label(r.label),
                [r.baseline_text, r.candidate_text],
                format_p(r.p_value),
                r.significant,
                r.worse,
                r.decisive,
                r.metric in KEY_METRICS,
                format_p(r.p_adjusted) + (" *" if r.significant else ""),
            )
            for r in sorted(comp.rows, key=lambda r: _rank(r.metric))
        ]
    else:
        rows = _agg_rows(summary, sides, sid)
    pk = _pass_k_row(summary, sides, sid)
    return rows + ([pk] if pk else [])


def _overview(
    summary: Summary | None,
    sides: list[SideView],
    sid: str,
    title: str,
    description: str,
    runs_by_side: dict[str, list[RunFacts]],
) -> OverviewBlock:
    comp = summary.comparison(sid) if summary else None
    return OverviewBlock(
        id=sid,
        title=title,
        description=description,
        verdict=comp.verdict if comp else None,
        rows=_rows(summary, sides, sid, runs_by_side),
        kinds_by_side=_kinds(summary, sides, sid),
        reasons=[_reason(x) for x in comp.reasons] if comp else [],
        label=verdict_label(comp) if comp else None,
        note=comp.note if comp else None,
    )


def _kinds(summary: Summary | None, sides: list[SideView], sid: str) -> list[list[str]]:
    out = []
    for s in sides:
        a = summary.aggregate(s.key, sid) if summary else None
        out.append(
            [
                kind_label(k)
                for k, r in sorted(a.rates.items())
                if a and k not in ("passed", "final_answer") and r.k > 0
            ]
            if a
            else []
        )
    return out


def _calls_at(run: RunFacts, turn: int) -> int:
    """Tool calls the model made at ``turn`` (0 past the end of the run)."""
    return run.calls_per_turn[turn] if turn < len(run.calls_per_turn) else 0


def _calls_series(view: ScenarioView, sides: list[SideView]) -> charts.Chart:
    series = []
    for s in sides:
        recs = [r for r in view.runs_by_side.get(s.key, []) if not r.is_infra_error]
        depth = max((len(r.calls_per_turn) for r in recs), default=0)
        means = [sum(_calls_at(r, t) for r in recs) / max(len(recs), 1) for t in range(depth)]
        series.append((s.label, f"s-{s.css}", means))
    return charts.calls_per_turn(series)


def _ends_chart(
    summary: Summary | None, sides: list[SideView], sid: str, by_side: dict[str, list[RunFacts]]
) -> charts.Chart:
    """How runs ended: passed, then failed by stop reason (from ``summary.json``); by
    stop reason alone when the summary predates ``termination_failed`` or is absent."""
    aggs = [summary.aggregate(s.key, sid) if summary else None for s in sides]
    if aggs and all(a is not None and a.termination_failed is not None for a in aggs):
        rows = [
            (s.label, a.runs - sum(a.termination_failed.values()), dict(a.termination_failed))
            for s, a in zip(sides, aggs, strict=True)
            if a is not None and a.termination_failed is not None
        ]
        return charts.outcome_bars(rows)
    return charts.termination_bars(
        [(s.label, _end_counts(summary, s, sid, by_side.get(s.key, []))) for s in sides]
    )


def _end_counts(
    summary: Summary | None, s: SideView, sid: str, recs: list[RunFacts]
) -> dict[str, int]:
    agg = summary.aggregate(s.key, sid) if summary else None
    if agg is not None and agg.termination:
        return dict(agg.termination)
    out: dict[str, int] = {}
    for r in recs:
        out[r.stop_reason] = out.get(r.stop_reason, 0) + 1
    return out


def _first_drift(summary: Summary | None) -> dict[tuple[str, str], RunScore]:
    """(side, scenario id) -> its first run with drift (one pass over the runs)."""
    out: dict[tuple[str, str], RunScore] = {}
    for r in summary.runs if summary is not None else []:
        if r.drift:
            out.setdefault((r.side, r.scenario_id), r)
    return out


def _traces(
    drifted: dict[tuple[str, str], RunScore], sides: list[SideView], sid: str
) -> list[tuple[str, str, list[TraceLine]]]:
    """The first run with drift on each side, call by call (consecutive repeats folded)."""
    out = []
    for s in sides:
        run = drifted.get((s.key, sid))
        if run is None:
            continue
        lines: list[TraceLine] = []
        for c in run.calls:
            phrases = sorted(
                {f"{d.path}: {d.phrase}" for d in run.drift if d.call_index == c.call_index}
            )
            last = lines[-1] if lines else None
            if (
                last
                and last.arguments == c.arguments
                and last.tool == (c.tool or "")
                and last.phrases == phrases
            ):
                last.times += 1
                continue
            lines.append(TraceLine(c.turn, c.tool or "", c.arguments, phrases))
        out.append((s.label, run.run_key, lines))
    return out


def _block(
    summary: Summary | None,
    sides: list[SideView],
    view: ScenarioView,
    drifted: dict[tuple[str, str], RunScore],
) -> ScenarioBlock:
    comp = summary.comparison(view.id) if summary else None
    first = view.description.split(". ")[0].rstrip(".") + "." if view.description else ""
    return ScenarioBlock(
        view=view,
        overview=_overview(summary, sides, view.id, view.id, first, view.runs_by_side),
        calls_chart=_calls_series(view, sides),
        end_chart=_ends_chart(summary, sides, view.id, view.runs_by_side),
        traces=_traces(drifted, sides, view.id),
        divergence=comp.first_divergence if comp else None,
    )


def _fusion_dict(summary: Summary | None, s: SideView) -> dict[str, Any] | None:
    info = next((i for i in summary.sides if i.side == s.key), None) if summary else None
    return info.fusion if info else None


def _gsm8k_models(rf: RunFolder) -> dict[str, str]:
    """side or label -> the model id a GSM8K run sent (``gsm8k.json``)."""
    out: dict[str, str] = {}
    for g in getattr(rf.gsm8k, "sides", None) or []:
        if getattr(g, "model", None):
            out[g.side or g.label] = g.model
    return out


def _provenance(rf: RunFolder, sides: list[SideView]) -> list[dict[str, Any]]:
    out = []
    found = _gsm8k_models(rf)
    for s in sides:
        t = s.target
        info = (t.server_info or {}) if t else {}
        model = (t.model if t else None) or found.get(s.role or s.label) or found.get(s.label)
        out.append(
            {
                "side": s,
                "role": s.role or "target",
                "label": s.label,
                "url": t.base_url if t else "",
                "model": model or "(not reported)",
                "version": info.get("version") if isinstance(info.get("version"), str) else None,
                "fusion": _fusion_dict(rf.summary, s),
            }
        )
    return out


def _args_diff(rf: RunFolder, sides: list[SideView]) -> dict[str, list[Any]]:
    if rf.summary is not None and rf.summary.server_args_diff is not None:
        return dict(rf.summary.server_args_diff)
    if len(sides) != 2 or not all(s.target and s.target.server_info for s in sides):
        return {}
    a, b = (s.target.server_info or {} for s in sides)  # type: ignore[union-attr]
    return {k: [v["baseline"], v["candidate"]] for k, v in server_args_diff(a, b).items()}


def _warnings(rf: RunFolder, provenance: list[dict[str, Any]]) -> list[str]:
    from harness.server.fusion import FusionEngagement, fusion_warning

    out = list(rf.summary.warnings) if rf.summary else []
    states = [p["fusion"] for p in provenance if p["fusion"]]
    if len(provenance) == 2 and len(states) == 2 and not any("fusion" in w for w in out):
        w = fusion_warning(*(FusionEngagement.model_validate(f) for f in states))
        out += [w] if w else []
    if rf.gsm8k is not None and not getattr(rf.gsm8k.config, "official_test_split", True):
        out.append("GSM8K data is not the official test split (its sha256 differs)")
    return out


def _verdict(rf: RunFolder) -> tuple[str | None, str, list[str]]:
    """Headline verdict: the comparison's, else GSM8K's, else the boot checks'; the other
    sources' verdicts join the reasons."""
    found: list[tuple[str, str, list[str]]] = []
    if rf.summary is not None and rf.summary.verdict is not None:
        v = rf.summary.verdict
        msg = v.message.removeprefix(f"{v.verdict}: ")
        if v.repeats_needed and v.verdict == "INCONCLUSIVE" and "repeats" not in msg:
            msg += f" (about {v.repeats_needed} repeats per scenario would settle it)"
        found.append((v.verdict, msg, [_reason(x) for x in v.reasons]))
    if rf.gsm8k is not None and rf.gsm8k.verdict is not None:
        p = rf.gsm8k.paired
        found.append((rf.gsm8k.verdict, "GSM8K: " + (p.reason if p else ""), []))
    if rf.boot is not None:
        failed = [f"{c.name}: {c.detail}" for c in rf.boot.checks if c.verdict == "FAIL"]
        found.append(
            (
                rf.boot.verdict,
                f"boot checks: {len(rf.boot.checks)} run, {len(failed)} failed",
                failed,
            )
        )
    if found:
        head, msg, reasons = found[0]
        return head, msg, [f"{m} ({v})" for v, m, _ in found[1:]] + reasons
    if len({r.side for r in rf.runs}) > 1:
        return None, "transcripts only: no summary.json, so no scores and no verdict", []
    agg = (
        rf.summary.aggregate(rf.summary.sides[0].side, "*")
        if rf.summary and rf.summary.sides
        else None
    )
    if agg is not None and "passed" in agg.rates:
        r = agg.rates["passed"]
        return (
            None,
            f"one side only: {r.k} of {r.n} scored runs passed (no comparison, no verdict)",
            [],
        )
    return None, "one side only: no comparison, no verdict", []


def _settings(rf: RunFolder) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rf.summary is not None:
        out.update(
            {k: v for k, v in rf.summary.settings.model_dump().items() if v not in (None, [], "")}
        )
    elif rf.manifest is not None:
        out.update({k: v for k, v in rf.manifest.args.items() if v not in (None, [], "")})
    if rf.runs:
        out.setdefault("sampling", rf.sampling)
    if rf.gsm8k is not None:
        c = rf.gsm8k.config
        out["gsm8k"] = (
            f"{c.num_questions} questions, {c.num_shots}-shot, {c.api} API, max_tokens {c.max_tokens}"
        )
    return out


def _overall_ends(rf: RunFolder, sides: list[SideView]) -> charts.Chart | None:
    if not rf.runs:
        return None
    by_side: dict[str, list[RunFacts]] = {}
    for r in rf.runs:
        by_side.setdefault(r.side, []).append(r)
    return _ends_chart(rf.summary, sides, "*", by_side)


def _gsm8k_chart(rf: RunFolder, sides: list[SideView]) -> charts.Chart | None:
    if rf.gsm8k is None:
        return None
    css = {s.role or s.label: s.css for s in sides}
    rows = [
        (
            g.label,
            f"s-{css.get(g.side or g.label, 'ab'[i % 2])}",
            g.accuracy,
            g.accuracy_interval.low,
            g.accuracy_interval.high,
        )
        for i, g in enumerate(rf.gsm8k.sides)
    ]
    return charts.accuracy_whiskers(rows)


def _passed(scores: dict[str, RunHead]) -> Callable[[RunFacts], bool | None]:
    """Passed/failed of a run for the compact run lists: from summary.json, else None."""

    def passed(run: RunFacts) -> bool | None:
        s = scores.get(run.run_key)
        return None if s is None or s.infra_error is not None else s.passed

    return passed


def build_report(rf: RunFolder) -> Report:
    """The whole template context of a run folder (pure function of its files)."""
    sides = build_sides(rf.runs, rf.manifest)
    ann: Annotator = SummaryAnnotator(rf.summary) if rf.summary is not None else FactsAnnotator()
    views = build_scenarios(rf, sides, ann, _passed(rf.heads))
    prov = _provenance(rf, sides)
    verdict, msg, reasons = _verdict(rf)
    m = rf.manifest
    by_side: dict[str, list[RunFacts]] = {s.key: [] for s in sides}
    for r in rf.runs:
        by_side.setdefault(r.side, []).append(r)
    drifted = _first_drift(rf.summary)
    pooled = (
        _overview(rf.summary, sides, "*", "All scenarios", "pooled over every scenario", by_side)
        if len(views) > 1
        else None
    )
    kind = kind_title(rf)
    return Report(
        title=f"harness {kind} · {m.run_id if m else rf.path.name}",
        run_id=m.run_id if m else rf.path.name,
        created_at=(m.created_at if m else "")[:19].replace("T", " ") + (" UTC" if m else ""),
        harness_version=m.harness_version if m else "",
        git_revision=m.git_revision if m else None,
        command=m.command if m else "",
        sides=sides,
        provenance=prov,
        args_diff=_args_diff(rf, sides),
        verdict=verdict,
        headline=_headline(rf, verdict),
        verdict_message=rf.matrix.message if rf.matrix is not None and not verdict else msg,
        verdict_reasons=reasons,
        warnings=_warnings(rf, prov),
        settings=_settings(rf),
        scenarios=[_block(rf.summary, sides, v, drifted) for v in views],
        pooled=pooled,
        end_chart=_overall_ends(rf, sides),
        summary=rf.summary,
        gsm8k=rf.gsm8k,
        gsm8k_chart=_gsm8k_chart(rf, sides),
        boot=rf.boot,
        facts_only=rf.summary is None,
        matrix=rf.matrix,
        kind_title=kind,
        p_legend=p_legend(rf.summary) if rf.summary is not None and rf.summary.comparisons else "",
    )
