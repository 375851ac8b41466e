"""The shipped scenario library: package data, the default of every command when the
current folder has no ``scenarios/`` (a wheel installed outside a clone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.scenario.library import LIBRARY, default_scenarios

ROOT = Path(__file__).resolve().parents[2]


def test_the_library_is_the_repository_scenarios() -> None:
    assert sorted(p.name for p in LIBRARY.glob("*.yaml")) == sorted(
        p.name for p in (ROOT / "scenarios").glob("*.yaml")
    )


def test_default_is_local_scenarios_else_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_scenarios() == str(LIBRARY)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "meeting_attendees" in out
    (tmp_path / "scenarios").mkdir()
    assert default_scenarios() == "scenarios"
    assert main(["list"]) == 0
    assert "meeting_attendees" not in capsys.readouterr().out  # its own folder, not the library
