"""Routed experts, A against B (harness.numerics.experts_ab): the pure comparison against
hand-made arrays with known answers, and the servers asked over real sockets (the
reference server with routed-experts capture on), alone and inside compare's numerics
section (logprobs.json, the console line, the report block)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.cli import main
from harness.numerics.experts_ab import compare_experts, compare_routing
from harness.numerics.models import LogprobsResult, Sequence
from harness.numerics.run import LogprobsOptions
from harness.runfolder import RunFolder

SHARED = 16  # the reference server's model: 16 routed experts, so the shared expert is 16
SEQS = [
    Sequence(
        id="chat",
        source="scenario",
        messages=(
            {"role": "user", "content": "What is the weather in Paris today?"},
            {"role": "assistant", "content": "Sunny, 21 degrees, a light wind from the west."},
        ),
    ),  # fmt: skip
    Sequence(id="gsm8k", source="gsm8k", text="Question: 3 apples and 4 pears. How many? Answer:"),
]


def _routing(tokens: int, layers: int = 4, top_k: int = 4, seed: int = 0) -> np.ndarray:
    """Distinct ids in [0, 16) per row, layer 0 dense (zeros): a healthy answer."""
    rng = np.random.default_rng(seed)
    ids = rng.random((tokens, layers, SHARED)).argsort(axis=2)[:, :, :top_k]
    ids[:, 0, :] = 0
    return ids


# ------------------------------------------------------------------ the pure comparison


def test_identical_answers_agree_on_every_layer_and_are_no_change() -> None:
    a = _routing(6)
    shuffled = a[:, :, ::-1].copy()  # a top-k set in another column order is the same set
    res = compare_routing(a, a.copy(), shuffled, num_routed_experts=SHARED, dense_layers=[0])
    assert res.verdict == "NO CHANGE" and res.regressed_layers == [] and res.pattern is None
    assert [(lay.ab_share, lay.aa_share) for lay in res.layers] == [(1.0, 1.0)] * 4
    assert res.first_parting is None and res.shared_in == [] and res.tokens == 6
    assert res.layers[0].dense and not res.layers[1].dense
    assert res.message.startswith("NO CHANGE: A/B top-k agreement as A/A on every layer")


def test_agreement_shares_and_the_first_parting_are_known_values() -> None:
    """4 tokens: the candidate differs at (token 2, layer 1) and (token 3, layer 1) and
    (token 3, layer 3): layer 1 agrees 2/4, layer 3 3/4; the first parting is token 2,
    layer 1 (token first, then layer)."""
    a = _routing(4)
    c = a.copy()
    c[2, 1, 0] = 99  # one id of the set changed
    c[3, 1] = a[3, 1] + 100  # every id changed
    c[3, 3, 1] = 99
    res = compare_routing([a], [a.copy()], [c], names=["s"])
    assert [lay.ab_agree for lay in res.layers] == [4, 2, 4, 3]
    assert [lay.ab_share for lay in res.layers] == [1.0, 0.5, 1.0, 0.75]
    assert [lay.aa_share for lay in res.layers] == [1.0] * 4
    assert res.verdict == "REGRESSION" and res.regressed_layers == [1, 3]
    fp = res.first_parting
    assert fp is not None and (fp.sequence, fp.token, fp.layer) == ("s", 2, 1)
    assert fp.baseline == a[2, 1].tolist() and fp.candidate == c[2, 1].tolist()
    assert res.pattern is None and "below the A/A floor on 2 of 4 layers" in res.message
    assert "1 50.0% vs 100.0%, 3 75.0% vs 100.0%" in res.message


def test_one_routed_expert_replaced_by_the_shared_id_is_named() -> None:
    """The seed bug's shape: the last column of every MoE row holds the shared id."""
    a = _routing(5)
    c = a.copy()
    c[:, 1:, 3] = SHARED
    res = compare_routing(a, a.copy(), c, num_routed_experts=SHARED, dense_layers=[0])
    assert res.verdict == "REGRESSION" and res.regressed_layers == [1, 2, 3]
    assert res.pattern == (
        "one routed expert replaced by the shared expert's id (16) on every token of 3 MoE "
        "layers (1, 2, 3)"
    )
    assert res.message.startswith("REGRESSION: one routed expert replaced by the shared")
    assert res.shared_in == ["candidate"]
    assert [lay.shared_candidate for lay in res.layers] == [0, 5, 5, 5]
    assert [lay.ab_share for lay in res.layers] == [1.0, 0.0, 0.0, 0.0]


def test_a_pattern_on_only_some_tokens_is_not_named() -> None:
    a = _routing(5)
    c = a.copy()
    c[:3, 2, 3] = SHARED  # 3 of 5 tokens of layer 2
    res = compare_routing(a, a.copy(), c, num_routed_experts=SHARED)
    assert res.verdict == "REGRESSION" and res.regressed_layers == [2] and res.pattern is None
    assert res.layers[2].ab_agree == 2 and res.shared_in == ["candidate"]


def test_the_shared_id_in_the_baseline_is_said() -> None:
    a = _routing(3)
    broken = a.copy()
    broken[:, 1:, 3] = SHARED
    res = compare_routing(broken, broken.copy(), a, num_routed_experts=SHARED)
    assert res.shared_in == ["baseline"] and res.pattern is None
    assert "the shared expert's id in the baseline's routed columns" in res.message


def test_the_rule_against_a_floor_below_100_percent_and_the_margin() -> None:
    """Nondeterministic routing: A/A agrees 3/4 on layer 1. A/B 3/4 is NO CHANGE (as
    A/A), 2/4 REGRESSION (below the floor); with margin 0.25 (slack floor(0.25 x 4) = 1)
    2/4 is NO CHANGE and 1/4 REGRESSION."""
    a = _routing(4)

    def differ(rows: list[int]) -> np.ndarray:
        out = a.copy()
        for r in rows:
            out[r, 1] = a[r, 1] + 50
        return out

    again = differ([0])
    assert compare_routing(a, again, differ([3])).verdict == "NO CHANGE"
    below = compare_routing(a, again, differ([2, 3]))
    assert below.verdict == "REGRESSION" and below.regressed_layers == [1]
    assert (below.layers[1].ab_share, below.layers[1].aa_share) == (0.5, 0.75)
    assert compare_routing(a, again, differ([2, 3]), margin=0.25).verdict == "NO CHANGE"
    loose = compare_routing(a, again, differ([1, 2, 3]), margin=0.25)
    assert loose.verdict == "REGRESSION" and "floor(0.25 x tokens)" in loose.rule
    better = compare_routing(a, again, a.copy())  # A/B above the A/A floor
    assert better.verdict == "NO CHANGE"
    assert better.aa_first_parting is not None and better.aa_first_parting.token == 0


def test_sequences_pool_and_the_first_parting_names_its_sequence() -> None:
    one, two = _routing(3, seed=1), _routing(5, seed=2)
    cand = two.copy()
    cand[4, 2] = two[4, 2] + 40
    res = compare_routing([one, two], [one, two], [one, cand], names=["first", "second"])
    assert res.sequences == 2 and res.tokens == 8
    assert res.layers[2].ab_agree == 7 and res.layers[2].ab_share == 7 / 8
    fp = res.first_parting
    assert fp is not None and (fp.sequence, fp.token, fp.layer) == ("second", 4, 2)


def test_rows_that_differ_are_cut_to_the_shortest_and_noted() -> None:
    a = _routing(6)
    res = compare_routing([a], [a[:5]], [a], names=["s"])
    assert res.tokens == 5 and res.verdict == "NO CHANGE"
    assert res.notes == ["s: rows differ (baseline 6, again 5, candidate 6); first 5 compared"]


def test_no_token_is_inconclusive_and_bad_geometry_refused() -> None:
    empty = np.zeros((0, 4, 4), dtype=np.int64)
    assert compare_routing(empty, empty, empty).verdict == "INCONCLUSIVE"
    with pytest.raises(ValueError, match="one geometry"):
        compare_routing(_routing(2), _routing(2), _routing(2, top_k=2))
    with pytest.raises(ValueError, match="one answer per side"):
        compare_routing([_routing(2)], [], [_routing(2)])


# ------------------------------------------------------------------ over real sockets


def test_healthy_servers_route_alike_and_are_no_change(sim_url: Callable[..., str]) -> None:
    """Two healthy servers with different seeds and fusion settings: routing is a function
    of the tokens, so every layer agrees 100% A/B and A/A."""
    base = sim_url("healthy", capture=True)
    cand = sim_url("fusion-on", capture=True, seed=7)
    notes: list[str] = []
    res = compare_experts(SEQS, base, cand, LogprobsOptions(), notes=notes)
    assert res is not None and notes == []
    assert res.verdict == "NO CHANGE" and res.sequences == 2 and res.tokens > 20
    assert all(lay.ab_share == 1.0 and lay.aa_share == 1.0 for lay in res.layers)
    assert (res.num_layers, res.top_k, res.num_routed_experts) == (4, 4, SHARED)
    assert [lay.dense for lay in res.layers] == [True, False, False, False]


def test_the_shared_expert_fault_is_a_named_regression(sim_url: Callable[..., str]) -> None:
    """experts-dup-shared (the fused-regression profile's routing fault, without its boot
    crash under capture): the shared id written over two routed columns on every MoE row."""
    base = sim_url("healthy", capture=True)
    cand = sim_url("experts-dup-shared", capture=True)
    res = compare_experts(SEQS, base, cand, LogprobsOptions())
    assert res is not None and res.verdict == "REGRESSION" and res.regressed_layers == [1, 2, 3]
    assert res.pattern == (
        "two routed experts replaced by the shared expert's id (16) on every token of 3 MoE "
        "layers (1, 2, 3)"
    )
    assert [lay.ab_share for lay in res.layers] == [1.0, 0.0, 0.0, 0.0]
    assert [lay.aa_share for lay in res.layers] == [1.0] * 4
    fp = res.first_parting
    assert fp is not None and (fp.sequence, fp.token, fp.layer) == ("chat", 0, 1)
    assert fp.candidate.count(SHARED) == 2 and SHARED not in fp.baseline
    assert res.shared_in == ["candidate"]


@pytest.mark.parametrize("which", ["candidate", "baseline"])
def test_a_server_without_capture_gives_none_and_a_note(
    sim_url: Callable[..., str], which: str
) -> None:
    on, off = sim_url("healthy", capture=True), sim_url("healthy", capture=False)
    base, cand = (on, off) if which == "candidate" else (off, on)
    notes: list[str] = []
    assert compare_experts(SEQS, base, cand, LogprobsOptions(), notes=notes) is None
    assert notes == [
        f"routed experts: not compared: the {which} ({off}) returned no routed experts: "
        "start it with --enable-return-routed-experts (SGLang)"
    ]


def test_a_server_without_generate_gives_none_and_a_note(sim_url: Callable[..., str]) -> None:
    notes: list[str] = []
    base = sim_url("healthy", capture=True)
    cand = sim_url("healthy", capture=True, flavour="vllm-0.33")
    assert compare_experts(SEQS, base, cand, LogprobsOptions(), notes=notes) is None
    assert len(notes) == 1 and notes[0].startswith("routed experts: not compared: ")
    assert "HTTP 404" in notes[0] and notes[0].endswith("not asked here)")


def _compare(tmp_path: Path, base: str, cand: str, run_id: str) -> LogprobsResult:
    args = ["compare", "scenarios/enum_units.yaml", "--baseline", base, "--candidate", cand,
            "--repeats", "1", "--results", str(tmp_path), "--run-id", run_id, "--no-progress"]  # fmt: skip
    main(args)
    res = RunFolder(tmp_path / run_id).read_model(RunFolder.LOGPROBS, LogprobsResult)
    assert res is not None
    return res


def test_compare_numerics_section_writes_shows_and_reports_it(
    sim_url: Callable[..., str], tmp_path: Path, capsys: Any
) -> None:
    scen = Path("scenarios")
    base = sim_url("healthy", capture=True, scenarios_dir=scen)
    cand = sim_url("experts-dup-shared", capture=True, scenarios_dir=scen)
    res = _compare(tmp_path, base, cand, "ab")
    assert res.experts is not None and res.experts.verdict == "REGRESSION"
    out = capsys.readouterr().out
    assert "routed experts (1 sequences" in out and "two routed experts replaced" in out
    html = (tmp_path / "ab" / "report.html").read_text()
    assert 'id="lp-experts"' in html and html.count('aria-label="layer ') == 4
    assert "below floor" in html and "first parting" in html.lower()
    plain = sim_url("healthy", capture=False, scenarios_dir=scen)
    res = _compare(tmp_path, base, plain, "off")
    assert res.experts is None
    assert [n for n in res.notes if n.startswith("routed experts: not compared: the candidate")]
