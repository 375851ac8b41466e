"""Command-line usage across commands: URL and count types, preflight, boot's executable,
A/A labels, server arguments a side does not report."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli import main
from harness.present.console import render_compare
from harness.present.views import drift_trace
from harness.runfolder import RunFolder
from harness.scoring.models import CallScore, RunScore
from harness.server.fusion import server_args_diff
from harness.server.process import resolve_command
from harness.summary import SideInfo, Summary
from tests.compare.test_compare import CLOCK


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("bad", ["notaurl", "ftp://host/x", "localhost:8000"])
@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--target", "{}"],
        ["compare", "--baseline", "{}", "--candidate", "http://127.0.0.1:9"],
        ["compare", "--baseline", "http://127.0.0.1:9", "--candidate", "{}"],
        ["gsm8k", "--target", "{}"],
        ["gsm8k", "--target", "http://127.0.0.1:9", "--baseline", "{}"],
        ["boot", "--target", "{}"],
    ],
)
def test_malformed_urls_are_usage_errors(
    argv: list[str], bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.format(bad) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    recording_ok = argv[argv.index("{}") - 1] in ("--baseline", "--candidate")
    if bad == "notaurl" and recording_ok:  # a baseline may be a recording's folder
        assert "notaurl: no such recording" in err and "server URL starting with http" in err
    else:
        assert f"{bad!r} is not an http(s) URL" in err


@pytest.mark.parametrize("value", ["0", "-1", "two"])
@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--target", "http://127.0.0.1:9", "--repeats"],
        ["run", "--target", "http://127.0.0.1:9", "--concurrency"],
        ["compare", "--repeats"],
        ["compare", "--concurrency"],
        ["gsm8k", "--target", "http://127.0.0.1:9", "--parallel"],
    ],
)
def test_counts_must_be_positive(
    argv: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, value]) == 2
    err = capsys.readouterr().err
    assert argv[-1] in err and "Traceback" not in err


def test_unreachable_side_fails_fast_before_running(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    base, dead = sim_url("healthy", scenarios_dir=scenarios), _closed_port_url()
    results = tmp_path / "results"
    argv = ["compare", str(scenarios), "--results", str(results), "--no-progress"]
    assert main([*argv, "--baseline", base, "--candidate", dead]) == 3
    assert f"candidate {dead}: connection refused" in capsys.readouterr().err
    assert not results.exists()  # nothing ran, not even the baseline
    assert main(["run", str(scenarios), "--target", dead, "--results", str(results)]) == 3
    assert f"target {dead}: connection refused" in capsys.readouterr().err


def test_server_arguments_missing_on_one_side_are_not_a_diff() -> None:
    assert server_args_diff({"tp_size": 1, "context_length": 8192}, {}) == {}
    assert server_args_diff({}, {"tp_size": 1}) == {}
    assert server_args_diff({"tp_size": 1}, {"tp_size": 2}) == {
        "tp_size": {"baseline": 1, "candidate": 2}
    }
    summary = Summary(
        run_id="x",
        sides=[
            SideInfo(
                side="baseline",
                label="unfused",
                fusion={"state": "OFF", "server_args": {"tp_size": 1}},
            ),
            SideInfo(
                side="candidate", label="llama", fusion={"state": "UNKNOWN", "server_args": {}}
            ),
        ],
        server_args_diff={"tp_size": [1, None]},  # as older summaries recorded it
    )
    console = Console(record=True, width=200)
    render_compare(summary, console)
    out = console.export_text()
    assert "llama does not report server arguments" in out
    assert "server arguments that differ" not in out and "None" not in out


def test_resolve_command_finds_the_venv_bin(monkeypatch: pytest.MonkeyPatch) -> None:
    venv_bin = Path(sys.executable).parent
    if not (venv_bin / "harness").exists():
        pytest.skip("no harness console script beside this interpreter")
    monkeypatch.setenv("PATH", "/nonexistent")
    argv = resolve_command(["harness", "sim", "--port", "0"])
    assert argv == [str(venv_bin / "harness"), "sim", "--port", "0"]
    with pytest.raises(FileNotFoundError, match="no-such-server-xyz"):
        resolve_command(["no-such-server-xyz"])


def test_boot_with_a_missing_executable_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    code = main(["boot", "--cmd", "no-such-server-xyz --port 1", "--results", str(results)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--cmd: 'no-such-server-xyz': not found on PATH" in err
    assert not results.exists()
    code = main(["boot", "--cmd", f"{tmp_path}/missing/server", "--results", str(results)])
    assert code == 2 and "no such executable file" in capsys.readouterr().err


def test_aa_labels_the_sides_apart_without_the_fusion_warning(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)  # reports fusion OFF: warned on A/B
    argv = ["compare", str(scenarios), "--aa", "--baseline", url, "--repeats", "1"]
    results = tmp_path / "results"
    assert main([*argv, "--results", str(results), "--run-id", "aa", "--no-progress"]) == 0
    out = capsys.readouterr().out
    s = RunFolder.open(results / "aa").read_summary()
    assert [x.label for x in s.sides] == ["A", "A'"]
    assert not any("fusion is OFF on both sides" in w for w in s.warnings)
    assert "fusion is OFF on both sides" not in out
    code = main([*argv, "--baseline-label", "unfused", "--results", str(results), "--no-progress"])
    assert code == 0
    folder = next(p for p in results.iterdir() if p.name != "aa")
    assert [x.label for x in RunFolder.open(folder).read_summary().sides] == [
        "unfused",
        "unfused (again)",
    ]


def _call(turn: int, args: str, repeat_of: int | None, index: int) -> CallScore:
    return CallScore(turn=turn, call_index=index, tool="f", arguments=args, repeat_of=repeat_of)


def test_drift_trace_folds_repeated_turns_and_caps_lines() -> None:
    long = '{"x": "' + "y" * 400 + '"}'
    calls = [_call(0, long, None, 0), _call(0, "{}", None, 1)]
    calls += [_call(t, a, 0, 2 * t + i) for t in range(1, 7) for i, a in enumerate([long, "{}"])]
    run = RunScore(
        run_key="candidate/s/0/nostream",
        scenario_id="s",
        side="candidate",
        label="fused",
        repeat=0,
        termination="turn_cap",
        calls=calls,
    )
    lines = [t.text() for t in drift_trace(run)]
    assert len(lines) == 3
    assert len(lines[0]) == 160 and lines[0].endswith("…")
    assert (
        lines[2] == "turns 1-6: the same 2 calls repeated 6 more times (repeated identical calls)"
    )


def test_interrupted_compare_says_how_to_resume(
    write_scenarios: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.cli import compare as compare_cmd

    def ctrl_c(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(compare_cmd, "compare", ctrl_c)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/local/bin/{name}")  # on PATH
    scenarios = write_scenarios(CLOCK)
    code = main(["compare", str(scenarios), "--aa", "--results", str(tmp_path), "--no-progress"])
    assert code == 130
    err = capsys.readouterr().err
    assert "resume with: harness compare " in err and " --no-progress --resume compare-" in err


def test_resume_hint_names_a_runnable_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not on PATH: the script that runs now, else ``<python> -m harness``."""
    import argparse
    import shlex
    import sys

    from harness.cli._common import resume_command

    args = argparse.Namespace(argv=["run", "--target", "http://h:1", "--run-id", "old"])
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["/nowhere/python-script"])
    hint = shlex.split(resume_command(args, "r1"))
    assert hint == [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--target",
        "http://h:1",
        "--resume",
        "r1",
    ]
    script = Path(sys.executable).parent / "harness"
    if script.exists():
        monkeypatch.setattr(sys, "argv", [str(script)])
        assert shlex.split(resume_command(args, "r1"))[0] == str(script)


def test_run_id_of_a_folder_from_another_command_is_refused(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)
    argv = [str(scenarios), "--results", str(tmp_path), "--run-id", "x", "--no-progress"]
    assert main(["compare", *argv, "--aa", "--baseline", url, "--repeats", "1"]) == 0
    assert main(["run", *argv, "--target", url]) == 2
    assert "was recorded by another command" in capsys.readouterr().err


def test_run_console_names_the_target_once(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``harness run`` without ``--label``: ``target: URL``, not ``target: target  URL``;
    a label given is shown before the URL."""
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)
    argv = ["run", str(scenarios), "--target", url, "--results", str(tmp_path), "--no-progress"]
    assert main([*argv, "--run-id", "a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"target: {url}" in lines, lines
    assert main([*argv, "--run-id", "b", "--label", "fused"]) == 0
    assert f"target: fused  {url}" in capsys.readouterr().out.splitlines()
