"""Boot checks against real processes: the reference server launched as a subprocess
(``harness sim``), crashing and hanging commands, and a server already running."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from harness.cli import ExitCode, main
from harness.runfolder import RunFolder
from harness.server.boot import BootReport, boot, check_running
from harness.server.process import find_failure, group_members, url_from_command, url_from_log
from harness.sim.moe import boot_log_lines
from harness.sim.profiles import get_profile
from harness.sim.server import serve_in_thread


def sim_cmd(profile: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "sim",
        "--profile",
        profile,
        "--port",
        "0",
        "--scenarios",
        "/nonexistent",
        *extra,
    ]


def by_name(report: BootReport) -> dict[str, str]:
    return {c.name: c.verdict for c in report.checks}


def assert_no_process_left(report: BootReport) -> None:
    assert report.pid is not None
    assert group_members(report.pid) == []
    stat = Path(f"/proc/{report.pid}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1].startswith(("Z", "X"))


# ------------------------------------------------------------------ acceptance (sim subprocess)


def test_capture_crash_fails_quoting_the_runtime_error(tmp_path: Path) -> None:
    t0 = time.monotonic()
    report = boot(
        sim_cmd("capture-crash", "--enable-return-routed-experts"), timeout_s=60, run_dir=tmp_path
    )
    assert time.monotonic() - t0 < 45  # failed early, not at the timeout
    health = next(c for c in report.checks if c.name == "health")
    assert health.verdict == "FAIL" and report.verdict == "FAIL"
    assert "The expanded size of the tensor (5) must match the existing size (4)" in health.detail
    assert health.evidence[-1].startswith("RuntimeError: The expanded size")
    assert any("routed_experts_capturer.py" in ln for ln in health.evidence)
    assert report.exit_code in (1, -15)  # exited on its own, or stopped by us
    fusion = next(c for c in report.checks if c.name == "fusion")
    assert fusion.verdict == "SKIP" and report.fusion is not None and report.fusion.state == "ON"
    saved = json.loads((tmp_path / "boot.json").read_text())
    assert saved["verdict"] == "FAIL" and saved["schema_version"] == 1
    assert "Traceback" in (tmp_path / "server.log").read_text()
    assert_no_process_left(report)


def test_duplicated_shared_id_fails_the_probe_naming_token_and_layer(tmp_path: Path) -> None:
    report = boot(
        sim_cmd("experts-dup-shared", "--enable-return-routed-experts"),
        timeout_s=60,
        probe="routed-experts",
        run_dir=tmp_path,
        expect_log=[r"Serving on"],
        forbid_log=[r"is disabled"],
    )
    verdicts = by_name(report)
    assert verdicts["health"] == "PASS" and verdicts["routed-experts"] == "FAIL"
    probe = next(c for c in report.checks if c.name == "routed-experts")
    assert "token 0, layer 1: shared expert id 16" in probe.detail
    assert report.fusion is not None and report.fusion.state == "ON"
    assert verdicts["expect-log Serving on"] == "PASS"
    assert verdicts["forbid-log is disabled"] == "PASS"
    assert report.verdict == "FAIL"
    assert_no_process_left(report)


def test_healthy_server_passes_with_capture_and_fusion_off(tmp_path: Path) -> None:
    report = boot(
        sim_cmd("healthy", "--enable-return-routed-experts"),
        timeout_s=60,
        probe="routed-experts",
        run_dir=tmp_path,
        expect_fusion="off",
        expect_log=[r"fired up and ready"],
        forbid_log=[r"fusion optimization enabled"],
    )
    assert report.verdict == "PASS", report.checks
    assert set(by_name(report).values()) == {"PASS"}
    assert report.fusion is not None and report.fusion.state == "OFF"
    assert report.server_info and report.server_info["enable_return_routed_experts"] is True
    assert report.probe is not None and report.probe.ok and report.probe.rows
    assert report.url and report.url.startswith("http://127.0.0.1:")
    assert report.timings["to_health_s"] > 0
    assert_no_process_left(report)


def test_hanging_command_is_killed_at_the_timeout(tmp_path: Path) -> None:
    t0 = time.monotonic()
    report = boot(
        ["bash", "-c", "sleep 987.65 & sleep 987.65"],
        timeout_s=1.5,
        run_dir=tmp_path,
        url="http://127.0.0.1:9",
        grace_s=2,
    )
    took = time.monotonic() - t0
    health = next(c for c in report.checks if c.name == "health")
    assert health.verdict == "FAIL" and health.detail.startswith("timeout")
    assert 1.5 <= took < 15
    assert by_name(report)["stop"] == "PASS"
    assert_no_process_left(report)
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and "sleep\x00987.65" in _cmdline(p)]
    assert leftovers == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def test_term_ignoring_child_is_sigkilled(tmp_path: Path) -> None:
    script = "trap '' TERM; sleep 1000 & wait"
    report = boot(
        ["bash", "-c", script],
        timeout_s=0.5,
        run_dir=tmp_path,
        url="http://127.0.0.1:9",
        grace_s=0.5,
    )
    stop = next(c for c in report.checks if c.name == "stop")
    assert stop.verdict == "PASS" and "SIGKILL" in stop.detail
    assert_no_process_left(report)


# ------------------------------------------------------------------ early failures


def test_exit_without_traceback_and_traceback_while_alive(tmp_path: Path) -> None:
    exited = boot(
        [sys.executable, "-c", "import sys; sys.exit(3)"], timeout_s=30, run_dir=tmp_path / "a"
    )
    health = next(c for c in exited.checks if c.name == "health")
    assert "exited with code 3" in health.detail and exited.exit_code == 3
    code = (
        "import traceback, time\ntry:\n    raise ValueError('bad weights')\n"
        "except ValueError:\n    traceback.print_exc()\ntime.sleep(100)"
    )
    t0 = time.monotonic()
    alive = boot([sys.executable, "-c", code], timeout_s=30, run_dir=tmp_path / "b")
    assert time.monotonic() - t0 < 20
    health = next(c for c in alive.checks if c.name == "health")
    assert health.verdict == "FAIL" and "ValueError: bad weights" in health.detail
    assert_no_process_left(alive)


def test_cuda_error_line_fails_early(tmp_path: Path) -> None:
    cmd = "echo 'HIP error: invalid device function'; sleep 100"
    report = boot(["bash", "-c", cmd], timeout_s=30, run_dir=tmp_path)
    health = next(c for c in report.checks if c.name == "health")
    assert health.verdict == "FAIL" and "HIP error: invalid device function" in health.detail
    assert report.timings["total_s"] < 20


def test_missing_executable_is_a_launch_failure(tmp_path: Path) -> None:
    report = boot(["/nonexistent/server"], timeout_s=5, run_dir=tmp_path)
    assert by_name(report) == {"launch": "FAIL"} and report.verdict == "FAIL"


# ------------------------------------------------------------------ a running server


@pytest.mark.parametrize(
    ("profile", "state"), [("fusion-on", "ON"), ("healthy", "OFF"), ("fusion-unknown", "UNKNOWN")]
)
def test_check_running_tells_fusion_states_apart(tmp_path: Path, profile: str, state: str) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(boot_log_lines(get_profile(profile), capture=True)) + "\n")
    with serve_in_thread(profile, capture=True, scenarios_dir=None) as url:
        report = check_running(url + "/v1", log_path=log, probe="routed-experts", run_dir=tmp_path)
    assert report.fusion is not None and report.fusion.state == state
    verdicts = by_name(report)
    assert verdicts["health"] == verdicts["routed-experts"] == verdicts["log-errors"] == "PASS"
    assert verdicts["fusion"] == ("WARN" if state == "UNKNOWN" else "PASS")
    assert report.verdict == ("WARN" if state == "UNKNOWN" else "PASS")
    assert (tmp_path / "boot.json").exists()


def test_check_running_on_nothing_fails(tmp_path: Path) -> None:
    report = check_running("http://127.0.0.1:9", run_dir=tmp_path)
    assert by_name(report) == {"health": "FAIL"} and "nothing" in report.checks[0].detail


# ------------------------------------------------------------------ parsing


def test_find_failure_takes_the_exception_line_of_an_sglang_traceback() -> None:
    lines = [
        "[2026-01-01 00:00:00 TP0] Load weight end.",
        "[2026-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "    g()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "",
        "[2026-01-01 00:00:01] Received sigquit from a child process.",
    ]
    found = find_failure(lines, quote=3)
    assert found is not None
    assert found[0].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert found[1][-1].startswith("torch.OutOfMemoryError")
    assert find_failure(["all good", "ready"]) is None


#: the reference server (``harness sim``) on a free port: it prints its boot log, then
#: ``Serving on http://127.0.0.1:<port>``, and answers the health probe
TINY_SERVER = """
from harness.cli import main
main(["sim", "--port", "0"])
"""


def test_ignored_errors_are_not_failures(tmp_path: Path) -> None:
    tb = ["Traceback (most recent call last):", '  File "a.py", line 1', "ImportError: flashinfer"]
    assert find_failure(tb) is not None
    assert find_failure(tb, ignore=("flashinfer",)) is None
    assert find_failure(["CUDA error: busy"], ignore=("busy",)) is None
    code = f"print({tb!r}[0]); print({tb!r}[2], flush=True)\n{TINY_SERVER}"
    report = boot(
        [sys.executable, "-c", code],
        timeout_s=30,
        run_dir=tmp_path / "a",
        ignore_errors=["flashinfer"],
    )
    assert by_name(report)["health"] == "PASS" and by_name(report)["log-errors"] == "PASS"
    strict = boot([sys.executable, "-c", code], timeout_s=30, run_dir=tmp_path / "b")
    assert "ImportError: flashinfer" in strict.checks[1].detail and strict.verdict == "FAIL"


def test_urls_from_command_and_log() -> None:
    assert url_from_command(["x", "--port", "30000"]) == "http://127.0.0.1:30000"
    assert url_from_command(["x", "--host=0.0.0.0", "--port=8"]) == "http://127.0.0.1:8"
    assert url_from_command(["x", "--port", "0"]) is None
    assert url_from_command(["x", "--url", "http://h:1/"]) == "http://h:1"
    log = ["INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"]
    assert url_from_log(log) == "http://127.0.0.1:30000"
    assert url_from_log(["Serving on http://127.0.0.1:4321"]) == "http://127.0.0.1:4321"
    assert url_from_log(["nothing"]) is None


# ------------------------------------------------------------------ CLI


def test_cli_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["boot", "--cmd", "x", "--expect-log", "a("]) == 2
    assert "invalid regular expression" in capsys.readouterr().err
    assert main(["boot", "--cmd", "x", "--log", "f"]) == 2
    assert main(["boot", "--target", "http://127.0.0.1:9", "--top-k", "4"]) == 2
    assert "go together" in capsys.readouterr().err
    assert main(["boot", "--cmd", "python 'x"]) == 2
    assert "check the quotes" in capsys.readouterr().err
    assert main(["boot", "--target", "http://127.0.0.1:9", "--url", "http://y"]) == 2
    assert main(["boot", "--cmd", "x", "--log", "f", "--results", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())  # a usage error creates no run folder


def test_cli_prints_checks_and_exits_1_on_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "boot",
            "--cmd",
            f"{sys.executable} -c 'raise SystemExit(4)'",
            "--boot-timeout",
            "20",
            "--results",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == ExitCode.REGRESSION
    assert "FAIL  health: the server exited with code 4" in out and "boot: FAIL" in out
    (saved,) = tmp_path.glob("boot-*/boot.json")
    # the run folder is said first, before the server is launched (a killed boot is found)
    assert out.startswith(f"run folder: {saved.parent}\n")
    manifest = RunFolder(saved.parent).manifest()
    assert manifest is not None and manifest.args["boot_timeout"] == 20.0
    assert manifest.kind == "boot"
    assert out.rstrip().endswith(f"report: {saved.parent / 'report.html'}")  # drawn, said


def test_cli_target_with_model_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "num_hidden_layers": 4,
                "num_experts_per_tok": 4,
                "n_routed_experts": 16,
                "first_k_dense_replace": 1,
            }
        )
    )
    log = tmp_path / "server.log"
    log.write_text("\n".join(boot_log_lines(get_profile("fusion-on"), capture=True)) + "\n")
    with serve_in_thread("fusion-on", capture=True, scenarios_dir=None) as url:
        ok = main(
            [
                "boot",
                "--target",
                url,
                "--log",
                str(log),
                "--probe",
                "routed-experts",
                "--model-config",
                str(cfg),
                "--expect-fusion",
                "on",
                "--results",
                str(tmp_path / "r"),
            ]
        )
        out = capsys.readouterr().out
        wrong = main(
            ["boot", "--target", url, "--expect-fusion", "off", "--results", str(tmp_path / "r")]
        )
    assert ok == 0, out
    assert "PASS  routed-experts" in out and "PASS  fusion: fusion ON" in out
    assert wrong == 1 and "expected OFF" in capsys.readouterr().out
    assert main(["boot", "--target", "http://x", "--model-config", str(tmp_path / "no")]) == 2


def test_check_status_is_not_a_comparison_verdict() -> None:
    """A check's status (``CheckStatus``) keeps its on-disk field name ``verdict`` and
    its four values; a comparison's verdict (``VerdictName``) is refused there."""
    from typing import get_args

    from pydantic import ValidationError

    from harness.server.boot import Check, CheckStatus

    assert get_args(CheckStatus) == ("PASS", "FAIL", "WARN", "SKIP")
    check = Check(name="health", verdict="SKIP", detail="no server")
    assert json.loads(check.model_dump_json())["verdict"] == "SKIP"
    assert Check.model_validate({"name": "h", "verdict": "WARN"}).verdict == "WARN"
    with pytest.raises(ValidationError):
        Check.model_validate({"name": "h", "verdict": "REGRESSION"})


# ----------------------------------------------------------------------------- a log out of bounds


def test_log_scanner_reads_only_what_was_appended_and_keeps_a_bounded_tail(
    tmp_path: Path,
) -> None:
    from harness.server import process

    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 3_000_000)  # no newline yet: one line being written
    scanner = process.LogScanner(log)
    assert scanner.poll() == [] and scanner.offset == 3_000_000
    (partial,) = scanner.lines
    assert partial.endswith(f"[cut at {process.MAX_LOG_LINE:,} bytes]")
    assert len(partial) < process.MAX_LOG_LINE + 40
    with log.open("ab") as fh:
        fh.write(b"x\nINFO: Uvicorn running on http://0.0.0.0:8123 (Press CTRL+C)\n")
        fh.write(b"".join(b"line %d\n" % i for i in range(3 * process.TAIL_LINES)))
    new = scanner.poll()
    assert new[0].endswith("bytes]") and len(new) == 2 + 3 * process.TAIL_LINES
    assert scanner.offset == log.stat().st_size  # read once, from where it stopped
    assert scanner.url == "http://127.0.0.1:8123"
    assert len(scanner.lines) == process.TAIL_LINES and scanner.lines[-1] == "line 5999"
    with log.open("ab") as fh:
        fh.write(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
        fh.write(b"".join(b"after %d\n" % i for i in range(3 * process.TAIL_LINES)))
    scanner.poll()  # the error scrolled out of the tail: still the failure
    assert scanner.failure() == (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        ["RuntimeError: CUDA error: an illegal memory access was encountered"],
    )
    assert scanner.poll() == []  # nothing new, nothing read


def test_read_lines_of_a_long_log_keeps_its_start_and_end(tmp_path: Path) -> None:
    from harness.server.process import read_lines

    log = tmp_path / "server.log"
    log.write_bytes(b"fusion enabled\n" + b"y" * 5_000_000 + b"\nTraceback (most recent call last):\n"
                    b"ValueError: bad weights\n")  # fmt: skip
    lines = read_lines(log, max_bytes=1_000_000)
    assert lines[0] == "fusion enabled" and lines[-1] == "ValueError: bad weights"
    assert lines[1].startswith("[") and "bytes of the log not read]" in lines[1]
    assert max(len(ln) for ln in lines) < 9000


def test_a_server_flooding_its_log_without_newlines_times_out_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A server writing 1.5 GB of log with no newline (1 GB address space for the harness):
    the boot fails at its timeout, in one report, without MemoryError."""
    import resource
    import subprocess

    flood = (
        "import os, sys, time\nchunk = b'x' * (64 << 20)\n"
        "for _ in range(24): os.write(1, chunk)\ntime.sleep(100)"
    )

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    cmd = [sys.executable, "-m", "harness", "boot", "--cmd", f"{sys.executable} -c \"{flood}\"",
           "--url", "http://127.0.0.1:9", "--boot-timeout", "8", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                          preexec_fn=cap_memory)  # fmt: skip
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    report = json.loads((folder / "boot.json").read_text())
    health = next(c for c in report["checks"] if c["name"] == "health")
    assert health["verdict"] == "FAIL" and health["detail"].startswith("timeout")
    (folder / "server.log").unlink()  # 1.5 GB of disk back
