"""docs/ci.md's recipe runs as written: its shell steps, read from the page, with the
reference server in place of the GPU server (``python -m sglang.launch_server ...`` ->
``harness sim``: ``healthy`` as main's build, ``fused-regression`` as the pull request's),
in a folder standing for the server's checkout (``harness/`` beside it, as the recipe's
second checkout puts it), the shared disk a temporary folder, and the CI's own commands
(``gh``, ``buildkite-agent``) as shell functions that check what they are given.

Steps: the nightly record; GitHub Actions' compare step and, as ``if: failure()`` says, its
comment step; Buildkite's command (its compare, then its annotation); the pytest step.
The installs (``pip install -e ...``) are left out: the package is installed already.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ci.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LAUNCH = re.compile(r"python -m sglang\.launch_server [^\"]*")
#: what stands for the CI's own commands: each fails unless given a non-empty report
FAKE_CI = """
gh() { test -s "${@: -1}" && cp "${@: -1}" comment.md; }
buildkite-agent() { cat > annotation.md; test -s annotation.md; }
"""

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(PAGE.read_text(encoding="utf-8")) if kind == lang]


def _local(script: str, port: int, data: Path, profile: str) -> str:
    """The page's commands on this machine: the reference server for the GPU server."""
    sim = f"{shlex.quote(sys.executable)} -m harness sim --profile {profile} --port {port}"
    script = LAUNCH.sub(sim, script)
    script = script.replace("http://127.0.0.1:30000", f"http://127.0.0.1:{port}")
    script = script.replace("/data/harness", str(data))
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("pip install")]
    return "\n".join(lines)


def _sh(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}, **env}
    full["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", FAKE_CI + script], cwd=cwd, env=full, capture_output=True, text=True,
        timeout=1500, check=False,
    )  # fmt: skip


def _github_steps(event: int, attempt: int) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The job's env and its steps that run a command, ``${{ ... }}`` filled in."""
    (workflow,) = [b for b in _blocks("yaml") if "jobs:" in b]
    text = workflow.replace("${{ github.event.number }}", str(event))
    text = text.replace("${{ github.run_attempt }}", str(attempt))
    text = text.replace("${{ github.token }}", "token")
    job = yaml.safe_load(text)["jobs"]["harness"]
    env = {k: str(v) for k, v in job["env"].items()}
    steps = [s for s in job["steps"] if "run" in s]
    for s in steps:
        s["run"] = s["run"].replace("${{ env.RUN_ID }}", env["RUN_ID"])
    return env, steps


def test_the_recipe_records_compares_and_reports(tmp_path: Path) -> None:
    checkout, data, port = tmp_path / "server-repo", tmp_path / "data", _free_port()
    checkout.mkdir()
    (checkout / "harness").symlink_to(ROOT)  # the recipe's second checkout
    record = _local(_blocks("sh")[0].replace("\\\n", " "), port, data, "healthy")
    proc = _sh(record, checkout, {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (data / "baseline-main" / "manifest.json").is_file()

    # GitHub Actions: the compare step fails the job (REGRESSION), so the comment step runs
    env, steps = _github_steps(event=7, attempt=1)
    compare, comment = (
        s for s in steps if s["name"] != "Install the build under test and the harness"
    )
    proc = _sh(_local(compare["run"], port, data, "fused-regression"), checkout, env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert comment.get("if") == "failure()"
    proc = _sh(comment["run"], checkout, env)
    assert proc.returncode == 0, proc.stderr
    assert "REGRESSION" in (checkout / "comment.md").read_text()

    # Buildkite: the same compare; its annotation holds the report
    (step,) = yaml.safe_load([b for b in _blocks("yaml") if b.startswith("steps:")][0])["steps"]
    command = step["command"].replace("$$", "$")
    bk = {"BUILDKITE_PULL_REQUEST": "7", "BUILDKITE_BUILD_NUMBER": "41"}
    proc = _sh(_local(command, port, data, "fused-regression"), checkout, bk)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "REGRESSION" in (checkout / "annotation.md").read_text()
    assert list(checkout.glob(step["artifact_paths"]))  # what the artifact step uploads

    # pytest, the candidate started first
    pytest_line = _local(_blocks("sh")[1], port, data, "fused-regression")
    sim = subprocess.Popen(
        [sys.executable, "-m", "harness", "sim", "--profile", "fused-regression",
         "--port", str(port)], cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        proc = _sh(f"sleep 3; {pytest_line}", checkout, {})
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (checkout / "junit.xml").is_file()
