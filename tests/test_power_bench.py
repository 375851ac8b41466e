"""The detection-power benchmark (bench/power.py) and the README table made from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import power, power_table

ROOT = Path(__file__).resolve().parents[1]


def test_tiny_run_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "power.json"
    argv = ["--parts", "aa,fused,gsm8k", "--aa", "2", "--aa-sequential", "1", "--fused", "1"]
    assert power.main([*argv, "--gsm8k", "5", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["defaults"]["temperature"] == 0.7 and doc["defaults"]["permutations"] == 10_000
    assert doc["aa"]["fixed"]["n"] == 2 and doc["aa"]["sequential"]["n"] == 1
    assert doc["aa"]["fixed"]["regression"] == 0
    fused = doc["fused_regression"]["sequential"]
    assert fused["regression"] == 1 and fused["max_rounds"] == 1  # decided in the first round
    assert doc["gsm8k"]["drop_0.88_0.81"]["n"] == 5
    text = power_table.render(doc)
    assert "| A/A healthy vs healthy, fixed | REGRESSION 0/2 (0.0%)" in text


def test_table_replaces_only_the_marked_block() -> None:
    doc = json.loads((ROOT / "bench" / "power.json").read_text())
    readme = f"before\n{power_table.BEGIN}\nold\n{power_table.END}\nafter\n"
    new = power_table.update(readme, doc)
    assert new.startswith("before\n") and new.endswith(f"{power_table.END}\nafter\n")
    assert "old" not in new and power_table.render(doc) in new
    with pytest.raises(ValueError, match="power:begin"):
        power_table.update("no markers", doc)


def test_readme_table_is_the_committed_figures() -> None:
    """README.md's detection table is what bench/power.json gives (make bench writes both)."""
    assert (
        power_table.main([str(ROOT / "bench" / "power.json"), str(ROOT / "README.md"), "--check"])
        == 0
    )
