"""``harness gsm8k`` runner against the reference server (harness.sim) on 127.0.0.1.

The servers answer GSM8K from ../shared/data/gsm8k/test.jsonl (``gsm8k_sim``) with the
failure modes the runner must survive: questions that always fail (left out, not
wrong; ``gsm8k_faults``), transient 500s (``flaky-500``, retried), a garbage body
(``invalid-json``: an infrastructure error), a refused request (``http-400``: not
retried). What each server received comes from ``GET /sim/stats``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.cli._common import gsm8k_exit_code
from harness.client.target import TargetConfig
from harness.gsm8k.data import load_dataset
from harness.gsm8k.models import GSM8KSummary
from harness.gsm8k.run import compare_gsm8k, read_gsm8k_records, rescore, run_gsm8k
from harness.sim.app import GSM8K_DATA_PATH, MODEL_NAME
from harness.sim.stats import fetch_stats
from tests.conftest import GSM8K_TEST

Sim = Callable[..., str]


def _opts(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {"data": GSM8K_TEST, "results": tmp_path, **kw}


def _fast(url: str, label: str = "candidate", **kw: Any) -> TargetConfig:
    """A target retrying after 10 ms (the default backoff's 3 retries take 3.5 s)."""
    return TargetConfig(url, label=label, backoff_s=0.01, **kw)


def test_single_target_scores_and_writes_records(tmp_path: Path, gsm8k_sim: Sim) -> None:
    url = gsm8k_sim("healthy")
    summary = run_gsm8k(url, **_opts(tmp_path, num_questions=60, run_id="one"))
    side = summary.sides[0]
    assert side.n == 60 and side.n_errors == 0 and side.model == MODEL_NAME
    assert side.accuracy_interval.low < side.accuracy < side.accuracy_interval.high
    assert 0.7 < side.accuracy <= 1.0
    records = sorted(read_gsm8k_records(tmp_path / "one"), key=lambda r: r.index)
    assert len(records) == 60 and {r.index for r in records} == set(range(60))
    assert sum(bool(r.correct) for r in records) == side.correct
    assert all(r.prompt_sha256 and r.output for r in records)
    assert [r.is_shot for r in records[:6]] == [True] * 5 + [False]
    stats = fetch_stats(url)  # one completions request per question, each asked once
    assert stats.paths == {"/v1/completions": 60}
    assert stats.gsm8k_questions == {i: 1 for i in range(60)}
    on_disk = GSM8KSummary.model_validate_json((tmp_path / "one/gsm8k.json").read_text())
    assert on_disk == summary and on_disk.schema_version == 1
    again = rescore(tmp_path / "one", write=False)  # a pure function of the files
    assert again.model_dump(exclude={"created_at"}) == summary.model_dump(exclude={"created_at"})
    with pytest.raises(TypeError):
        run_gsm8k(url, **_opts(tmp_path, num_question=3))


def test_regression_is_detected_on_200(tmp_path: Path, gsm8k_sim: Sim) -> None:
    good, bad = gsm8k_sim("healthy"), gsm8k_sim("gsm8k-drop")
    summary = compare_gsm8k(good, bad, **_opts(tmp_path, num_questions=200))
    p = summary.paired
    assert p is not None and p.n_pairs == 200
    assert p.verdict == "REGRESSION" and gsm8k_exit_code(summary) == 1
    assert p.c == 0 and p.b > 10 and p.mcnemar_p < 1e-3
    assert p.diff_interval.low < p.accuracy_diff < p.diff_interval.high < 0
    assert p.discordant and all(d.baseline_correct for d in p.discordant)


def test_failed_questions_are_left_out_not_wrong(tmp_path: Path, gsm8k_sim: Sim) -> None:
    good = gsm8k_sim("healthy")
    faults = {7: "http-500", 9: "http-500", 11: "invalid-json"}
    broken = gsm8k_sim("healthy", gsm8k_faults=faults)
    opts = _opts(tmp_path, num_questions=40)
    summary = compare_gsm8k(_fast(good, "baseline"), _fast(broken), **opts)
    cand = summary.sides[1]
    assert cand.n_errors == 3 and cand.error_indices == [7, 9, 11] and cand.n == 37
    assert summary.paired is not None and summary.paired.n_pairs == 37
    # no question differs, but 37 pairs cannot rule out a 2-point drop: INCONCLUSIVE,
    # and not an infrastructure failure (exit 0)
    assert summary.verdict == "INCONCLUSIVE" and "not ruled out" in summary.paired.reason
    assert (summary.paired.b, summary.paired.c) == (0, 0) and gsm8k_exit_code(summary) == 0
    recs = {
        r.index: r for r in read_gsm8k_records(tmp_path / summary.run_id) if r.side == "candidate"
    }
    assert recs[7].correct is None and recs[7].attempts == 4  # transient: retried 3 times
    assert (recs[7].error or "").startswith("http_status: HTTP 500:")
    assert "simulated internal server error" in (recs[7].error or "")
    assert recs[11].correct is None and recs[11].attempts == 4  # garbage is retried too
    assert recs[11].error == "invalid_body: the response is not JSON"
    stats = fetch_stats(broken)  # the server saw the retries, and only those
    assert stats.gsm8k_questions[7] == stats.gsm8k_questions[9] == 4
    assert stats.gsm8k_questions[11] == 4 and stats.faults_served == 12
    assert stats.requests == 37 + 12 and fetch_stats(good).faults_served == 0


def test_target_config_retries_apply_and_the_target_is_not_modified(
    tmp_path: Path, gsm8k_sim: Sim
) -> None:
    """GSM8K takes the harness's one TargetConfig: its retries and backoff apply, an HTTP
    400 is not retried (RequestFailed.transient), and the caller's object is untouched."""
    url = gsm8k_sim("healthy", gsm8k_faults={3: "http-500"})
    refusing = gsm8k_sim("healthy", gsm8k_faults={4: "http-400"})
    target = TargetConfig(url, label="t", max_retries=1, backoff_s=0.01)
    run_gsm8k(target, **_opts(tmp_path, num_questions=6, run_id="r"))
    run_gsm8k(refusing, **_opts(tmp_path, num_questions=6, run_id="400"))
    assert target.model is None and target.side is None  # the run worked on a copy
    recs = {r.index: r for r in read_gsm8k_records(tmp_path / "r")}
    assert recs[3].attempts == 2 and recs[3].model == MODEL_NAME  # 1 retry, as configured
    refused = {r.index: r for r in read_gsm8k_records(tmp_path / "400")}[4]
    assert refused.attempts == 1 and (refused.error or "").startswith("http_status: HTTP 400")
    assert fetch_stats(url).gsm8k_questions[3] == 2
    assert fetch_stats(refusing).gsm8k_questions[4] == 1


def test_transient_errors_are_retried(tmp_path: Path, gsm8k_sim: Sim) -> None:
    url = gsm8k_sim("flaky-500")  # each question's first try answers 500
    summary = run_gsm8k(url, **_opts(tmp_path, num_questions=20, run_id="flaky"))
    assert summary.sides[0].n == 20 and summary.sides[0].n_errors == 0
    assert {r.attempts for r in read_gsm8k_records(tmp_path / "flaky")} == {2}
    stats = fetch_stats(url)
    assert stats.gsm8k_questions == {i: 2 for i in range(20)} and stats.faults_served == 20


def test_too_many_errors_is_inconclusive(tmp_path: Path, gsm8k_sim: Sim) -> None:
    good = gsm8k_sim("healthy")
    broken = gsm8k_sim("healthy", gsm8k_faults=dict.fromkeys(range(10), "http-500"))
    opts = _opts(tmp_path, num_questions=30)
    summary = compare_gsm8k(_fast(good, "baseline"), _fast(broken), **opts)
    assert summary.sides[1].n_errors == 10
    assert summary.verdict == "INCONCLUSIVE" and gsm8k_exit_code(summary) == 3


def test_chat_api_and_exclude_shots(tmp_path: Path, gsm8k_sim: Sim) -> None:
    url = gsm8k_sim("healthy")
    summary = run_gsm8k(
        url, **_opts(tmp_path, num_questions=30, api="chat", exclude_shots=True, run_id="c")
    )
    records = read_gsm8k_records(tmp_path / "c")
    assert {r.index for r in records} == set(range(5, 30)) and not any(r.is_shot for r in records)
    assert summary.sides[0].n == 25 and summary.sides[0].accuracy > 0.6
    stats = fetch_stats(url)  # the chat endpoint, the shots never asked
    assert stats.paths == {"/v1/chat/completions": 25}
    assert set(stats.gsm8k_questions) == set(range(5, 30))


def test_download_into_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gsm8k_sim: Sim
) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    ds = load_dataset(url=gsm8k_sim("healthy") + GSM8K_DATA_PATH)
    assert ds.official and (tmp_path / "gsm8k/test.jsonl").read_bytes() == GSM8K_TEST.read_bytes()


def test_cli_exit_codes_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gsm8k_sim: Sim
) -> None:
    assert main(["gsm8k", "--target", "localhost:1"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    missing = tmp_path / "nope.jsonl"
    assert main(["gsm8k", "--target", "http://127.0.0.1:9", "--data", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert (
        main(["gsm8k", "--target", "http://127.0.0.1:9", "--exclude-shots", "--num-questions", "5"])
        == 2
    )
    assert "--exclude-shots leaves no question" in capsys.readouterr().err
    good, bad = gsm8k_sim("healthy"), gsm8k_sim("gsm8k-drop")
    code = main([
        "gsm8k", "--baseline", good, "--target", bad, "--data", str(GSM8K_TEST), "--num-questions",
        "150", "--results", str(tmp_path), "--run-id", "cli", "--no-progress",
    ])  # fmt: skip
    assert code == 1
    assert "REGRESSION" in capsys.readouterr().out
    summary = json.loads((tmp_path / "cli/gsm8k.json").read_text())
    assert summary["verdict"] == "REGRESSION" and summary["sides"][1]["label"] == "candidate"
