"""Verdict wording in the console, HTML and Markdown."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from harness.matrix.result import DeploymentFacts, DeploymentResult, _warnings
from harness.present.console import render_compare
from harness.present.report import render_html, render_markdown
from harness.present.report.charts import outcome_bars
from harness.present.report.context import _headline, kind_title
from harness.present.report.load import ReportInput
from harness.present.report.render import environment
from harness.runfolder import RunFolder
from harness.scoring.models import RunScore
from harness.server.boot import Check, _quote_once
from harness.stats.aggregate import aggregate
from harness.stats.verdict import decide
from harness.summary import SideInfo, Summary
from tests.report_data import write_case


def _scores(
    side: str, sid: str, n: int, fail: bool, termination: str = "final_answer"
) -> list[RunScore]:
    return [
        RunScore(
            run_key=f"{side}/{sid}/{i}/nostream", scenario_id=sid, side=side, label=side,
            repeat=i, termination="turn_cap" if fail else termination, final_answer=not fail,
            failures=["repeat_loop"] if fail else [], passed=not fail,
        )
        for i in range(n)
    ]  # fmt: skip


def _summary(scenarios: int = 3) -> Summary:
    """Every scenario fails 5/5 in the candidate only: pooled REGRESSION, each scenario
    worse but not significant alone after Holm; plus a single-turn scenario that passes
    at the turn cap on both sides."""
    ids = [f"s{i}" for i in range(scenarios)]
    by = {
        side: {sid: _scores(side, sid, 5, side == "candidate") for sid in ids}
        | {"tool_choice": _scores(side, "tool_choice", 5, False, "turn_cap")}
        for side in ("baseline", "candidate")
    }
    aggs = {
        side: {sid: aggregate(side, side, sid, v, ["repeat_loop"]) for sid, v in runs.items()}
        | {"*": aggregate(side, side, "*", [x for v in runs.values() for x in v], ["repeat_loop"])}
        for side, runs in by.items()
    }
    result = decide(aggs["baseline"], aggs["candidate"])
    return Summary(
        run_id="t",
        sides=[SideInfo(side=s, label="unfused" if s == "baseline" else "fused") for s in by],
        aggregates=[a for side in aggs.values() for a in side.values()],
        comparisons=result.comparisons,
        verdict=result.verdict,
    )


def test_per_scenario_reasons_count_passes_under_passed_and_say_not_significant_alone() -> None:
    s = _summary()
    comp = s.comparison("s0")
    assert comp is not None and comp.verdict == "INCONCLUSIVE"  # the decision is unchanged
    assert comp.reasons[0].startswith("passed: candidate 0/5, baseline 5/5 (p one-sided 0.004;")
    assert comp.display == "WORSE (not significant alone)"
    assert comp.holm_tests and f"over {comp.holm_tests} tests" in (comp.note or "")
    assert comp.repeats_needed and f"about {comp.repeats_needed} more repeats" in (comp.note or "")
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    assert s.verdict.reasons and all(r.startswith("all scenarios: ") for r in s.verdict.reasons)
    assert not any(r.startswith("*") for r in s.verdict.reasons)


def test_console_table_has_both_p_columns_a_legend_and_how_runs_ended() -> None:
    console = Console(record=True, width=220, color_system=None)
    render_compare(_summary(), console)
    out = console.export_text()
    assert "p (one-sided)" in out and "p adj. (W-Y)" in out
    assert "* significant at alpha 0.01" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("│ s0 "))
    assert "WORSE (not significant alone)" in row  # in the per-scenario table
    assert "\ns0  " not in out  # no detail heading with nothing under it (no trace given)
    assert out.startswith(" REGRESSION ")  # the verdict comes first
    pooled = out[out.index("all scenarios (4 scenarios)") :]
    passed = next(ln for ln in pooled.splitlines() if ln.startswith("│ passed"))
    cells = [c.strip() for c in passed.split("│")[1:-1]]
    assert cells[1:3] == ["20/20", "5/20"] and cells[4].endswith("*")  # W-Y column starred
    assert float(cells[3]) < float(cells[4].rstrip(" *"))  # raw p below the adjusted one
    assert "drifted arguments" in out
    # the single-turn scenario passed at the turn cap: told as passed, not as a failure
    assert "how runs ended: unfused 20 passed; fused 5 passed, 15 failed (15 turn cap)" in out


def test_termination_of_passing_runs_is_not_a_failure() -> None:
    agg = aggregate("b", "b", "tool_choice", _scores("b", "tool_choice", 5, False, "turn_cap"), [])
    assert agg.termination == {"turn_cap": 5} and agg.termination_failed == {}
    chart = outcome_bars([("unfused", 5, {}), ("fused", 1, {"turn_cap": 4})])
    assert [c for c, _ in chart.legend] == ["t-passed", "t-failed_turn_cap"]
    assert chart.legend[0][1] == "passed (ended as expected)"
    assert any("4 of 5 runs failed: turn cap" in r.title for r in chart.rects)


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_case(tmp_path_factory.mktemp("wording") / "cmp", summary=True)


def test_html_and_markdown_label_both_p_values_and_the_report_kind(
    scored: Path, tmp_path: Path
) -> None:
    case = Path(shutil.copytree(scored, tmp_path / "cmp"))
    html, md = render_html(case), render_markdown(case)
    assert "harness · compare report" in html and "regression report" not in html
    for text in (html, md):
        assert "p (one-sided)" in text and "p adj. (W-Y)" in text
        assert "* significant at alpha 0.01" in text
    assert "failed: turn cap" in html  # how runs ended: by passed, then stop reason
    assert "harness compare report:" in md


def test_report_titles_by_kind_and_carrier_is_informative_not_green() -> None:
    def folder(**kw: object) -> ReportInput:
        return ReportInput(RunFolder(Path("x")), None, **kw)  # type: ignore[arg-type]

    mx = SimpleNamespace(outcome="CARRIER", carriers=["fusion"])
    assert kind_title(folder(matrix=mx)) == "isolation matrix"
    assert kind_title(folder(boot=object())) == "boot report"
    assert kind_title(folder(gsm8k=object())) == "GSM8K report"
    assert kind_title(folder()) == "run report"
    assert _headline(folder(matrix=mx), None) == "CARRIER FOUND: fusion"
    chip = environment().get_template("macros.html").module.verdict_chip("CARRIER FOUND: fusion")  # type: ignore[attr-defined]
    assert 'class="verdict info' in str(chip)


def test_matrix_warns_when_declared_fusion_is_not_proven() -> None:
    row = DeploymentResult(
        label="fused", attributes={"fusion": "on"}, source="url", target="http://x",
        status="fail", facts=DeploymentFacts(fusion="UNKNOWN", fusion_reason="no /server_info"),
    )  # fmt: skip
    warnings = _warnings([row], need_gsm8k=False)
    assert warnings == [
        "fused: declared fusion on, but the server does not prove it "
        "(fusion UNKNOWN: no /server_info)"
    ]


def test_boot_traceback_is_quoted_once() -> None:
    tb = ["Traceback (most recent call last):", "RuntimeError: boom"]
    checks = [
        Check(name="health", verdict="FAIL", detail="printed an error", evidence=tb),
        Check(name="log-errors", verdict="FAIL", detail="RuntimeError: boom", evidence=tb),
    ]
    _quote_once(checks)
    assert checks[0].evidence == tb and checks[1].evidence == []
    assert checks[1].detail == "RuntimeError: boom (quoted under the health check)"


def test_gsm8k_records_the_model_id_it_found(tmp_path: Path) -> None:
    from harness.client.target import TargetConfig
    from harness.gsm8k.run import _record_models
    from harness.runfolder import RunFolder
    from harness.transcript import RunManifest, TargetInfo

    target = TargetConfig("http://127.0.0.1:9", label="target")
    info = TargetInfo(label="target", base_url=target.base_url)
    folder = RunFolder.create("gsm8k", results=tmp_path, run_id="g", targets=[info]).path
    target.model = "harness-sim"  # what GET /v1/models answered during the run
    _record_models(folder, [target])
    manifest = RunManifest.model_validate_json((folder / "manifest.json").read_text())
    assert [t.model for t in manifest.targets] == ["harness-sim"]


def test_one_repeat_per_side_says_too_few_runs_and_counts_passes() -> None:
    b = {"s": _scores("baseline", "s", 1, False)}
    c = {"s": _scores("candidate", "s", 1, True)}
    b_aggs = {k: aggregate("baseline", "b", k, v, ["repeat_loop"]) for k, v in b.items()}
    c_aggs = {k: aggregate("candidate", "c", k, v, ["repeat_loop"]) for k, v in c.items()}
    comp = decide(b_aggs, c_aggs).comparisons[0]
    assert comp.reasons[0].startswith("passed: candidate 0/1, baseline 1/1 (p one-sided 0.5;")
    assert "too few runs for any test to reach alpha 0.01" in (comp.note or "")


def test_infrastructure_banner_does_not_repeat_itself() -> None:
    from harness.present.views import headline
    from harness.summary import RunOutcome, Summary, Verdict

    v = Verdict(
        verdict="INCONCLUSIVE",
        message="INCONCLUSIVE: too many infrastructure errors (fused 5/10 runs)",
        infra_limited=["fused"],
    )
    assert headline(Summary(run_id="x", verdict=v)) == (
        "TOO MANY INFRASTRUCTURE ERRORS",
        "fused 5/10 runs",
    )
    o = RunOutcome(
        passed=False,
        message="too many infrastructure errors (t 3/4 runs; limit 20%); 1 scenario below "
        "pass rate 1: s (0/1 passed)",
        min_pass_rate=1.0,
        infra_limited=["t"],
    )
    banner, message = headline(Summary(run_id="x", kind="run", outcome=o))
    assert banner == "TOO MANY INFRASTRUCTURE ERRORS"
    assert message == "t 3/4 runs; limit 20%; 1 scenario below pass rate 1: s (0/1 passed)"


def test_console_tables_fit_an_80_column_terminal_without_cutting_words() -> None:
    console = Console(record=True, width=80, color_system=None)
    render_compare(_summary(), console)
    out = console.export_text()
    table_lines = [ln for ln in out.splitlines() if ln[:1] in "┏┃┡│└"]
    assert table_lines and all(len(ln) <= 80 for ln in table_lines)
    assert all(ln.rstrip()[-1] in "┓┃┩│┘" for ln in table_lines)  # the right border is there
    assert "significant" in out and "signific\n" not in out  # folded at spaces, not cut
