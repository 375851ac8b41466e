"""The server's own keys stay secret: SGLang's ``/server_info`` is its whole server
arguments object (``api_key``, ``admin_api_key``, ``launch_command`` with ``--api-key``),
and ``record --target http://user:KEY@host`` carries one in its URL. None of them reaches
a file of the run folder or a console line (``compare``, ``record``, ``boot``)."""

from __future__ import annotations

import shlex
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.redaction import REDACTED, redact_data

BASE_KEY = "sk-basesecret0123456789"
CAND_KEY = "sk-candsecret9876543210"
URL_KEY = "urlsecretKEY4242"
SECRETS = (BASE_KEY, CAND_KEY, URL_KEY)
SCENARIO = Path(__file__).parents[2] / "scenarios" / "no_params_tool.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leaks(root: Path, *texts: str) -> list[str]:
    found = [
        f"{p}: {s[:12]}"
        for p in root.rglob("*")
        if p.is_file()
        for s in SECRETS
        if s.encode() in p.read_bytes()
    ]
    found += [f"console: {s[:12]}" for t in texts for s in SECRETS if s in t]
    return found


def test_no_key_of_the_servers_own_answers_in_files_or_console(
    sim_url: Callable[..., str],
    harness_cli: Callable[..., int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = SCENARIO.parent
    base = sim_url(
        "healthy", scenarios_dir=scenarios, flavour="sglang-0.5.23", server_info_api_key=BASE_KEY
    )
    cand = sim_url(
        "fused-regression",
        scenarios_dir=scenarios,
        flavour="sglang-0.5.23",
        server_info_api_key=CAND_KEY,
    )
    common = ("--repeats", "1", "--rounds", "1", "--no-logprobs")
    code = harness_cli("compare", SCENARIO, "--baseline", base, "--candidate", cand, *common,
                       "--verbose", run_id="cmp")  # fmt: skip
    assert code in (0, 1)
    userinfo = base.replace("http://", f"http://user:{URL_KEY}@")
    code = harness_cli("record", SCENARIO, "--target", userinfo, *common, run_id="rec")
    assert code == 0, capsys.readouterr()
    from harness.cli import main

    boot = ["boot", "--target", cand, "--results", str(harness_cli.results)]  # type: ignore[attr-defined]
    assert main(boot) in (0, 1)
    port = _free_port()
    cmd = shlex.join(
        [sys.executable, "-m", "harness", "sim", "--port", str(port), "--scenarios",
         str(scenarios), "--server-flavour", "sglang-0.5.23", "--server-info-api-key", BASE_KEY]
    )  # fmt: skip
    code = harness_cli("record", SCENARIO, "--cmd", cmd, *common, "--boot-timeout", "60",
                       run_id="rec-cmd")  # fmt: skip
    assert code == 0
    out, err = capsys.readouterr()
    assert harness_cli.results.is_dir()  # type: ignore[attr-defined]
    assert _leaks(harness_cli.results, out, err) == []  # type: ignore[attr-defined]
    # what was kept in their place says a key was there
    manifest = (harness_cli.results / "rec" / "manifest.json").read_text()  # type: ignore[attr-defined]
    assert '"api_key": "***"' in manifest or "***" in manifest


def test_redact_data_takes_secret_fields_and_key_looking_values() -> None:
    info = {
        "api_key": "anything",
        "admin_api_key": "adm-1",
        "hf_token": "x",
        "ssl_keyfile_password": "p",
        "launch_command": "python -m sglang.launch_server --api-key k1 --port 30000",
        "nested": [{"client_secret": "c"}, "sk-abcdefgh12345"],
        "api_key_env": "OPENAI_API_KEY",
        "tokenizer_path": "/models/m",
        "max_total_num_tokens": 8192,
        "disable_shared_experts_fusion": False,
        "served_model_name": "m",
    }
    out = redact_data(info)
    for k in ("api_key", "admin_api_key", "hf_token", "ssl_keyfile_password"):
        assert out[k] == REDACTED, k
    assert out["launch_command"] == "python -m sglang.launch_server --api-key *** --port 30000"
    assert out["nested"] == [{"client_secret": REDACTED}, REDACTED]
    for k in ("api_key_env", "tokenizer_path", "max_total_num_tokens", "served_model_name"):
        assert out[k] == info[k], k
    assert out["disable_shared_experts_fusion"] is False
