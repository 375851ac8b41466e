"""The report in headless Chromium: renders, logs no console message, runs no model output.

Needs Debian's ``chromium`` (``.ci/run`` installs it); skipped with a reason otherwise.
Console messages are read from Chromium's own log (``--enable-logging=stderr``), where
each one appears as an ``INFO:CONSOLE`` line; a control page proves the detection works.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.present.report import write_report
from tests.report_data import write_case

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)"
    ),
]

_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]
_CONSOLE = re.compile(r"CONSOLE[:(]\d*\)?\]? ?(.*)")


def chromium(url: str, tmp: Path, *extra: str) -> tuple[str, list[str]]:
    """Run headless Chromium on ``url``; returns (stdout, console messages)."""
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, *_FLAGS, f"--user-data-dir={tmp / 'profile'}", *extra, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = [m.group(1) for line in proc.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return proc.stdout, console


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = write_case(tmp_path_factory.mktemp("browser") / "cmp", xss=True, summary=True)
    return write_report(folder)


def test_console_detection_works(tmp_path: Path) -> None:
    page = tmp_path / "control.html"
    page.write_text("<html><body><script>console.error('boom'); nosuchfn();</script></body></html>")
    _, console = chromium(page.as_uri(), tmp_path, "--dump-dom")
    assert any("boom" in c for c in console)
    assert any("Uncaught ReferenceError" in c for c in console)


def test_screenshot_at_laptop_width_without_console_errors(report: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    _, console = chromium(
        report.as_uri(), tmp_path, f"--screenshot={png}", "--window-size=1366,900"
    )
    assert console == []
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") == 1366  # IHDR width
    assert len(data) > 20_000  # a rendered page, not a blank one


def test_model_output_shows_as_text_and_runs_nothing(report: Path, tmp_path: Path) -> None:
    dom, console = chromium(report.as_uri(), tmp_path, "--dump-dom")
    assert console == []
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert title is not None and "pwned" not in title.group(1)
    assert "harness · compare report" in dom  # the body was not replaced
    assert "&lt;script&gt;document.title='pwned'" in dom  # the payload is text in the DOM
    assert "&lt;img src=x onerror=" in dom and "<img" not in dom
    assert "<b>bold</b>" not in dom
