"""The detection-power benchmark (bench/calibration/power.py) and the documentation tables made from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.calibration import power, power_table

ROOT = Path(__file__).resolve().parents[2]


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
    doc = json.loads((ROOT / "bench" / "calibration" / "power.json").read_text())
    readme = f"before\n{power_table.BEGIN}\nold\n{power_table.END}\nafter\n"
    new = power_table.update(readme, doc)
    assert new.startswith("before\n") and new.endswith(f"{power_table.END}\nafter\n")
    assert "old" not in new and power_table.render(doc) in new
    with pytest.raises(ValueError, match="power:begin"):
        power_table.update("no markers", doc)


def test_doc_tables_are_the_committed_figures() -> None:
    """The pages' measured tables are what bench/*.json give (make bench writes both)."""
    assert power_table.main([str(ROOT / "bench" / "calibration" / "power.json"), "--check"]) == 0


def test_a_stale_page_is_found_and_rewritten(tmp_path: Path) -> None:
    """A page whose block differs from the JSON fails --check, and is rewritten to pass."""
    pages = []
    for page in power_table.PAGES:
        copy = tmp_path / page.name
        text = page.read_text(encoding="utf-8")
        copy.write_text(text.replace(power_table.END, "a hand edit\n" + power_table.END, 1))
        pages.append(str(copy))
    args = [str(ROOT / "bench" / "calibration" / "power.json"), *pages]
    assert power_table.main([*args, "--check"]) == 1
    assert power_table.main(args) == 0
    assert power_table.main([*args, "--check"]) == 0
    with pytest.raises(ValueError, match="in none of"):
        power_table.main([str(ROOT / "bench" / "calibration" / "power.json"), pages[0], "--check"])


# ------------------------------------------------------------------------ recorded baselines


def _in_unit(t: dict[str, object]) -> None:
    """A figure's rates are rates of its counts, and its interval holds the rate."""
    n, k = t["n"], t["regression"]
    assert isinstance(n, int) and isinstance(k, int) and 0 <= k <= n
    assert t["regression_rate"] == pytest.approx(k / n)
    lo, hi = t["regression_ci"]  # type: ignore[misc]
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert 0.0 <= t["inconclusive_rate"] <= 1.0  # type: ignore[operator]
    assert sum(t["verdicts"].values()) == n  # type: ignore[attr-defined]


def test_tiny_recorded_part_writes_rates_of_its_counts(tmp_path: Path) -> None:
    out = tmp_path / "power.json"
    argv = ["--parts", "recorded", "--recorded-aa", "2", "--recorded-baselines", "1"]
    argv += ["--recorded-candidates", "2", "--recorded-detect", "1"]
    assert power.main([*argv, "--recorded-cases", "fused-regression", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())["recorded"]
    n = len(list((ROOT / "scenarios").glob("*.yaml")))  # the shipped library
    assert rec["recording"] == {
        "repeats": 20, "schedule": [5, 10, 15, 20], "runs": 20 * n, "profile": "healthy"
    }  # fmt: skip
    assert rec["aa"]["n"] == 2
    _in_unit(rec["aa"])
    spread = rec["spread"]
    assert (spread["recordings"], spread["candidates_per_recording"]) == (1, 2)
    _in_unit(spread["pooled"])
    (one,) = spread["per_recording"]
    _in_unit(one)
    assert one["n"] == 2 and one["scored"] == 20 * n and 0 <= one["failed"] <= 20 * n
    assert one["fail_rate"] == pytest.approx(one["failed"] / one["scored"])
    assert 0.0 <= one["fail_rate_first_round"] <= 1.0
    assert spread["over_alpha"] == (one["regression_rate"] > spread["alpha"])
    assert spread["min_rate"] == spread["max_rate"] == one["regression_rate"]
    fused = rec["detection"]["fused-regression"]
    for arm in ("recorded", "live"):
        _in_unit(fused[arm]["pooled"])
        assert fused[arm]["pooled"]["regression"] == 1  # the seed case: always caught
        assert fused[arm]["pooled"]["mean_candidate_runs"] == 5 * n  # one round
    text = power_table.render_recorded({"recorded": rec})
    assert "| A/A, a fresh recording per comparison | " in text
    assert f"| {one['recording']} | {one['fail_rate']:.1%}" in text


def test_recording_read_lazily_is_the_full_recording() -> None:
    """A recording's runs are a pure function of (seed, repeat): reading it round by
    round (runs made on demand) gives the runs of recording every repeat first."""
    b = power._bench(str(ROOT / "scenarios"))
    lazy, full = b.side("healthy", "baseline", 11), b.side("healthy", "baseline", 11)
    lazy.upto(5)
    got = [lazy.upto(10), full.upto(10)]
    keys = [
        sorted((r.run_key, tuple(power._score(s, r).failures)) for r in runs)
        for s, runs in zip((lazy, full), got, strict=True)
    ]
    assert keys[0] == keys[1] and len(keys[0]) == 10 * len(b.scenarios)


def test_uneven_schedule_is_decided_and_unpatched() -> None:
    b = power._bench(str(ROOT / "scenarios"))
    rec = b.side("healthy", "baseline", 12)
    cand = power.Side(b.scenarios, b.index, "fused-regression", "candidate", 12,
                      server_seed=power._server(12, 0, "candidate"))  # fmt: skip
    unfinished = power.pipeline._unfinished
    summary, look = power.decide_sequential(rec, cand, rounds=1, baseline=[10])
    assert power._verdict(summary) == "REGRESSION" and look == 1
    assert power.pipeline._unfinished is unfinished
    assert {len(rec.records), len(cand.records)} == {10 * len(b.scenarios), 5 * len(b.scenarios)}
    with pytest.raises(ValueError, match="one baseline size per round"):
        power.decide_sequential(rec, cand, rounds=2, baseline=[10])


def test_clopper_pearson_known_values() -> None:
    assert power.clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025 ** (1 / 10)))
    assert power.clopper_pearson(10, 10) == pytest.approx((0.025 ** (1 / 10), 1.0))
    assert power.clopper_pearson(0, 0) == (0.0, 1.0)


def test_recorded_block_needs_its_markers() -> None:
    doc = json.loads((ROOT / "bench" / "calibration" / "power.json").read_text())
    both = (
        f"{power_table.BEGIN}\nold\n{power_table.END}\n"
        f"{power_table.RECORDED_BEGIN}\nold\n{power_table.RECORDED_END}\n"
    )
    new = power_table.update(both, doc)  # figures without the part: the block says so
    assert "old" not in new and "(not measured" in new
    recorded = {**doc, "recorded": {"aa": {}}}
    with pytest.raises(ValueError, match="power-recorded:begin"):
        power_table.update(f"{power_table.BEGIN}\n{power_table.END}\n", recorded)


# ------------------------------------------------------------ drift kinds and the early stop


def test_tiny_drift_part_writes_every_kind_rate_and_rule(tmp_path: Path) -> None:
    out = tmp_path / "power.json"
    assert power.main(["--parts", "drift", "--drift", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["drift"]) == set(power.DRIFT) and len(power.DRIFT) >= 3
    for rates in doc["drift"].values():
        assert set(rates) == {"0.1", "0.2"}
        for by in rates.values():
            assert {"sequential", "earlier_rule"} <= set(by)
            assert all(t["n"] == 1 and sum(t["verdicts"].values()) == 1 for t in by.values())
    # every drift kind shows in several scenarios of the library
    assert all(int(v.split()[0]) >= 4 for v in doc["drift_scenarios"].values())
    text = power_table.render(doc)
    assert "| `string-as-scalar` |" in text and "candidate-only" in text


def test_earlier_futility_rule_stops_where_the_shipped_rule_goes_on() -> None:
    from harness.summary import Summary, Verdict

    only = Verdict(verdict="NO CHANGE", message="m", candidate_only_kinds=["collapse"])
    s = Summary(run_id="s", verdict=only)  # type: ignore[arg-type]
    assert power.stop_earlier_rule(s, 1, 4) and not power.should_stop(s, 1, 4)


def test_numerics_block_from_the_logprobs_figures() -> None:
    m = {
        "sequences": 19, "probe_requests": 2, "seconds": 60.0, "command": "python -m x",
        "aa": {"n": 10, "verdicts": {"NO CHANGE": 10}, "ab_mean_kl": 0.0, "aa_mean_kl": 0.0},
        "regression": {"n": 10, "verdicts": {"REGRESSION": 10}, "requests_per_verdict": 97,
                       "ab_mean_kl": 0.08, "aa_mean_kl": 1.4e-05},
        "benign": {"n": 10, "verdicts": {"NO CHANGE": 10}, "ab_mean_kl": 4.5e-4,
                   "aa_mean_kl": 1e-5},
        "behavioural": {"requests": 970, "verdict": "REGRESSION", "exit": 1},
    }  # fmt: skip
    text = power_table.render_numerics(m)
    assert "logprobs 97 (19 sequences x 5, + 2 to detect the API)" in text
    assert "**10.0x fewer**" in text
    assert "0 / 10 REGRESSION (10 NO CHANGE; 95% upper bound 25.9%)" in text  # 1 - 0.05^(1/10)
    assert "(1.9e-06," in text  # 2^-19


def test_flags_name_the_bands_a_verdict_falls_in() -> None:
    from harness.summary import MetricRow, ScenarioComparison, Summary, Verdict

    row = MetricRow(
        metric="passed", kind="rate", baseline=1.0, candidate=0.9, effect=-0.1, worse=True,
        p_value=0.01, p_adjusted=0.025, test="t", decisive=True,
    )  # fmt: skip
    comp = ScenarioComparison(scenario_id="*", rows=[row], verdict="NO CHANGE")
    verdict = Verdict(verdict="NO CHANGE", message="m", candidate_only_kinds=["collapse"])
    s = Summary(run_id="s", comparisons=[comp], verdict=verdict)  # type: ignore[arg-type]
    assert power._flags(s).split(",") == ["only", "band_0.1", "band_0.044", "band_0.03"]
    loop = Verdict(verdict="REGRESSION", message="REGRESSION: x with repeat_loop (1 of its 1")
    assert power._flags(Summary(run_id="s", verdict=loop)) == "loop"  # type: ignore[arg-type]


def test_tiny_stream_both_part_decides_each_comparison_both_ways(tmp_path: Path) -> None:
    out = tmp_path / "both.json"
    argv = ["--parts", "aa-both", "--aa-both", "2", "--aa-sequential", "1"]
    assert power.main([*argv, "--json", str(out)]) == 0
    figs = json.loads(out.read_text())["aa_stream_both"]
    assert {k: v["n"] for k, v in figs.items()} == {
        "fixed": 2, "fixed_runs_as_units": 2, "sequential": 1, "sequential_runs_as_units": 1,
        "fixed_independent_twins": 2, "fixed_independent_twins_runs_as_units": 2}  # fmt: skip
    runs = 2 * 2 * 5 * json.loads(out.read_text())["defaults"]["scenarios"]  # sides, modes
    assert figs["fixed"]["mean_runs"] == figs["fixed_runs_as_units"]["mean_runs"] == runs
    # the rule before is restored after each decision: the shipped one counts repeats
    from harness.stats.aggregate import AggregateBuilder

    assert AggregateBuilder._units.__name__ == "_units"  # not the stand-in lambda
    text = power_table.render_stream_both({"aa_stream_both": figs, **json.loads(out.read_text())})
    assert "| fixed, a repeat a unit (shipped) | " in text and "each run a unit" in text
