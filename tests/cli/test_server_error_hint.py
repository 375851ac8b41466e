"""When most runs fail on one server error, the console names it and the launch flag that
fixes it: the reference server plays vLLM launched without a tool-call parser (profile
``no-tool-parser``: HTTP 400 with vLLM's message to every request offering tools)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.client.hints import server_error_hint
from harness.sim.infra import NO_PARSER_AUTO, NO_PARSER_REQUIRED

ROOT = Path(__file__).resolve().parents[2]
FILES = [str(ROOT / "scenarios" / f) for f in ("enum_units.yaml", "parallel_calls.yaml")]


@pytest.mark.parametrize("message", [NO_PARSER_AUTO, NO_PARSER_REQUIRED])
def test_vllm_refusals_name_the_parser_flags(message: str) -> None:
    hint = server_error_hint(f"Error code: 400 - {message}")
    assert hint is not None and "--enable-auto-tool-choice --tool-call-parser NAME" in hint
    assert server_error_hint("Error code: 500 - internal server error") is None


@pytest.mark.parametrize("command", ["run", "record"])
def test_the_console_says_the_server_error_and_its_fix(
    command: str,
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = sim_url("no-tool-parser", scenarios_dir=str(ROOT / "scenarios"))
    extra = ["--rounds", "1", "--no-logprobs"] if command == "record" else []
    code = main([command, *FILES, "--target", url, "--repeats", "2", "--no-progress",
                 "--results", str(tmp_path), *extra])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 3, out
    assert "4/4 runs failed on the same server error" in out and NO_PARSER_AUTO in out
    assert "  fix: the server was launched without a tool-call parser: add " in out


def test_a_healthy_server_gets_no_such_line(
    sim_url: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = sim_url("healthy", scenarios_dir=str(ROOT / "scenarios"))
    main(["run", *FILES, "--target", url, "--repeats", "1", "--no-progress",
          "--results", str(tmp_path)])  # fmt: skip
    assert "the same server error" not in capsys.readouterr().out
