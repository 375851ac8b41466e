"""The decode path: a kernel fault that teacher forcing cannot see.

Prefill (teacher-forced prompt logprobs) and decode (generation) run different kernels.
The reference server's ``decode-fault`` profile is healthy in prefill and shifted in
generation, as a broken decode kernel is. The generation-aligned comparison decodes
greedily from every assistant turn (one unit each) and decides early-parting greedy
paths by an exact binomial test against the A/A share plus a margin, so a handful of scenarios suffices; its false alarms on the
A/A and a benign change are checked here over several server seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.numerics.decide import EARLY, parting
from harness.numerics.models import LogprobsResult, SequenceDivergence, SequenceResult
from harness.numerics.run import LogprobsOptions, compare_logprobs, decode_units
from harness.numerics.sequences import from_scenario
from harness.runfolder import RunFolder
from harness.scenario.model import load_scenarios

SEQS = [from_scenario(s) for s in load_scenarios(["scenarios"])]
GREEDY = LogprobsOptions(api="greedy")


def _row(ab: int | None, aa: int | None, i: int) -> SequenceResult:
    empty = SequenceDivergence(
        positions=0, mean_kl=None, p99_kl=None, max_kl=None, top1_agreement=None,
        mean_abs_dlogp=None, first_over=None, worst=[], nonfinite={}, strip=[],
    )  # fmt: skip
    return SequenceResult(
        id=str(i), source="t", tokens=1, ab=empty, aa=empty, parted_at=ab, aa_parted_at=aa
    )


def test_parting_against_known_values() -> None:
    """9 of 9 A/B paths part at once, no A/A path does: P(X >= 9), X ~ Bin(9, 0.2), is
    0.2^9; 6 of 10 against an A/A share of 1/10: P(X >= 6), X ~ Bin(10, 0.3)."""
    n, ab, aa, p = parting([_row(2, None, i) for i in range(9)])
    assert (n, ab, aa) == (9, 9, 0)
    assert p == pytest.approx(0.2**9, rel=1e-9)
    rows = [_row(2 if i < 6 else None, 1 if i == 9 else None, i) for i in range(10)]
    want = sum(math.comb(10, k) * 0.3**k * 0.7 ** (10 - k) for k in range(6, 11))
    assert parting(rows)[3] == pytest.approx(want, rel=1e-9)
    # late partings are not "early"; none early gives p = 1
    assert parting([_row(EARLY + 1, None, i) for i in range(9)])[1:] == (0, 0, 1.0)
    # as many A/A as A/B partings: no evidence
    assert parting([_row(2, 3, i) for i in range(9)])[3] == pytest.approx(1.0)


def test_decode_units_are_one_per_assistant_turn() -> None:
    units = decode_units(SEQS[:3])
    turns = sum(
        sum(1 for j, m in enumerate(s.messages or ()) if m.get("role") == "assistant" and j > 0)
        for s in SEQS[:3]
    )
    assert len(units) == turns > 3
    assert all(u.messages and u.messages[-1]["role"] == "assistant" for u in units)


def test_a_decode_only_fault_is_caught_with_three_scenarios(sim_url: Callable[..., str]) -> None:
    """Prefill says NO CHANGE (it cannot see the fault); the decode path says REGRESSION
    from three scenarios (the paired KL test alone needed 7 sequences)."""
    base, cand = sim_url("healthy"), sim_url("decode-fault", seed=3)
    prefill = compare_logprobs(SEQS, base, cand)
    assert prefill.verdict == "NO CHANGE", prefill.message
    decode = compare_logprobs(SEQS[:3], base, cand, GREEDY)
    assert decode.verdict == "REGRESSION", decode.message
    assert "greedy paths part within the first" in decode.message
    assert decode.stats.test.startswith("one-sided exact binomial")


@pytest.mark.parametrize("seed", range(6))
def test_decode_false_alarms_aa_and_benign(sim_url: Callable[..., str], seed: int) -> None:
    """No REGRESSION on the A/A (two healthy servers, other seeds: noise per request) or on
    the benign KV-cache-like shift, with every scenario's turns decoded."""
    base = sim_url("healthy", seed=seed)
    for other in ("healthy", "kv-cache-quant"):
        res = compare_logprobs(SEQS, base, sim_url(other, seed=seed + 100), GREEDY)
        assert res.verdict != "REGRESSION", (other, res.message)


def test_compare_reports_prefill_and_decode_apart(
    sim_url: Callable[..., str], tmp_path: Path, capsys: Any
) -> None:
    base = sim_url("healthy", scenarios_dir="scenarios")
    cand = sim_url("decode-fault", scenarios_dir="scenarios")
    args = ["compare", "scenarios/enum_units.yaml", "scenarios/typed_scalars.yaml",
            "scenarios/followup_conversion.yaml", "--baseline", base, "--candidate", cand,
            "--repeats", "1", "--results", str(tmp_path), "--run-id", "d", "--no-progress"]  # fmt: skip
    code = main(args)
    out = capsys.readouterr().out
    assert "numerics (token logprobs" in out and "numerics (decode path, greedy" in out
    res = RunFolder(tmp_path / "d").read_model(RunFolder.LOGPROBS, LogprobsResult)
    assert res.decode is not None
    assert res.verdict != "REGRESSION" and res.decode.verdict == "REGRESSION"
    html = (tmp_path / "d" / "report.html").read_text()
    assert "Decode path: greedy generation" in html
    # the decode path decides: exit 1, the headline names the decode path, not the prefill
    assert code == 1, out
    summary = RunFolder(tmp_path / "d").read_summary()
    assert summary is not None and summary.verdict is not None
    assert summary.verdict.verdict == "REGRESSION"
    assert summary.verdict.message.startswith("REGRESSION: numerics (decode): REGRESSION: ")
    head = out.splitlines()[:5]
    assert any("REGRESSION" in ln and "numerics (decode)" in ln for ln in head), head
    md = (tmp_path / "d" / "report.md").read_text()
    assert md.startswith("## 🔴") and "numerics (decode): REGRESSION" in md.splitlines()[0]
    assert main(["score", str(tmp_path / "d"), "--quiet"]) == 1  # re-scored: the same


def test_first_divergence_says_whether_each_token_is_in_the_others_top_5() -> None:
    """Where two greedy paths part, each side's token is checked against the other's
    top 5 (as vLLM's model tests do): here the baseline's ' cat' is the candidate's
    runner-up, while the candidate's ' zebra' is nowhere in the baseline's top 5."""
    from harness.numerics.models import ScoredSequence, Sequence
    from harness.numerics.run import _pair_result

    def path(second: str, top: dict[str, float]) -> ScoredSequence:
        return ScoredSequence(
            ["<prompt>", " the", second], ["<prompt>", " the", second], [None, -0.1, -0.2],
            [{}, {" the": -0.1}, top],
        )  # fmt: skip

    base_top = {" cat": -0.2, " dog": -2.0, " cow": -3.0, " pig": -4.0, " hen": -5.0, " ant": -6.0}
    cand_top = {" zebra": -0.3, " cat": -1.5, " dog": -2.5}
    base = path(" cat", base_top)
    row = _pair_result(
        Sequence(id="s", source="t", text="x"), base, path(" cat", base_top),
        path(" zebra", cand_top), generation=True, opts=LogprobsOptions(),
    )  # fmt: skip
    assert row.parted_at == 2 and row.aa_parted_at is None
    assert row.parted is not None
    assert "baseline's in the candidate's top 5: yes" in row.parted
    assert "candidate's in the baseline's: no" in row.parted
