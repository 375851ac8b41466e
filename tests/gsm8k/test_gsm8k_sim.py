"""Acceptance of ``harness gsm8k`` against the reference server (harness.sim, in-process).

On the first 500 questions of ../shared/data/gsm8k/test.jsonl, a server
answering at 0.81 against one at 0.88 is a REGRESSION by McNemar's test; two healthy
servers are not; infrastructure errors are left out, never scored as wrong. (Retries,
per-question failures and the thread pool: tests/gsm8k/test_gsm8k_runner.py and
tests/gsm8k/test_gsm8k_threads.py, on the same server.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli._common import gsm8k_exit_code
from harness.client.target import TargetConfig
from harness.gsm8k.run import compare_gsm8k, read_gsm8k_records, run_gsm8k
from tests.conftest import GSM8K_TEST

Sim = Callable[..., str]


def _opts(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {"data": GSM8K_TEST, "results": tmp_path, **kw}


def test_gsm8k_500_regression_088_vs_081(tmp_path: Path, gsm8k_sim: Sim) -> None:
    unfused, fused = gsm8k_sim("healthy"), gsm8k_sim("gsm8k-drop")
    summary = compare_gsm8k(unfused, fused, **_opts(tmp_path))
    base, cand = summary.sides
    assert base.n == cand.n == 500 and base.n_errors == cand.n_errors == 0
    assert 0.85 < base.accuracy < 0.92 and 0.77 < cand.accuracy < 0.85
    p = summary.paired
    assert p is not None and p.verdict == "REGRESSION" and gsm8k_exit_code(summary) == 1
    assert p.c == 0 and p.b >= 25 and p.mcnemar_p < 1e-6
    assert p.diff_interval.high < 0
    assert base.output_throughput > 0 and base.completion_tokens > 0


def test_gsm8k_two_healthy_no_change(tmp_path: Path, gsm8k_sim: Sim) -> None:
    a, b = gsm8k_sim("healthy"), gsm8k_sim("healthy")
    summary = compare_gsm8k(a, b, **_opts(tmp_path, num_questions=200))
    assert summary.paired is not None and summary.paired.b == summary.paired.c == 0
    assert summary.verdict == "NO CHANGE" and gsm8k_exit_code(summary) == 0


def test_gsm8k_chat_api_on_sim(tmp_path: Path, gsm8k_sim: Sim) -> None:
    url = gsm8k_sim("healthy")
    summary = run_gsm8k(url, **_opts(tmp_path, num_questions=40, api="chat"))
    assert summary.sides[0].n == 40 and summary.sides[0].accuracy > 0.7


@pytest.mark.parametrize("profile", ["http-500", "http-400", "no-choices", "invalid-json"])
def test_gsm8k_broken_server_is_infra_not_wrong(
    tmp_path: Path, gsm8k_sim: Sim, profile: str
) -> None:
    good, broken = gsm8k_sim("healthy"), gsm8k_sim(profile)
    cand = TargetConfig(broken, label="broken", backoff_s=0.01)
    summary = compare_gsm8k(good, cand, **_opts(tmp_path, num_questions=20, run_id=profile))
    side = summary.sides[1]
    assert side.n == 0 and side.n_errors == 20 and side.correct == 0
    assert summary.verdict == "INCONCLUSIVE" and gsm8k_exit_code(summary) == 3
    records = [r for r in read_gsm8k_records(tmp_path / profile) if r.side == "candidate"]
    assert all(r.correct is None and r.error for r in records)
