"""GSM8K scoring: per-side summaries, the paired comparison and its verdict (the
general statistics it uses are tested against known values in tests/test_stats.py)."""

from __future__ import annotations

import pytest

from harness.cli._common import gsm8k_exit_code
from harness.client.target import TargetConfig
from harness.gsm8k.models import Extracted, GSM8KConfig, GSM8KRecord
from harness.gsm8k.run import summarize
from harness.gsm8k.stats import paired_comparison, side_summary
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
    [(0, 0, "NO CHANGE"), (5, 3, "NO CHANGE"), (3, 15, "IMPROVEMENT"), (15, 3, "REGRESSION")],
)
def test_verdicts(b: int, c: int, verdict: str) -> None:
    base, cand = _pairs(300, b, c, 50)
    assert paired_comparison(base, cand).verdict == verdict


def test_paired_interval_is_newcombes_for_candidate_minus_baseline() -> None:
    base, cand = _pairs(30, 9, 2, 19)
    p = paired_comparison(base, cand)
    assert (p.diff_interval.low, p.diff_interval.high) == newcombe_paired_interval(30, 9, 2, 19)
    assert p.diff_interval.method == "newcombe-paired"
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
