"""Keys are never written or shown: a key in a server URL's userinfo
(``boot --target``, matrix ``url:``, the plugin's ``--harness-target``, ``import --golden``) and
the value of a key flag or a secret-looking variable in a launch command (``--api-key
KEY``, ``--api-key=KEY``, ``OPENAI_API_KEY=KEY``; ``boot --cmd``, matrix ``launch:``).
Each test greps everything written and printed for the key."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.redaction import redact_text

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "sensor_entropy_pipeline.yaml"
KEY = "sk-SECRET-0123456789abcdef"


def _with_key(url: str) -> str:
    return url.replace("http://", f"http://user:{KEY}-url@", 1)


def _launch_cmd(port: int) -> str:
    """A reference server behind ``sh -c`` (which ignores the arguments after it): the
    command carries the key three ways, as SGLang's or vLLM's would."""
    sim = f"exec {shlex.quote(sys.executable)} -m harness sim --port {port}"
    sim += f" --scenarios {shlex.quote(str(ROOT / 'scenarios'))}"
    return (
        f"env OPENAI_API_KEY={KEY}-env sh -c {shlex.quote(sim)} sh "
        f"--api-key {KEY}-flag --api-key={KEY}-eq"
    )


def _leaks(root: Path, *printed: str) -> list[str]:
    where = [
        p.name for p in root.rglob("*") if p.is_file() and KEY in p.read_text("utf-8", "replace")
    ]
    return where + [f"output {i}" for i, text in enumerate(printed) if KEY in text]


def test_redaction_of_key_flags_and_assignments() -> None:
    from harness.redaction import redact_argv

    cmd = "OPENAI_API_KEY=k1 vllm serve m --api-key k2 --api-key=k3 --api-key-file /run/k --port 8"
    assert redact_text(cmd) == (
        "OPENAI_API_KEY=*** vllm serve m --api-key *** --api-key=*** --api-key-file /run/k --port 8"
    )
    assert (
        redact_text("--cmd 'llama-server --api-key k2' --x")
        == "--cmd 'llama-server --api-key ***' --x"
    )
    argv = ["llama-server", "--api-key", "k2", "--max-tokens", "5", "HF_TOKEN=h"]
    assert redact_argv(argv) == [
        "llama-server",
        "--api-key",
        "***",
        "--max-tokens",
        "5",
        "HF_TOKEN=***",
    ]


def test_boot_target_and_boot_cmd_write_and_show_no_key(
    sim_url: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = tmp_path / "res"
    assert main(["boot", "--target", _with_key(sim_url()), "--results", str(res)]) == 0
    port = _free_port()
    cmd = _launch_cmd(port)
    url = f"http://127.0.0.1:{port}"
    assert (
        main(["boot", "--cmd", cmd, "--url", url, "--boot-timeout", "60", "--results", str(res)])
        == 0
    )
    out, err = capsys.readouterr()
    assert len(list(res.glob("boot-*/boot.json"))) == 2
    assert _leaks(res, out, err) == []
    boot = json.loads(
        next(p for p in res.glob("boot-*/boot.json") if "command" in p.read_text()).read_text()
    )
    if boot["command"] is None:
        boot = json.loads(sorted(res.glob("boot-*/boot.json"))[-1].read_text())
    assert "--api-key=***" in boot["command"] and "OPENAI_API_KEY=***" in boot["command"]


def test_matrix_url_and_launch_write_and_show_no_key(
    sim_url: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _with_key(sim_url("healthy", scenarios_dir=ROOT / "scenarios"))
    deployments = [
        {"label": "by-url", "url": url, "attributes": {"k": "x"}},
        {"label": "launched", "launch": _launch_cmd(_free_port()), "attributes": {"k": "y"},
         "boot_timeout_s": 60},
    ]  # fmt: skip
    spec = {"scenarios": [str(SCENARIO)], "repeats": 1, "deployments": deployments}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    res = tmp_path / "res"
    code = main(["matrix", str(path), "--results", str(res), "--run-id", "m", "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert _leaks(res, out, err) == []
    matrix = json.loads((res / "m" / "matrix.json").read_text())
    assert matrix["deployments"][0]["target"].startswith("http://***@127.0.0.1:")


def test_plugin_summary_and_import_golden_line_show_no_key(
    sim_url: Callable[..., str], tmp_path: Path, pytester: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    url = _with_key(sim_url("healthy", scenarios_dir=ROOT / "scenarios"))
    pytester.makeini("[pytest]\n")
    (pytester.path / "scenarios").mkdir()
    shutil.copy(SCENARIO, pytester.path / "scenarios")
    result = pytester.runpytest("scenarios", "--harness-target", url, "--harness-repeats", "1")
    result.stdout.fnmatch_lines(["target http://***@127.0.0.1:*: 1 passed*"])
    assert KEY not in result.stdout.str() + result.stderr.str()
    src = tmp_path / "r.jsonl"
    body = {"model": "m", "messages": [{"role": "user", "content": "Hello there."}]}
    src.write_text(json.dumps(body) + "\n", encoding="utf-8")
    main(["import", str(src), "-o", str(tmp_path / "imported"), "--golden", url])
    out, err = capsys.readouterr()
    assert "golden http://***@127.0.0.1:" in out
    assert KEY not in out + err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
