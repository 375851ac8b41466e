"""Acceptance of ``harness gsm8k`` against the reference server (harness.sim, in-process).

Issue 5: on the first 500 questions of ../shared/data/gsm8k/test.jsonl, a server
answering at 0.81 against one at 0.88 is a REGRESSION by McNemar's test; two healthy
servers are not; infrastructure errors are left out, never scored as wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cli._common import gsm8k_exit_code
from harness.client.target import TargetConfig
from harness.gsm8k.run import compare_gsm8k, read_gsm8k_records, run_gsm8k
from harness.sim import server

SHARED = Path(__file__).parents[2] / "shared/data/gsm8k/test.jsonl"
pytestmark = pytest.mark.skipif(
    not SHARED.exists(),
    reason=f"GSM8K test split not found at {SHARED} (../shared beside the clone)",
)


def _sim(profile: str) -> Any:
    return server.serve_in_thread(profile, scenarios_dir=None, gsm8k_path=SHARED)


def _opts(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {"data": SHARED, "results": tmp_path, **kw}


def test_gsm8k_500_regression_088_vs_081(tmp_path: Path) -> None:
    with _sim("healthy") as unfused, _sim("gsm8k-drop") as fused:
        summary = compare_gsm8k(unfused, fused, **_opts(tmp_path))
    base, cand = summary.sides
    assert base.n == cand.n == 500 and base.n_errors == cand.n_errors == 0
    assert 0.85 < base.accuracy < 0.92 and 0.77 < cand.accuracy < 0.85
    p = summary.paired
    assert p is not None and p.verdict == "REGRESSION" and gsm8k_exit_code(summary) == 1
    assert p.c == 0 and p.b >= 25 and p.mcnemar_p < 1e-6
    assert p.diff_interval.high < 0
    assert base.output_throughput > 0 and base.completion_tokens > 0


def test_gsm8k_two_healthy_no_change(tmp_path: Path) -> None:
    with _sim("healthy") as a, _sim("healthy") as b:
        summary = compare_gsm8k(a, b, **_opts(tmp_path, num_questions=200))
    assert summary.paired is not None and summary.paired.b == summary.paired.c == 0
    assert summary.verdict == "NO CHANGE" and gsm8k_exit_code(summary) == 0


def test_gsm8k_chat_api_on_sim(tmp_path: Path) -> None:
    with _sim("healthy") as url:
        summary = run_gsm8k(url, **_opts(tmp_path, num_questions=40, api="chat"))
    assert summary.sides[0].n == 40 and summary.sides[0].accuracy > 0.7


def test_gsm8k_flaky_server_is_retried(tmp_path: Path) -> None:
    with _sim("flaky-500") as url:
        target = TargetConfig(url, backoff_s=0.01)
        summary = run_gsm8k(target, **_opts(tmp_path, num_questions=30, run_id="flaky"))
    assert summary.sides[0].n == 30 and summary.sides[0].n_errors == 0
    assert max(r.attempts for r in read_gsm8k_records(tmp_path / "flaky")) == 2


@pytest.mark.parametrize("profile", ["http-500", "no-choices", "invalid-json"])
def test_gsm8k_broken_server_is_infra_not_wrong(tmp_path: Path, profile: str) -> None:
    with _sim("healthy") as good, _sim(profile) as broken:
        cand = TargetConfig(broken, label="broken", backoff_s=0.01)
        summary = compare_gsm8k(good, cand, **_opts(tmp_path, num_questions=20, run_id=profile))
    side = summary.sides[1]
    assert side.n == 0 and side.n_errors == 20 and side.correct == 0
    assert summary.verdict == "INCONCLUSIVE" and gsm8k_exit_code(summary) == 3
    records = [r for r in read_gsm8k_records(tmp_path / profile) if r.side == "candidate"]
    assert all(r.correct is None and r.error for r in records)
