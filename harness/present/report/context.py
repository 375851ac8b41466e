"""The template context of a report: one :class:`Report` built from a :class:`ReportInput`.

Scores, verdicts and significance come from ``summary.json`` and ``scores.jsonl``
(through :mod:`harness.present.views`, the same rows and traces the console prints),
``gsm8k.json`` and ``boot.json`` as written; in a folder never scored, the report shows
only raw facts of the transcripts (runs, calls made, how each run stopped).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.kinds import label
from harness.present.logprobs import logprobs_line, logprobs_view
from harness.present.report import charts
from harness.present.report.annotate import FactsAnnotator, SummaryAnnotator
from harness.present.report.backends import BackendRow, backend_rows
from harness.present.report.load import ReportInput
from harness.present.report.select import RunFacts
from harness.present.report.view import (
    Annotator,
    ScenarioView,
    SideView,
    build_scenario,
    build_sides,
    runs_by_scenario,
)
from harness.present.views import (
    ContractRow,
    ScenarioRow,
    TableRow,
    TraceLine,
    candidate_outcome,
    contract_rows,
    headline,
    metric_rows,
    p_legend,
    scenario_rows,
    unit_noun,
    units_note,
)
from harness.server.fusion import recorded_args_diff, recorded_fusion_warning
from harness.stats.aggregate import unit_rate
from harness.summary import Summary

__all__ = ["OverviewBlock", "Report", "ScenarioBlock", "build_report"]


@dataclass
class OverviewBlock:
    """One table of the overview: a scenario, or all scenarios pooled (``id == "*"``)."""

    id: str
    title: str
    description: str
    verdict: str | None
    rows: list[TableRow]
    kinds_by_side: list[list[str]]
    reasons: list[str] = field(default_factory=list)
    label: str | None = None  # what the verdict chip says ("WORSE (not significant alone)")
    note: str | None = None  # why, e.g. the family's size and the repeats needed


@dataclass
class ScenarioBlock:
    """One scenario's part of the report: its runs, overview, charts, traces and divergence."""

    view: ScenarioView
    overview: OverviewBlock
    calls_chart: charts.Chart
    end_chart: charts.Chart
    traces: list[tuple[str, str, list[TraceLine]]]  # (side label, run key, lines)
    divergence: Any = None  # harness.summary.Divergence


class ScenarioBlocks:
    """The scenario sections, built one at a time as a template iterates over them, so a
    report of thousands of scenarios holds one section in memory, not all of them.
    ``len()`` and truthiness work without building any."""

    def __init__(self, rf: ReportInput, sides: list[SideView], ann: Annotator) -> None:
        self.rf, self.sides, self.ann = rf, sides, ann
        self.by_sid = runs_by_scenario(rf)
        self.records = {(r.scenario_id, r.side, r.repeat, r.stream): r for r in rf.records}

    def __len__(self) -> int:
        return len(self.by_sid)

    def __iter__(self) -> Iterator[ScenarioBlock]:
        for sid, runs in self.by_sid.items():
            view = build_scenario(self.rf, self.sides, self.ann, sid, runs, self.records)
            yield _block(self.rf, self.sides, view)

    def only(self, ids: Collection[str]) -> Iterator[ScenarioBlock]:
        """The sections of the scenarios ``ids`` (in the same order), built one at a time."""
        for sid, runs in self.by_sid.items():
            if sid in ids:
                view = build_scenario(self.rf, self.sides, self.ann, sid, runs, self.records)
                yield _block(self.rf, self.sides, view)

    def overviews(self) -> list[OverviewBlock]:
        """Every scenario's overview table (the overview grid), without the sections."""
        out = []
        for sid, runs in self.by_sid.items():
            desc = str(self.rf.headers.get(sid, {}).get("description") or "")
            first = desc.split(". ")[0].rstrip(".") + "." if desc else ""
            by_side = {s.key: [r for r in runs if r.side == s.key] for s in self.sides}
            out.append(_overview(self.rf.summary, self.sides, sid, sid, first, by_side))
        return out


@dataclass
class Report:
    """Everything the report's template renders, computed from the run folder."""

    title: str
    run_id: str
    folder: str  # the run folder's path, as given (what `harness score`/`report` take)
    created_at: str
    harness_version: str
    git_revision: str | None
    command: str
    sides: list[SideView]
    provenance: list[dict[str, Any]]
    args_diff: dict[str, list[Any]]
    verdict: str | None
    headline: str  # the verdict, PASSED/FAILED of a run, or what stands in its place
    verdict_message: str
    verdict_reasons: list[str]
    warnings: list[str]
    settings: dict[str, Any]
    scenarios: ScenarioBlocks
    overviews: list[OverviewBlock]  # every scenario's overview table, in order
    pooled: OverviewBlock | None
    #: one line per scenario, as the console's compact table (empty for one scenario)
    scenario_rows: list[ScenarioRow]
    end_chart: charts.Chart | None
    summary: Summary | None
    gsm8k: Any
    gsm8k_chart: charts.Chart | None
    boot: Any
    facts_only: bool
    notes: list[str] = field(default_factory=list)
    matrix: Any = None  # harness.matrix.result.MatrixResult (harness matrix)
    logprobs: Any = None  # harness.present.logprobs.LogprobsView (logprobs.json)
    logprobs_line: str = ""
    kind_title: str = "report"  # "compare report", "run report", "GSM8K report", ...
    p_legend: str = ""  # legend of the p columns and "*" (comparisons); what rates count
    #: BFCL tasks grouped by backend (harness.present.report.backends); [] without BFCL tasks
    backends: list[BackendRow] = field(default_factory=list)
    #: the contract pre-flight, a row per check and a cell per side ([]: not run)
    contract: list[ContractRow] = field(default_factory=list)


def kind_title(rf: ReportInput) -> str:
    """What the folder is a report of, from the files it holds."""
    if rf.matrix is not None:
        return "isolation matrix"
    if rf.boot is not None:
        return "boot report"
    if rf.gsm8k is not None:
        return "GSM8K report"
    if rf.logprobs is not None and rf.summary is None and not rf.runs:
        return "numerics report"
    compared = rf.summary.kind == "compare" if rf.summary is not None else None
    if compared or (compared is None and {"baseline", "candidate"} <= {r.side for r in rf.runs}):
        return "compare report"
    return "run report"


def _headline(rf: ReportInput, verdict: str | None) -> str:
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


def _pass_k_row(summary: Summary, sides: list[SideView], sid: str) -> TableRow | None:
    aggs = [summary.aggregate(s.key, sid) for s in sides]
    ks = sorted({int(k) for a in aggs if a for k in a.pass_hat_k}, reverse=True)
    if not ks:
        return None
    k = str(ks[0])
    cells = [f"{a.pass_hat_k[k]:.2f}" if a and k in a.pass_hat_k else "–" for a in aggs]
    return TableRow("pass_hat_k", f"pass^{k}", cells)


def _fact_rows(runs_by_side: dict[str, list[RunFacts]], sides: list[SideView]) -> list[TableRow]:
    """Raw facts of a folder never scored: runs, calls, final answers, errors."""
    runs = [runs_by_side.get(s.key, []) for s in sides]

    def per(fn: Any) -> list[str]:
        return [fn(rs) if rs else "–" for rs in runs]

    calls = per(lambda rs: f"{sum(r.n_calls for r in rs) / len(rs):.1f}")
    final = per(lambda rs: f"{sum(r.stop_reason == 'final_answer' for r in rs)}/{len(rs)}")
    errors = per(lambda rs: str(sum(r.is_infra_error for r in rs)))
    return [
        TableRow("runs", "runs", per(lambda rs: str(len(rs)))),
        TableRow("tool_calls", "tool calls per run", calls),
        TableRow("final_answer", "stopped with a final answer", final),
        TableRow("infra_errors", "infrastructure errors", errors),
    ]


def _rows(
    summary: Summary | None,
    sides: list[SideView],
    sid: str,
    runs_by_side: dict[str, list[RunFacts]],
) -> list[TableRow]:
    """Metric rows of scenario ``sid`` (``"*"``: pooled): the shared table rows
    (:func:`harness.present.views.metric_rows`) and pass^k, else raw facts."""
    if summary is None:
        return _fact_rows(runs_by_side, sides)
    rows = metric_rows(summary, sid, [s.key for s in sides])
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
        reasons=list(comp.reasons) if comp else [],
        label=comp.label if comp else None,
        note=comp.note if comp else None,
    )


def _kinds(summary: Summary | None, sides: list[SideView], sid: str) -> list[list[str]]:
    aggs = [summary.aggregate(s.key, sid) if summary else None for s in sides]
    return [[label(k) for k in a.failing_kinds()] if a else [] for a in aggs]


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


def _traces(
    rf: ReportInput, sides: list[SideView], sid: str
) -> list[tuple[str, str, list[TraceLine]]]:
    """The first run with drift on each side, call by call (the console's trace)."""
    out = []
    for s in sides:
        trace = rf.traces.get((s.key, sid))
        if trace is not None:
            out.append((s.label, trace.run_key, trace.lines))
    return out


def _block(rf: ReportInput, sides: list[SideView], view: ScenarioView) -> ScenarioBlock:
    summary = rf.summary
    comp = summary.comparison(view.id) if summary else None
    first = view.description.split(". ")[0].rstrip(".") + "." if view.description else ""
    return ScenarioBlock(
        view=view,
        overview=_overview(summary, sides, view.id, view.id, first, view.runs_by_side),
        calls_chart=_calls_series(view, sides),
        end_chart=_ends_chart(summary, sides, view.id, view.runs_by_side),
        traces=_traces(rf, sides, view.id),
        divergence=comp.first_divergence if comp else None,
    )


def _fusion_dict(summary: Summary | None, s: SideView) -> dict[str, Any] | None:
    info = next((i for i in summary.sides if i.side == s.key), None) if summary else None
    return info.fusion if info else None


def _gsm8k_models(rf: ReportInput) -> dict[str, str]:
    """side or label -> the model id a GSM8K run sent (``gsm8k.json``)."""
    out: dict[str, str] = {}
    for g in getattr(rf.gsm8k, "sides", None) or []:
        if getattr(g, "model", None):
            out[g.side or g.label] = g.model
    return out


def _provenance(rf: ReportInput, sides: list[SideView]) -> list[dict[str, Any]]:
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
                "recorded": _side_field(rf.summary, s, "recorded"),
                "boot": _side_field(rf.summary, s, "boot"),
            }
        )
    return out


def _side_field(summary: Summary | None, s: SideView, name: str) -> Any:
    """``SideInfo.<name>`` of the summary's side ``s`` (``recorded``, ``boot``), or None."""
    if summary is None:
        return None
    info = next((i for i in summary.sides if i.side == (s.role or s.label)), None)
    return getattr(info, name, None) if info is not None else None


def _args_diff(rf: ReportInput, sides: list[SideView]) -> dict[str, list[Any]]:
    recorded = rf.summary.server_args_diff if rf.summary is not None else None
    infos = [s.target.server_info if s.target else None for s in sides]
    return recorded_args_diff(recorded, infos)


def _warnings(rf: ReportInput, provenance: list[dict[str, Any]]) -> list[str]:
    out = list(rf.summary.warnings) if rf.summary else []
    fusion = recorded_fusion_warning(out, [p["fusion"] for p in provenance])
    out += [fusion] if fusion else []
    if rf.gsm8k is not None and not getattr(rf.gsm8k.config, "official_test_split", True):
        out.append("GSM8K data is not the official test split (its sha256 differs)")
    return out


def _tagged(verdict: str | None, message: str) -> str:
    """``message (verdict)``, unless the message already opens with its verdict after its
    source (``numerics: REGRESSION: ...``)."""
    if verdict and message.partition(": ")[2].startswith(verdict):
        return message
    return f"{message} ({verdict})"


def _verdict(rf: ReportInput) -> tuple[str | None, str, list[str]]:
    """Headline verdict: the comparison's, else GSM8K's, else the boot checks'; the other
    sources' verdicts join the reasons."""
    found: list[tuple[str, str, list[str]]] = []
    summary = rf.summary
    if summary is not None and rf.matrix is None and (summary.verdict or summary.outcome):
        banner, msg = headline(summary)  # the console's headline, word for word
        reasons = list(summary.verdict.reasons) if summary.verdict else []
        also = candidate_outcome(summary)  # the pytest plugin with a baseline
        found.append((banner, msg, ([also] if also else []) + reasons))
    if rf.gsm8k is not None and rf.gsm8k.verdict is not None:
        p = rf.gsm8k.paired
        found.append((rf.gsm8k.verdict, "GSM8K: " + (p.reason if p else ""), []))
    if rf.logprobs is not None:  # every path, each with its verdict (prefill, decode, experts)
        found += [(p.verdict, p.line(), []) for p in rf.logprobs.paths()]
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
        others = [_tagged(v, m) for v, m, _ in found[1:] if m not in reasons]
        return head, msg, others + reasons
    if len({r.side for r in rf.runs}) > 1:
        return None, "transcripts only: no summary.json, so no scores and no verdict", []
    agg = (
        rf.summary.aggregate(rf.summary.sides[0].side, "*")
        if rf.summary and rf.summary.sides
        else None
    )
    if agg is not None and "passed" in agg.rates:
        r = unit_rate(agg, "passed")
        noun = "scored runs" if unit_noun(agg) == "runs" else "repeats"
        return (
            None,
            f"one side only: {r.k} of {r.n} {noun} passed (no comparison, no verdict)",
            [],
        )
    return None, "one side only: no comparison, no verdict", []


def _legend(summary: Summary | None) -> str:
    """The tables' legend: :func:`~harness.present.views.p_legend` with a comparison, else
    :func:`~harness.present.views.units_note` (``""`` when rates count runs)."""
    if summary is None:
        return ""
    return p_legend(summary) if summary.comparisons else units_note(summary)


def _settings(rf: ReportInput) -> dict[str, Any]:
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


def _overall_ends(rf: ReportInput, sides: list[SideView]) -> charts.Chart | None:
    if not rf.runs:
        return None
    by_side: dict[str, list[RunFacts]] = {}
    for r in rf.runs:
        by_side.setdefault(r.side, []).append(r)
    return _ends_chart(rf.summary, sides, "*", by_side)


def _gsm8k_chart(rf: ReportInput, sides: list[SideView]) -> charts.Chart | None:
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


def build_report(rf: ReportInput) -> Report:
    """The whole template context of a run folder (pure function of its files)."""
    sides = build_sides(rf.runs, rf.manifest)
    ann: Annotator = SummaryAnnotator(rf.summary, rf.scores) if rf.scores else FactsAnnotator()
    blocks = ScenarioBlocks(rf, sides, ann)
    prov = _provenance(rf, sides)
    verdict, msg, reasons = _verdict(rf)
    m = rf.manifest
    by_side: dict[str, list[RunFacts]] = {s.key: [] for s in sides}
    for r in rf.runs:
        by_side.setdefault(r.side, []).append(r)
    pooled = (
        _overview(rf.summary, sides, "*", "All scenarios", "pooled over every scenario", by_side)
        if len(blocks) > 1
        else None
    )
    kind = kind_title(rf)
    return Report(
        title=f"harness {kind} · {m.run_id if m else rf.path.name}",
        run_id=m.run_id if m else rf.path.name,
        folder=str(rf.path),
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
        scenarios=blocks,
        overviews=blocks.overviews(),
        pooled=pooled,
        scenario_rows=scenario_rows(rf.summary) if rf.summary and len(blocks) > 1 else [],
        end_chart=_overall_ends(rf, sides),
        summary=rf.summary,
        gsm8k=rf.gsm8k,
        gsm8k_chart=_gsm8k_chart(rf, sides),
        boot=rf.boot,
        facts_only=rf.summary is None,
        matrix=rf.matrix,
        logprobs=logprobs_view(rf.logprobs) if rf.logprobs is not None else None,
        logprobs_line=logprobs_line(rf.logprobs) if rf.logprobs is not None else "",
        kind_title=kind,
        p_legend=_legend(rf.summary),
        backends=backend_rows(rf, sides),
        contract=contract_rows(rf.summary) if rf.summary is not None else [],
    )
