"""The numerics decision rule's own error rates (bench/calibration/numerics_rule.py) and
the block of docs/numerics.md made from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibration import numerics_rule

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_run_counts_every_case_under_both_rules() -> None:
    doc = numerics_rule.measure(reps=20, seed=1)
    assert len(doc["cases"]) == len(numerics_rule.CASES) * len(numerics_rule.SIZES)
    for r in doc["cases"]:
        for rule in ("signed_rank", "shipped"):
            assert sum(r[rule].values()) == 20
    aa = [r for r in doc["cases"] if r["kind"] == "aa"]
    assert all(r["shipped"]["REGRESSION"] == 0 for r in aa)
    # the fault the mean test exists for: 30% of 75 sequences at 0.1 nats
    hit = next(r for r in doc["cases"] if r["case"].startswith("30%") and r["n"] == 75)
    assert hit["shipped"]["REGRESSION"] > 15 and hit["signed_rank"]["REGRESSION"] < 5


def test_the_page_block_is_the_committed_figures() -> None:
    doc = json.loads(numerics_rule.JSON.read_text(encoding="utf-8"))
    page = numerics_rule.DOC.read_text(encoding="utf-8")
    assert numerics_rule.update(page, doc) == page, (
        "docs/numerics.md is stale: run python -m bench.calibration.numerics_rule --render"
    )
    assert "signed rank alone" in page and doc["cases"][0]["reps"] >= 1000


def test_a_page_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="numerics-rule:begin"):
        numerics_rule.update("no markers", {"cases": []})
