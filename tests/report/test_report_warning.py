"""A report that cannot be drawn is one warning naming the exception, and the command's
results and exit code stand (:func:`harness.present.report.write_report_or_warning`,
used by ``harness boot``, ``harness gsm8k``, ``harness matrix`` and the pytest plugin).

"Broken" here is a bug inside the report itself: the view builder raises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.present.report.render as render
from harness.cli import main
from harness.present.report import write_report_or_warning
from harness.pytest_plugin.session import write_html
from harness.sim.profiles import get_profile
from tests.conftest import GSM8K_TEST
from tests.report_data import write_case

WARNING = "report not written: RuntimeError: template bug on two lines"
ROOT = Path(__file__).resolve().parents[2]


def _bug(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("template bug\non two lines")


def _twice(monkeypatch: pytest.MonkeyPatch, command: Callable[[str], int]) -> tuple[int, int]:
    """Exit codes of ``command("ok")`` with the report working, then ``command("broken")``
    with the report broken."""
    ok = command("ok")
    with monkeypatch.context() as m:
        m.setattr(render, "build_report", _bug)
        broken = command("broken")
    return ok, broken


def test_the_path_or_one_line_naming_the_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_case(tmp_path / "case")
    assert write_report_or_warning(folder) == (folder / "report.html", None)
    assert (folder / "report.html").is_file() and (folder / "report.md").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    path, warning = write_report_or_warning(empty)
    assert path is None and warning is not None and "\n" not in warning
    assert warning.startswith("report not written: ReportInputError: ")
    monkeypatch.setattr(render, "build_report", _bug)
    other = write_case(tmp_path / "other")
    assert write_report_or_warning(other) == (None, WARNING)
    assert not (other / "report.html").exists()


def test_keyboard_interrupt_is_not_swallowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupt(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(render, "build_report", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_report_or_warning(write_case(tmp_path / "case"))


def test_plugin_report_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_case(tmp_path / "case")
    assert write_html(folder, None) == f"report: {folder / 'report.html'}"
    copy = tmp_path / "out" / "r.html"
    assert write_html(folder, str(copy)) == f"report: {copy}" and copy.is_file()
    (tmp_path / "file").write_text("x")
    line = write_html(folder, str(tmp_path / "file" / "r.html"))  # parent is a file
    assert line.startswith(f"report: {folder / 'report.html'} (not copied to ")
    monkeypatch.setattr(render, "build_report", _bug)
    assert write_html(folder, None) == f"warning: {WARNING}"


@pytest.mark.parametrize("profile", ["healthy", None])
def test_boot_exit_code_stands(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sim_url: Callable[..., str],
    profile: str | None,
) -> None:
    url = sim_url(profile) if profile else "http://127.0.0.1:9"  # None: nothing listens

    def boot(run: str) -> int:
        return main(["boot", "--target", url, "--results", str(tmp_path / run)])

    ok, broken = _twice(monkeypatch, boot)
    assert ok == broken == (0 if profile else 1)
    assert f"warning: {WARNING}" in capsys.readouterr().err
    assert list((tmp_path / "ok").glob("*/report.html"))
    assert list((tmp_path / "broken").glob("*/boot.json"))
    assert not list((tmp_path / "broken").glob("*/report.html"))


def test_gsm8k_exit_code_stands(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    gsm8k_sim: Callable[..., str],
) -> None:
    good = gsm8k_sim("healthy")
    bad = gsm8k_sim(dataclasses.replace(get_profile("gsm8k-drop"), gsm8k_accuracy=0.5))

    def gsm8k(run: str) -> int:
        return main([
            "gsm8k", "--baseline", good, "--target", bad, "--data", str(GSM8K_TEST),
            "--num-questions", "60", "--results", str(tmp_path), "--run-id", run,
            "--no-progress",
        ])  # fmt: skip

    ok, broken = _twice(monkeypatch, gsm8k)
    assert ok == broken == 1  # REGRESSION either way
    assert f"warning: {WARNING}" in capsys.readouterr().err
    assert (tmp_path / "ok/report.html").is_file() and (tmp_path / "broken/gsm8k.json").is_file()


def test_matrix_exit_code_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {
        "scenarios": [str(ROOT / "scenarios" / "sensor_entropy_pipeline.yaml")],
        "repeats": 1,
        "deployments": [
            {"label": "a", "sim": "repeat-loop", "attributes": {"fusion": "on", "triton": 3.6}},
            {"label": "b", "sim": "healthy", "attributes": {"fusion": "off", "triton": 3.5}},
        ],
    }
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")

    def matrix(run: str) -> int:
        return main([
            "matrix", str(path), "--results", str(tmp_path / "res"), "--run-id", run,
            "--no-progress",
        ])  # fmt: skip

    ok, broken = _twice(monkeypatch, matrix)
    assert ok == broken == 1  # NOT ISOLATED either way
    assert f"warning: {WARNING}" in capsys.readouterr().err  # as every command says it
    assert (tmp_path / "res/ok/report.html").is_file()
    assert not (tmp_path / "res/broken/report.html").exists()
