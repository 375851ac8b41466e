"""The exact stratified test, Westfall-Young and the power figures against known values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.stats.aggregate import aggregate
from harness.stats.family import run_family
from harness.stats.permutation import (
    Stratum,
    min_detectable_rate,
    one_scenario_p,
    permuted_counts,
    stratified_null,
    stratified_p,
    tail_table,
    westfall_young,
)
from harness.stats.tests import fisher_one_sided, mannwhitney_one_sided
from harness.stats.verdict import decide
from tests.compare.test_compare_verdict import _scores

#: R's ``Rabbits`` example of ?mantelhaen.test (penicillin, Mantel & Haenszel 1959): the
#: 2 x 2 tables of the five strata, rows (cured, died) x columns (penicillin timing)
RABBITS = [[[0, 6], [0, 5]], [[3, 3], [0, 6]], [[6, 0], [2, 4]], [[5, 1], [6, 0]], [[2, 0], [5, 0]]]


def _margins(tables: list[list[list[int]]]) -> list[tuple[int, int, int]]:
    """(runs, events in column 1, runs in row 1) of each stratum."""
    return [(sum(map(sum, t)), t[0][0] + t[1][0], t[0][0] + t[0][1]) for t in tables]


def test_exact_stratified_matches_r_mantelhaen_exact() -> None:
    # R: mantelhaen.test(Rabbits, exact = TRUE) -> S = 16, p-value = 0.03994
    strata = _margins(RABBITS)
    s = sum(t[0][0] for t in RABBITS)
    assert s == 16
    assert stratified_p(s, strata, "two-sided") == pytest.approx(0.03994, abs=5e-6)


def test_exact_stratified_one_sided_by_enumeration() -> None:
    strata = _margins(RABBITS)
    # brute force: every combination of per-stratum [1,1] cells, weighted by hypergeometric
    supports = [range(max(0, e + n - r), min(e, n) + 1) for r, e, n in strata]
    total = 0.0
    for cells in itertools.product(*supports):
        if sum(cells) >= 16:
            total += math.prod(
                sps.hypergeom.pmf(x, r, e, n) for x, (r, e, n) in zip(cells, strata, strict=True)
            )
    assert stratified_p(16, strata, "greater") == pytest.approx(total, rel=1e-9)
    assert stratified_null(strata).sum() == pytest.approx(1.0)


@pytest.mark.parametrize(("k_c", "n_c", "k_b", "n_b"), [(5, 5, 0, 5), (2, 5, 0, 5), (3, 20, 1, 20)])
def test_one_stratum_is_fisher(k_c: int, n_c: int, k_b: int, n_b: int) -> None:
    worse, better = tail_table(n_c + n_b, k_c + k_b, n_c)
    assert worse[k_c] == pytest.approx(fisher_one_sided(k_c, n_c, k_b, n_b, "greater"))
    assert better[k_c] == pytest.approx(fisher_one_sided(k_c, n_c, k_b, n_b, "less"))
    assert stratified_p(k_c, [(n_c + n_b, k_c + k_b, n_c)]) == pytest.approx(worse[k_c])


def test_permuted_counts_are_hypergeometric_and_seeded() -> None:
    events = np.zeros((10, 1), dtype=np.int8)
    events[:4] = 1
    s = Stratum(events, 5)
    a = permuted_counts([s], 20_000, seed=3)[0][:, 0]
    assert np.array_equal(a, permuted_counts([s], 20_000, seed=3)[0][:, 0])
    freq = np.bincount(a, minlength=5) / a.size
    assert freq == pytest.approx(sps.hypergeom.pmf(range(5), 10, 4, 5), abs=0.01)


def _exact_step_down(p: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """Step-down min-p over an exhaustive list of equally likely relabellings."""
    order = np.argsort(p)
    out = np.empty(len(p))
    running = 0.0
    for j, i in enumerate(order):
        mins = perms[:, order[j:]].min(axis=1)
        running = max(running, float(np.mean(mins <= p[i] * (1 + 1e-9))))
        out[i] = running
    return out


def test_westfall_young_matches_exhaustive_enumeration() -> None:
    # two strata of 3 + 3 runs and two outcomes; every relabelling enumerated exactly
    x1 = np.array([[1, 1], [1, 0], [1, 1], [0, 0], [0, 0], [0, 1]], dtype=np.int8)
    x2 = np.array([[1, 0], [1, 1], [0, 0], [0, 0], [0, 0], [0, 0]], dtype=np.int8)
    tables = [[tail_table(6, int(x[:, j].sum()), 3)[0] for j in range(2)] for x in (x1, x2)]
    subsets = [list(c) for c in itertools.combinations(range(6), 3)]
    # joint relabelling of both strata: all 20 x 20 combinations
    rows = []
    for c1 in subsets:
        for c2 in subsets:
            rows.append(
                [tables[0][j][int(x1[c1, j].sum())] for j in range(2)]
                + [tables[1][j][int(x2[c2, j].sum())] for j in range(2)]
            )
    perms = np.array(rows)
    observed = np.array(
        [tables[0][j][int(x1[:3, j].sum())] for j in range(2)]
        + [tables[1][j][int(x2[:3, j].sum())] for j in range(2)]
    )
    exact = _exact_step_down(observed, perms)
    counts = permuted_counts([Stratum(x1, 3), Stratum(x2, 3)], 40_000, seed=1)
    mc = np.column_stack(
        [tables[0][j][counts[0][:, j]] for j in range(2)]
        + [tables[1][j][counts[1][:, j]] for j in range(2)]
    )
    adjusted = westfall_young(observed, mc)
    assert adjusted == pytest.approx(exact, abs=0.01)
    assert np.all(adjusted >= observed - 1e-12)


def test_westfall_young_uses_dependence() -> None:
    # the same test three times costs nothing: adjusted = the single test's permutation p
    one = np.array([0.004])
    perm = np.random.default_rng(0).uniform(size=(50_000, 1))
    single = westfall_young(one, perm)[0]
    tripled = westfall_young(np.repeat(one, 3), np.repeat(perm, 3, axis=1))
    assert single == pytest.approx(0.004, abs=0.001)
    assert tripled == pytest.approx([single] * 3)
    # independent uniform tests: Sidak's 1 - (1 - p)^m
    indep = np.random.default_rng(1).uniform(size=(50_000, 3))
    got = westfall_young(np.array([0.01, 0.5, 0.9]), indep)[0]
    assert got == pytest.approx(1 - 0.99**3, abs=0.003)


def test_min_detectable_rate_is_the_binomial_power_point() -> None:
    q = min_detectable_rate(85, 85, 0.002)
    assert q is not None
    t = math.floor(math.log(0.002) / math.log(0.5)) + 1  # 9 events
    assert float(sps.binom.sf(t - 1, 85, q)) == pytest.approx(0.8, abs=1e-9)
    assert min_detectable_rate(5, 5, 0.002) is None  # 5 events cannot reach it
    assert one_scenario_p(5, 5) == pytest.approx(1 / 252)


def test_greedy_collapse_tests_across_scenarios_as_a_sign_test() -> None:
    # 8 greedy scenarios, each failing every candidate repeat and no baseline repeat
    ids = [f"s{i}" for i in range(8)]
    cand = {
        s: aggregate("candidate", "c", s, _scores("candidate", s, [["collapse"]] * 5), ["collapse"])
        for s in ids
    }
    base = {
        s: aggregate("baseline", "b", s, _scores("baseline", s, [[]] * 5), ["collapse"])
        for s in ids
    }
    metrics = {s: ["passed", "collapse"] for s in [*ids, "*"]}
    fam = run_family(base, cand, metrics, alpha=0.01, permutations=2000, greedy=ids)
    pooled = next(t for t in fam.tests if t.scenario == "*" and t.metric == "collapse")
    sign = sps.binomtest(8, 8, 0.5, alternative="greater").pvalue
    assert (pooled.k_c, pooled.n_c, pooled.k_b, pooled.n_b) == (8, 8, 0, 8)
    assert pooled.p_worse == pytest.approx(sign)
    alone = next(t for t in fam.tests if t.scenario == "s0" and t.metric == "collapse")
    assert alone.p_worse == pytest.approx(0.5)  # one unit per side: no evidence alone
    assert fam.collapsed == ids


def test_lost_runs_do_not_unbalance_strata() -> None:
    # scenario a fails every run on both sides, b passes every run; the candidate lost 16
    # of b's 20 runs to infrastructure errors. Pooled Fisher sees 20/24 against 20/40
    # failing; the stratified test sees no difference in any scenario.
    def side(name: str, b_runs: int) -> dict[str, object]:
        a = _scores(name, "a", [["repeat_loop"]] * 20)
        b = _scores(name, "b", [[]] * b_runs)
        return {
            "a": aggregate(name, name, "a", a, ["repeat_loop"]),
            "b": aggregate(name, name, "b", b, ["repeat_loop"]),
            "*": aggregate(name, name, "*", a + b, ["repeat_loop"]),
        }

    base, cand = side("baseline", 20), side("candidate", 4)
    assert fisher_one_sided(20, 24, 20, 40) < 0.01  # alpha: the old pooled test's REGRESSION
    r = decide(base, cand)  # type: ignore[arg-type]
    assert r.verdict.verdict == "NO CHANGE"
    pooled = next(x for x in r.comparisons[-1].rows if x.metric == "passed")
    assert pooled.p_value == pytest.approx(1.0)


def _sides(base: dict[str, list[list[str]]], cand: dict[str, list[list[str]]]):  # type: ignore[no-untyped-def]
    kinds = sorted({k for d in (base, cand) for fs in d.values() for f in fs for k in f})
    out = []
    for name, data in (("baseline", base), ("candidate", cand)):
        scores = {s: _scores(name, s, f) for s, f in data.items()}
        aggs = {s: aggregate(name, name, s, v, kinds) for s, v in scores.items()}
        aggs["*"] = aggregate(name, name, "*", [x for v in scores.values() for x in v], kinds)
        out.append(aggs)
    return out


def test_mixed_result_is_a_regression_naming_the_improvement() -> None:
    clean, loop = [[]] * 8, [["repeat_loop"]] * 8
    drift = [["value_mismatch"]] * 8
    base, cand = _sides({"a": clean, "b": drift}, {"a": loop, "b": clean})
    v = decide(base, cand).verdict
    assert v.verdict == "REGRESSION"
    assert v.regressed_kinds == ["repeat_loop"] and v.improved_kinds == ["value_mismatch"]
    assert "repeat_loop (in a); but better: value_mismatch (in b)" in v.message


def test_no_change_states_what_it_would_have_detected() -> None:
    ids = [f"s{i}" for i in range(17)]
    base, cand = _sides({s: [[]] * 5 for s in ids}, {s: [[]] * 5 for s in ids})
    v = decide(base, cand).verdict
    assert v.verdict == "NO CHANGE" and v.power is not None
    q = min_detectable_rate(85, 85, 0.01)  # nothing varies: the critical p is alpha itself
    assert q is not None and f"a new failure kind in >= {q:.1%} of candidate runs" in v.power
    assert "one scenario failing every candidate run would have been detected" in v.power
    assert "10000 permutations" in v.power


def _both(side: str, scenario: str, failures: list[list[str]]) -> list:  # type: ignore[type-arg]
    """``failures`` per repeat, each repeat run twice (streamed and not) with one outcome,
    as ``--stream both`` gives on a server that honours the request seed."""
    runs = _scores(side, scenario, failures)
    twins = [r.model_copy(update={"stream": True, "run_key": r.run_key + "-s"}) for r in runs]
    return [*runs, *twins]


def test_stream_both_counts_a_repeat_once() -> None:
    # 3 of 4 candidate draws fail, 0 of 4 baseline draws, each run streamed and not: the
    # test is Fisher's on 3/4 against 0/4 (p 0.071), not on 6/8 against 0/8 (p 0.0035)
    kinds = ["missing_calls"]
    cand = aggregate("candidate", "c", "s", _both("candidate", "s", [kinds] * 3 + [[]]), kinds)
    base = aggregate("baseline", "b", "s", _both("baseline", "s", [[]] * 4), kinds)
    assert cand.scored == 8 and cand.unit_count() == 4
    assert cand.units == {"final_answer,missing_calls": 3, "final_answer,passed": 1}
    assert cand.rate("missing_calls").k == 6  # the rates still count runs
    metrics = {"s": ["passed", "missing_calls"], "*": ["passed", "missing_calls"]}
    fam = run_family({"s": base, "*": base}, {"s": cand, "*": cand}, metrics,
                     alpha=0.01, permutations=2000)  # fmt: skip
    t = next(t for t in fam.tests if t.scenario == "s" and t.metric == "missing_calls")
    assert (t.k_c, t.n_c, t.k_b, t.n_b) == (3, 4, 0, 4)
    assert t.p_worse == pytest.approx(fisher_one_sided(3, 4, 0, 4)) == pytest.approx(1 / 14)
    assert fisher_one_sided(6, 8, 0, 8) < 0.01  # what counting each run as a unit said
    assert set(cand.pass_hat_k) == {"1", "4"}  # pass^k over the 4 repeats, not 8 runs
    # the table and the reasons show what the test counted: repeats
    row = next(r for r in _scenario_rows(base, cand) if r.metric == "missing_calls")
    assert (row.baseline, row.candidate) == (0.0, 0.75)


def _scenario_rows(base, cand):  # type: ignore[no-untyped-def]
    d = decide({"s": base, "*": base}, {"s": cand, "*": cand})
    return next(c for c in d.comparisons if c.scenario_id == "s").rows


def test_a_repeat_takes_its_non_streamed_outcomes_and_its_streamed_stream_only_kinds() -> None:
    # repeat 0: the streamed run drifts, misses its answer and loses its last delta; the
    # non-streamed run passes. The unit is the non-streamed run's outcomes plus the
    # streamed run's stream-only kind (stream_truncated_args), not its drift
    runs = _scores("candidate", "s", [[], []])
    bad = runs[0].model_copy(update={
        "stream": True, "run_key": "s0-s", "passed": False, "final_answer": False,
        "failures": ["stream_truncated_args", "value_mismatch"]})  # fmt: skip
    agg = aggregate("candidate", "c", "s", [*runs, bad])
    assert agg.units == {"final_answer,passed": 1, "final_answer,passed,stream_truncated_args": 1}
    assert agg.unit_count() == 2 and agg.scored == 3
    # only the streamed run of a repeat scored (the other an infrastructure error): its own
    twin = runs[0].model_copy(update={"stream": True, "run_key": "s0-s"})
    alone = aggregate("candidate", "c", "s", [runs[0], twin, bad.model_copy(update={"repeat": 1})])
    assert alone.units == {"final_answer,passed": 1, "stream_truncated_args,value_mismatch": 1}
    one_each = aggregate("candidate", "c", "s", runs)
    assert one_each.units == {} and one_each.unit_count() == 2  # one run a repeat: runs


def test_stream_both_counts_tool_calls_over_repeats_too() -> None:
    # 6 repeats a side, each run streamed and not: the candidate's repeats made 3 calls, the
    # baseline's 1. The Mann-Whitney row tests 6 values a side (each repeat's non-streamed
    # run), not 12: doubling every value would shrink its p
    def runs(side: str, calls: int) -> list:  # type: ignore[type-arg]
        return [r.model_copy(update={"tool_calls": calls}) for r in _both(side, "s", [[]] * 6)]

    cand = aggregate("candidate", "c", "s", runs("candidate", 3))
    base = aggregate("baseline", "b", "s", runs("baseline", 1))
    assert cand.counts["tool_calls"].n == 12 and cand.unit_counts["tool_calls"].n == 6
    assert cand.unit_counts["tool_calls"].total == 18
    row = next(r for r in _scenario_rows(base, cand) if r.metric == "tool_calls")
    assert row.p_value == pytest.approx(mannwhitney_one_sided([3] * 6, [1] * 6, "greater"))
    assert row.p_value > mannwhitney_one_sided([3] * 12, [1] * 12, "greater")
    # the streamed run alone scored: its value; one run a repeat: no unit counts
    twin = runs("candidate", 3)[6].model_copy(update={"tool_calls": 5, "repeat": 9})
    alone = aggregate("candidate", "c", "s", [*runs("candidate", 3), twin])
    assert alone.unit_counts["tool_calls"].total == 18 + 5
    assert aggregate("candidate", "c", "s", runs("candidate", 3)[:6]).unit_counts == {}


def test_a_side_whose_twin_runs_differ_is_not_judged_worse_for_it() -> None:
    # The same per-run failure rate on both sides (a draw fails with p 0.3); the baseline
    # gives a repeat's two runs the same draw, the candidate two independent draws (a
    # server whose streamed sample is not its non-streamed one). Failing a repeat when
    # either run fails would read that as a regression (2p - p^2 against p); one
    # designated run per outcome keeps the test's size.
    rng = np.random.default_rng(11)
    kinds = ["value_mismatch"]
    metrics = {"s": ["passed", "value_mismatch"], "*": ["passed", "value_mismatch"]}
    worse = 0
    for _ in range(300):
        b = [kinds if x else [] for x in rng.random(12) < 0.3]
        twins = [[kinds if x else [] for x in row] for row in rng.random((2, 12)) < 0.3]
        base = _both("baseline", "s", b)
        cand = _scores("candidate", "s", twins[0]) + [
            r.model_copy(update={"stream": True, "run_key": r.run_key + "-s"})
            for r in _scores("candidate", "s", twins[1])
        ]
        ba, ca = (
            aggregate(n, n, "s", x, kinds) for n, x in (("baseline", base), ("candidate", cand))
        )
        fam = run_family({"s": ba, "*": ba}, {"s": ca, "*": ca}, metrics,
                         alpha=0.05, permutations=200)  # fmt: skip
        t = next(t for t in fam.tests if t.scenario == "s" and t.metric == "value_mismatch")
        worse += t.p_worse <= 0.05
    assert worse / 300 <= 0.05


def test_stream_both_aa_false_alarms_at_most_alpha_with_repeats_as_units() -> None:
    # 400 A/A tables of 8 draws a side, each draw a run twice: a draw fails with p 0.5.
    # With repeats as units the one-sided Fisher test keeps its size (<= alpha 0.05 here);
    # counting each run as a unit, it rejects about twice as often as alpha
    rng = np.random.default_rng(7)
    kinds = ["missing_calls"]
    metrics = {"s": ["missing_calls"], "*": ["missing_calls"]}
    as_units = as_runs = 0
    for _ in range(400):
        draws = rng.random((2, 8)) < 0.5
        c, b = ([kinds if x else [] for x in row] for row in draws)
        ca = aggregate("candidate", "c", "s", _both("candidate", "s", c), kinds)
        ba = aggregate("baseline", "b", "s", _both("baseline", "s", b), kinds)
        fam = run_family({"s": ba, "*": ba}, {"s": ca, "*": ca}, metrics,
                         alpha=0.05, permutations=200)  # fmt: skip
        t = next(t for t in fam.tests if t.scenario == "s")
        as_units += t.p_worse <= 0.05
        as_runs += fisher_one_sided(2 * t.k_c, 16, 2 * t.k_b, 16) <= 0.05
    assert as_units / 400 <= 0.05
    assert as_runs / 400 > 1.5 * 0.05


def test_the_streamed_family_adjusts_as_the_matrix_does() -> None:
    """permuted_columns keeps the draws of permuted_counts, westfall_young_columns the
    adjusted p-values of westfall_young: scoring's memory no longer grows with every
    event of every scenario, its numbers are unchanged."""
    from harness.stats.permutation import permuted_columns, westfall_young_columns

    rng = np.random.default_rng(1)
    strata = [Stratum(rng.integers(0, 2, size=(10, 4)).astype(np.int8), 5) for _ in range(30)] + [
        Stratum(np.ones((6, 4), dtype=np.int8), 3)
    ]  # one without a draw
    full = permuted_counts(strata, 500, seed=7)
    keep = [[1, 3]] * len(strata)
    cols, pooled = permuted_columns(strata, 500, 7, keep, [0, 2])
    for f, c in zip(full, cols, strict=True):
        assert np.array_equal(f[:, [1, 3]], c)
    assert np.array_equal(np.sum(full, axis=0)[:, [0, 2]], pooled)
    observed = rng.random(40)
    permuted = rng.random((500, 40))
    adjusted, low = westfall_young_columns(observed, lambda i: permuted[:, i], 500)
    assert np.array_equal(adjusted, westfall_young(observed, permuted))
    assert np.array_equal(low, permuted.min(axis=1))
