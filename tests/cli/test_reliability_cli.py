"""Command line and run folders under misuse: option validation, one writer
per run folder, a cut transcript line said, SIGTERM's resume hint, no secret from a URL
in any file of a run folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import RunFolderError
from harness.redaction import redact_text, redact_url
from harness.runfolder import RunFolder, release_locks
from harness.scenario.library import LIBRARY
from tests.compare.test_compare import CLOCK, ENTROPY

ROOT = Path(__file__).parents[2]


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, (code, err)
    *usage, line = err.strip().splitlines()  # argparse's usage block, then its one line
    assert not usage or (usage[0].startswith("usage: ") and all(u[0] == " " for u in usage[1:]))
    return line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--timeout", "0"], "argument --timeout: '0' is not a number of seconds > 0"),
        (["--timeout", "-1"], "argument --timeout: '-1' is not a number of seconds > 0"),
        (["--request-timeout", "nan"], "'nan' is not a number of seconds > 0"),
        (["--max-retries", "-1"], "argument --max-retries: '-1' is not a whole number >= 0"),
        (["--max-response-bytes", "0"], "argument --max-response-bytes: '0' is not a whole"),
        (["--stream", "bogus"], "--stream bogus: not a mode (on, off or both)"),
        (["--run-id", "../../../tmp/x"], "run id '../../../tmp/x' is not a folder name"),
        (
            ["--run-id", "r" * 300],
            f"run id {'r' * 40!r}... (300 characters) is too long; give at most 128 characters",
        ),
        (["--repeats", "1000000000"], "argument --repeats: '1000000000' is more than 1000"),
        (["--run-id", "x\x1b]0;owned\x07\x1b[2J"], "holds control characters"),
        (["--run-id", "é" * 100], "(100 characters) is too long; give at most 128 characters"),
    ],
)
@pytest.mark.parametrize("command", ["run", "compare"])
def test_bad_options_are_one_line_exit_2(
    command: str,
    extra: list[str],
    expected: str,
    write_scenarios: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    urls = ["--target", "http://127.0.0.1:9"] if command == "run" else ["--aa", "--baseline",
                                                                         "http://127.0.0.1:9"]  # fmt: skip
    argv = [command, str(write_scenarios(CLOCK)), *urls, "--results", str(tmp_path / "r"), *extra]
    assert expected in _one_line_exit_2(argv, capsys)
    assert not (tmp_path.parent / "tmp").exists() and not Path("/tmp/x").exists()


def test_results_that_is_a_file_or_not_writable_is_one_line(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    err = _one_line_exit_2(["run", str(scenarios), "--target", url, "--results", str(a_file)],
                           capsys)  # fmt: skip
    assert "is a file, not a folder" in err
    under_file = a_file / "sub"  # a folder that cannot be created (root may write anywhere)
    err = _one_line_exit_2(["run", str(scenarios), "--target", url, "--results", str(under_file)],
                           capsys)  # fmt: skip
    assert "cannot create the run folder" in err and "--results" in err


def test_a_run_folder_has_one_writer(tmp_path: Path) -> None:
    """A folder locked by another process cannot be locked (the error names the holder's
    pid); it is free again once the holder ends."""
    folder = RunFolder.create("run", results=tmp_path, run_id="x", args={"target": "http://h"})
    holder = subprocess.Popen(  # another process takes the lock and keeps it
        [sys.executable, "-c", "import time; from harness.runfolder import RunFolder; "
         f"RunFolder({str(folder.path)!r}).lock(); print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderError, match=f"another harness process \\(pid {holder.pid}\\)"):
            RunFolder(folder.path).lock()
    finally:
        holder.kill()
        holder.wait()
    RunFolder(folder.path).lock()  # the holder is gone: free again
    release_locks()


def test_second_resume_of_one_folder_is_refused(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios, latency_ms=300)
    argv = [
        "run",
        str(scenarios),
        "--target",
        url,
        "--results",
        str(tmp_path),
        "--repeats",
        "40",
        "--no-progress",
        "--concurrency",
        "1",
    ]  # fmt: skip  (~25 s: still running below)
    first = subprocess.Popen([sys.executable, "-m", "harness", *argv, "--run-id", "x"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lock = tmp_path / "x" / RunFolder.LOCK
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        code = main([*argv, "--resume", "x"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.strip() == (
            f"error: {tmp_path / 'x'} is being written by another harness process "
            f"(pid {first.pid}); wait for it to end, or give another --run-id"
        )
        assert first.poll() is None  # the holder was still running when refused
        transcripts = tmp_path / "x" / RunFolder.TRANSCRIPTS
        while time.monotonic() < deadline and not (
            transcripts.exists() and transcripts.read_text().strip()
        ):
            time.sleep(0.05)  # one run finished before the stop, so it must be kept
    finally:
        first.terminate()  # stops as Ctrl-C does, keeping what it finished
        out, ferr = first.communicate(timeout=120)
    assert first.returncode == 143, ferr
    keys = [r.run_key for r in RunFolder(tmp_path / "x").records()]
    assert len(keys) == len(set(keys)) >= 1  # nothing written twice


def test_score_beside_a_running_compare_is_refused_in_one_line(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``harness score`` of a folder a ``compare`` still writes: refused (exit 2, one line
    naming the writer's pid), the compare untouched; once it ends, score works."""
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios, latency_ms=300)
    argv = [
        "compare",
        str(scenarios),
        "--baseline",
        url,
        "--candidate",
        url,
        "--results",
        str(tmp_path),
        "--run-id",
        "x",
        "--repeats",
        "20",
        "--no-sequential",
        "--concurrency",
        "1",
        "--no-progress",
    ]  # fmt: skip  (~25 s: still running below)
    compare = subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    folder = tmp_path / "x"
    try:
        deadline = time.monotonic() + 60
        transcripts = folder / RunFolder.TRANSCRIPTS
        while time.monotonic() < deadline and not (
            transcripts.exists() and transcripts.read_text().strip()
        ):
            time.sleep(0.05)
        code = main(["score", str(folder)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.strip() == (
            f"error: {folder} is being written by another harness process (pid {compare.pid}); "
            f"wait for it to end, then `harness score {folder}`"
        )
        assert compare.poll() is None  # still running, untouched
    finally:
        compare.terminate()
        _, cerr = compare.communicate(timeout=120)
    assert compare.returncode == 143, cerr
    assert "Traceback" not in cerr
    assert not list(folder.glob("*.tmp"))
    assert main(["score", str(folder), "--quiet"]) in (0, 1)  # the writer is gone: free again
    assert not list(folder.glob("*.tmp"))


def test_a_folder_that_cannot_be_locked_is_one_line() -> None:
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    with pytest.raises(RunFolderError, match=r"^/proc/self: cannot write here \("):
        RunFolder("/proc/self").lock()  # even as root: not a file system that takes files


def test_temporary_files_are_unique_per_writer(tmp_path: Path) -> None:
    from harness.runfolder import temp_path

    path = tmp_path / RunFolder.SCORES
    names = {temp_path(path) for _ in range(3)}
    assert len(names) == 3 and all(p.name.startswith("scores.jsonl.") for p in names)
    assert all(str(os.getpid()) in p.name and p.suffix == ".tmp" for p in names)


def test_score_says_how_many_lines_were_skipped(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)
    argv = ["run", str(scenarios), "--target", url, "--results", str(tmp_path), "--run-id", "x",
            "--repeats", "3", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    transcripts = tmp_path / "x" / "transcripts.jsonl"
    text = transcripts.read_bytes()
    transcripts.write_bytes(text[: len(text) - 200])  # the last line cut, as by kill -9
    capsys.readouterr()
    main(["score", str(tmp_path / "x")])
    err = capsys.readouterr().err
    cut_at = text.rstrip(b"\n").rfind(b"\n") + 1
    assert f"{transcripts}: 1 line skipped (at byte {cut_at}): not complete JSON" in err
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert json.dumps(summary).count('"n": 2') >= 1  # two runs scored, not three


@pytest.mark.parametrize("sigint", ["default", "ignored"])
@pytest.mark.parametrize("command", ["run", "compare"])
def test_sigterm_prints_the_resume_hint_like_sigint(
    command: str,
    sigint: str,
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
) -> None:
    # "ignored": SIGINT inherited as ignored, as by a background job of a script (how CI
    # runners start commands); the SIGTERM must stop the command all the same
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios, latency_ms=500)
    sides = ["--target", url] if command == "run" else ["--baseline", url, "--candidate", url]
    argv = [sys.executable, "-m", "harness", command, str(scenarios), *sides, "--results",
            str(tmp_path), "--run-id", "x", "--repeats", "20", "--no-progress", "--concurrency",
            "1"]  # fmt: skip

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ignore_sigint if sigint == "ignored" else None,
    )  # fmt: skip
    transcripts = tmp_path / "x" / "transcripts.jsonl"
    deadline = time.monotonic() + 60
    while not (transcripts.exists() and transcripts.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert "interrupted; resume with: " in err and "--resume x" in err
    assert len(list(RunFolder(tmp_path / "x").records())) >= 1  # what finished is kept
    report = (tmp_path / "x" / "report.md").read_text()  # a report for the CI job to post
    assert "INTERRUPTED" in report and "--resume x" in report


SECRET = "s3cr3tKEY"


def test_no_secret_of_a_url_in_any_file_of_a_run_folder(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK, ENTROPY)
    url = sim_url("healthy", scenarios_dir=scenarios)
    bad = sim_url("http-500", scenarios_dir=scenarios)
    keyed = url.replace("http://", f"http://user:{SECRET}@")
    bad_keyed = bad.replace("http://", f"http://user:{SECRET}@")
    common = [str(scenarios), "--results", str(tmp_path), "--repeats", "1", "--no-progress",
              "--max-retries", "0"]  # fmt: skip
    main(["run", *common, "--target", keyed, "--run-id", "r"])
    main(["compare", *common, "--baseline", keyed, "--candidate", bad_keyed, "--run-id", "c"])
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"manifest.json", "transcripts.jsonl", "summary.json",
                                       "report.html", "report.md"}  # fmt: skip
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["args"]["target"] == redact_url(keyed) and "***@" in manifest["args"]["target"]


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("http://u:k@h:1/v1", "http://***@h:1/v1"),
        ("http://h:1/v1?api_key=k&x=1", "http://h:1/v1?api_key=***&x=1"),
        (
            "https://h/?token=k&access_token=k&sig=k",
            "https://h/?token=***&access_token=***&sig=***",
        ),
        ("http://h:1/v1?monkey=1", "http://h:1/v1?monkey=1"),
        ("http://h:1", "http://h:1"),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted
    assert redact_text(f"error: GET {url} failed") == f"error: GET {redacted} failed"


def _start_sim(cwd: Path, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    """``harness sim`` in ``cwd``: the process, its URL, what it said before serving."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.sim", "--port", "0", *extra], cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.stdout is not None
    said = ""
    for line in proc.stdout:
        said += line
        if line.startswith("Serving on "):
            return proc, line.split()[-1], said
    proc.kill()
    raise AssertionError(said + (proc.stderr.read() if proc.stderr else ""))


def test_sim_says_what_it_plays_and_refuses_what_it_does_not_know(
    write_scenarios: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = write_scenarios(CLOCK, ENTROPY)
    proc, url, said = _start_sim(tmp_path, "--scenarios", str(scenarios))
    proc.terminate()
    proc.wait()
    assert f"Playing 2 scenario(s) from {scenarios}" in said
    empty = tmp_path / "empty"
    empty.mkdir()
    proc, url, said = _start_sim(empty)  # no scenarios/ here: the shipped library
    proc.terminate()
    proc.wait()
    assert f"Playing 30 scenario(s) from {LIBRARY}" in said
    proc, url, said = _start_sim(empty, "--scenarios", str(empty))  # an empty folder
    try:
        common = [str(scenarios), "--results", str(tmp_path), "--repeats", "1", "--no-progress"]
        code = main(["run", *common, "--target", url, "--run-id", "u"])
        capsys.readouterr()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"WARNING: no scenario files in '{empty}'" in err and "give --scenarios DIR" in err
    assert code == 3  # every run an infrastructure error, not a model failure
    for rec in RunFolder(tmp_path / "u").records():
        assert rec.stop_reason == "error" and rec.error is not None
        assert (rec.error.kind, rec.error.status, rec.error.attempts) == ("http_status", 404, 1)
        assert "the reference server does not know this scenario" in rec.error.message


def test_reports_fold_long_fields_with_their_size(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 10 MB answer let through a raised --max-response-bytes: the transcript keeps it,
    the report shows its start and its size, and stays small."""
    scenarios = write_scenarios(CLOCK)
    url = sim_url("huge", scenarios_dir=scenarios)
    argv = ["run", str(scenarios), "--target", url, "--results", str(tmp_path), "--run-id", "h",
            "--repeats", "1", "--no-progress", "--max-response-bytes", "20000000"]  # fmt: skip
    main(argv)
    capsys.readouterr()
    (rec,) = RunFolder(tmp_path / "h").records()
    assert rec.final_content is not None and len(rec.final_content) == 10_000_000
    report = (tmp_path / "h" / "report.html").read_text()
    assert len(report) < 2_000_000
    assert "folded: 9,940,000 more characters (10,000,000 in all) in transcripts.jsonl" in report


@pytest.mark.parametrize("results", ["/proc/nope", "{file}/x"])
def test_plugin_results_that_cannot_be_made_is_one_line(
    results: str, tmp_path: Path, write_scenarios: Callable[..., Path]
) -> None:
    """``pytest --harness-results=/proc/nope``: one ``ERROR:`` line and exit 4 (usage), before any
    test runs; not an error with its traceback per test."""
    if results.startswith("/proc") and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    scenarios = write_scenarios(CLOCK, ENTROPY)
    (tmp_path / "file").write_text("x")
    results = results.format(file=tmp_path / "file")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(scenarios),
         "--harness-target", "http://127.0.0.1:9", f"--harness-results={results}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ERROR")]
    assert line.startswith(f"ERROR: {results}/pytest-") and "cannot create the run folder" in line
    assert "Traceback" not in out and len(out.splitlines()) < 10, out[-2000:]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--rounds", "1000000"], "argument --rounds: '1000000' is more than 100 rounds"),
        (["--api-key-env", "sk-live-0123456789abcdef"], "not an environment variable name"),
    ],
)
@pytest.mark.parametrize("command", ["record", "compare"])
def test_unbounded_rounds_and_a_key_for_its_variable_are_refused(
    command: str,
    extra: list[str],
    expected: str,
    write_scenarios: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--rounds`` has a cap; a key typed where its variable's name goes is refused
    without being repeated (nor written anywhere)."""
    side = ["--target"] if command == "record" else ["--aa", "--baseline"]
    argv = [command, str(write_scenarios(CLOCK)), *side, "http://127.0.0.1:9",
            "--results", str(tmp_path / "r"), *extra]  # fmt: skip
    line = _one_line_exit_2(argv, capsys)
    assert expected in line
    assert "0123456789abcdef" not in line
    assert not (tmp_path / "r").exists()


DANGLING = {
    "id": "dangling_ref",
    "description": "a local $ref that points at nothing, used by the expected call",
    "messages": [{"role": "user", "content": "Look up order 7."}],
    "tools": [
        {
            "name": "lookup",
            "description": "Look up an order.",
            "parameters": {
                "type": "object",
                "properties": {"order": {"$ref": "#/definitions/nope"}},
                "required": ["order"],
            },
            "simulator": {"result": {"status": "shipped"}},
        }
    ],
    "expect": {
        "calls": [{"tool": "lookup", "arguments": {"order": 7}}],
        "final_answer": {"contains": ["shipped"]},
    },
}


def test_a_dangling_local_ref_is_refused_at_load(
    write_scenarios: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.sim.model import ScenarioIndex

    folder = write_scenarios(DANGLING)
    for argv in (
        ["list", str(folder)],
        ["run", str(folder), "--target", "http://127.0.0.1:9", "--results", str(tmp_path)],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert "$ref '#/definitions/nope' points at nothing" in lines[0], lines[0]
        assert "dangling_ref.yaml" in lines[0]
    index = ScenarioIndex.from_dir(folder)  # the reference server skips it, saying why
    assert "dangling_ref" not in [s.id for s in index.scenarios]
    assert "points at nothing" in capsys.readouterr().err
    # a pointer that resolves is fine
    ok = {**DANGLING, "id": "resolving_ref"}
    ok["tools"] = [dict(DANGLING["tools"][0])]  # type: ignore[index]
    ok["tools"][0]["parameters"] = {  # type: ignore[index]
        "type": "object",
        "$defs": {"order": {"type": "integer"}},
        "properties": {"order": {"$ref": "#/$defs/order"}},
    }
    assert main(["list", str(write_scenarios(ok))]) == 0


def test_a_path_component_over_255_bytes_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = tmp_path / ("a" * 300)
    (tmp_path / "req.jsonl").write_text("{}\n")
    for argv in (
        ["run", str(ROOT / "scenarios/no_params_tool.yaml"), "--target", "http://127.0.0.1:9",
         "--results", str(long)],
        ["import", str(tmp_path / "req.jsonl"), "-o", str(long)],
    ):  # fmt: skip
        line = _one_line_exit_2(argv, capsys)
        assert "longer than 255 bytes" in line, line
