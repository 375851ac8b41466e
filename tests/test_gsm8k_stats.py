"""GSM8K statistics: Wilson interval, McNemar's exact test, Newcombe paired interval, verdict."""

from __future__ import annotations

import math

import pytest

from harness.client.target import TargetConfig
from harness.gsm8k.models import Extracted, GSM8KConfig, GSM8KRecord
from harness.gsm8k.run import summarize
from harness.gsm8k.stats import newcombe_paired, paired_comparison, side_summary, wilson


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


def test_wilson_matches_closed_form() -> None:
    k, n, z = 440, 500, 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    ci = wilson(k, n)
    assert ci.low == pytest.approx(centre - half, abs=1e-9)
    assert ci.high == pytest.approx(centre + half, abs=1e-9)
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)


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


def test_newcombe_interval_properties() -> None:
    none = newcombe_paired(440, 0, 0, 60)
    assert none.low < 0 < none.high and none.high - none.low > 0.005
    lost = newcombe_paired(405, 35, 0, 60)
    won = newcombe_paired(405, 0, 35, 60)
    assert lost.low == pytest.approx(-won.high) and lost.high == pytest.approx(-won.low)
    wide = newcombe_paired(81, 7, 0, 12)
    assert wide.high - wide.low > lost.high - lost.low  # fewer pairs, wider


def test_newcombe_matches_reference_formula() -> None:
    """Against R biostatUZH confIntPairedProportion (Newcombe 1998) for p1 - p2."""
    r, s, t, u = 30, 9, 2, 19  # both, only 1, only 2, neither
    n = r + s + t + u
    p1, p2 = (r + s) / n, (r + t) / n
    l1, u1 = wilson(r + s, n).low, wilson(r + s, n).high
    l2, u2 = wilson(r + t, n).low, wilson(r + t, n).high
    cross = r * u - s * t
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = cross / math.sqrt((r + s) * (t + u) * (r + t) * (s + u))
    low = (p1 - p2) - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = (p1 - p2) + math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    ours = newcombe_paired(r, s, t, u)  # interval for p2 - p1
    assert ours.low == pytest.approx(-high) and ours.high == pytest.approx(-low)


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
    assert s.verdict == "REGRESSION" and s.exit_code == 1
    broken = [
        _rec(r.index, None, side="candidate", label="cand") if r.index < 20 else r for r in cand
    ]
    s = summarize(base + broken, run_id="r", config=config, targets=targets)
    assert (
        s.verdict == "INCONCLUSIVE"
        and s.exit_code == 3
        and "20 of 100" in (s.paired and s.paired.reason or "")
    )
    s = summarize(
        base,
        run_id="r",
        config=config,
        targets=[TargetConfig("http://a", label="base", side="baseline")],
    )
    assert s.verdict is None and s.exit_code == 0 and s.sides[0].accuracy == pytest.approx(0.8)
