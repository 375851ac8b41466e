"""The plugin's pass/fail rule and evidence text, on small hand-made scores (no server)."""

from __future__ import annotations

from typing import Any

from harness.kinds import VerdictName
from harness.present.evidence import format_run, run_line
from harness.present.views import drift_trace
from harness.pytest_plugin.judge import judge
from harness.pytest_plugin.options import HarnessSettings
from harness.scenario.model import scenario_from_data
from harness.scoring.models import CallScore, DriftFinding, RunScore
from harness.summary import MetricRow, ScenarioComparison, Summary, Verdict
from harness.transcript import InfraError

SCENARIO = scenario_from_data(
    {
        "id": "entropy_array",
        "description": "d",
        "messages": [{"role": "user", "content": "entropy?"}],
        "tools": [{"name": "entropy", "parameters": {"type": "object", "properties": {}}}],
        "expect": {"calls": [{"tool": "entropy", "arguments": {"values": [0.5, 0.25, 0.25]}}]},
    }
)

#: the reference trace of the fused kernel: a string, then zeros, then empty strings
TRACE = [
    ('{"values": "[0.5, 0.25, 0.25]", "base": 2}', "array sent as a string"),
    ('{"values": [0, 0, 0], "base": 2}', "values collapsed to zeros"),
    ('{"values": ["", "", ""], "base": 2}', "values collapsed to empty strings"),
    ('{"values": ["", "", ""], "base": 2}', "values collapsed to empty strings"),
]


def score(repeat: int = 0, *, side: str = "target", **kw: Any) -> RunScore:
    base: dict[str, Any] = dict(
        run_key=f"{side}/entropy_array/{repeat}/nostream", scenario_id="entropy_array",
        side=side, label=side, repeat=repeat, termination="final_answer", turns=2,
        tool_calls=1, final_answer=True, final_answer_ok=True, passed=True,
    )  # fmt: skip
    return RunScore(**{**base, **kw})


def looping(repeat: int = 0, side: str = "target") -> RunScore:
    calls = [
        CallScore(
            turn=t, call_index=t, tool="entropy", arguments=args, repeat_of=2 if t == 3 else None
        )
        for t, (args, _) in enumerate(TRACE)
    ]
    drift = [
        DriftFinding(
            kind="collapse",
            phrase=phrase,
            tool="entropy",
            path="values",
            turn=t,
            call_index=t,
            value="",
        )
        for t, (_, phrase) in enumerate(TRACE)
    ]
    return score(
        repeat, side=side, termination="turn_cap", turns=12, tool_calls=4, repeated_calls=1,
        longest_repeat_streak=1, final_answer=False, final_answer_ok=False, passed=False,
        failures=["collapse", "repeat_loop"], calls=calls, drift=drift,
    )  # fmt: skip


def infra(repeat: int = 0) -> RunScore:
    err = InfraError(kind="http_status", status=500, message="HTTP 500: boom")
    return score(repeat, termination="error", infra_error=err, passed=False, final_answer_ok=False)


def test_drift_trace_reads_like_the_reviewers_trace_and_folds_repeats() -> None:
    assert [t.text() for t in drift_trace(looping())] == [
        'turn 0 entropy {"values": "[0.5, 0.25, 0.25]", "base": 2}  <- values: array sent as a string',
        'turn 1 entropy {"values": [0, 0, 0], "base": 2}  <- values: values collapsed to zeros',
        'turn 2 entropy {"values": ["", "", ""], "base": 2}  <- values: values collapsed to empty strings',
        "turn 3: the same call again (repeated identical calls)",
    ]


def test_format_run_shows_stop_reason_repeats_and_calls() -> None:
    text = "\n".join(format_run(looping()))
    assert "stop reason: turn_cap after 12 turns" in text
    assert "turn 3: the same call again (repeated identical calls)" in text
    assert "repeated identical calls: 1 (longest streak 1, scenario allows 0)" in text


def test_all_good_runs_pass() -> None:
    j = judge(SCENARIO, [score(0), score(1)], HarnessSettings(target="t"))
    assert j.outcome == "passed" and not j.reasons
    assert ("final_answers", 2) in j.properties


def test_thresholds_fail_with_one_reason_each() -> None:
    j = judge(SCENARIO, [score(0), looping(1)], HarnessSettings(target="t"))
    assert j.outcome == "failed"
    assert j.reasons[0].startswith("acceptable final answer in 1/2 runs")
    assert j.reasons[1].startswith("repeated identical tool calls in 1/2 runs")
    assert j.reasons[2].startswith("passed 1/2 runs")
    assert "first failed run (target run 1)" in j.evidence


def test_relaxed_thresholds_pass_the_same_runs() -> None:
    relaxed = HarnessSettings(
        target="t", min_final_answer_rate=0.5, min_pass_rate=0.5, max_repeated_calls=1
    )
    assert judge(SCENARIO, [score(0), looping(1)], relaxed).outcome == "passed"


def test_allowed_repeats_of_the_scenario_are_not_counted() -> None:
    run = score(0, repeated_calls=2, allowed_repeats=2)
    assert judge(SCENARIO, [run], HarnessSettings(target="t")).outcome == "passed"


def test_infrastructure_errors_are_left_out_up_to_the_limit() -> None:
    settings = HarnessSettings(target="t", max_infra_error_rate=0.5)
    j = judge(SCENARIO, [score(0), infra(1)], settings)
    assert j.outcome == "passed"  # one of two errored: judged on the other
    j = judge(SCENARIO, [infra(0), infra(1), score(2)], settings)
    assert j.outcome == "infra"
    assert "2 of 3 runs failed for server/network reasons" in j.reasons[0]
    assert "http_status" in j.reasons[0] and "infrastructure error" in run_line(infra())


def test_a_baseline_side_with_only_errors_is_an_infrastructure_error() -> None:
    settings = HarnessSettings(target="t", baseline="b")
    base_err = infra(0).model_copy(update={"side": "baseline", "run_key": "baseline/x/0/nostream"})
    cand = score(0, side="candidate")
    j = judge(SCENARIO, [cand, base_err], settings)
    assert j.outcome == "infra" and j.reasons[0].startswith("baseline:")


# ---------------------------------------------------------------- with a baseline


def _row(metric: str, *, worse: bool | None, significant: bool = False) -> MetricRow:
    return MetricRow(
        metric=metric, kind="rate", baseline=0.0, candidate=0.5, effect=0.5, worse=worse,
        p_value=0.001 if significant else 0.3, p_adjusted=0.001 if significant else 0.6,
        test="Fisher exact, one-sided (worse)", significant=significant, decisive=True,
    )  # fmt: skip


def _summary(
    verdict: VerdictName, mine: list[MetricRow], pooled: list[MetricRow] | None
) -> Summary:
    """A comparison of ``entropy_array`` (rows ``mine``) and another scenario, pooled
    rows ``pooled`` (None: one scenario, no pool)."""
    comps = [
        ScenarioComparison(scenario_id="entropy_array", rows=mine, verdict="INCONCLUSIVE"),
        ScenarioComparison(scenario_id="other", rows=[], verdict="NO CHANGE"),
    ]
    if pooled is not None:
        comps.append(ScenarioComparison(scenario_id="*", rows=pooled, verdict="REGRESSION"))
    return Summary(run_id="r", comparisons=comps, verdict=Verdict(verdict=verdict, message=verdict))


def _both(*runs: RunScore) -> list[RunScore]:
    base = [
        score(i, side="baseline").model_copy(
            update={"run_key": f"baseline/entropy_array/{i}/nostream"}
        )
        for i in range(2)
    ]
    return [*[r.model_copy(update={"side": "candidate"}) for r in runs], *base]


BASE = HarnessSettings(target="t", baseline="b")


def test_with_a_baseline_a_scenario_significantly_worse_fails() -> None:
    own = _summary("REGRESSION", [_row("passed", worse=True, significant=True)], None)
    j = judge(SCENARIO, _both(looping(0), looping(1)), BASE, summary=own)
    assert j.outcome == "failed"
    assert j.reasons == [
        "compare verdict REGRESSION against the baseline: this scenario is significantly "
        "worse (passed: candidate -, baseline -)"
    ]


def test_with_a_baseline_a_pooled_regression_fails_the_scenarios_worse_on_its_metric() -> None:
    pooled = [_row("passed", worse=True, significant=True), _row("collapse", worse=None)]
    worse = _summary("REGRESSION", [_row("passed", worse=True)], pooled)
    j = judge(SCENARIO, _both(looping(0), score(1)), BASE, summary=worse)
    assert j.outcome == "failed"
    assert j.reasons[0].startswith(
        "compare verdict REGRESSION against the baseline (pooled over scenarios: passed); "
        "this scenario is worse on it, not significant alone"
    )
    assert "pooled over scenarios: REGRESSION" in j.evidence  # the pool's rows under it
    better = _summary("REGRESSION", [_row("passed", worse=False)], pooled)
    assert judge(SCENARIO, _both(score(0), score(1)), BASE, summary=better).outcome == "passed"
    other = _summary("REGRESSION", [_row("collapse", worse=True)], pooled)  # not the pooled metric
    assert judge(SCENARIO, _both(looping(0), score(1)), BASE, summary=other).outcome == "passed"


def test_with_a_baseline_worse_without_regression_passes_whatever_the_default_thresholds() -> None:
    """A scenario WORSE (not significant alone) under NO CHANGE or INCONCLUSIVE is noise;
    its failed runs would fail the default --harness-min-pass-rate 1, which does not apply."""
    verdicts: tuple[VerdictName, ...] = ("NO CHANGE", "INCONCLUSIVE")
    for verdict in verdicts:
        s = _summary(verdict, [_row("passed", worse=True)], [_row("passed", worse=True)])
        j = judge(SCENARIO, _both(looping(0), score(1)), BASE, summary=s)
        assert j.outcome == "passed" and j.verdict == "INCONCLUSIVE", j.reasons


def test_with_a_baseline_explicit_thresholds_apply_on_top() -> None:
    s = _summary("NO CHANGE", [_row("passed", worse=True)], None)
    given = HarnessSettings(target="t", baseline="b", explicit=frozenset({"min_pass_rate"}))
    j = judge(SCENARIO, _both(looping(0), score(1)), given, summary=s)
    assert j.outcome == "failed"
    assert [r.split(" (")[0] for r in j.reasons] == ["passed 1/2 runs"]  # only the one given


def test_with_a_baseline_and_no_comparison_of_the_scenario_is_not_a_pass() -> None:
    s = Summary(
        run_id="r", verdict=Verdict(verdict="INCONCLUSIVE", message="INCONCLUSIVE: unfinished")
    )
    j = judge(SCENARIO, _both(score(0)), BASE, summary=s)
    assert j.outcome == "infra"
    assert j.reasons == [
        "no comparison of this scenario against the baseline (INCONCLUSIVE: unfinished)"
    ]
