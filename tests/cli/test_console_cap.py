"""The console caps its per-scenario section: with many scenarios it shows the ones that
differ first, at most CONSOLE_SCENARIOS rows and CONSOLE_DETAILS traces, and says where
the rest are (the report holds every scenario)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from harness.present.console import CONSOLE_DETAILS, CONSOLE_SCENARIOS

ROOT = Path(__file__).parents[2]
N = CONSOLE_SCENARIOS + 20


def test_many_scenarios_print_a_capped_section(
    tmp_path: Path,
    sim_url: Callable[..., str],
    harness_cli: Callable[..., int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = yaml.safe_load((ROOT / "scenarios" / "no_params_tool.yaml").read_text())
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(N):
        (folder / f"s{i:03d}.yaml").write_text(yaml.safe_dump({**base, "id": f"s{i:03d}"}))
    b = sim_url("healthy", scenarios_dir=folder)
    c = sim_url("fused-regression", scenarios_dir=folder)
    code = harness_cli("compare", folder, "--baseline", b, "--candidate", c, "--repeats", "1",
                       "--rounds", "1", "--no-logprobs", "--skip-contract", run_id="many")  # fmt: skip
    out = capsys.readouterr().out
    assert code in (0, 1), out
    rows = [ln for ln in out.splitlines() if ln.startswith("│ s0") or ln.startswith("│ s")]
    assert len({ln.split()[1] for ln in rows}) <= CONSOLE_SCENARIOS, len(rows)
    assert f"{N - CONSOLE_SCENARIOS} more scenarios not shown here" in out
    assert out.count("first divergence") <= CONSOLE_DETAILS
    report = (harness_cli.results / "many" / "report.md").read_text()  # type: ignore[attr-defined]
    assert all(f"s{i:03d}" in report for i in range(N))  # the report has every one
