"""The one data flow: transcripts -> scores.jsonl -> a small summary.json -> views -> exit codes.

Real comparisons against the reference server over sockets; the summary's size must not
grow with the number of runs, the verdict is decided once, exit codes come only from the
command line, and the console reads top-down.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import ExitCode, main
from harness.cli._common import exit_code
from harness.errors import RunFolderError
from harness.runfolder import RunFolder
from harness.stats.aggregate import aggregate
from harness.stats.verdict import decide, judge_run, over_infra_limit
from harness.summary import RunOutcome, SideInfo, Summary, Verdict
from tests.compare.test_compare import CLOCK, ENTROPY, LOOKUP
from tests.conftest import HarnessCli
from tests.plugin.test_plugin_judge import infra, looping, score

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scenarios(write_scenarios: Callable[..., Path]) -> Path:
    return write_scenarios(ENTROPY, LOOKUP, CLOCK)


def test_summary_does_not_grow_with_runs_and_scores_are_one_line_each(
    scenarios: Path, harness_cli: HarnessCli, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = {}
    for repeats in (2, 8):
        run_id = f"r{repeats}"
        code = harness_cli(
            "compare", scenarios, "--repeats", str(repeats), "--no-sequential", run_id=run_id
        )
        assert code == ExitCode.REGRESSION
        folder = harness_cli.folder(run_id)
        lines = folder.scores_path.read_text().splitlines()
        assert len(lines) == 2 * 3 * repeats  # sides x scenarios x repeats
        assert "runs" not in json.loads(folder.summary_path.read_text())
        sizes[repeats] = folder.summary_path.stat().st_size
    capsys.readouterr()
    assert sizes[8] < 1.25 * sizes[2]  # 4x the runs, about the same summary


def test_console_reads_top_down_and_is_not_cut_at_80_columns(
    scenarios: Path, harness_cli: HarnessCli, capsys: pytest.CaptureFixture[str]
) -> None:
    code = harness_cli("compare", scenarios, "--repeats", "2", "--no-sequential", run_id="c")
    assert code == ExitCode.REGRESSION
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run folder: {harness_cli.results / 'c'}"  # said before anything runs
    assert "--resume c" in out[1]
    assert out[2].startswith(" REGRESSION ")  # then the verdict
    pooled = next(i for i, ln in enumerate(out) if ln.startswith("all scenarios (3 scenarios x 2"))
    compact = next(i for i, ln in enumerate(out) if ln.startswith("per scenario (3 scenarios)"))
    trace = next(i for i, ln in enumerate(out) if "drifted arguments, fused" in ln)
    assert pooled < compact < trace
    assert max(len(ln) for ln in out) > 80 and not any(ln.endswith("…│") for ln in out)
    assert out[-1].startswith("report: ")


def test_verbose_prints_every_scenario_table(
    scenarios: Path, harness_cli: HarnessCli, capsys: pytest.CaptureFixture[str]
) -> None:
    harness_cli("compare", scenarios, "--repeats", "2", "--verbose", run_id="v")
    out = capsys.readouterr().out
    for sid in ("entropy", "lookup", "clock"):
        assert f"\n{sid}  " in out  # each scenario's own table title


def test_resume_finishes_a_comparison_without_rerunning(
    scenarios: Path, harness_cli: HarnessCli, capsys: pytest.CaptureFixture[str]
) -> None:
    assert harness_cli("compare", scenarios, "--repeats", "2", run_id="x") == ExitCode.REGRESSION
    folder = harness_cli.folder("x")
    before = folder.transcripts.read_text()
    resume = ("--resume", "x")
    assert harness_cli("compare", scenarios, *resume, "--repeats", "2") == ExitCode.REGRESSION
    assert folder.transcripts.read_text() == before  # nothing run again
    assert harness_cli("compare", scenarios, *resume, "--repeats", "3") == ExitCode.USAGE_ERROR
    assert "cannot resume" in capsys.readouterr().err


def test_results_root_that_is_a_file_is_one_line_and_exit_2(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(RunFolderError, match="cannot create the run folder"):
        RunFolder.create("run", results=blocker)
    code = main(["compare", str(scenarios), "--results", str(blocker), "--no-progress"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE_ERROR
    last = err.strip().splitlines()[-1]  # argparse: the usage, then one error line
    assert "error: argument --results:" in last and "is a file, not a folder" in last


def test_exit_codes_come_from_the_verdict_or_the_outcome() -> None:
    def summary(**kw: object) -> Summary:
        return Summary(run_id="x", **kw)  # type: ignore[arg-type]

    reg = Verdict(verdict="REGRESSION", message="m")
    unsure = Verdict(verdict="INCONCLUSIVE", message="m")
    assert exit_code(summary(verdict=reg)) == ExitCode.REGRESSION
    assert exit_code(summary(verdict=unsure)) == ExitCode.OK
    assert exit_code(summary(verdict=unsure), strict=True) == ExitCode.REGRESSION
    limited = reg.model_copy(update={"infra_limited": ["fused"]})
    assert exit_code(summary(verdict=limited)) == ExitCode.INFRA_ERROR
    assert exit_code(summary(outcome=RunOutcome(passed=True, message="m"))) == ExitCode.OK
    failed = RunOutcome(passed=False, message="m", failing=["s"])
    assert exit_code(summary(outcome=failed)) == ExitCode.REGRESSION
    over = RunOutcome(passed=False, message="m", infra_limited=["t"])
    assert exit_code(summary(outcome=over)) == ExitCode.INFRA_ERROR


def test_the_infrastructure_error_limit_is_one_rule() -> None:
    assert over_infra_limit(10, 3) and not over_infra_limit(10, 2)  # > 20%
    assert over_infra_limit(1, 1) and not over_infra_limit(0, 0)  # every run; no runs
    base = [score(r, side="baseline") for r in range(5)]
    cand = [score(0, side="candidate"), *(infra(r) for r in range(1, 5))]
    sides = [
        SideInfo(side="baseline", label="unfused", runs=5, infra_errors=0),
        SideInfo(side="candidate", label="fused", runs=5, infra_errors=4),
    ]
    b = {"s": aggregate("baseline", "unfused", "s", base)}
    c = {"s": aggregate("candidate", "fused", "s", cand)}
    v = decide(b, c, sides).verdict
    assert v.verdict == "INCONCLUSIVE" and v.infra_limited == ["fused"]
    assert v.reasons[0].startswith("too many infrastructure errors to judge (fused 4/5 runs")
    out = judge_run(c.values(), sides[1:])
    assert not out.passed and out.infra_limited == ["fused"]


def test_a_failing_run_is_named_by_scenario_and_pass_rate() -> None:
    runs = [score(0), looping(1)]
    agg = aggregate("target", "target", "entropy_array", runs)
    side = SideInfo(side="target", label="target", runs=2)
    strict = judge_run([agg], [side])
    assert not strict.passed and strict.failing == ["entropy_array"]
    assert strict.message == "1 scenario below pass rate 1: entropy_array (1/2 passed)"
    assert judge_run([agg], [side], min_pass_rate=0.5).passed


def test_make_compare_with_one_url_answers_in_makes_terms() -> None:
    out = subprocess.run(
        ["make", "-s", "compare", "FUSED=http://127.0.0.1:9"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "UNFUSED= is missing" in out.stderr and "--baseline" not in out.stderr
