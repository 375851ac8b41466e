"""The wheel as a user installs it: built from the repository, installed into a fresh
virtual environment outside it, and run from a folder with no ``scenarios/``: the
distribution's own name, the shipped scenario library found by every command, the
reference server and the pytest plugin."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from harness._version import DISTRIBUTION, RELEASE

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "VIRTUAL_ENV"))}
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(bin folder of the fresh venv, an empty working folder)``."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        cwd=base,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    assert wheel.name.startswith(f"{DISTRIBUTION.replace('-', '_')}-{RELEASE}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(Path(n).name for n in names if n.startswith("harness/library/")) == SHIPPED
    assert any(n.endswith("licenses/LICENSE") for n in names)
    venv.create(base / "venv", with_pip=True)
    bin_ = base / "venv" / "bin"
    pip = _run([str(bin_ / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=base)
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = base / "work"
    work.mkdir()
    return bin_, work


def test_the_wheel_installs_under_its_own_name_with_the_harness_command(
    installed: tuple[Path, Path],
) -> None:
    bin_, work = installed
    show = _run([str(bin_ / "python"), "-m", "pip", "show", DISTRIBUTION], cwd=work)
    assert show.returncode == 0 and f"Version: {RELEASE}" in show.stdout
    version = _run([str(bin_ / "harness"), "--version"], cwd=work)
    assert version.stdout.strip() == f"harness {RELEASE}"  # no git: not from a clone
    listed = _run([str(bin_ / "harness"), "list"], cwd=work)
    assert listed.returncode == 0, listed.stderr
    assert "meeting_attendees" in listed.stdout and "entropy_followups" in listed.stdout


def test_compare_on_the_built_in_servers_finds_the_regression(
    installed: tuple[Path, Path],
) -> None:
    bin_, work = installed
    argv = [str(bin_ / "harness"), "compare", "--repeats", "5", "--no-sequential",
            "--no-logprobs", "--no-progress", "--results", str(work / "results")]  # fmt: skip
    proc = _run(argv, cwd=work)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "REGRESSION" in proc.stdout
    (folder,) = (work / "results").iterdir()
    summary = json.loads((folder / "summary.json").read_text())
    assert len(summary["settings"]["scenarios"]) == len(SHIPPED)


def test_sim_and_the_pytest_plugin_play_the_library(installed: tuple[Path, Path]) -> None:
    bin_, work = installed
    log = (work / "sim.log").open("w")
    sim = subprocess.Popen(
        [str(bin_ / "harness"), "sim", "--profile", "healthy", "--port", "0"],
        cwd=work, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            m = re.search(r"Serving on (http://\S+)", (work / "sim.log").read_text())
            url = m.group(1) if m else None
            time.sleep(0.2)
        assert url is not None, (work / "sim.log").read_text()
        proc = _run(
            [str(bin_ / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--harness-target", url, "--harness-repeats", "1",
             f"--harness-results={work / 'pytest-results'}"],
            cwd=work,
        )  # fmt: skip
    finally:
        sim.terminate()
        sim.wait(timeout=30)
        log.close()
    out = proc.stdout + proc.stderr
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|error)", out)}
    assert counts.get("error", 0) == 0, out[-3000:]  # the server played every scenario
    assert counts.get("passed", 0) + counts.get("failed", 0) == len(SHIPPED), out[-3000:]
    assert list((work / "pytest-results").glob("pytest-*/transcripts.jsonl"))
