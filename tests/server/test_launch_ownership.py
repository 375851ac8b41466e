"""A launched build is the process that answers: a port that already answers is refused
before anything runs (``compare --baseline-cmd/--candidate-cmd``, ``record --cmd``,
``boot --cmd``), a 200 from another process's listener is not the launched server's
health, a resumed launch reads its own fresh log, and a process that detached from the
launch's session (``setsid``) is stopped with it and named."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.server.boot import boot, wait_healthy
from harness.server.process import launch, stop_group
from harness.sim.server import serve_in_thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sim(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness", "sim", "--port", str(port), *extra]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def held() -> object:
    """A healthy reference server (in this process) holding a port: ``(url, port)``."""
    port = _free_port()
    with serve_in_thread("healthy", port=port) as url:
        yield url, port


def test_launch_on_a_held_port_is_refused_before_any_run(
    held: tuple[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, port = held
    cand = shlex.join(_sim(port, "--profile", "fused-regression"))
    with serve_in_thread("healthy") as other:
        for argv in (
            ["compare", "scenarios/no_params_tool.yaml", "--baseline", other,
             "--candidate-cmd", cand, "--strict"],
            ["compare", "scenarios/no_params_tool.yaml", "--baseline-cmd", shlex.join(_sim(port)),
             "--candidate-cmd", cand],
            ["record", "scenarios/no_params_tool.yaml", "--cmd", cand],
        ):  # fmt: skip
            code = main(
                [*argv, "--results", str(tmp_path), "--no-progress", "--boot-timeout", "20"]
            )
            err = _one_line(capsys.readouterr().err)
            assert code == 2, err
            assert f"127.0.0.1:{port}" in err and "already answers" in err
            assert f"pid {os.getpid()}" in err  # the process that holds it
            assert "model 'sim-model'" in err or "serving model" in err
    assert not list(tmp_path.rglob("transcripts.jsonl"))  # nothing ran
    code = main(["boot", "--cmd", cand, "--results", str(tmp_path / "b"), "--boot-timeout", "20"])
    err = _one_line(capsys.readouterr().err)
    assert code == 2 and f"127.0.0.1:{port}" in err and "already answers" in err


def test_health_of_another_process_on_the_port_is_not_the_launched_server(
    held: tuple[str, int], tmp_path: Path
) -> None:
    """A launched process that never binds (it crashed at boot, or bound elsewhere) while
    another server answers on its port: the 200 is not its health."""
    url, port = held
    log = tmp_path / "server.log"
    proc = launch([sys.executable, "-c", "import time; time.sleep(30)"], log)
    try:
        check, _ = wait_healthy(proc, log, url, health_path="/health", timeout_s=10, ignore=())
    finally:
        stop_group(proc, grace_s=1)
    assert check.verdict == "FAIL", check.detail
    assert f"pid {os.getpid()}" in check.detail and f"pid {proc.pid}" in check.detail


def test_a_resumed_launch_starts_a_fresh_log(tmp_path: Path) -> None:
    """The previous attempt's log (a crash, the URL of another port) is not read as this
    launch's: it is kept beside as server.log.1."""
    old = (
        "INFO:     Uvicorn running on http://127.0.0.1:9 (Press CTRL+C to quit)\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "RuntimeError: the previous attempt crashed\n"
    )
    run_dir = tmp_path / "candidate-boot"
    run_dir.mkdir()
    (run_dir / "server.log").write_text(old)
    t0 = time.monotonic()
    report = boot(_sim(0), run_dir=run_dir, timeout_s=30, grace_s=2)
    health = next(c for c in report.checks if c.name == "health")
    assert health.verdict == "PASS", health.detail
    assert ":9" not in (report.url or "")
    assert time.monotonic() - t0 < 25
    assert (run_dir / "server.log.1").read_text() == old
    assert "previous attempt" not in (run_dir / "server.log").read_text()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize(
    "detach",
    ["setsid sleep 300 &", "(setsid sleep 300 &);"],
    ids=["setsid-child", "setsid-double-fork"],
)
def test_a_process_that_leaves_the_session_is_stopped_and_named(
    detach: str, tmp_path: Path
) -> None:
    port = _free_port()
    sim = shlex.join(_sim(port))
    report = boot(["sh", "-c", f"{detach} exec {sim}"], run_dir=tmp_path, timeout_s=30, grace_s=2)
    stop = next(c for c in report.checks if c.name == "stop")
    assert "left the session" in stop.detail, stop.detail
    pids = [int(p) for p in stop.detail.split("[", 1)[1].split("]", 1)[0].split(",")]
    assert pids and not any(_alive(p) for p in pids), stop.detail
    assert stop.verdict == "PASS"  # stopped: nothing survived


def test_blank_or_unbalanced_launch_commands_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["compare", "--baseline-cmd", "   ", "--candidate-cmd", "x"],
        ["compare", "--baseline-cmd", "x", "--candidate-cmd", "sim --port '1"],
        ["record", "scenarios/no_params_tool.yaml", "--cmd", "   "],
        ["record", "scenarios/no_params_tool.yaml", "--cmd", 'a "b'],
    ):
        code = main([*argv, "--results", str(tmp_path), "--no-progress"])
        err = _one_line(capsys.readouterr().err)
        assert code == 2, err
        assert "-cmd" in err and ("empty" in err or "quotes" in err), err


FLOOD = (
    "import sys, time\n"
    "for i in range(40000):\n"
    "    sys.stdout.write(f'line {i} ' + 'x' * 1000 + '\\n')\n"
    "sys.stdout.write('the last line\\n'); sys.stdout.flush()\n"
    "time.sleep(60)\n"
)


def test_a_flooding_server_log_is_capped_on_disk_keeping_head_and_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 MB written; the file on disk stays about the cap, its start and end kept."""
    import harness.server.process as process

    monkeypatch.setattr(process, "MAX_LOG_FILE", 1024 * 1024, raising=False)
    report = boot([sys.executable, "-c", FLOOD], run_dir=tmp_path, timeout_s=8, grace_s=1)
    log = tmp_path / "server.log"
    assert log.stat().st_size <= 1024 * 1024, log.stat().st_size
    text = log.read_text()
    assert text.startswith("line 0 ")
    assert "the last line" in text
    assert "bytes of this log cut here" in text
    assert next(c for c in report.checks if c.name == "health").verdict == "FAIL"
