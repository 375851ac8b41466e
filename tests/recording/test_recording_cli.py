"""Recorded baselines, the launched forms: ``harness record --cmd`` and
``harness compare --baseline-cmd ... --candidate-cmd ...`` (the reference server as a
subprocess, ``python -m harness sim``, one at a time on the same port), and GSM8K answers
recorded then compared (``harness gsm8k --baseline <recording>``)."""

from __future__ import annotations

import collections
import json
import shlex
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import RecordingError
from harness.recording import Recording
from harness.runfolder import RunFolder
from harness.sim.server import serve_in_thread
from harness.summary import Summary
from tests.conftest import GSM8K_TEST

ROOT = Path(__file__).parents[2]
SCENARIO_FILES = ("no_params_tool.yaml", "parallel_calls.yaml", "tool_choice_required.yaml")


@pytest.fixture
def scenarios(tmp_path: Path) -> Path:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    for name in SCENARIO_FILES:
        shutil.copy(ROOT / "scenarios" / name, folder / name)
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _sim_cmd(profile: str, port: int, scenarios: Path, *extra: str) -> str:
    return shlex.join(
        [sys.executable, "-m", "harness", "sim", "--profile", profile, "--port", str(port),
         "--scenarios", str(scenarios), *extra]
    )  # fmt: skip


def _per_side(folder: Path) -> dict[tuple[str, str], int]:
    return dict(collections.Counter((r.side, r.scenario_id) for r in RunFolder(folder).records()))


def _summary(folder: Path) -> Summary:
    s = RunFolder.open(folder).read_summary()
    assert s is not None, f"{folder}: no summary.json"
    return s


# ------------------------------------------------------------------ 2. record --cmd


def test_record_cmd_launches_records_and_stops(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    code = main(
        ["record", str(scenarios), "--cmd", _sim_cmd("healthy", port, scenarios),
         "--repeats", "2", "--rounds", "1", "--results", str(tmp_path), "--run-id", "rec",
         "--no-progress", "--no-logprobs", "--boot-timeout", "60"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"boot: PASS at http://127.0.0.1:{port}" in out
    rec = Recording.open(tmp_path / "rec")
    assert rec.info.complete and rec.info.boot is not None
    assert rec.info.boot["verdict"] == "PASS"
    assert rec.info.side is not None and rec.info.side.boot == rec.info.boot
    assert rec.info.side.fusion is not None and rec.info.side.fusion["state"] == "OFF"
    assert rec.info.url == f"http://127.0.0.1:{port}"
    assert (tmp_path / "rec" / "boot.json").is_file()
    assert sorted(_per_side(tmp_path / "rec").values()) == [2, 2, 2]
    # stopped: the port is free, another server can take it
    assert _port_is_free(port)
    with serve_in_thread("healthy", port=port) as url:
        assert url == f"http://127.0.0.1:{port}"


def test_record_cmd_that_crashes_at_boot_exits_1_with_a_report(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    cmd = _sim_cmd("capture-crash", port, scenarios, "--enable-return-routed-experts")
    code = main(["record", str(scenarios), "--cmd", cmd, "--results", str(tmp_path),
                 "--run-id", "crash", "--no-progress", "--boot-timeout", "60"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1  # the build's failure, not the runner's
    assert "boot: FAIL" in out and "RuntimeError: The expanded size" in out  # quoted
    assert "crashed at boot" in err and len(err.strip().splitlines()) == 1
    report = (tmp_path / "crash" / "report.md").read_text()
    assert "BOOT CRASH" in report and "RuntimeError: The expanded size" in report
    assert "**Next step:** fix the crash" in report
    with pytest.raises(RecordingError, match="crash: the recording did not finish"):
        Recording.open(tmp_path / "crash")  # harness record's folder: not "not a recording"


# ------------------------------------------------------------------ 4. builds launched in turn


def test_compare_launches_baseline_then_candidate_on_one_port(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Baseline launched, recorded into <run>/baseline, stopped; candidate launched on the
    same port, compared, stopped: REGRESSION, both boots kept and printed. A resume after
    part of the candidate's runs is lost does not launch the baseline again."""
    port = _free_port()
    argv = [
        "compare", str(scenarios),
        "--baseline-cmd", _sim_cmd("healthy", port, scenarios),
        "--candidate-cmd", _sim_cmd("fused-regression", port, scenarios),
        "--repeats", "3", "--rounds", "2", "--results", str(tmp_path), "--no-progress",
        "--boot-timeout", "60",
    ]  # fmt: skip
    code = main([*argv, "--run-id", "launched"])
    out = capsys.readouterr().out
    assert code == 1, out
    url = f"http://127.0.0.1:{port}"
    assert (
        f"baseline boot: PASS at {url}" in out or f"baseline (baseline) boot: PASS at {url}" in out
    )
    assert "candidate boot: PASS" in out or "candidate (candidate) boot: PASS" in out
    folder = tmp_path / "launched"
    s = _summary(folder)
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    sides = {x.side: x for x in s.sides}
    assert sides["baseline"].boot is not None and sides["baseline"].boot["verdict"] == "PASS"
    assert sides["candidate"].boot is not None and sides["candidate"].boot["verdict"] == "PASS"
    assert sides["baseline"].recorded == str(folder / "baseline")
    assert sides["baseline"].fusion["state"] == "OFF"  # type: ignore[index]
    assert sides["candidate"].fusion["state"] == "ON"  # type: ignore[index]
    rec = Recording.open(folder / "baseline")  # a recording, reusable as --baseline
    assert rec.info.complete and rec.info.boot is not None and rec.info.boot["verdict"] == "PASS"
    assert rec.info.repeats == 6
    assert _port_is_free(port)

    # lose the candidate's runs of the second round, then resume
    boot_json = folder / "baseline" / "boot.json"
    before = boot_json.stat().st_mtime_ns
    lines = (folder / "transcripts.jsonl").read_text().splitlines(keepends=True)
    kept = [
        ln for ln in lines
        if not (json.loads(ln)["target"]["side"] == "candidate" and json.loads(ln)["repeat"] >= 3)
    ]  # fmt: skip
    assert len(kept) < len(lines)
    (folder / "transcripts.jsonl").write_text("".join(kept))
    code = main([*argv, "--resume", "launched"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "(resumed: not launched again)" in out
    assert "baseline boot: PASS" not in out and "baseline (baseline) boot" not in out
    assert boot_json.stat().st_mtime_ns == before
    runs = _per_side(folder)
    for sid in ("no_params_tool", "parallel_calls", "tool_choice_required"):
        assert runs[("candidate", sid)] == runs[("baseline", sid)] == 6
    s = _summary(folder)
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    assert {x.side: x.boot is not None for x in s.sides} == {"baseline": True, "candidate": True}


def test_compare_candidate_that_crashes_at_boot_exits_1_quoting_it(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    code = main(
        ["compare", str(scenarios / "no_params_tool.yaml"),
         "--baseline-cmd", _sim_cmd("healthy", port, scenarios),
         "--candidate-cmd",
         _sim_cmd("capture-crash", port, scenarios, "--enable-return-routed-experts"),
         "--repeats", "1", "--rounds", "1", "--no-logprobs", "--results", str(tmp_path),
         "--run-id", "crash", "--no-progress", "--boot-timeout", "60"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1, (out, err)  # a crash at boot is the candidate's failure
    assert "boot: FAIL" in out
    assert "    | RuntimeError: The expanded size of the tensor" in out  # the crash, quoted
    assert "the candidate (candidate) crashed at boot" in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "crash" / "candidate-boot" / "boot.json").is_file()
    report = (tmp_path / "crash" / "report.md").read_text()  # what the CI job posts
    assert report.startswith("## harness compare: BOOT CRASH")
    assert "RuntimeError: The expanded size of the tensor" in report
    assert str(tmp_path / "crash" / "candidate-boot" / "server.log") in report
    assert _port_is_free(port)


def test_compare_candidate_that_prints_a_traceback_and_exits_is_exit_1(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any launched command that dies with a Python traceback before /health answers: the
    crash quoted in report.md, exit 1; a command that never answers is exit 3."""
    crash = tmp_path / "crash.py"
    crash.write_text("def load():\n    raise ValueError('weights of layer 3 missing')\nload()\n")
    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(30)\n")
    port = _free_port()
    base = ["compare", str(scenarios / "no_params_tool.yaml"),
            "--baseline-cmd", _sim_cmd("healthy", port, scenarios),
            "--repeats", "1", "--rounds", "1", "--no-logprobs", "--results", str(tmp_path),
            "--no-progress", "--url", f"http://127.0.0.1:{port}"]  # fmt: skip
    code = main([*base, "--candidate-cmd", f"{sys.executable} {crash}", "--run-id", "tb",
                 "--boot-timeout", "60"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    report = (tmp_path / "tb" / "report.md").read_text()
    assert "BOOT CRASH" in report and "ValueError: weights of layer 3 missing" in report
    assert "Traceback (most recent call last)" in report
    code = main([*base, "--candidate-cmd", f"{sys.executable} {silent}", "--run-id", "silent",
                 "--boot-timeout", "3"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 3, (out, err)  # nothing ran, and nothing says the build is at fault
    assert "DID NOT BOOT" in (tmp_path / "silent" / "report.md").read_text()
    assert "did not boot" in err and len(err.strip().splitlines()) == 1


def test_compare_cmd_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, says in (
        (["--baseline", "http://127.0.0.1:9", "--baseline-cmd", "x", "--candidate-cmd", "y"],
         "not both"),
        (["--baseline-cmd", "x"], "needs the other side"),
    ):  # fmt: skip
        assert main(["compare", *argv, "--results", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0]


# ------------------------------------------------------------------ 5. GSM8K answers recorded


def test_gsm8k_against_recorded_answers(
    tmp_path: Path, gsm8k_sim: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    scen = tmp_path / "scen"
    scen.mkdir()
    shutil.copy(ROOT / "scenarios" / "no_params_tool.yaml", scen / "no_params_tool.yaml")
    with serve_in_thread("healthy", scenarios_dir=str(scen), gsm8k_path=GSM8K_TEST) as url:
        code = main(
            ["record", str(scen), "--target", url, "--repeats", "1", "--rounds", "1",
             "--no-logprobs", "--gsm8k", "20", "--gsm8k-data", str(GSM8K_TEST),
             "--results", str(tmp_path), "--run-id", "rec", "--no-progress"]
        )  # fmt: skip
    assert code == 0
    rec = Recording.open(tmp_path / "rec")
    assert rec.info.gsm8k is not None and rec.info.gsm8k["num_questions"] == 20
    assert rec.gsm8k_folder() is not None
    capsys.readouterr()

    cand = gsm8k_sim("gsm8k-drop", seed=1)  # another server, the recorded one is gone
    common = ["gsm8k", "--target", cand, "--baseline", str(tmp_path / "rec"),
              "--data", str(GSM8K_TEST), "--results", str(tmp_path), "--no-progress"]  # fmt: skip
    code = main([*common, "--num-questions", "20", "--run-id", "paired"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    summary = json.loads((tmp_path / "paired" / "gsm8k.json").read_text())
    assert summary["verdict"] in ("NO CHANGE", "INCONCLUSIVE", "REGRESSION")
    assert summary["paired"]["n_pairs"] == 20  # the recorded answers, paired question by question
    sides = {x["side"]: x for x in summary["sides"]}
    assert sides["baseline"]["n"] == sides["candidate"]["n"] == 20
    assert sides["baseline"]["base_url"] == rec.info.url  # answered by the recorded server
    assert "McNemar" in out and f"verdict: {summary['verdict']}" in out

    code = main([*common, "--num-questions", "25", "--run-id", "refused"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "num_questions 20 recorded, 25 now" in err[0]
