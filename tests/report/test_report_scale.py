"""A report of a large folder renders a bounded number of runs turn by turn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.present.report import load_run_folder, render_html, write_report
from harness.present.report.select import LIST_LIMIT, PER_SCENARIO, RunFacts, choose
from harness.runfolder import RunFolder
from harness.transcript import TargetInfo
from tests.report_data import write_case

REPEATS = PER_SCENARIO + LIST_LIMIT + 2  # 2 more than the compact list holds, per side


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scenario, REPEATS runs per side, scored (summary.json)."""
    return write_case(tmp_path_factory.mktemp("scale") / "many", repeats=REPEATS, summary=True)


def _runheads(html: str) -> list[str]:
    """run_key of each run rendered turn by turn (its header in a pair grid)."""
    return re.findall(
        r'<div class="runhead[^"]*">\s*<b>[^<]*</b> <code class="muted">([^<]+)</code>', html
    )


def test_loader_keeps_only_the_runs_it_renders(many: Path) -> None:
    rf = load_run_folder(many)
    assert len(rf.runs) == 2 * REPEATS  # facts of every run
    assert len(rf.records) == 2 * PER_SCENARIO  # full records of the rendered ones only
    assert rf.shown == {"entropy_array": [(r, False) for r in range(PER_SCENARIO)]}
    assert {r.run_key for r in rf.records} == {
        f"{side}/entropy_array/{r}/nostream"
        for side in ("baseline", "candidate")
        for r in range(PER_SCENARIO)
    }


def test_many_runs_render_a_bounded_number_and_say_how_many_more(many: Path) -> None:
    out = write_report(many)
    html = out.read_text("utf-8")
    heads = _runheads(html)
    assert len(heads) == 2 * PER_SCENARIO
    assert len(set(heads)) == len(heads)
    assert html.count("raw request / response JSON") > 0
    assert f"{PER_SCENARIO} of {REPEATS} repeats shown turn by turn" in html
    # the rest listed compactly, up to LIST_LIMIT per side, then a count
    assert html.count("<tr><td><code>candidate/entropy_array/") == LIST_LIMIT
    assert html.count("<tr><td><code>baseline/entropy_array/") == LIST_LIMIT
    more = REPEATS - PER_SCENARIO - LIST_LIMIT
    assert html.count(f"{more} more runs: see transcripts.jsonl") == 2
    assert '<span class="badge bad">failed</span>' in html  # candidate runs, from summary.json
    assert "<script" not in html.lower()


def test_report_budget_limits_rendered_runs_over_the_folder(many: Path) -> None:
    rf = load_run_folder(many, max_runs=2)
    assert rf.shown == {"entropy_array": [(0, False)]}
    assert len(rf.records) == 2
    none = load_run_folder(many, max_runs=1)  # a key costs both sides' runs: none fits
    assert none.records == [] and none.shown == {"entropy_array": []}


def _facts(side: str, sid: str, repeat: int, stop: str) -> RunFacts:
    target = TargetInfo(label=side, side=side, base_url="http://127.0.0.1:1")  # type: ignore[arg-type]
    return RunFacts(
        f"{side}/{sid}/{repeat}/nostream", sid, side, side, repeat, False, stop, 1, (1,), target, 0
    )


def test_choice_prefers_a_failing_and_a_passing_run_and_urgent_scenarios() -> None:
    runs = [_facts("baseline", "a", r, "final_answer") for r in range(10)]
    runs += [
        _facts("candidate", "a", r, "turn_cap" if r == 7 else "final_answer") for r in range(10)
    ]
    runs += [_facts(s, "b", r, "turn_cap") for s in ("baseline", "candidate") for r in range(10)]
    shown = choose(runs, ["baseline", "candidate"], per_scenario=2)
    assert shown["a"] == [(0, False), (7, False)]  # the failing repeat 7, the first passing 0
    assert shown["b"] == [(0, False), (1, False)]
    # budget: the scenario with a REGRESSION verdict is served first
    tight = choose(
        runs, ["baseline", "candidate"], verdicts={"b": "REGRESSION"}, max_runs=4, per_scenario=2
    )
    assert tight == {"a": [], "b": [(0, False), (1, False)]}


def test_small_folders_render_every_run(tmp_path: Path) -> None:
    folder = write_case(tmp_path / "small", repeats=2, summary=True)
    html = render_html(folder)
    assert len(_runheads(html)) == 4
    assert "more runs" not in html and "Other runs" not in html


def test_summary_is_small_and_scores_are_streamed_with_non_ascii_text(
    many: Path, tmp_path: Path
) -> None:
    folder = RunFolder(many)
    summary = folder.read_summary()
    assert summary is not None
    assert "runs" not in summary.model_dump()  # per-run scores live in scores.jsonl
    pooled = summary.aggregate("candidate", "*")
    assert pooled is not None and sum(pooled.counts["tool_calls"].histogram.values()) == REPEATS
    scores = [s for _, s in folder.scores_with_offsets()]
    assert len(scores) == 2 * REPEATS
    # a score with non-ASCII text survives the round trip, read back by its offset
    copy = RunFolder(tmp_path)
    scores[4].final_excerpt = 'entropé … 😀 "quoted" \\ end'
    with copy.score_writer() as write:
        for s in scores:
            write(s)
    offsets = [o for o, _ in copy.scores_with_offsets()]
    got = [s for _, s in copy.scores_at(offsets[3:6])]
    assert got == scores[3:6]
    assert got[1].final_excerpt == 'entropé … 😀 "quoted" \\ end'


def _wide_case(folder: Path, n: int) -> Path:
    """``n`` scenarios, one run per side; the candidate fails in the last half of them."""
    from tests.report_data import baseline_record, candidate_record, write_summary_for

    write_case(folder, repeats=1)  # the manifest and one scenario
    rf = RunFolder(folder)
    for i in range(1, n):
        sid = f"scenario_{i:04d}"
        cand = candidate_record(0) if i >= n // 2 else baseline_record(0)
        cand = cand.model_copy(update={"target": candidate_record(0).target})
        for rec in (baseline_record(0), cand):
            side = rec.target.side
            rf.append_record(rec.model_copy(
                update={"scenario_id": sid, "run_key": f"{side}/{sid}/0/nostream"}))  # fmt: skip
    write_summary_for(folder)
    return folder


def test_the_markdown_summary_fits_a_github_comment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hundreds of scenarios: report.md stays within 60,000 characters (a GitHub comment
    holds 65,536), the scenarios that differ first, giving up sections before rows, and
    says how many are left to report.html; report.html keeps every scenario."""
    from harness.present.report.render import MAX_MARKDOWN_CHARS, MD_SECTIONS

    n = 300
    folder = _wide_case(tmp_path / "wide", n)
    html = write_report(folder).read_text("utf-8")
    md = (folder / "report.md").read_text("utf-8")
    assert len(md) <= MAX_MARKDOWN_CHARS <= 65_536 - 5_000
    rows = re.findall(r"^\| (entropy\\_array|scenario\\_\d{4}) \|", md, flags=re.M)
    assert 0 < len(rows) <= n
    if len(rows) < n:
        assert f"_… {n - len(rows)} more rows in report.html" in md
    # the scenarios whose candidate fails (the comparison differs) come first
    first = [int(r.removeprefix("scenario\\_")) for r in rows[:10] if r != "entropy\\_array"]
    assert len(first) >= 9 and all(i >= n // 2 for i in first), rows[:10]
    sections = md.count("<details><summary><b>")  # the scenario sections kept
    assert 0 <= sections <= MD_SECTIONS
    assert f"_… {n - sections} more scenario sections in report.html_" in md
    assert all(f"scenario_{i:04d}" in html for i in range(1, n))

    from harness.present.report import render

    monkeypatch.setattr(render, "MAX_MARKDOWN_CHARS", 12_000)  # rows given up too
    md = render.render_markdown(folder)
    assert len(md) <= 12_000 and "<details><summary><b>" not in md
    rows = re.findall(r"^\| (entropy\\_array|scenario\\_\d{4}) \|", md, flags=re.M)
    differ = [r for r in rows if r != "entropy\\_array"]  # entropy_array's candidate fails too
    assert 0 < len(rows) < n and all(r >= f"scenario\\_{n // 2:04d}" for r in differ)
    assert f"_… {n - len(rows)} more rows in report.html" in md
    assert f"_… {n} more scenario sections in report.html_" in md
