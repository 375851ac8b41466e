"""Run folders from the command line: what ``--resume``/``--run-id`` accept, an interrupted
comparison re-scored, ``harness score`` redrawing the report, GSM8K folders not resumed,
and output cut short by a closed pipe.

Real runs against the reference server on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import ExitCode, main
from harness.errors import RunFolderError
from harness.present.evidence import format_run
from harness.runfolder import RunFolder, check_run_id
from harness.scoring.models import RunScore
from harness.sim.server import serve_in_thread
from tests.compare.test_compare import CLOCK, ENTROPY, LOOKUP


def _compare(scenarios: Path, results: Path, *extra: str) -> int:
    """A fixed comparison of 2 repeats (these tests cut and resume its runs; behaviour
    only: a numerics REGRESSION, decided from three sequences by blocks of tokens, would
    be the verdict whatever the runs)."""
    args = ["compare", str(scenarios), "--results", str(results), "--no-progress"]
    return main([*args, "--repeats", "2", "--no-sequential", "--no-logprobs", *extra])


@pytest.fixture
def scenarios(write_scenarios: Callable[..., Path]) -> Path:
    return write_scenarios(ENTROPY, LOOKUP, CLOCK)


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../x", "/tmp/x"])
def test_run_ids_are_plain_folder_names(bad: str, tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="is not a folder name"):
        check_run_id(bad)
    with pytest.raises(RunFolderError):
        RunFolder.create("run", results=tmp_path, run_id=bad or "/")
    assert check_run_id("compare-20261130-120000-1") == "compare-20261130-120000-1"


def test_run_ids_are_at_most_128_characters(tmp_path: Path) -> None:
    assert check_run_id("r" * 128) == "r" * 128
    with pytest.raises(RunFolderError, match=r"\(300 characters\) is too long; give at most 128"):
        check_run_id("r" * 300)
    with pytest.raises(RunFolderError, match="is too long"):  # not an OSError from mkdir
        RunFolder.create("run", results=tmp_path, run_id="r" * 300)


def test_resume_and_run_id_are_checked_before_anything_runs(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    assert _compare(scenarios, results, "--resume", "x", "--run-id", "y") == 2
    assert "not both" in capsys.readouterr().err
    assert _compare(scenarios, results, "--run-id", "../elsewhere") == 2
    assert "is not a folder name" in capsys.readouterr().err
    assert _compare(scenarios, results, "--resume", "nothing-here") == 2
    assert "--resume: no run folder" in capsys.readouterr().err
    assert not results.exists()  # no folder made by a refused command


def test_resume_with_fewer_scenarios_is_refused(
    scenarios: Path,
    write_scenarios: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _compare(scenarios, tmp_path, "--run-id", "r") == ExitCode.REGRESSION
    capsys.readouterr()
    only_clock = write_scenarios(CLOCK)
    assert _compare(only_clock, tmp_path, "--resume", "r") == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert "scenarios not given now: " in err and "entropy" in err and "cannot resume" in err


def test_resume_with_more_scenarios_is_refused_even_before_they_ran(
    write_scenarios: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.cli import compare as compare_cmd

    def ctrl_c(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt  # killed before any run was recorded

    with monkeypatch.context() as m:
        m.setattr(compare_cmd, "compare", ctrl_c)
        assert _compare(write_scenarios(CLOCK), tmp_path, "--run-id", "k") == 130
    capsys.readouterr()
    more = write_scenarios(CLOCK, ENTROPY)
    assert _compare(more, tmp_path, "--resume", "k") == ExitCode.USAGE_ERROR
    assert "scenarios not in the recorded run: entropy" in capsys.readouterr().err


def test_interrupted_comparison_rescored_is_inconclusive_not_one_sided(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _compare(scenarios, tmp_path, "--run-id", "c") == ExitCode.REGRESSION
    folder = RunFolder(tmp_path / "c")
    lines = folder.transcripts.read_text().splitlines(keepends=True)
    baseline_only = [x for x in lines if json.loads(x)["target"]["side"] == "baseline"]
    assert 0 < len(baseline_only) < len(lines)
    folder.transcripts.write_text("".join(baseline_only))  # as if killed before the candidate
    folder.summary_path.unlink()
    capsys.readouterr()
    assert main(["score", str(folder.path)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out.startswith(" INCONCLUSIVE  the candidate has no runs yet")
    summary = json.loads(folder.summary_path.read_text())
    assert summary["kind"] == "compare" and summary["outcome"] is None
    # fusion engagement and settings were saved before the runs: not lost with the summary
    assert [s["fusion"]["state"] for s in summary["sides"]] == ["OFF"]
    assert summary["settings"]["repeats"] == 2
    assert "compare report" in (folder.path / "report.html").read_text()
    assert main(["score", str(folder.path), "--strict"]) == ExitCode.REGRESSION


def test_partly_finished_comparison_is_not_judged(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _compare(scenarios, tmp_path, "--run-id", "p") == ExitCode.REGRESSION
    folder = RunFolder(tmp_path / "p")
    lines = folder.transcripts.read_text().splitlines(keepends=True)
    cut = [x for x in lines if json.loads(x)["run_key"] != "candidate/clock/1/nostream"]
    assert len(cut) == len(lines) - 1
    folder.transcripts.write_text("".join(cut))  # killed before the candidate's last run
    capsys.readouterr()
    assert main(["score", str(folder.path), "--quiet"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "INCONCLUSIVE: unfinished: runs per side differ (clock 2 vs 1) "
        "(interrupted? finish it with --resume)"
    ]


def test_resume_runs_again_the_runs_lost_to_infrastructure_errors(
    write_scenarios: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = write_scenarios(CLOCK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    args = ["run", str(scenarios), "--target", url, "--results", str(tmp_path)]
    args += ["--repeats", "2", "--max-retries", "0", "--no-progress"]
    with serve_in_thread("http-500", port=port, scenarios_dir=scenarios):
        assert main([*args, "--run-id", "i"]) == ExitCode.INFRA_ERROR  # every POST fails
    folder = RunFolder(tmp_path / "i")
    assert folder.finished_keys() == set()  # infrastructure errors are not finished runs
    with serve_in_thread("healthy", port=port, scenarios_dir=scenarios):  # the server is back
        assert main([*args, "--resume", "i"]) == ExitCode.OK
    capsys.readouterr()
    side = json.loads(folder.summary_path.read_text())["sides"][0]
    assert side["infra_errors"] == 0 and side["runs"] == 2
    assert len(folder.transcripts.read_text().splitlines()) == 4  # 2 lost, 2 run again


def test_score_redraws_the_report(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _compare(scenarios, tmp_path, "--run-id", "s") == ExitCode.REGRESSION
    report = tmp_path / "s" / "report.html"
    report.write_text("stale")
    capsys.readouterr()
    assert main(["score", str(tmp_path / "s"), "--quiet"]) == ExitCode.REGRESSION
    [line] = capsys.readouterr().out.splitlines()  # --quiet: the verdict line alone
    assert line.startswith("REGRESSION: ")
    assert "REGRESSION" in report.read_text()  # redrawn all the same
    assert main(["score", str(tmp_path / "s")]) == ExitCode.REGRESSION
    assert capsys.readouterr().out.splitlines()[-1] == f"report: {report}"


def test_gsm8k_does_not_write_into_an_existing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "keep.txt").write_text("mine")
    args = ["gsm8k", "--target", "http://127.0.0.1:9", "--results", str(tmp_path)]
    assert main([*args, "--run-id", "g"]) == ExitCode.USAGE_ERROR
    assert "a GSM8K run is not resumed" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "g").iterdir()] == ["keep.txt"]
    assert main([*args, "--run-id", "../up"]) == ExitCode.USAGE_ERROR
    assert "is not a folder name" in capsys.readouterr().err


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    code = "import sys; from harness.cli import main; sys.exit(main(['sim', '--list-profiles']))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader left before anything was written (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in (141, 120)  # 120: Python's own flush failure at exit
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_missing_calls_are_named_by_segment() -> None:
    score = RunScore.model_validate(
        {
            "run_key": "candidate/s/0/nostream",
            "scenario_id": "s",
            "side": "candidate",
            "label": "fused",
            "repeat": 0,
            "stream": False,
            "termination": "turn_cap",
            "turns": 12,
            "passed": False,
            "sequence": {"missing": ["seg0:entropy", "seg2:normalize"]},
        }
    )
    lines = format_run(score)
    assert "  missing expected calls: entropy (opening), normalize (follow-up 2)" in lines
