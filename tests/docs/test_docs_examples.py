"""Every command on the getting-started page runs, as written, against the reference server.

The page's fenced ``sh`` blocks are read in order. A GPU server's launch command
(``python -m sglang.launch_server ...``, ``vllm serve ...``) is not run: it switches which
reference server answers on the page's port 30000 (the fused build: ``fused-regression``;
the unfused one, fusion off: ``healthy``). Every other command runs in the repository with
``http://127.0.0.1:30000`` (and ``:30001``, the second server) pointed at a reference
server, ``results/<id>`` at the folder the last command printed, ``--port 30000`` inside a
launch command at a free port, and must exit with the code the comment line above it
states (``# ... exit N``; 0 when there is none).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.docgen import CONSOLE_BEGIN, CONSOLE_END, console_excerpt

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LAUNCH = re.compile(r"(^|\s)(python -m sglang\.launch_server|vllm serve)\s")
#: longest a command of the page may take (make compare records 5 x 4 rounds per scenario)
COMMAND_TIMEOUT_S = 900


def shell_blocks(text: str) -> list[list[tuple[str, int]]]:
    """The page's ``sh`` blocks, each as its commands (continuation lines joined) with the
    exit code the comment line above each states."""
    blocks = []
    for lang, body in FENCE.findall(text):
        if lang != "sh":
            continue
        commands, comment = [], ""
        for line in body.replace("\\\n", " ").splitlines():
            line = " ".join(line.split())
            if line.startswith("#"):
                comment = line
            elif line:
                commands.append((line, expected_exit(comment)))
                comment = ""
        blocks.append(commands)
    return blocks


def expected_exit(comment: str) -> int:
    """The exit code a comment states (``# REGRESSION: exit 2``), else 0."""
    found = re.search(r"\bexit (\d+)\b", comment)
    return int(found.group(1)) if found else 0


def is_fused(launch: str) -> bool:
    """Whether a GPU launch command starts the fused build."""
    if "sglang.launch_server" in launch:
        return "--disable-shared-experts-fusion" not in launch
    return "FUSION_SHARED_EXPERTS=1" in launch


def test_page_blocks_are_read() -> None:
    blocks = shell_blocks(PAGE.read_text(encoding="utf-8"))
    commands = [c for b in blocks for c, _ in b]
    assert any(c.startswith("make record") for c in commands)
    assert any("results/<id>" in c for c in commands)
    assert sum(bool(LAUNCH.search(c)) for c in commands) >= 3
    assert ("make compare", 2) in blocks[0]
    assert expected_exit("# REGRESSION: exit 2") == 2
    assert expected_exit("# prints the folder") == 0
    assert is_fused("python -m sglang.launch_server --port 30000")
    assert not is_fused("python -m sglang.launch_server --disable-shared-experts-fusion")
    assert not is_fused("VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS=0 vllm serve m")


def readme_excerpt() -> list[str]:
    """The console lines the README shows (between its console markers)."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index(CONSOLE_BEGIN) : text.index(CONSOLE_END)]
    return block.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def _masked(lines: list[str]) -> list[str]:
    """Lines with the servers' ports masked (each run gets free ports)."""
    return [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line) for line in lines]


def check_readme_excerpt(output: str) -> None:
    """The README's excerpt is what ``make compare`` prints today (ports aside)."""
    assert _masked(readme_excerpt()) == _masked(console_excerpt(output)), (
        "README.md's console excerpt is stale: save `make compare`'s output and run "
        "`python -m harness.docgen --console OUTPUT README.md`"
    )


def test_readme_excerpt_is_a_console_excerpt() -> None:
    """The excerpt's rules pick the README's lines out of themselves, in order, once each;
    a console without one of them is refused."""
    lines = readme_excerpt()
    assert len(lines) >= 12 and lines[0].startswith(" REGRESSION ")
    assert console_excerpt("\n".join(lines)) == lines
    with pytest.raises(ValueError, match="no line matching"):
        console_excerpt("\n".join(line for line in lines if not line.startswith("baseline: ")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(command: str, want: int, env: dict[str, str], tmp: Path) -> str:
    proc = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=COMMAND_TIMEOUT_S, check=False,
    )  # fmt: skip
    (tmp / "log.txt").open("a").write(f"$ {command}\n{proc.stdout}\n{proc.stderr}\n")
    assert proc.returncode == want, (
        f"{command!r} exited {proc.returncode}, the page says {want}:\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(3 * COMMAND_TIMEOUT_S)
def test_every_getting_started_command_runs(sim_url: Callable[..., str], tmp_path: Path) -> None:
    scenarios = ROOT / "scenarios"
    unfused = sim_url("healthy", scenarios_dir=scenarios)
    fused = sim_url("fused-regression", scenarios_dir=scenarios)
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path / "results"), "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    env.pop("OPENAI_API_KEY", None)
    up = unfused  # what answers on the page's port 30000
    folder = None
    ran = 0
    for block in shell_blocks(PAGE.read_text(encoding="utf-8")):
        for command, want in block:
            if LAUNCH.search(command) and not command.startswith((".venv/bin/harness", "make")):
                up = fused if is_fused(command) else unfused
                continue
            if "--candidate-cmd" in command:
                port = str(_free_port())
                command = command.replace("30000", port)
            elif ":30001" in command:
                command = command.replace("http://127.0.0.1:30000", unfused)
                command = command.replace("http://127.0.0.1:30001", fused)
            else:
                command = command.replace("http://127.0.0.1:30000", up)
            if "results/<id>" in command:
                assert folder is not None, f"{command!r}: no folder printed before it"
                command = command.replace("results/<id>", shlex.quote(folder))
            out = _run(command, want, env, tmp_path)
            if command == "make compare":
                check_readme_excerpt(out)
            printed = re.findall(r"^(?:run folder|recording): (\S+)", out, re.M)
            folder = printed[-1] if printed else folder
            ran += 1
    assert ran >= 6
