"""The HTML/Markdown report: content, escaping, one-sided folders, the CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.cli import main
from harness.present.report import ReportInputError, render_html, render_markdown, write_report
from harness.runfolder import RunFolder
from tests.report_data import write_case


@pytest.fixture(scope="module")
def scored_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Hand-made comparison (unfused vs fused loop), scored once with harness.pipeline.summarize."""
    return write_case(tmp_path_factory.mktemp("report") / "cmp", xss=True, summary=True)


@pytest.fixture
def case(scored_case: Path, tmp_path: Path) -> Path:
    """A private copy of the scored comparison (tests may write into it)."""
    return Path(shutil.copytree(scored_case, tmp_path / "cmp"))


def _text(html: str) -> str:
    """Visible text, roughly: tags dropped, entities of interest decoded."""
    t = re.sub(r"<[^>]+>", " ", html)
    return " ".join(t.replace("&#34;", '"').replace("&quot;", '"').replace("&#39;", "'").split())


def test_comparison_report_shows_verdict_drift_and_turns(case: Path) -> None:
    html = render_html(case)
    summary = json.loads((case / "summary.json").read_text())
    text = _text(html)
    assert summary["verdict"]["verdict"] in text  # the verdict that compare wrote, not recomputed
    assert "unfused" in text and "fused" in text
    assert "array sent as a string" in text
    assert "values collapsed to zeros" in text
    assert "values collapsed to empty strings" in text
    assert "first divergence" in text
    assert "repeat of turn 1" in text  # repeated identical calls marked from summary.calls
    assert "raw request / response JSON" in text
    # every call of the first candidate run is shown with its arguments
    assert text.count('"[0.5, 0.25, 0.25]"') >= 33
    # server arguments that differ between the sides
    assert "disable_shared_experts_fusion" in text and "attention_backend" in text
    # the turn-cap outcome is charted (SVG with an escaped title per bar)
    assert "<svg" in html and "runs failed: turn cap" in html


def test_report_is_self_contained_and_escapes_model_output(case: Path) -> None:
    html = render_html(case)
    assert "<script" not in html.lower()  # neither ours nor the model's
    assert "&lt;script&gt;document.title=" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=" in html
    assert "<b>bold</b>" not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # no external assets
    assert "<link" not in html and "@import" not in html
    assert "Content-Security-Policy" in html


def test_markdown_summary_reads_as_a_pr_comment(case: Path) -> None:
    md = render_markdown(case)
    first = md.splitlines()[0]
    verdict = json.loads((case / "summary.json").read_text())["verdict"]["verdict"]
    assert first.startswith("## ") and verdict in first
    assert "| metric | unfused | fused | p (one-sided) | p adj. (W-Y) |" in md
    assert re.search(
        r'turn 1 entropy \{"values": "\[0.5, 0.25, 0.25\]", "base": 2\}  ×3  <- values: array sent as a string',
        md,
    )
    assert "turns 2-4: the same 3 calls repeated 3 more times (repeated identical calls)" in md
    assert "values collapsed to zeros" in md
    assert "<script" not in md and "<img" not in md  # model text never reaches Markdown raw
    assert "<summary>settings</summary>" in md


def test_one_side_without_summary_shows_raw_facts(tmp_path: Path) -> None:
    folder = write_case(tmp_path / "one", one_side=True, repeats=2)
    html = render_html(folder)
    text = _text(html)
    assert "NOT SCORED" in text and "one side only" in text
    assert "No summary.json in this folder" in text
    assert "stopped with a final answer" in text and "2/2" in text
    assert "candidate" not in text  # only the baseline ran
    md = render_markdown(folder)
    assert "**NOT SCORED**" in md and "| runs | 2 |" in md


def test_two_sides_without_summary_mark_identical_calls_as_facts(tmp_path: Path) -> None:
    folder = write_case(tmp_path / "raw")
    text = _text(render_html(folder))
    assert "no summary.json, so no scores" in text
    assert "same as a call at turn 1" in text
    assert "array sent as a string" not in text  # drift names come only from the summary


def test_write_report_and_cli(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = write_report(case, markdown=False)
    assert out == case / "report.html" and out.stat().st_size > 10_000
    assert not (case / "report.md").exists()
    assert main(["report", str(case), "--markdown"]) == 0
    assert (case / "report.md").read_text().startswith("## ")
    assert "wrote" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such run folder" in capsys.readouterr().err


def test_bad_inputs_are_one_line_errors(case: Path, tmp_path: Path) -> None:
    (case / "summary.json").write_text("{not json")
    with pytest.raises(ReportInputError, match=r"summary\.json: not valid JSON"):
        render_html(case)
    (case / "summary.json").write_text(json.dumps({"run_id": 3, "runs": "x"}))
    with pytest.raises(ReportInputError, match=r"summary\.json: .*re-create it"):
        render_html(case)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportInputError, match="nothing to report"):
        render_html(empty)


ROOT = Path(__file__).resolve().parents[2]


def test_report_of_a_comparison_against_the_reference_server(tmp_path: Path) -> None:
    from harness.client.target import TargetConfig
    from harness.pipeline import compare
    from harness.scenario.model import load_scenarios
    from harness.sim.server import serve_in_thread
    from harness.summary import Settings

    scenarios = load_scenarios([ROOT / "scenarios" / "sensor_entropy_pipeline.yaml"])
    sdir = ROOT / "scenarios"
    with (
        serve_in_thread("healthy", scenarios_dir=sdir) as a,
        serve_in_thread("fused-regression", scenarios_dir=sdir) as b,
    ):
        rf = RunFolder.create("compare", results=tmp_path, run_id="sim")
        summary = compare(
            scenarios,
            TargetConfig(base_url=a, label="unfused"),
            TargetConfig(base_url=b, label="fused"),
            settings=Settings(repeats=2, concurrency=4),
            folder=rf,
            progress=False,
        )
    html_path = write_report(rf.path)
    text = _text(html_path.read_text())
    assert summary.verdict is not None and summary.verdict.verdict in text
    assert "sensor_entropy_pipeline" in text and "unfused" in text and "fused" in text
    fused = next(r for _, r in rf.scores_with_offsets() if r.side == "candidate")
    for d in fused.drift[:3]:  # the drift compare found is named in the report
        assert d.phrase in text
    assert f"{fused.tool_calls} tool calls" in text
    agg = summary.aggregate("candidate", "sensor_entropy_pipeline")
    assert agg is not None and "pass^2" in text
    md = (
        (rf.path / "report.md").read_text()
        if (rf.path / "report.md").exists()
        else render_markdown(rf.path)
    )
    assert summary.verdict.verdict in md.splitlines()[0]


def _gsm8k_summary() -> dict[str, object]:
    from harness.gsm8k.models import (
        GSM8KConfig,
        GSM8KDiscordant,
        GSM8KPaired,
        GSM8KSideSummary,
        GSM8KSummary,
        Interval,
    )

    def side(label: str, side: str, acc: float) -> GSM8KSideSummary:
        return GSM8KSideSummary(
            label=label,
            side=side,
            base_url="http://127.0.0.1:1",
            n=500,
            n_errors=0,  # type: ignore[arg-type]
            correct=int(acc * 500),
            accuracy=acc,
            accuracy_interval=Interval(low=acc - 0.03, high=acc + 0.03),
            invalid=4,
            invalid_rate=0.008,
            accuracy_strict=acc - 0.1,
            accuracy_flexible=acc,
            latency_s=12.5,
            completion_tokens=90000,
            output_throughput=7200.0,
        )

    disc = GSM8KDiscordant(
        index=17,
        question="Tom has 3 apples <b>and</b> buys 4. How many?",
        reference="7",
        baseline_correct=True,
        baseline_answer="7",
        candidate_answer="12",
        baseline_output="3 + 4 = 7. The answer is 7.",
        candidate_output="<script>x()</script> 12",
    )
    paired = GSM8KPaired(
        n_pairs=500,
        both_correct=395,
        b=45,
        c=10,
        neither=50,
        baseline_accuracy=0.88,
        candidate_accuracy=0.81,
        mcnemar_p=1.2e-6,
        accuracy_diff=-0.07,
        diff_interval=Interval(low=-0.10, high=-0.04),
        verdict="REGRESSION",
        reason="the candidate lost 45 questions and won 10",
        discordant=[disc],
    )
    cfg = GSM8KConfig(
        num_questions=500,
        num_shots=5,
        max_tokens=512,
        stop=["Question:"],
        api="completions",
        parallel=64,
        data_source="test.jsonl",
        data_sha256="0" * 64,
        official_test_split=True,
    )
    s = GSM8KSummary(
        run_id="g",
        config=cfg,
        sides=[side("unfused", "baseline", 0.88), side("fused", "candidate", 0.81)],
        paired=paired,
        verdict="REGRESSION",
        exit_code=1,
    )
    return s.model_dump(mode="json")


def test_gsm8k_only_folder(tmp_path: Path) -> None:
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "gsm8k.json").write_text(json.dumps(_gsm8k_summary()))
    html = render_html(folder)
    text = _text(html)
    assert "REGRESSION" in text and "McNemar" in text
    assert "0.880 [0.850, 0.910]" in text and "0.810 [0.780, 0.840]" in text
    assert "baseline-only correct 45" in text and "candidate-only correct 10" in text
    assert "#17" in text and "&lt;script&gt;x()" in html and "<script>x()" not in html
    assert "accuracy, 95% interval" in html  # the whisker chart
    md = render_markdown(folder)
    assert "accuracy 0.880 [0.850, 0.910]" in md and "b=45, c=10" in md


def test_boot_folder_lists_checks_with_log_lines(tmp_path: Path) -> None:
    from harness.server.boot import BootReport, Check

    rep = BootReport(
        checks=[
            Check(name="health", verdict="PASS", detail="/health answered 200 after 3.2 s"),
            Check(
                name="log-errors",
                verdict="FAIL",
                detail="RuntimeError: The expanded size of the tensor (5) must match the existing size (4)",
                evidence=[
                    "Traceback (most recent call last):",
                    "RuntimeError: The expanded size of the tensor (5) must match the existing size (4)",
                ],
            ),
        ],
        command=["python", "-m", "sglang.launch_server"],
    ).finish()
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "boot.json").write_text(rep.model_dump_json())
    text = _text(render_html(folder))
    assert "Boot checks" in text and "FAIL" in text
    assert "Traceback (most recent call last):" in text and "tensor (5)" in text
    md = render_markdown(folder)
    assert "Boot checks" in md and "log-errors" in md and "tensor (5)" in md


def test_fusion_off_on_both_sides_raises_a_banner(case: Path) -> None:
    data = json.loads((case / "summary.json").read_text())
    for side in data["sides"]:
        side["fusion"] = {
            "state": "OFF",
            "reason": "the log says fusion is disabled",
            "evidence": ["Shared experts fusion optimization is disabled."],
        }
    (case / "summary.json").write_text(json.dumps(data))
    html = render_html(case)
    text = _text(html)
    assert 'role="alert"' in html and "OFF on both sides" in text
    assert text.count("fusion OFF") == 2
    assert "Warning" in render_markdown(case) and "OFF on both sides" in render_markdown(case)


def test_one_side_scored_shows_aggregates_without_tests(tmp_path: Path) -> None:
    folder = write_case(tmp_path / "one", one_side=True, repeats=2, summary=True)
    text = _text(render_html(folder))
    assert "FAILED" in text and "1 scenario below pass rate 1: entropy_array (0/2 passed)" in text
    assert "6 (3 each)" in text and "pass^2" in text
    assert ">p<" not in render_html(folder)  # no significance column with one side
    md = render_markdown(folder)
    assert md.startswith("## 🔴 harness run report: **FAILED**") and "| metric | unfused |" in md


def test_infrastructure_errors_are_shown_as_such(tmp_path: Path) -> None:
    from harness.runfolder import RunFolder
    from harness.transcript import InfraError
    from tests.report_data import candidate_record, write_summary_for

    folder = write_case(tmp_path / "infra", repeats=2)
    bad = candidate_record(2).model_copy(
        update={
            "run_key": "candidate/entropy_array/2/nostream",
            "turns": [],
            "stop_reason": "error",
            "error": InfraError(kind="timeout", message="read timed out after 120 s", attempts=3),
        }
    )
    RunFolder(folder).append_record(bad)
    write_summary_for(folder)
    text = _text(render_html(folder))
    assert "read timed out after 120 s" in text
    assert "infrastructure error (not scored)" in text


def test_markdown_filters_neutralise_model_text() -> None:
    from harness.present.report.render import _code, _fence, _md

    assert _md("a|b <script>x</script> *bold* [l](javascript:x)") == (
        r"a\|b &lt;script&gt;x&lt;/script&gt; \*bold\* \[l\](javascript:x)"
    )
    assert _md("two\nlines") == "two lines"
    span = _code("x `y` z")
    assert span.startswith("``") and span.endswith("``") and "`y`" in span
    assert _code("a|b", table=True) == r"`a\|b`"
    assert "```" not in _fence("a```b\nc") and "\n" not in _fence("a\nb")
