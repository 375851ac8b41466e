"""The MoE of the e2e job (e2e.moe), its step (e2e.moe_step) and its panel (e2e.panel).

The builder is checked on a small dense llama GGUF written here (two layers, FFN 256
wide, Q4_1 as in SmolLM2's file): the expert tensors' shapes and metadata, and that the
experts put back together are the dense FFN (up to Q8_0's rounding). The panel page is
checked against the committed ``e2e/panel.json``: a stale ``docs/moe-panel.md`` fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from e2e import moe, moe_step, panel  # noqa: E402
from e2e.servers import E2EError  # noqa: E402

N_EMBD, N_FF, N_LAYER = 64, 256, 2


def _dense(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A dense llama GGUF at ``path``; returns its FFN weights as dequantised (numpy order)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny")
    w.add_block_count(N_LAYER)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(4)
    w.add_string("tokenizer.ggml.model", "gpt2")
    q41 = gguf.GGMLQuantizationType.Q4_1
    out: dict[str, np.ndarray] = {}
    w.add_tensor("token_embd.weight", rng.standard_normal((32, N_EMBD)).astype(np.float32))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name, shape in (("ffn_gate", (N_FF, N_EMBD)), ("ffn_up", (N_FF, N_EMBD)),
                            ("ffn_down", (N_EMBD, N_FF))):  # fmt: skip
            q = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), q41)
            out[f"blk.{i}.{name}"] = gguf.quants.dequantize(q, q41)
            w.add_tensor(f"blk.{i}.{name}.weight", q, raw_dtype=q41)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _tensors(path: Path) -> dict[str, Any]:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def test_the_experts_put_back_together_are_the_dense_ffn(tmp_path: Path) -> None:
    dense = _dense(tmp_path / "dense.gguf")
    out = tmp_path / "moe.gguf"
    summary = moe.build(tmp_path / "dense.gguf", out, moe.MoESpec(experts=4))
    assert summary["expert_width"] == N_FF // 4 and summary["used_per_layer"] == [4, 4]
    r = gguf.GGUFReader(out)
    f = r.fields
    assert f["llama.expert_count"].contents() == 4
    assert f["llama.expert_used_count"].contents() == 4
    assert f["llama.feed_forward_length"].contents() == N_FF // 4
    assert f["tokenizer.ggml.model"].contents() == "gpt2"
    t = _tensors(out)
    assert "blk.0.ffn_gate.weight" not in t
    q8 = gguf.GGMLQuantizationType.Q8_0
    for i in range(N_LAYER):
        # ggml order (ne): [n_embd, width, E] and [width, n_embd, E]; the router [n_embd, E]
        assert list(t[f"blk.{i}.ffn_gate_exps.weight"].shape) == [N_EMBD, N_FF // 4, 4]
        assert list(t[f"blk.{i}.ffn_down_exps.weight"].shape) == [N_FF // 4, N_EMBD, 4]
        assert t[f"blk.{i}.ffn_up_exps.weight"].tensor_type == q8
        router = t[f"blk.{i}.ffn_gate_inp.weight"]
        assert list(router.shape) == [N_EMBD, 4] and not np.any(router.data)
        gate = gguf.quants.dequantize(t[f"blk.{i}.ffn_gate_exps.weight"].data, q8)
        down = gguf.quants.dequantize(t[f"blk.{i}.ffn_down_exps.weight"].data, q8)
        # experts stacked back: gate rows in order; down columns in order, divided by E
        np.testing.assert_allclose(gate.reshape(N_FF, N_EMBD), dense[f"blk.{i}.ffn_gate"],
                                   atol=0.02)  # fmt: skip
        back = (down / 4).transpose(1, 0, 2).reshape(N_EMBD, N_FF)
        np.testing.assert_allclose(back, dense[f"blk.{i}.ffn_down"], atol=0.02)
        # and the routed sum of all experts is the dense FFN on an input
        x = np.random.default_rng(i).standard_normal(N_EMBD).astype(np.float32)
        up = gguf.quants.dequantize(t[f"blk.{i}.ffn_up_exps.weight"].data, q8)
        h = gate @ x
        act = h / (1 + np.exp(-h)) * (up @ x)  # (E, width)
        moe_out = sum(down[e] @ act[e] for e in range(4)) / 4  # softmax of equal logits
        dh = dense[f"blk.{i}.ffn_gate"] @ x
        dense_out = dense[f"blk.{i}.ffn_down"] @ (
            dh / (1 + np.exp(-dh)) * (dense[f"blk.{i}.ffn_up"] @ x)
        )
        rel = np.linalg.norm(moe_out - dense_out) / np.linalg.norm(dense_out)
        assert rel < 0.02


def test_variants_per_layer_counts_and_a_scaled_expert(tmp_path: Path) -> None:
    _dense(tmp_path / "dense.gguf")
    a = tmp_path / "a.gguf"
    moe.build(tmp_path / "dense.gguf", a, moe.MoESpec(experts=4, used_per_layer=(4, 3)))
    assert list(gguf.GGUFReader(a).fields["llama.expert_used_count"].contents()) == [4, 3]
    b = tmp_path / "b.gguf"
    moe.build(tmp_path / "dense.gguf", b, moe.MoESpec(experts=4, expert_scale=(1, 1.5)))
    base = tmp_path / "base.gguf"
    moe.build(tmp_path / "dense.gguf", base, moe.MoESpec(experts=4))
    q8 = gguf.GGMLQuantizationType.Q8_0
    d0 = gguf.quants.dequantize(_tensors(base)["blk.0.ffn_down_exps.weight"].data, q8)
    d1 = gguf.quants.dequantize(_tensors(b)["blk.0.ffn_down_exps.weight"].data, q8)
    np.testing.assert_allclose(d1[0], d0[0])
    ratio = np.linalg.norm(d1[1]) / np.linalg.norm(d0[1])
    assert ratio == pytest.approx(1.5, rel=0.01)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (moe.MoESpec(experts=3), "multiple of 32"),
        (moe.MoESpec(experts=4, used_per_layer=(4,)), "--used-per-layer"),
        (moe.MoESpec(experts=4, used_per_layer=(3, 4)), "the first the largest"),
        (moe.MoESpec(experts=4, expert_scale=(4, 1.1)), "--expert-scale"),
    ],
)
def test_bad_specs_are_one_line(tmp_path: Path, spec: moe.MoESpec, needle: str) -> None:
    _dense(tmp_path / "dense.gguf")
    with pytest.raises(E2EError, match=needle):
        moe.build(tmp_path / "dense.gguf", tmp_path / "x.gguf", spec)
    assert not (tmp_path / "x.gguf").exists()


def test_the_cache_key_follows_the_inputs(tmp_path: Path) -> None:
    _dense(tmp_path / "d1.gguf", seed=0)
    _dense(tmp_path / "d2.gguf", seed=1)
    k = moe.MoESpec().key(tmp_path / "d1.gguf")
    assert k == moe.MoESpec().key(tmp_path / "d1.gguf")
    assert k != moe.MoESpec().key(tmp_path / "d2.gguf")
    assert k != moe.MoESpec(expert_scale=(0, 1.1)).key(tmp_path / "d1.gguf")


def test_cached_build_builds_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _dense(tmp_path / "dense.gguf")
    monkeypatch.setenv("HARNESS_E2E_CACHE", str(tmp_path / "cache"))
    spec = moe.MoESpec(experts=4)
    path = moe.cached_build(spec, tmp_path / "dense.gguf")
    assert path.parent.parent == tmp_path / "cache" / "moe"
    stamp = path.stat().st_mtime_ns
    assert moe.cached_build(spec, tmp_path / "dense.gguf") == path
    assert path.stat().st_mtime_ns == stamp
    assert json.loads((path.parent / "build.json").read_text())["experts"] == 4


# ---------------------------------------------------------------- llama-perplexity

# the summary as tools/perplexity/perplexity.cpp prints it (LOG format strings), with the
# log prefix of the server's logger
PPL_TAIL = """\
0.04.123.456 I ====== KL divergence statistics ======
0.04.123.457 I Mean    KLD:   0.001234 ±   0.000056
0.04.123.458 I Maximum KLD:   0.098765
0.04.123.459 I 99.9%   KLD:   0.050000
0.04.123.460 I 99.0%   KLD:   0.012345
0.04.123.461 I Median  KLD:   0.000321
"""


def test_parse_kld_reads_llama_perplexity_summary() -> None:
    assert panel.parse_kld(PPL_TAIL) == {"mean": 0.001234, "p99": 0.012345, "max": 0.098765}
    with pytest.raises(E2EError, match="no KLD summary"):
        panel.parse_kld("main: error: failed to load model\n")


# ---------------------------------------------------------------- the step's rule


def _step(name: str, exit_code: int = 0, **figures: Any) -> SimpleNamespace:
    return SimpleNamespace(name=name, exit_code=exit_code, figures=figures)


def _passing() -> list[SimpleNamespace]:
    return [
        _step("moe build"),
        _step("moe record M"),
        _step("moe vs dense", slowdown=1.1, kl_mean=0.0025),
        _step("moe logprobs drop1", 1, verdict="REGRESSION"),
        _step("moe compare drop1", 1, verdict="REGRESSION"),
        _step("moe logprobs benign", 0, verdict="INCONCLUSIVE"),
    ]


def test_moe_step_passes_when_every_rule_holds() -> None:
    assert moe_step.failed(_passing()) == []
    assert moe_step.failed([]) == []  # --no-moe


@pytest.mark.parametrize(
    ("index", "step", "code", "needle"),
    [
        (2, _step("moe vs dense", slowdown=1.6, kl_mean=0.002), 1, "slower"),
        (2, _step("moe vs dense", slowdown=1.0, kl_mean=0.02), 1, "mean KL 0.02"),
        (3, _step("moe logprobs drop1", 0, verdict="INCONCLUSIVE"), 1, "required: REGRESSION"),
        (4, _step("moe compare drop1", 0, verdict="NO CHANGE"), 1, "required: REGRESSION"),
        (5, _step("moe logprobs benign", 1, verdict="REGRESSION"), 1, "not REGRESSION"),
        (3, _step("moe logprobs drop1", 2), 2, "did not run"),
    ],
)
def test_moe_step_fails_on_each_rule(index: int, step: Any, code: int, needle: str) -> None:
    steps = _passing()
    steps[index] = step
    found = moe_step.failed(steps)
    assert [c for c, _ in found] == [code]
    assert needle in found[0][1]


def test_a_moe_step_cut_short_does_not_pass() -> None:
    found = moe_step.failed(_passing()[:4])
    assert found and found[0][0] == 2


# ---------------------------------------------------------------- the panel page


def _pair(kind: str, name: str, kls: list[float], verdicts: list[str]) -> dict[str, Any]:
    return {"name": name, "kind": kind, "numerics": [
        {"verdict": v, "kl_mean": k, "kl_p99": 2 * k, "kl_max": 3 * k, "requests": 14,
         "seconds": 30.0} for k, v in zip(kls, verdicts, strict=True)],
        "behaviour": [], "reference": {"mean": kls[0] * 2, "p99": 1.0, "max": 2.0}}  # fmt: skip


def test_calibration_says_whether_the_tolerance_separates() -> None:
    data = {"settings": {"tolerance": 0.01}, "pairs": [
        _pair("aa", "A/A", [0.0, 0.0], ["NO CHANGE", "NO CHANGE"]),
        _pair("benign", "fa", [0.002], ["NO CHANGE"]),
        _pair("fault", "drop", [1.2], ["REGRESSION"])]}  # fmt: skip
    text = "\n".join(panel.calibration(data))
    assert "separates every benign change from every fault" in text
    data["pairs"].append(_pair("fault", "subtle", [0.004], ["NO CHANGE"]))
    text = "\n".join(panel.calibration(data))
    assert "Overlap" in text and "subtle" in text
    assert "subtle: 1 of 1 numerics verdicts are not REGRESSION" in text


def test_render_gives_rates_intervals_and_the_ratio() -> None:
    data = {"settings": {"tolerance": 0.01}, "pairs": [
        _pair("fault", "drop", [1.0, 1.2, 1.4], ["REGRESSION"] * 3)]}  # fmt: skip
    page = panel.render(data)
    row = next(ln for ln in page.splitlines() if ln.startswith("| fault | drop"))
    assert "3/3 [0.44, 1.00]" in row  # Wilson 95%
    # a comparison cut short (no verdict) is shown, and left out of the rate
    cut = {**_pair("benign", "kv", [0.001], ["NO CHANGE"]), "reference": None}
    cut["numerics"].append({"exit_code": 143})
    cut_row = next(ln for ln in panel.render({"settings": {}, "pairs": [cut]}).splitlines()
                   if ln.startswith("| benign | kv"))  # fmt: skip
    assert "| 0/1 [0.00, 0.79] | NO CHANGE 1, exit 143 1 |" in cut_row
    assert "| 0.60 |" in row  # median 1.2 over llama-perplexity's 2.0
    data["pairs"][0]["behaviour"] = [{"verdict": "REGRESSION"}, {"verdict": "INCONCLUSIVE"},
                                     {"exit_code": 2}]  # fmt: skip
    row = next(ln for ln in panel.render(data).splitlines() if ln.startswith("| fault | drop"))
    assert "| INCONCLUSIVE 1, REGRESSION 1, exit 2 1; REGRESSION 1/2 [0.09, 0.91]; seeds 1 |" in row
    # a comparison stopped part way (exit 143) keeps the verdict its partial folder gave:
    # not counted as one, nor in the medians of requests and seconds
    data["pairs"][0]["behaviour"] = [
        {"verdict": "REGRESSION", "exit_code": 1, "requests": 10, "seconds": 60},
        {"verdict": "NO CHANGE", "exit_code": 143, "requests": 4, "seconds": 20}]  # fmt: skip
    row = next(ln for ln in panel.render(data).splitlines() if ln.startswith("| fault | drop"))
    assert "| REGRESSION 1, exit 143 1; REGRESSION 1/1 [0.21, 1.00]; seeds 1 |" in row
    assert row.endswith("| 14 / 10 | 30 / 60 |")  # numerics / behaviour medians


def test_each_behaviour_comparison_has_its_own_sampling_seed(tmp_path: Path) -> None:
    """At one seed H's runs are largely the same draws in every comparison: each comparison
    of a panel, and of another panel folder, gets another seed; a rerun into the same
    folder the same one. The page counts the distinct seeds of a cell's comparisons (those
    stored without one ran at seed 0)."""
    a, b = tmp_path / "moe-panel-a", tmp_path / "moe-panel-b"
    seeds = {panel.behaviour_seed(out, f"p{p:02d}-r{r:02d}") for out in (a, b)
             for p in range(13) for r in range(20)}  # fmt: skip
    assert len(seeds) == 2 * 13 * 20 and all(0 <= x < 2**31 for x in seeds)
    assert panel.behaviour_seed(a, "p00-r00") == panel.behaviour_seed(a, "p00-r00")
    data = {"settings": {}, "pairs": [{**_pair("aa", "aa", [0.0], ["NO CHANGE"]), "behaviour": [
        {"verdict": "NO CHANGE", "exit_code": 0}, {"verdict": "NO CHANGE", "exit_code": 0},
        {"verdict": "NO CHANGE", "exit_code": 0, "sampling_seed": 7},
        {"verdict": "NO CHANGE", "exit_code": 143, "sampling_seed": 8}]}]}  # fmt: skip
    row = next(ln for ln in panel.render(data).splitlines() if ln.startswith("| aa | aa"))
    assert "REGRESSION 0/3 [0.00, 0.56]; seeds 2 |" in row


def test_the_panel_page_is_generated_from_the_committed_json() -> None:
    data = json.loads(panel.PANEL_JSON.read_text(encoding="utf-8"))
    assert panel.DOC.read_text(encoding="utf-8") == panel.render(data), (
        "docs/moe-panel.md is stale: run `python -m e2e.panel --render`"
    )


def test_merge_joins_numerics_and_behaviour_parts_by_pair() -> None:
    num = {"command": "a", "seconds": 100.0, "settings": {"behaviour_repeats": 0},
           "pairs": [_pair("fault", "drop", [1.0, 1.2], ["REGRESSION"] * 2)]}  # fmt: skip
    beh_row = {**_pair("fault", "drop", [1.0], ["REGRESSION"]), "numerics": [],
               "reference": None, "behaviour": [{"verdict": "REGRESSION", "requests": 90}]}  # fmt: skip
    beh = {"command": "b", "seconds": 300.0, "settings": {"behaviour_repeats": 1},
           "pairs": [beh_row]}  # fmt: skip
    merged = panel.merge([num, beh])
    (row,) = merged["pairs"]
    assert len(row["numerics"]) == 2 and row["behaviour"][0]["verdict"] == "REGRESSION"
    assert row["reference"]["mean"] == 2.0
    assert merged["seconds"] == 300.0 and merged["settings"]["behaviour_repeats"] == 1
    assert merged["command"] == "a ; b"


def test_q4_1_experts_hold_the_dense_weights_exactly(tmp_path: Path) -> None:
    dense = _dense(tmp_path / "dense.gguf")
    out = tmp_path / "moe.gguf"
    moe.build(tmp_path / "dense.gguf", out, moe.MoESpec(experts=4, expert_type="q4_1"))
    t = _tensors(out)
    q41 = gguf.GGMLQuantizationType.Q4_1
    assert t["blk.1.ffn_down_exps.weight"].tensor_type == q41
    gate = gguf.quants.dequantize(t["blk.1.ffn_gate_exps.weight"].data, q41)
    down = gguf.quants.dequantize(t["blk.1.ffn_down_exps.weight"].data, q41)
    np.testing.assert_array_equal(gate.reshape(N_FF, N_EMBD), dense["blk.1.ffn_gate"])
    back = down.transpose(1, 0, 2).reshape(N_EMBD, N_FF)
    np.testing.assert_array_equal(back, dense["blk.1.ffn_down"] * 4)
    assert moe.MoESpec(expert_type="q4_1").name() == "smollm2-moe8-q4_1"


def _stored(folder: Path, tag: str, ab: list[float]) -> None:
    """A ``logprobs-<tag>/logprobs.json`` holding ``len(ab)`` sequences at these A/B KLs."""
    from harness.numerics.decide import decide
    from harness.numerics.models import LogprobsResult, SequenceDivergence, SequenceResult

    def div(m: float) -> SequenceDivergence:
        return SequenceDivergence(positions=10, mean_kl=m, p99_kl=m, max_kl=m, top1_agreement=1.0,
                                  mean_abs_dlogp=0.0, nonfinite={})  # fmt: skip

    rows = [SequenceResult(id=f"s{i}", source="t", tokens=11 + i, ab=div(kl), aa=div(0.0))
            for i, kl in enumerate(ab)]  # fmt: skip
    verdict, message, st = decide(rows)
    result = LogprobsResult(baseline={}, candidate={}, aa_source="baseline scored twice",
                            settings={}, sequences=rows, stats=st, verdict=verdict, message=message)  # fmt: skip
    (folder / f"logprobs-{tag}").mkdir(parents=True)
    (folder / f"logprobs-{tag}" / "logprobs.json").write_text(result.model_dump_json())


def test_sweep_decides_the_stored_comparisons_again_at_each_tolerance(tmp_path: Path) -> None:
    pairs = [{"name": "A/A", "kind": "aa"}, {"name": "subtle", "kind": "fault"},
             {"name": "kv", "kind": "benign"}]  # fmt: skip
    (tmp_path / "panel.json").write_text(json.dumps({"pairs": pairs}))
    _stored(tmp_path, "p00-r00", [0.0] * 10)
    for r in range(2):  # a fault at 0.005-0.0059 nats/token, a benign change at 0.0015-0.0024
        _stored(tmp_path, f"p01-r{r:02d}", [0.005 + i / 10000 for i in range(10)])
        _stored(tmp_path, f"p02-r{r:02d}", [0.0015 + i / 10000 for i in range(10)])
    data = panel.sweep([tmp_path], grid=(0.001, 0.003, 0.01))
    by = {p["name"]: p["verdicts"] for p in data["pairs"]}
    assert by["A/A"]["0.003"] == {"NO CHANGE": 1}
    assert by["subtle"] == {"0.001": {"REGRESSION": 2}, "0.003": {"REGRESSION": 2},
                            "0.01": {"NO CHANGE": 2}}  # fmt: skip
    assert by["kv"]["0.001"] == {"REGRESSION": 2} and by["kv"]["0.003"] == {"NO CHANGE": 2}
    text = "\n".join(panel.render_sweep(data))
    assert "| fault | subtle | 2 R | 2 R | 2 N |" in text
    assert (
        "- tolerance 0.003: faults not REGRESSION in every comparison: none; benign or A/A "
        "pairs with a REGRESSION: none." in text
    )
    assert "- tolerance 0.01: faults not REGRESSION in every comparison: subtle;" in text


def test_a_later_sweep_adds_its_counts_to_the_committed_one() -> None:
    first = {"command": "a", "grid": ["0.003"], "pairs": [
        {"name": "A/A", "kind": "aa", "verdicts": {"0.003": {"NO CHANGE": 20}}},
        {"name": "2 threads", "kind": "benign", "verdicts": {"0.003": {"NO CHANGE": 1}}}]}  # fmt: skip
    more = {"command": "b", "grid": ["0.003"], "pairs": [
        {"name": "2 threads", "kind": "benign",
         "verdicts": {"0.003": {"NO CHANGE": 3, "INCONCLUSIVE": 1}}},
        {"name": "new", "kind": "fault", "verdicts": {"0.003": {"REGRESSION": 5}}}]}  # fmt: skip
    out = panel.add_sweeps(first, more)
    assert [p["name"] for p in out["pairs"]] == ["A/A", "2 threads", "new"]
    assert out["pairs"][1]["verdicts"]["0.003"] == {"NO CHANGE": 4, "INCONCLUSIVE": 1}
    assert out["pairs"][2]["verdicts"]["0.003"] == {"REGRESSION": 5}
    assert first["pairs"][1]["verdicts"]["0.003"] == {"NO CHANGE": 1}  # not changed in place
    assert out["command"] == "a ; b"
    with pytest.raises(ValueError, match="grids differ"):
        panel.add_sweeps(first, {**more, "grid": ["0.01"]})
    # a folder counted once is refused the second time (it would double its counts)
    once = panel.add_sweeps({**first, "folders": ["r/a"]}, {**more, "folders": ["r/b"]})
    assert once["folders"] == ["r/a", "r/b"]
    with pytest.raises(ValueError, match="already counted in the sweep: r/b"):
        panel.add_sweeps(once, {**more, "folders": ["r/b"]})


def test_the_page_says_where_ours_is_not_a_lower_bound_and_what_the_prompt_cache_adds() -> None:
    aa = _pair("aa", "A/A", [0.0004, 0.0003], ["NO CHANGE"] * 2)
    aa["reference"] = {"mean": -1e-6, "p99": 0.0, "max": 0.0}
    off = {**_pair("aa", "A/A" + panel.NO_PROMPT_CACHE_SUFFIX, [0.0, 0.0], ["NO CHANGE"] * 2),
           "reference": None, "flags": "--parallel 1 --no-cache-prompt"}  # fmt: skip
    drop = _pair("fault", "drop", [1.0], ["REGRESSION"])  # llama-perplexity's 2.0
    lines = panel.lower_bound({"pairs": [aa, drop, off]})
    assert lines[0].startswith("- Ours at or below llama-perplexity's KLD in 2 of 3 pairs")
    assert "ours is 0.50-0.50 of it" in lines[0]
    assert lines[1] == "- Above it: A/A (ours 0.00035, llama-perplexity's -1e-06)."
    assert lines[2].startswith("- A/A: ours 0.00035 with llama-server's prompt cache")
    assert "(its default); 0 with it off (2 comparisons); llama-perplexity's -1e-06." in lines[2]
    assert len(lines) == 3
    # a variant with more flags on every launch: named after them, and the page says why
    kv = _pair("aa", "A/A" + panel.NO_PROMPT_CACHE_SUFFIX + " [--override-kv a=str:[x]]", [0.0],
               ["NO CHANGE"])  # fmt: skip
    fa = _pair("aa", "A/A" + panel.NO_PROMPT_CACHE_SUFFIX + " [--flash-attn off]", [0.0],
               ["NO CHANGE"])  # fmt: skip
    lines = panel.lower_bound({"pairs": [aa, drop, off, fa, kv]})
    assert (
        "; 0 with it off (2 comparisons); 0 with it off and --flash-attn off (1 comparison)"
        in (lines[2])
    )
    assert "and --override-kv a=str:[x] (1 comparison)" in lines[2]  # its own brackets kept
    assert lines[3].startswith("\n(H launched") and "decode path alone" in lines[3]
    # the prompt-cache-off row takes its base pair's reference figure on the page
    row = next(ln for ln in panel.render({"pairs": [aa, drop, off]}).splitlines()
               if ln.startswith("| aa | A/A (prompt cache off)"))  # fmt: skip
    assert "-1e-06 (0, 0)" in row


def test_the_shipped_numerics_set_leaves_out_what_does_not_fit_a_slot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--numerics-scenarios shipped``: scenarios/ but long_context_logs (longer than a
    slot's 4,096 tokens), recorded in the settings; the pairs' names say which set."""
    shipped = panel.numerics_scenarios("shipped")
    every = sorted((panel.ROOT / "scenarios").glob("*.yaml"))
    assert [f.stem for f in every if f not in shipped] == list(panel.TOO_LONG)
    assert [f.parent for f in panel.numerics_scenarios("e2e")] == [panel.SCENARIOS] * 3
    with pytest.raises(ValueError, match="one of e2e, shipped"):
        panel.numerics_scenarios("all")
    monkeypatch.setattr(panel, "find_llama_server", lambda _: Path("/bin/true"))
    args = panel._parser().parse_args(["--numerics-scenarios", "shipped", "--no-prompt-cache"])
    args.argv = []
    p = panel._Panel(args, tmp_path)
    assert p.data["settings"]["numerics_scenarios"] == "shipped"
    assert (
        p._row(panel.PAIRS[3])["name"]
        == "template drops tool results (prompt cache off) {scenarios/}"
    )


def test_a_sweep_says_its_rule_and_one_by_another_rule_is_not_added(tmp_path: Path) -> None:
    (tmp_path / "panel.json").write_text(json.dumps({"pairs": [{"name": "A/A", "kind": "aa"}]}))
    _stored(tmp_path, "p00-r00", [0.0] * 10)
    now = panel.sweep([tmp_path], grid=(0.003,))
    assert now["rule"] == panel.RULE == panel.SHIPPED_TEST
    before = {"grid": ["0.003"], "pairs": [
        {"name": "A/A", "kind": "aa", "verdicts": {"0.003": {"NO CHANGE": 20}}}]}  # fmt: skip
    with pytest.raises(ValueError, match="sweep rules differ"):
        panel.add_sweeps(before, now)
    data = {"settings": {}, "pairs": [_pair("aa", "A/A", [0.0], ["NO CHANGE"])]}
    assert "by the rule of the time" in panel.render(data, before)
    assert "by the rule of the time" not in panel.render(data, now)


def _named(index: int, suffix: str, verdicts: list[str], kl: float = 0.01) -> dict[str, Any]:
    pair = panel.PAIRS[index]
    return _pair(pair.kind, pair.name + suffix, [kl] * len(verdicts), verdicts)


def test_the_summary_says_whether_each_pair_meets_its_requirement() -> None:
    """A fault must be REGRESSION in every numerics comparison on scenarios/; an A/A or a
    benign change never REGRESSION (numerics on either set, or behaviour); the limit pair
    has no requirement. A failing row says so in bold."""
    shipped = panel.NUMERICS_SUFFIX["shipped"]
    limit = next(i for i, p in enumerate(panel.PAIRS) if p.kind == "limit")
    benign = next(i for i, p in enumerate(panel.PAIRS) if p.kind == "benign")
    data = {"settings": {}, "pairs": [
        _named(0, shipped, ["NO CHANGE"] * 3, 0.001),
        _named(1, shipped, ["REGRESSION", "REGRESSION"]),
        _named(2, shipped, ["REGRESSION", "INCONCLUSIVE"]),
        _named(limit, shipped, ["NO CHANGE"], 0.001),
        _named(benign, "", ["NO CHANGE"], 0.001),
        {**_named(benign, shipped, ["NO CHANGE"], 0.001),
         "behaviour": [{"verdict": "REGRESSION", "exit_code": 1, "requests": 50}]}]}  # fmt: skip
    rows = {ln.split(" | ")[1]: ln for ln in panel.summary(data, swept={})}
    assert rows[panel.PAIRS[0].name].endswith("| yes |")
    assert rows[panel.PAIRS[1].name].endswith("| yes |") and "2/2 [" in rows[panel.PAIRS[1].name]
    assert rows[panel.PAIRS[2].name].endswith("| **no** |")  # one comparison missed it
    assert rows[panel.PAIRS[limit].name].endswith("| exempt (the limit): missed |")
    assert rows[panel.PAIRS[benign].name].endswith("| **no** |")  # its behaviour alarmed
    assert "| NO CHANGE 1 |" in rows[panel.PAIRS[benign].name]  # the e2e set's column
    assert panel.PAIRS[3].name not in rows  # not in the panel: no row
    # a benign pair whose every comparison ended without a verdict has not met it
    data["pairs"][-1] = {**data["pairs"][-1], "numerics": [{"exit_code": 3}], "behaviour": []}
    data["pairs"][-2] = {**data["pairs"][-2], "numerics": [{"exit_code": 143}]}
    rows = {ln.split(" | ")[1]: ln for ln in panel.summary(data, swept={})}
    assert rows[panel.PAIRS[benign].name].endswith("| **no** |")


def test_a_pairs_kind_is_the_panels_definition_not_what_the_run_stored() -> None:
    """A panel stored when the +3% pair was a fault renders it as the limit pair, whatever
    suffixes its name carries."""
    limit = next(p for p in panel.PAIRS if p.kind == "limit")
    for suffix in ("", panel.NUMERICS_SUFFIX["shipped"], panel.NO_PROMPT_CACHE_SUFFIX,
                   panel.NO_PROMPT_CACHE_SUFFIX + " [--flash-attn off]"):  # fmt: skip
        assert panel.base_name(limit.name + suffix) == limit.name
        stored = {"pairs": [_pair("fault", limit.name + suffix, [0.002], ["NO CHANGE"])]}
        assert panel.with_kinds(stored)["pairs"][0]["kind"] == "limit"
    other = {"pairs": [_pair("fault", "not a pair of the panel", [0.1], ["REGRESSION"])]}
    assert panel.with_kinds(other)["pairs"][0]["kind"] == "fault"


def test_the_severity_line_splits_faults_seen_by_behaviour_from_those_not() -> None:
    data = {"settings": {}, "pairs": [
        {**_named(1, "", ["REGRESSION"]), "behaviour": [
            {"verdict": "REGRESSION", "exit_code": 1, "requests": 70, "seconds": 300},
            {"verdict": "REGRESSION", "exit_code": 1, "requests": 90, "seconds": 500}]},
        {**_named(5, "", ["REGRESSION"]), "behaviour": [
            {"verdict": "NO CHANGE", "exit_code": 0, "requests": 170, "seconds": 200},
            {"verdict": "REGRESSION", "exit_code": 1, "requests": 120, "seconds": 250}]}]}  # fmt: skip
    line = "\n".join(panel.severity(data))
    seen, unseen = line.split("Does not see")
    assert f"{panel.PAIRS[1].name} (2/2; 80 requests, 400 s)" in seen
    assert f"{panel.PAIRS[5].name} (1/2; 120 requests, 250 s)" in unseen


def test_the_committed_panel_meets_every_requirement() -> None:
    """The acceptance of the panel, on the committed JSON: every pair of PAIRS is on the
    page, with at least 5 numerics comparisons on scenarios/ (20 for the A/A), and none
    fails its requirement."""
    data = json.loads(panel.PANEL_JSON.read_text(encoding="utf-8"))
    rows = panel.summary(data)[2:]
    assert len(rows) == len(panel.PAIRS)
    assert not [r for r in rows if r.endswith("| **no** |")]
    by_name = {p["name"]: p for p in data["pairs"]}
    for pair in panel.PAIRS:
        rows_of = by_name[pair.name + panel.NUMERICS_SUFFIX["shipped"]]["numerics"]
        n = sum(panel._verdict(r) is not None for r in rows_of)  # comparisons that gave one
        assert n >= (20 if pair.kind == "aa" else 5), (pair.name, n)
