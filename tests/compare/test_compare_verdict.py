"""The decision rule on synthetic scores (pure, no server)."""

from __future__ import annotations

from harness.pipeline import summarize
from harness.scoring.divergence import first_divergence
from harness.scoring.models import RunScore
from harness.stats.aggregate import aggregate
from harness.stats.verdict import decide, judge_run
from harness.summary import Aggregate, SideInfo
from tests.scoring.test_scoring import GOOD, make_record


def _scores(side: str, scenario: str, failures: list[list[str]]) -> list[RunScore]:
    return [
        RunScore(
            run_key=f"{side}/{scenario}/{i}/nostream",
            scenario_id=scenario,
            side=side,
            label=side,
            repeat=i,
            termination="final_answer",
            final_answer=True,
            failures=f,
            passed=not f,
        )
        for i, f in enumerate(failures)
    ]


def _decide(base: dict[str, list[list[str]]], cand: dict[str, list[list[str]]]):  # type: ignore[no-untyped-def]
    b = {s: _scores("baseline", s, f) for s, f in base.items()}
    c = {s: _scores("candidate", s, f) for s, f in cand.items()}
    kinds = sorted({k for d in (base, cand) for fs in d.values() for f in fs for k in f})
    b_aggs = {s: aggregate("baseline", "b", s, v, kinds) for s, v in b.items()}
    c_aggs = {s: aggregate("candidate", "c", s, v, kinds) for s, v in c.items()}
    b_aggs["*"] = aggregate("baseline", "b", "*", [x for v in b.values() for x in v], kinds)
    c_aggs["*"] = aggregate("candidate", "c", "*", [x for v in c.values() for x in v], kinds)
    return decide(b_aggs, c_aggs)


CLEAN = [[] for _ in range(5)]


def test_identical_sides_no_change() -> None:
    r = _decide({"a": CLEAN, "b": CLEAN}, {"a": CLEAN, "b": CLEAN})
    assert r.verdict.verdict == "NO CHANGE"


def test_consistent_failure_is_a_regression_named_by_kind() -> None:
    loop = [["repeat_loop"]] * 5
    r = _decide({"a": CLEAN, "b": CLEAN}, {"a": loop, "b": loop})
    assert r.verdict.verdict == "REGRESSION"
    assert r.verdict.regressed_kinds == ["repeat_loop"]
    row = next(x for x in r.comparisons[-1].rows if x.metric == "repeat_loop")
    assert row.significant and row.worse and row.p_adjusted is not None
    assert row.candidate == 1.0 and row.baseline == 0.0 and row.worse


def test_reverse_is_an_improvement() -> None:
    loop = [["repeat_loop"]] * 5
    r = _decide({"a": loop, "b": loop}, {"a": CLEAN, "b": CLEAN})
    assert r.verdict.verdict == "IMPROVEMENT"
    assert r.verdict.improved_kinds == ["repeat_loop"]


def test_weak_difference_is_inconclusive_with_repeats_needed() -> None:
    some = [["collapse"], ["collapse"], [], [], []]
    r = _decide({"a": CLEAN, "b": CLEAN}, {"a": some, "b": some})
    assert r.verdict.verdict == "INCONCLUSIVE"
    assert r.verdict.repeats_needed is not None and r.verdict.repeats_needed > 0
    assert "more repeats" in r.verdict.message


def test_rare_noise_is_not_flagged() -> None:
    one = [["missing_final_answer"], [], [], [], []]
    r = _decide({"a": CLEAN, "b": CLEAN}, {"a": one, "b": CLEAN})
    assert r.verdict.verdict == "NO CHANGE"
    assert r.comparisons[0].new_failure_kinds == ["missing_final_answer"]
    assert r.verdict.candidate_only_kinds == ["missing_final_answer"]
    assert "only in the candidate" in r.verdict.message
    # the baseline shows the kind in another scenario: new in "a", but not "only in the
    # candidate" in the message
    elsewhere = _decide({"a": one, "b": CLEAN}, {"a": CLEAN, "b": one})
    new_in = {c.scenario_id: c.new_failure_kinds for c in elsewhere.comparisons}
    assert new_in["b"] == ["missing_final_answer"] and new_in["a"] == []
    assert "only in the candidate" not in elsewhere.verdict.message
    assert elsewhere.verdict.candidate_only_kinds == []


def test_first_divergence_and_one_sided_summary() -> None:
    drift = {"values": "[0.5, 0.25, 0.25]", "base": 2}
    base = make_record([[GOOD], "1.5 bits"])
    cand = make_record([[drift], [GOOD], "1.5 bits"])
    base.target.side, base.target.label = "baseline", "unfused"
    base.run_key = "baseline/entropy_array/0/nostream"
    d = first_divergence(base, cand)
    assert d is not None and d.turn == 0
    assert d.baseline == ['entropy {"values": [0.5, 0.25, 0.25], "base": 2}']
    assert d.candidate == ['entropy {"values": "[0.5, 0.25, 0.25]", "base": 2}']
    assert first_divergence(base, base) is None
    s, _ = summarize([base, cand], run_id="x")
    assert s.kind == "compare" and s.comparisons[0].first_divergence == d
    one, _ = summarize([cand], run_id="y")
    assert one.kind == "run" and one.verdict is None and one.comparisons == []
    assert one.outcome is not None and one.outcome.failing == ["entropy_array"]
    assert one.aggregate("candidate", "entropy_array") is not None


def test_one_sided_outcome_names_the_side_of_each_failing_scenario() -> None:
    """Several sides judged at once (the matrix's deployments): a scenario failing on two
    of them is named twice, each time with its side; ``failing`` lists it once."""
    aggs = [
        aggregate(label, label, "s", _scores(label, "s", failures))
        for label, failures in (("fused", [["collapse"]] * 2), ("loop", [["repeat_loop"]] * 2),
                                ("ok", CLEAN))
    ]  # fmt: skip
    sides = [SideInfo(side=a.side, label=a.label, runs=a.runs) for a in aggs]
    out = judge_run(aggs, sides, min_pass_rate=0.8)
    assert not out.passed and out.failing == ["s"] and out.min_pass_rate == 0.8
    assert out.message == (
        "1 scenario below pass rate 0.8: s on fused (0/2 passed), s on loop (0/2 passed)"
    )
    alone = judge_run(aggs[:1], sides[:1], min_pass_rate=0.8)
    assert alone.message == "1 scenario below pass rate 0.8: s (0/2 passed)"
    assert judge_run(aggs, sides, min_pass_rate=0.0).passed


def test_a_loop_sharing_the_significant_kinds_runs_is_named() -> None:
    # the candidate loops and never answers (missing_final_answer + repeat_loop
    # in the same runs); the baseline's noise loops answer (repeat_loop alone), so the
    # loop's own test is not significant: the headline still names the loop
    loops = [["missing_final_answer", "repeat_loop"]] * 4 + [[]] * 6
    noise = [["repeat_loop"]] * 3 + [[]] * 7
    r = _decide({s: noise for s in "abcd"}, {s: loops for s in "abcd"})
    assert r.verdict.verdict == "REGRESSION"
    assert "repeat_loop" not in r.verdict.regressed_kinds
    assert r.verdict.message.startswith(
        "REGRESSION: missing_final_answer with repeat_loop (16 of its 16 candidate runs; "
        "not significant alone)"
    )
    # a kind in fewer than half the significant kind's runs is not named beside it
    rare = [["missing_final_answer", "repeat_loop"]] + [["missing_final_answer"]] * 4 + [[]] * 5
    r = _decide({s: noise for s in "abcd"}, {s: rare for s in "abcd"})
    assert r.verdict.verdict == "REGRESSION"
    assert "repeat_loop" not in r.verdict.message.split(";")[0].split("(")[0]


def test_an_early_stop_states_the_power_of_the_rule_as_it_ran() -> None:
    # after round 1 of 4 (5 runs a scenario) a scenario failing every candidate
    # run is not significant at the runs spent, but the rounds left would have run
    from harness.stats.permutation import min_detectable_rate
    from harness.stats.sequential import Look

    b = {s: _scores("baseline", s, CLEAN) for s in "ab"}
    c = {s: _scores("candidate", s, CLEAN) for s in "ab"}
    b_aggs = {s: aggregate("baseline", "b", s, v, []) for s, v in b.items()}
    c_aggs = {s: aggregate("candidate", "c", s, v, []) for s, v in c.items()}
    b_aggs["*"] = aggregate("baseline", "b", "*", [*b["a"], *b["b"]], [])
    c_aggs["*"] = aggregate("candidate", "c", "*", [*c["a"], *c["b"]], [])
    look = Look(1, 4, 0.01)
    r = decide(b_aggs, c_aggs, alpha=look.level, look=look)
    power = r.verdict.power or ""
    assert r.verdict.verdict == "NO CHANGE"
    assert "3 rounds left would have run" in power
    # at the last look: 20 runs a scenario and side, critical p scaled by 7/1 (the levels)
    crit = float(power.split("critical p taken as ")[1].split(")")[0])
    q = min_detectable_rate(40, 40, crit)
    assert q is not None and f">= {q:.1%}" in power.split("; the runs spent alone")[0]
    assert "one scenario failing every candidate run would have been detected" in power
    assert power.split("the runs spent alone: ")[1].startswith(
        "no new failure kind could have been detected; one scenario failing every "
        "candidate run would not have been detected"
    )


def test_a_numerics_regression_is_an_input_of_the_decision() -> None:
    """Rule 7: the numerics verdict decides with the behaviour, in one call of ``decide``."""
    from harness.stats.verdict import NumericsFinding

    b = {s: _scores("baseline", s, CLEAN) for s in ("a", "b")}
    c = {s: _scores("candidate", s, CLEAN) for s in ("a", "b")}
    b_aggs = {s: aggregate("baseline", "b", s, v, []) for s, v in b.items()}
    c_aggs = {s: aggregate("candidate", "c", s, v, []) for s, v in c.items()}
    kl = NumericsFinding("REGRESSION", "REGRESSION: KL 0.031 vs A/A 0 (p=0.00098)")
    plain = decide(b_aggs, c_aggs)
    folded = decide(b_aggs, c_aggs, numerics=[kl])
    assert plain.verdict.verdict == "NO CHANGE"
    assert folded.verdict.verdict == "REGRESSION"
    assert folded.verdict.message == (
        f"REGRESSION: numerics (prefill): {kl.message}; behaviour: {plain.verdict.message}"
    )
    assert folded.verdict.reasons[0] == f"numerics (prefill): {kl.message}"
    assert folded.verdict.behaviour == "NO CHANGE"  # what the stopping rule reads
    assert folded.comparisons == plain.comparisons  # the behavioural evidence unchanged
    calm = decide(b_aggs, c_aggs, numerics=[NumericsFinding("NO CHANGE", "NO CHANGE: KL 0")])
    assert calm.verdict == plain.verdict
    # a behavioural REGRESSION keeps its own message
    loop = [["repeat_loop"]] * 5
    lb = {s: aggregate("baseline", "b", s, _scores("baseline", s, CLEAN), ["repeat_loop"])
          for s in ("a",)}  # fmt: skip
    lc = {s: aggregate("candidate", "c", s, _scores("candidate", s, loop), ["repeat_loop"])
          for s in ("a",)}  # fmt: skip
    both = decide(lb, lc, numerics=[kl])
    assert both.verdict.verdict == "REGRESSION"
    assert "numerics" not in both.verdict.message


def _clean_aggregates() -> tuple[dict[str, Aggregate], dict[str, Aggregate]]:
    b = {s: _scores("baseline", s, CLEAN) for s in ("a", "b")}
    c = {s: _scores("candidate", s, CLEAN) for s in ("a", "b")}
    return (
        {s: aggregate("baseline", "b", s, v, []) for s, v in b.items()},
        {s: aggregate("candidate", "c", s, v, []) for s, v in c.items()},
    )


def test_a_decode_path_regression_decides_beside_a_calm_prefill() -> None:
    """Rule 7 over every path: a decode-only fault (prefill NO CHANGE, decode REGRESSION)
    is a REGRESSION whose message names the decode path; so is routed experts alone."""
    from harness.stats.verdict import NumericsFinding

    b_aggs, c_aggs = _clean_aggregates()
    prefill = NumericsFinding("NO CHANGE", "NO CHANGE: KL 1e-05 vs A/A 1e-05", "prefill")
    decode = NumericsFinding("REGRESSION", "REGRESSION: paths part early", "decode")
    experts = NumericsFinding("REGRESSION", "REGRESSION: layer 3 parts", "routed experts")
    v = decide(b_aggs, c_aggs, numerics=[prefill, decode]).verdict
    assert v.verdict == "REGRESSION"
    assert v.message.startswith("REGRESSION: numerics (decode): REGRESSION: paths part early;")
    assert "prefill" not in v.message and v.behaviour == "NO CHANGE"
    both = decide(b_aggs, c_aggs, numerics=[prefill, decode, experts]).verdict
    assert both.reasons[:2] == [decode.line(), experts.line()]
    only = decide(b_aggs, c_aggs, numerics=[prefill, experts]).verdict
    assert only.verdict == "REGRESSION" and "numerics (routed experts)" in only.message


def test_an_inconclusive_path_is_not_hidden_by_no_change_elsewhere() -> None:
    """Behaviour NO CHANGE and prefill NO CHANGE, decode INCONCLUSIVE: INCONCLUSIVE,
    naming the decode path; a REGRESSION on another path still wins."""
    from harness.stats.verdict import NumericsFinding

    b_aggs, c_aggs = _clean_aggregates()
    prefill = NumericsFinding("NO CHANGE", "NO CHANGE: KL 0", "prefill")
    unsure = NumericsFinding("INCONCLUSIVE", "INCONCLUSIVE: 4 sequences", "decode")
    v = decide(b_aggs, c_aggs, numerics=[prefill, unsure]).verdict
    assert v.verdict == "INCONCLUSIVE"
    assert v.message.startswith("INCONCLUSIVE: numerics (decode): INCONCLUSIVE: 4 sequences;")
    assert v.behaviour == "NO CHANGE"
    bad = NumericsFinding("REGRESSION", "REGRESSION: KL 0.08", "prefill")
    assert decide(b_aggs, c_aggs, numerics=[bad, unsure]).verdict.verdict == "REGRESSION"
    # behaviour already INCONCLUSIVE (one run a side): the unsettled path is named beside
    b1 = {"a": aggregate("baseline", "b", "a", _scores("baseline", "a", CLEAN[:1]), [])}
    c1 = {"a": aggregate("candidate", "c", "a", _scores("candidate", "a", CLEAN[:1]), [])}
    few = decide(b1, c1).verdict
    both = decide(b1, c1, numerics=[prefill, unsure]).verdict
    assert few.verdict == both.verdict == "INCONCLUSIVE" and both.message == few.message
    assert both.reasons[0] == unsure.line()
