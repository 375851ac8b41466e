"""GSM8K scoring: per-side summaries, the paired comparison and its verdict (the
general statistics it uses are tested against known values in tests/stats/test_stats.py)."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from harness.cli._common import gsm8k_exit_code
from harness.client.target import TargetConfig
from harness.gsm8k.models import Extracted, GSM8KConfig, GSM8KPaired, GSM8KRecord, GSM8KSummary
from harness.gsm8k.run import summarize
from harness.gsm8k.stats import min_detectable_drop, paired_comparison, side_summary
from harness.stats.tests import mcnemar_exact, newcombe_paired_interval, wilson_interval


def _rec(index: int, correct: bool | None, *, side: str | None = None, label: str = "t",
         answer: str | None = "1", tokens: int = 10, t: float = 0.0) -> GSM8KRecord:  # fmt: skip
    return GSM8KRecord(
        side=side, label=label, index=index, prompt_sha256="x", reference="1",
        output=None if correct is None else f"#### {answer}", completion_tokens=tokens,
        extracted=Extracted(sglang=answer, strict=answer, flexible=answer),
        correct=correct, correct_strict=correct, correct_flexible=correct,
        error="HTTP 500" if correct is None else None, t_start=t, t_end=t + 1.0,
    )  # fmt: skip


def _pairs(both: int, b: int, c: int, neither: int) -> tuple[list[GSM8KRecord], list[GSM8KRecord]]:
    outcomes = [(True, True)] * both + [(True, False)] * b + [(False, True)] * c
    outcomes += [(False, False)] * neither
    base = [_rec(i, x, side="baseline", label="base") for i, (x, _) in enumerate(outcomes)]
    cand = [_rec(i, y, side="candidate", label="cand") for i, (_, y) in enumerate(outcomes)]
    return base, cand


def test_side_accuracy_interval_is_the_wilson_interval() -> None:
    recs = [_rec(i, i % 4 != 0) for i in range(40)]  # 30 of 40 right
    s = side_summary(recs, label="t", base_url="http://x")
    ci = s.accuracy_interval
    assert (ci.low, ci.high) == wilson_interval(30, 40) and ci.method == "wilson"
    assert ci.low < s.accuracy == 0.75 < ci.high
    empty = side_summary([], label="t", base_url="http://x").accuracy_interval
    assert (empty.low, empty.high) == (0.0, 1.0)


def test_mcnemar_exact_one_sided_discordance_is_regression() -> None:
    base, cand = _pairs(405, 35, 0, 60)
    p = paired_comparison(base, cand)
    assert (p.n_pairs, p.both_correct, p.b, p.c, p.neither) == (500, 405, 35, 0, 60)
    assert p.mcnemar_p == pytest.approx(2 * 0.5**35)
    assert p.verdict == "REGRESSION"
    assert p.accuracy_diff == pytest.approx(-0.07)
    assert p.diff_interval.low < -0.07 < p.diff_interval.high < 0


@pytest.mark.parametrize(
    ("b", "c", "verdict"),
    [(0, 0, "NO CHANGE"), (5, 3, "INCONCLUSIVE"), (3, 15, "IMPROVEMENT"), (15, 3, "REGRESSION")],
)
def test_verdicts(b: int, c: int, verdict: str) -> None:
    base, cand = _pairs(300, b, c, 50)
    assert paired_comparison(base, cand).verdict == verdict


def test_paired_interval_is_newcombes_for_candidate_minus_baseline() -> None:
    base, cand = _pairs(30, 9, 2, 19)
    p = paired_comparison(base, cand)
    # at confidence 1 - 2 * alpha: its lower end is the one-sided bound at alpha
    assert (p.diff_interval.low, p.diff_interval.high) == newcombe_paired_interval(
        30, 9, 2, 19, 0.9
    )
    assert p.diff_interval.method == "newcombe-paired" and p.diff_interval.level == 0.9
    assert p.mcnemar_p == mcnemar_exact(9, 2) and p.accuracy_diff == pytest.approx(-7 / 60)


def test_errored_questions_are_not_pairs() -> None:
    base, cand = _pairs(30, 9, 2, 19)
    cand[0] = _rec(0, None, side="candidate", label="cand")  # errored on one side only
    p = paired_comparison(base, cand)
    assert p.n_pairs == 59 and p.both_correct == 29


def test_side_summary_leaves_errors_out() -> None:
    recs = [_rec(0, True), _rec(1, False, answer=None), _rec(2, None), _rec(3, True, t=1.0)]
    s = side_summary(recs, label="t", base_url="http://x", model=None)
    assert (s.n, s.n_errors, s.error_indices, s.correct) == (3, 1, [2], 2)
    assert s.accuracy == pytest.approx(2 / 3) and s.invalid == 1
    assert s.latency_s == pytest.approx(2.0) and s.completion_tokens == 30
    assert s.output_throughput == pytest.approx(15.0)


def test_summary_exit_codes() -> None:
    config = GSM8KConfig(
        num_questions=100, num_shots=5, max_tokens=512, stop=["Question"], api="completions",
        parallel=8, data_source="x", data_sha256="y", official_test_split=False,
    )  # fmt: skip
    targets = [
        TargetConfig("http://a", label="base", side="baseline"),
        TargetConfig("http://b", label="cand", side="candidate"),
    ]
    base, cand = _pairs(60, 20, 0, 20)
    s = summarize(base + cand, run_id="r", config=config, targets=targets)
    assert s.verdict == "REGRESSION" and gsm8k_exit_code(s) == 1
    broken = [
        _rec(r.index, None, side="candidate", label="cand") if r.index < 20 else r for r in cand
    ]
    s = summarize(base + broken, run_id="r", config=config, targets=targets)
    assert (
        s.verdict == "INCONCLUSIVE"
        and gsm8k_exit_code(s) == 3
        and "20 of 100" in (s.paired and s.paired.reason or "")
    )
    s = summarize(
        base,
        run_id="r",
        config=config,
        targets=[TargetConfig("http://a", label="base", side="baseline")],
    )
    assert (
        s.verdict is None and gsm8k_exit_code(s) == 0 and s.sides[0].accuracy == pytest.approx(0.8)
    )


def test_gsm8k_verdict_is_the_shared_verdict_name() -> None:
    """GSM8K's verdict is harness.kinds.VerdictName: every verdict of the vocabulary is
    accepted on disk, a check status is not."""
    from pydantic import ValidationError

    from harness.gsm8k.models import GSM8KPaired
    from harness.kinds import VERDICTS

    base, cand = _pairs(30, 9, 2, 19)
    paired = paired_comparison(base, cand).model_dump()
    for name in VERDICTS:
        assert GSM8KPaired.model_validate({**paired, "verdict": name}).verdict == name
    with pytest.raises(ValidationError):
        GSM8KPaired.model_validate({**paired, "verdict": "PASS"})


def test_one_sided_mcnemar_decides_regression_at_alpha() -> None:
    # b = 12, c = 4: two-sided p 0.077 (not < 0.05), one-sided 0.038 (the stated alpha)
    base, cand = _pairs(300, 12, 4, 50)
    p = paired_comparison(base, cand)
    one = sps.binomtest(12, 16, 0.5, alternative="greater").pvalue
    assert p.p_worse == pytest.approx(one) and p.mcnemar_p == pytest.approx(mcnemar_exact(12, 4))
    assert p.mcnemar_p > 0.05 >= p.p_worse and p.verdict == "REGRESSION"


def test_inconclusive_while_the_interval_admits_a_drop_over_the_margin() -> None:
    few = paired_comparison(*_pairs(15, 2, 1, 2))  # 20 questions
    assert few.verdict == "INCONCLUSIVE" and "not ruled out" in few.reason
    assert few.diff_interval.low < -0.1
    many = paired_comparison(*_pairs(1800, 5, 3, 200))
    assert many.verdict == "NO CHANGE" and "ruled out" in many.reason
    loose = paired_comparison(*_pairs(15, 2, 1, 2), margin=0.5)
    assert loose.verdict == "NO CHANGE" and loose.margin == 0.5
    assert gsm8k_exit_code(_summary_of(few)) == 0  # underpowered is not an infra error
    assert gsm8k_exit_code(_summary_of(few), strict=True) == 1


CONFIG = GSM8KConfig(
    num_questions=20, num_shots=5, max_tokens=512, stop=["Question"], api="completions",
    parallel=8, data_source="x", data_sha256="y", official_test_split=False,
)  # fmt: skip


def _summary_of(paired: GSM8KPaired) -> GSM8KSummary:
    return GSM8KSummary(run_id="x", config=CONFIG, sides=[], paired=paired, verdict=paired.verdict)


def test_min_detectable_drop_is_connors_and_has_the_power_it_claims() -> None:
    n, psi, alpha = 500, 0.264, 0.05
    d = min_detectable_drop(n, psi, alpha)
    assert d is not None
    za, zb = sps.norm.ppf(1 - alpha), sps.norm.ppf(0.8)
    assert (za * math.sqrt(psi) + zb * math.sqrt(psi - d * d)) ** 2 / d**2 == pytest.approx(n)
    # exact check: m = n * psi discordant pairs, b among them Binomial(m, (psi + d) / 2psi)
    m = round(n * psi)
    k = next(k for k in range(m + 1) if sps.binom.sf(k - 1, m, 0.5) <= alpha)
    assert sps.binom.sf(k - 1, m, (psi + d) / (2 * psi)) == pytest.approx(0.8, abs=0.04)
    assert min_detectable_drop(0, 0.2, alpha) is None and min_detectable_drop(10, 0.0, 0.05) is None
