"""``harness compare`` / ``harness score`` end to end against the reference server (HTTP)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.present.views import metric_rows, scenario_rows
from harness.runfolder import RunFolder
from harness.stats.family import run_family
from tests.sim_driver import ENTROPY_TOOL

ENTROPY: dict[str, Any] = {
    "id": "entropy",
    "description": "an array argument and an optional base",
    "messages": [
        {"role": "system", "content": "You have an entropy tool."},
        {"role": "user", "content": "Entropy of [0.5, 0.25, 0.25] in bits?"},
    ],
    "tools": [{**ENTROPY_TOOL, "simulator": {"builtin": "entropy"}}],
    "expect": {
        "calls": [{"tool": "entropy", "arguments": {"values": [0.5, 0.25, 0.25], "base": 2}}],
        "final_answer": {"contains": ["1.5"], "example": "The entropy is 1.5 bits."},
    },
}
LOOKUP: dict[str, Any] = {
    "id": "lookup",
    "description": "two string ids in a row",
    "messages": [{"role": "user", "content": "Where are orders 123_456 and 007?"}],
    "tools": [
        {
            "name": "lookup_order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
            "simulator": {"result": {"status": "shipped"}},
        }
    ],
    "expect": {
        "calls": [
            {"tool": "lookup_order", "arguments": {"order_id": "123_456"}},
            {"tool": "lookup_order", "arguments": {"order_id": "007"}},
        ],
        "final_answer": {"contains": ["shipped"], "example": "Both orders have shipped."},
    },
}
CLOCK: dict[str, Any] = {
    "id": "clock",
    "description": "a tool without parameters",
    "messages": [{"role": "user", "content": "What time is it?"}],
    "tools": [{"name": "now", "simulator": {"result": "09:30"}}],
    "expect": {
        "calls": [{"tool": "now"}],
        "final_answer": {"contains": ["9:30"], "example": "It is 09:30."},
    },
}


@pytest.fixture
def scenarios(write_scenarios: Callable[..., Path]) -> Path:
    return write_scenarios(ENTROPY, LOOKUP, CLOCK)


def _only_run(results: Path) -> Path:
    (folder,) = [p for p in results.iterdir() if p.is_dir()]
    return folder


def test_default_compare_is_a_regression(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No URLs: healthy ("unfused") vs fused-regression ("fused") on the reference server."""
    results = tmp_path / "results"
    code = main(
        ["compare", str(scenarios), "--results", str(results), "--repeats", "3", "--no-progress"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "REGRESSION" in out and "repeat_loop" in out
    assert "array sent as a string" in out and "values collapsed to zeros" in out
    assert "reached a final answer" in out and "repeated identical calls" in out
    assert "first divergence at turn 0" in out
    s = RunFolder.open(_only_run(results)).read_summary()
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    assert {"repeat_loop", "missing_final_answer"} <= set(s.verdict.regressed_kinds)
    cand, base = s.aggregate("candidate", "*"), s.aggregate("baseline", "*")
    assert cand is not None and base is not None
    assert cand.rates["final_answer"].k == 0 and base.rates["final_answer"].k == base.scored == 9
    assert cand.rates["container_as_string"].k > 0 and cand.rates["collapse"].k > 0
    assert cand.counts["tool_calls"].mean > 3 * base.counts["tool_calls"].mean  # type: ignore[operator]
    assert [x.label for x in s.sides] == ["unfused", "fused"]
    scores = [x for _, x in RunFolder(_only_run(results)).scores_with_offsets()]
    run = next(r for r in scores if r.side == "candidate" and r.scenario_id == "entropy")
    assert run.drift[0].turn == 0 and run.drift[0].kind == "container_as_string"


def test_aa_on_healthy_is_no_change(scenarios: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    code = main(
        [
            "compare",
            str(scenarios),
            "--aa",
            "--results",
            str(results),
            "--repeats",
            "5",
            "--no-sequential",
            "--no-progress",
        ]
    )
    assert code == 0
    s = RunFolder.open(_only_run(results)).read_summary()
    assert s.verdict is not None
    # three scenarios decode too few independent turns for the decode path's paired test:
    # that path is INCONCLUSIVE, and a behavioural NO CHANGE does not hide it
    assert s.verdict.behaviour == "NO CHANGE", s.verdict.message
    if s.verdict.verdict != "NO CHANGE":
        assert s.verdict.verdict == "INCONCLUSIVE", s.verdict.message
        assert s.verdict.message.startswith("INCONCLUSIVE: numerics (decode): INCONCLUSIVE")
        assert "add scenarios or --gsm8k prompts" in s.verdict.message
    scores = [x for _, x in RunFolder(_only_run(results)).scores_with_offsets()]
    assert len(scores) == 30
    # sampled at 0.7: the healthy server's noise fails a few runs, on both sides alike
    assert sum(not r.passed for r in scores) <= 6


def test_stream_both_tests_each_repeat_once(
    scenarios: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stream both`` over HTTP: each repeat runs streamed and not on one request seed
    (the reference server gives both the same draw), and the tests count the repeat once;
    so do the tables the console and the report show, and both say so."""
    args = ["compare", str(scenarios), "--aa", "--repeats", "3", "--no-sequential"]
    args += ["--stream", "both", "--results", str(tmp_path), "--run-id", "b", "--no-progress"]
    assert main(args) in (0, 1)
    out = capsys.readouterr().out
    assert "rates and counts count repeats" in " ".join(out.split())
    s = RunFolder(tmp_path / "b").read_summary()
    assert s is not None
    for row in scenario_rows(s):  # passed: of 3 repeats, not of 6 runs
        assert [c.split("/")[1] for c in row.passed] == ["3", "3"], row
    pooled = {r.metric: r.cells for r in metric_rows(s, "*")}
    assert [c.split("/")[1] for c in pooled["passed"]] == ["9", "9"]
    assert s.verdict is not None and "of candidate runs" not in (s.verdict.power or "")
    html = (tmp_path / "b" / "report.html").read_text()
    assert "rates and counts count repeats" in html
    assert s is not None and s.parity_pairs == 18 and not s.parity
    base = {a.scenario_id: a for a in s.aggregates if a.side == "baseline"}
    cand = {a.scenario_id: a for a in s.aggregates if a.side == "candidate"}
    for sid in ("entropy", "lookup", "clock"):
        assert (base[sid].scored, base[sid].unit_count(), cand[sid].unit_count()) == (6, 3, 3)
    metrics = {sid: ["passed"] for sid in base}
    fam = run_family(base, cand, metrics, alpha=0.01, permutations=100)
    assert {(t.n_b, t.n_c) for t in fam.tests if t.scenario != "*"} == {(3, 3)}


def test_no_change_needs_a_budget_that_could_detect_something(
    scenarios: Path, tmp_path: Path
) -> None:
    """3 scenarios x 2 repeats: even every candidate run failing would not be significant
    after the correction, so equal sides are INCONCLUSIVE (exit 0), not NO CHANGE."""
    args = ["compare", str(scenarios), "--aa", "--repeats", "2", "--no-sequential"]
    assert main([*args, "--results", str(tmp_path), "--run-id", "x", "--no-progress"]) == 0
    s = RunFolder(tmp_path / "x").read_summary()
    assert s is not None and s.verdict is not None and s.verdict.verdict == "INCONCLUSIVE"
    assert s.verdict.message.startswith("INCONCLUSIVE: no change could have been detected")
    assert s.verdict.power and "no new failure kind could have been detected" in s.verdict.power


def test_two_urls_and_rescoring(
    scenarios: Path, tmp_path: Path, sim_url: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    base = sim_url("healthy", scenarios_dir=scenarios)
    cand = sim_url("finish-reason-mismatch", scenarios_dir=scenarios)
    results = tmp_path / "results"
    argv = [
        "compare",
        str(scenarios),
        "--baseline",
        base,
        "--candidate",
        cand,
        "--results",
        str(results),
    ]
    code = main([*argv, "--repeats", "3", "--no-progress", "--candidate-label", "fused"])
    assert code == 1
    folder = _only_run(results)
    first = json.loads((folder / "summary.json").read_text())
    assert "finish_reason_mismatch" in first["verdict"]["regressed_kinds"]
    (folder / "summary.json").unlink()
    capsys.readouterr()
    assert main(["score", str(folder)]) == 1
    again = json.loads((folder / "summary.json").read_text())
    assert again["verdict"] == first["verdict"] and again["aggregates"] == first["aggregates"]
    assert len((folder / "scores.jsonl").read_text().splitlines()) == 18
    assert again["sides"][1]["label"] == "fused"
    assert "finish_reason_mismatch" in capsys.readouterr().out


def test_infrastructure_errors_exit_3(
    scenarios: Path,
    tmp_path: Path,
    sim_url: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = sim_url("healthy", scenarios_dir=scenarios)
    cand = sim_url("no-choices", scenarios_dir=scenarios)
    results = tmp_path / "results"
    code = main(
        [
            "compare",
            str(scenarios / "clock.yaml"),
            "--baseline",
            base,
            "--candidate",
            cand,
            "--results",
            str(results),
            "--repeats",
            "2",
            "--no-progress",
        ]
    )
    assert code == 3
    out = capsys.readouterr().out
    assert "\n TOO MANY INFRASTRUCTURE ERRORS " in out and "\n INCONCLUSIVE " not in out
    assert "  e.g. " in out  # one example message per kind of infrastructure error
    s = RunFolder.open(_only_run(results)).read_summary()
    assert [x.infra_errors for x in s.sides] == [0, 2]
    cand_agg = s.aggregate("candidate", "clock")
    assert cand_agg is not None and cand_agg.scored == 0 and cand_agg.infra_errors == 2
    scores = [x for _, x in RunFolder(_only_run(results)).scores_with_offsets()]
    assert all(r.failures == [] for r in scores)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--baseline", "http://127.0.0.1:9"], "--candidate"),
        (["--baseline", "localhost:8000", "--candidate", "http://x"], "not an http(s) URL"),
        (["--aa", "--baseline-log", "/nonexistent/log"], "no such log file"),
        (["--repeats", "0"], "--repeats"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_score_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["score", str(tmp_path / "nope")]) == 2
    assert main(["score", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no transcripts.jsonl" in err and "harness report" in err
