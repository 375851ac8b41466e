"""Reasoning sent back, or not: ``--reasoning-history`` / a scenario's ``reasoning_history``
against reference servers that require it back (HTTP 400 when missing, as DeepSeek's
thinking mode) and that refuse it (HTTP 400 when present, as deepseek-reasoner)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.client.target import TargetConfig
from harness.errors import OptionValueError
from harness.options import reasoning_history
from harness.runner import SamplingPolicy, reasoning_kept, run_many_sync
from harness.scenario.model import Scenario, load_scenarios
from tests.conftest import HarnessCli

#: a two-call tool loop, then a follow-up with one more call: written for these tests
LOOP: dict[str, Any] = {
    "id": "pantry_totals",
    "description": "Two sums in a tool loop, then a product after a follow-up question.",
    "messages": [
        {"role": "system", "content": "You keep a pantry ledger. Use the tools for arithmetic."},
        {"role": "user", "content": "Add 14 jars to 9 jars, then add 6 tins to 17 tins."},
    ],
    "tools": [
        {
            "name": name,
            "description": f"{name} two numbers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
            "simulator": {"builtin": name},
        }
        for name in ("add", "multiply")
    ],
    "expect": {
        "calls": [
            {"tool": "add", "arguments": {"a": 14, "b": 9}},
            {"tool": "add", "arguments": {"a": 6, "b": 17}},
        ],
        "final_answer": {"contains": ["23"], "example": "23 jars and 23 tins."},
    },
    "followups": [
        {
            "user": "How many jars across 3 shelves of 23?",
            "expect": {
                "calls": [{"tool": "multiply", "arguments": {"a": 3, "b": 23}}],
                "final_answer": {"contains": ["69"], "example": "69 jars."},
            },
        }
    ],
    "repeats": 1,
}


def _run(
    url: str,
    scenario: Scenario,
    tmp: Path,
    mode: str | None,
    stream: bool = False,
) -> Any:
    tgt = TargetConfig(base_url=url, label="t", timeout_s=10, max_retries=0, backoff_s=0.01)
    policy = SamplingPolicy(0.0, None, mode)  # type: ignore[arg-type]
    (rec,) = run_many_sync(
        [scenario], [tgt], repeats=1, stream=stream, out_dir=tmp, progress=False, sampling=policy
    )
    return rec


@pytest.fixture
def loop(write_scenarios: Callable[..., Path]) -> tuple[Path, Scenario]:
    folder = write_scenarios(LOOP)
    (sc,) = load_scenarios([folder])
    return folder, sc


@pytest.mark.parametrize("stream", [False, True])
def test_drop_on_a_server_that_requires_it_is_an_infra_error_naming_the_flag(
    sim_url: Callable[..., str], loop: tuple[Path, Scenario], tmp_path: Path, stream: bool
) -> None:
    url = sim_url("reasoning-required", scenarios_dir=loop[0])
    rec = _run(url, loop[1], tmp_path / "drop", "drop", stream)
    assert rec.stop_reason == "error" and rec.error is not None
    assert rec.error.status == 400 and rec.error.turn == 1
    assert "\n" not in rec.error.message
    assert "reasoning_history drop" in rec.error.message
    assert "--reasoning-history keep" in rec.error.message
    assert rec.reasoning_history == "drop"
    # the request that was refused carried the tool-call turn without its reasoning
    sent = rec.request_messages(1)
    assert [m for m in sent if m["role"] == "assistant" and "reasoning_content" in m] == []


@pytest.mark.parametrize("mode", ["keep", "auto"])
def test_keep_and_auto_pass_on_a_server_that_requires_it(
    sim_url: Callable[..., str], loop: tuple[Path, Scenario], tmp_path: Path, mode: str
) -> None:
    url = sim_url("reasoning-required", scenarios_dir=loop[0])
    rec = _run(url, loop[1], tmp_path / mode, mode)
    assert rec.stop_reason == "final_answer", rec.error
    assert rec.reasoning_history == mode
    sent = rec.request_messages(len(rec.turns) - 1)
    assistants = [m for m in sent if m["role"] == "assistant"]
    with_calls = [m for m in assistants if m.get("tool_calls")]
    answers = [m for m in assistants if not m.get("tool_calls")]
    assert len(with_calls) == 3 and len(answers) == 1
    assert all(m["reasoning_content"] for m in with_calls)
    # auto drops the reasoning of a turn that answered; keep sends it back too
    assert ("reasoning_content" in answers[0]) == (mode == "keep")


@pytest.mark.parametrize("stream", [False, True])
def test_keep_on_a_server_that_refuses_it_names_drop_and_drop_passes(
    sim_url: Callable[..., str], loop: tuple[Path, Scenario], tmp_path: Path, stream: bool
) -> None:
    url = sim_url("reasoning-refused", scenarios_dir=loop[0])
    kept = _run(url, loop[1], tmp_path / "keep", "keep", stream)
    assert kept.stop_reason == "error" and kept.error is not None
    assert kept.error.status == 400 and kept.error.turn == 1
    assert "--reasoning-history drop" in kept.error.message
    dropped = _run(url, loop[1], tmp_path / "drop", "drop", stream)
    assert dropped.stop_reason == "final_answer", dropped.error


def test_the_scenario_field_applies_unless_the_command_line_says_otherwise(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path
) -> None:
    folder = write_scenarios({**LOOP, "reasoning_history": "keep"})
    (sc,) = load_scenarios([folder])
    url = sim_url("reasoning-refused", scenarios_dir=folder)
    own = _run(url, sc, tmp_path / "own", None)
    assert own.reasoning_history == "keep" and own.stop_reason == "error"
    overridden = _run(url, sc, tmp_path / "cli", "drop")
    assert overridden.reasoning_history == "drop"
    assert overridden.stop_reason == "final_answer", overridden.error


def test_a_400_on_the_first_turn_or_without_reasoning_gets_no_hint(
    sim_url: Callable[..., str], loop: tuple[Path, Scenario], tmp_path: Path
) -> None:
    # look-alikes: a server that refuses every request (turn 0), and a model without
    # reasoning on a server that refuses it (nothing to send back: passes)
    url = sim_url("http-400", scenarios_dir=loop[0])
    rec = _run(url, loop[1], tmp_path / "400", "drop")
    assert rec.error is not None and rec.error.turn == 0
    assert "reasoning" not in rec.error.message
    plain = sim_url("healthy", scenarios_dir=loop[0])
    ok = _run(plain, loop[1], tmp_path / "plain", "keep")
    assert ok.stop_reason == "final_answer"
    sent = ok.request_messages(len(ok.turns) - 1)
    assert not any("reasoning_content" in m for m in sent)


def test_modes_and_their_option() -> None:
    assert reasoning_kept("keep", called_tools=False) and reasoning_kept("keep", called_tools=True)
    assert not reasoning_kept("drop", called_tools=True)
    assert reasoning_kept("auto", called_tools=True)
    assert not reasoning_kept("auto", called_tools=False)
    assert reasoning_history(" KEEP ") == "keep"
    with pytest.raises(OptionValueError, match="keep, drop or auto"):
        reasoning_history("sometimes")


def test_a_recording_serves_only_the_reasoning_history_it_was_made_with(
    sim_url: Callable[..., str],
    loop: tuple[Path, Scenario],
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.cli import ExitCode

    url = sim_url("reasoning-required", scenarios_dir=loop[0])
    assert harness_cli("record", loop[0], "--target", url, "--repeats", "1", "--rounds", "1",
                       "--no-logprobs", "--skip-contract", "--reasoning-history", "keep",
                       run_id="kept") == 0  # fmt: skip
    argv = [loop[0], "--baseline", harness_cli.folder("kept").path, "--candidate", url,
            "--repeats", "1", "--no-sequential", "--no-logprobs", "--skip-contract"]  # fmt: skip
    capsys.readouterr()
    assert harness_cli("compare", *argv, "--reasoning-history", "drop") == ExitCode.USAGE_ERROR
    err = capsys.readouterr().err
    assert "--reasoning-history keep recorded, drop now" in err and "\n" not in err.strip()
    code = harness_cli("compare", *argv, "--reasoning-history", "keep")
    assert code in (ExitCode.OK, ExitCode.REGRESSION)
