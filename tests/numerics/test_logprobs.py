"""Numerics divergence (``harness logprobs``): the estimator and the decision against known
values, each adapter against its server's documented response shape, and the whole
comparison over real sockets against the reference server's profiles."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from scipy import stats

from harness.cli import main
from harness.errors import LogprobsError, TokenizationMismatch
from harness.numerics.adapters import (
    EchoAdapter,
    GreedyAdapter,
    SGLangAdapter,
    VLLMAdapter,
    detect,
)
from harness.numerics.decide import TOLERANCE, decide
from harness.numerics.divergence import (
    align_generated,
    check_aligned,
    kl_topk,
    sequence_divergence,
)
from harness.numerics.models import ScoredSequence, Sequence, SequenceDivergence, SequenceResult
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_scenario
from harness.scenario.model import load_scenarios

SEQS = [from_scenario(s) for s in load_scenarios(["scenarios"])]


# ------------------------------------------------------------------ the estimator


def _lp(p: np.ndarray) -> dict[str, float]:
    return {str(i): float(np.log(v)) for i, v in enumerate(p)}


def test_kl_topk_equals_scipy_when_the_top_k_covers_the_vocabulary() -> None:
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    assert kl_topk(_lp(p), _lp(q)) == pytest.approx(stats.entropy(p, q), rel=1e-9)


def test_kl_topk_is_the_coarsened_kl_and_a_lower_bound() -> None:
    rng = np.random.default_rng(2)
    for _ in range(200):
        p, q = rng.dirichlet(np.ones(50) * 0.3), rng.dirichlet(np.ones(50) * 0.3)
        top_p = {k: v for k, v in _lp(p).items() if int(k) in np.argsort(-p)[:5]}
        top_q = {k: v for k, v in _lp(q).items() if int(k) in np.argsort(-q)[:5]}
        shared = sorted(top_p.keys() & top_q.keys(), key=int)
        if not shared:
            assert math.isnan(kl_topk(top_p, top_q))
            continue
        idx = [int(k) for k in shared]
        cp = np.append(p[idx], 1 - p[idx].sum())  # the partition the docstring states
        cq = np.append(q[idx], 1 - q[idx].sum())
        est = kl_topk(top_p, top_q)
        assert est == pytest.approx(stats.entropy(cp, cq), rel=1e-6, abs=1e-12)
        assert est <= stats.entropy(p, q) + 1e-12  # biased low: never above the full KL


def test_kl_topk_non_finite_is_nan_and_identical_is_zero() -> None:
    assert kl_topk({"a": -0.1, "b": -2.5}, {"a": -0.1, "b": -2.5}) == 0.0
    assert math.isnan(kl_topk({"a": float("nan")}, {"a": -0.1}))
    assert math.isnan(kl_topk({"a": -0.1}, {"a": float("-inf")}))


def _scored(keys: list[str], lps: list[float]) -> ScoredSequence:
    top = [{}] + [
        {k: lp, "x": math.log(max(1e-9, 1 - math.exp(lp)) / 2)}
        for k, lp in zip(keys[1:], lps, strict=True)
    ]
    return ScoredSequence(keys, keys, [None, *lps], top, names={k: k for k in keys})


def test_sequence_divergence_statistics_and_first_over() -> None:
    a = _scored(["s", "a", "b", "c"], [-0.1, -0.2, -0.3])
    b = _scored(["s", "a", "b", "c"], [-0.1, -2.0, -0.3])
    d = sequence_divergence(a, b, token_tolerance=0.1)
    kls = [kl_topk(a.top[i], b.top[i]) for i in (1, 2, 3)]
    assert d.positions == 3 and d.mean_kl == pytest.approx(np.mean(kls))
    assert d.max_kl == pytest.approx(max(kls)) and d.p99_kl == pytest.approx(np.percentile(kls, 99))
    assert d.first_over is not None and d.first_over.position == 2 and d.first_over.before == "sa"
    assert d.mean_abs_dlogp == pytest.approx(1.8 / 3)
    assert d.worst[0].position == 2


def test_check_aligned_names_the_first_differing_position() -> None:
    a = _scored(["s", "a", "b", "c"], [-0.1, -0.2, -0.3])
    with pytest.raises(TokenizationMismatch, match=r"position 2: baseline 'b'.*candidate 'B'"):
        check_aligned("x", a, _scored(["s", "a", "B", "c"], [-0.1, -0.2, -0.3]))
    with pytest.raises(TokenizationMismatch, match="4 tokens, the candidate 3"):
        check_aligned("x", a, _scored(["s", "a", "b"], [-0.1, -0.2]))


# ------------------------------------------------------------------ the decision


def _row(ab: float | None, aa: float | None, nan_c: int = 0, nan_b: int = 0) -> SequenceResult:
    def div(m: float | None, nf: dict[str, int]) -> SequenceDivergence:
        return SequenceDivergence(positions=10, mean_kl=m, p99_kl=m, max_kl=m, top1_agreement=1.0,
                                  mean_abs_dlogp=0.0, nonfinite=nf)  # fmt: skip

    return SequenceResult(
        id="s", source="t", tokens=11,
        ab=div(ab, {"baseline": nan_b, "candidate": nan_c}), aa=div(aa, {"baseline": nan_b, "candidate": 0}),
    )  # fmt: skip


def test_decide_p_value_is_scipys_wilcoxon() -> None:
    rng = np.random.default_rng(3)
    ab, aa = rng.gamma(2, 0.01, 15), rng.gamma(2, 0.001, 15)
    _, _, st = decide([_row(a, b) for a, b in zip(ab, aa, strict=True)], tolerance=0.01)
    want = stats.wilcoxon(ab - aa - 0.01, alternative="greater").pvalue
    assert st.p_regression == pytest.approx(want)


def test_decide_verdicts() -> None:
    assert decide([_row(0.1 + i / 1000, 1e-5) for i in range(10)])[0] == "REGRESSION"
    assert decide([_row(1e-4 + i / 1e5, 1e-5) for i in range(10)])[0] == "NO CHANGE"
    assert decide([_row(0.0, 0.0) for _ in range(10)])[0] == "NO CHANGE"  # deterministic server
    assert decide([_row(0.1, 0.0) for _ in range(3)])[0] == "INCONCLUSIVE"  # too few
    near = [_row(TOLERANCE + (-1) ** i * TOLERANCE / 2, 0.0) for i in range(10)]
    assert decide(near)[0] == "INCONCLUSIVE"


def test_a_fault_on_a_minority_of_sequences_is_decided_by_its_mean() -> None:
    """8 of 75 sequences at 0.15 nats/token, the rest at the floor: the mean (0.016) is five
    times the tolerance, the typical sequence within it. The signed rank alone said NO
    CHANGE (the rule before); the t-test on the mean makes it a REGRESSION."""
    rows = [_row(0.15 if i < 8 else 1e-4, 1e-4) for i in range(75)]
    verdict, msg, st = decide(rows)
    assert st.p_no_change is not None and st.p_no_change < 0.01  # the signed rank: within
    x = np.array([0.15 - 1e-4] * 8 + [0.0] * 67) - TOLERANCE
    assert st.p_regression_mean == pytest.approx(
        stats.ttest_1samp(x, 0.0, alternative="greater").pvalue
    )
    assert st.p_no_change_mean == pytest.approx(
        stats.ttest_1samp(x, 0.0, alternative="less").pvalue
    )
    assert verdict == "REGRESSION" and "the mean is above tolerance" in msg


def test_no_change_needs_the_mean_within_tolerance_too() -> None:
    """Most sequences well within the tolerance, a few far enough above it that the mean is
    near it: not NO CHANGE (the signed rank alone would say so), not REGRESSION either."""
    rows = [_row(0.03 + 1e-4 if i < 3 else 1e-4, 1e-4) for i in range(30)]  # mean at tau
    verdict, _, st = decide(rows)
    assert st.p_no_change is not None and st.p_no_change < 0.01
    assert st.p_no_change_mean is not None and st.p_no_change_mean > 0.01
    assert verdict == "INCONCLUSIVE"


def test_the_mean_test_with_no_spread_knows_the_mean() -> None:
    from harness.numerics.decide import _ttest

    assert (
        _ttest(np.full(5, -0.003), "less") == 0.0 and _ttest(np.full(5, -0.003), "greater") == 1.0
    )
    assert _ttest(np.full(5, 0.01), "greater") == 0.0 and _ttest(np.array([0.5]), "greater") == 1.0


def test_decide_non_finite_is_a_finding_not_a_crash() -> None:
    v, msg, _ = decide([_row(None, 1e-5, nan_c=3)] + [_row(1e-4, 1e-5) for _ in range(9)])
    assert v == "REGRESSION" and "NaN/infinite" in msg and "3 positions" in msg
    v, msg, _ = decide([_row(1e-4, None, nan_b=2) for _ in range(9)])
    assert v == "INCONCLUSIVE" and "baseline" in msg


# ------------------------------------------------------------------ adapters vs documented shapes


def _mock(answers: dict[str, Any]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        body = answers.get(request.url.path)
        if body is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(200, content=json.dumps(body).encode())

    return httpx.Client(transport=httpx.MockTransport(handler))


#: vLLM: TokenizeResponse and a completion choice with prompt_logprobs (dict keyed by token id,
#: Logprob {logprob, rank, decoded_token}; -inf clamped to -9999.0)
VLLM = {
    "/tokenize": {"count": 3, "max_model_len": 2048, "tokens": [1, 15, 27]},
    "/v1/completions": {"choices": [{"index": 0, "text": "x", "prompt_logprobs": [
        None,
        {"15": {"logprob": -1.2, "rank": 2, "decoded_token": "Hi"},
         "9": {"logprob": -0.5, "rank": 1, "decoded_token": "Hello"}},
        {"27": {"logprob": -9999.0, "rank": 900, "decoded_token": "!"},
         "3": {"logprob": -0.1, "rank": 1, "decoded_token": ","}},
    ]}]},
}  # fmt: skip
#: SGLang: meta_info.input_token_logprobs [[logprob, id, text]], input_top_logprobs (first None)
SGLANG = {"/generate": {"text": "", "meta_info": {
    "input_token_logprobs": [[None, 1, "<s>"], [-0.4, 3, " a"]],
    "input_top_logprobs": [None, [[-0.4, 3, " a"], [-1.3, 5, " b"]]],
}}}  # fmt: skip
#: llama-cpp-python 0.3.36 _create_completion with echo: the prompt's tokens then 1 generated
ECHO = {"/v1/completions": {"choices": [{"text": "Hi there!", "logprobs": {
    "tokens": ["Hi", " there", "!"], "text_offset": [0, 2, 8],
    "token_logprobs": [None, -2.0, -0.7],
    "top_logprobs": [None, {" there": -2.0, " you": -0.3}, {"!": -0.7}],
}}], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}}  # fmt: skip


def test_vllm_shape() -> None:
    s = VLLMAdapter(_mock(VLLM), "http://x", model="m", top_k=1).score(SEQS[0])
    assert s.keys == ["1", "15", "27"] and s.texts[1:] == ["Hi", "!"]
    assert s.logprobs[1] == -1.2 and s.logprobs[2] == -math.inf and s.nonfinite() == 1
    assert s.top[1] == {"15": -1.2, "9": -0.5}


def test_sglang_shape() -> None:
    s = SGLangAdapter(_mock(SGLANG), "http://x", model=None, top_k=2).score(SEQS[0])
    assert (
        s.keys == ["1", "3"] and s.logprobs == [None, -0.4] and s.top[1] == {"3": -0.4, "5": -1.3}
    )


def test_echo_shape_drops_the_generated_token() -> None:
    s = EchoAdapter(_mock(ECHO), "http://x", model=None, top_k=2).score(SEQS[0])
    assert s.keys == ["Hi", " there"] and s.logprobs == [None, -2.0]
    assert s.top[1] == {" there": -2.0, " you": -0.3}


#: OpenAI chat completions with logprobs: true, top_logprobs: 2 (the API reference's shape)
GREEDY = {"/v1/chat/completions": {"choices": [{"index": 0, "message": {"content": "Hi!"},
    "logprobs": {"content": [
        {"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
         "top_logprobs": [{"token": "Hi", "logprob": -0.1}, {"token": "Hello", "logprob": -2.4}]},
        {"token": "!", "logprob": -0.3, "bytes": [33], "top_logprobs": [{"token": "!", "logprob": -0.3}]},
    ]}}]}}  # fmt: skip


def test_greedy_shape_puts_the_prompt_at_position_0() -> None:
    s = GreedyAdapter(_mock(GREEDY), "http://x", model=None, top_k=2).score(SEQS[0])
    assert s.keys == ["<prompt>", "Hi", "!"] and s.logprobs == [None, -0.1, -0.3]
    assert s.top[1] == {"Hi": -0.1, "Hello": -2.4}


def test_align_generated_keeps_the_first_parting_position() -> None:
    a = _scored(["p", "x", "y", "z"], [-0.1, -0.2, -0.3])
    b = _scored(["p", "x", "w", "v"], [-0.1, -0.9, -0.3])
    a2, b2, at = align_generated(a, b)
    assert at == 2 and a2.keys == b2.keys == ["p", "x", "y"] and b2.logprobs == [None, -0.1, -0.9]
    assert align_generated(a, a)[2] is None


def test_greedy_on_the_reference_server_names_where_the_paths_part(
    sim_url: Callable[..., str],
) -> None:
    base, opts = sim_url("healthy"), LogprobsOptions(api="greedy")
    fused = compare_logprobs(SEQS, base, sim_url("fused-regression"), opts)
    assert fused.verdict == "REGRESSION" and any(r.parted for r in fused.sequences)
    assert next(r.parted for r in fused.sequences if r.parted).startswith("position ")
    aa = compare_logprobs(SEQS, base, sim_url("healthy", seed=3), opts)
    assert aa.verdict == "NO CHANGE"  # batch noise may flip a near-tie: rarely
    assert sum(bool(r.parted) for r in aa.sequences) < sum(bool(r.parted) for r in fused.sequences)


def test_truncated_lists_and_missing_support_are_one_line_errors() -> None:
    short = json.loads(json.dumps(VLLM))
    short["/v1/completions"]["choices"][0]["prompt_logprobs"].pop()
    with pytest.raises(LogprobsError, match="2 entries for 3 tokens"):
        VLLMAdapter(_mock(short), "http://x", model="m", top_k=1).score(SEQS[0])
    with pytest.raises(LogprobsError, match="no teacher-forced logprobs API.*--logits_all true"):
        detect(_mock({}), "http://x", model=None, top_k=1)


# ------------------------------------------------------------------ over real sockets


@pytest.mark.parametrize("api", ["vllm", "sglang", "llama-cpp"])
def test_every_api_on_the_reference_server(sim_url: Callable[..., str], api: str) -> None:
    base, fused, kv = sim_url("healthy"), sim_url("fused-regression"), sim_url("kv-cache-quant")
    opts = LogprobsOptions(api=api)
    seqs = SEQS[:8]
    assert compare_logprobs(seqs, base, fused, opts).verdict == "REGRESSION"
    benign = compare_logprobs(seqs, base, kv, opts)
    assert benign.verdict == "NO CHANGE"
    assert benign.stats.ab_mean_kl > 3 * benign.stats.aa_mean_kl  # a real shift, below tolerance
    aa = compare_logprobs(seqs, base, sim_url("healthy", seed=5), opts)
    assert aa.verdict == "NO CHANGE" and aa.stats.aa_mean_kl > 0  # batch noise measured


def test_auto_detects_vllm_and_a_second_baseline_gives_the_floor(
    sim_url: Callable[..., str],
) -> None:
    base, cand, base2 = sim_url("healthy"), sim_url("healthy"), sim_url("healthy")
    res = compare_logprobs(SEQS[:7], base, cand, LogprobsOptions(aa_url=base2))
    assert res.baseline["api"] == "vllm" and res.aa_source.endswith(base2)
    assert res.requests == {"baseline": 14, "candidate": 14, "baseline2": 14}
    again = compare_logprobs(SEQS[:7], base, cand)  # scored twice: tokenised once
    assert again.requests == {"baseline": 21, "candidate": 14}


def test_nan_logprobs_are_a_regression_finding(sim_url: Callable[..., str]) -> None:
    res = compare_logprobs(SEQS[:8], sim_url("healthy"), sim_url("logprobs-nan"))
    assert res.verdict == "REGRESSION" and "NaN" in res.message
    assert any(r.ab.nonfinite["candidate"] for r in res.sequences)


def test_server_errors_and_context_overflow(sim_url: Callable[..., str]) -> None:
    with pytest.raises(LogprobsError, match="no teacher-forced logprobs API"):
        compare_logprobs(SEQS[:2], sim_url("http-500"), sim_url("healthy"))
    with pytest.raises(LogprobsError, match="HTTP 500"):
        compare_logprobs(SEQS[:2], sim_url("healthy"), sim_url("http-500"))
    long = Sequence(id="long", source="t", text="word " * 40_000)
    with pytest.raises(LogprobsError, match="context overflow"):
        compare_logprobs(
            [long], sim_url("healthy"), sim_url("healthy"), LogprobsOptions(max_tokens=10**6)
        )


def test_cli_exit_codes(sim_url: Callable[..., str], tmp_path: Any, capsys: Any) -> None:
    assert (
        main(
            [
                "logprobs",
                "--results",
                str(tmp_path),
                "scenarios/enum_units.yaml",
                "scenarios/typed_scalars.yaml",
            ]
        )
        == 1
    )  # fmt: skip  (2 sequences: decided by blocks of tokens)
    assert "REGRESSION" in (out := capsys.readouterr().out) and "blocks of 32 tokens" in out
    assert main(["logprobs", "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert (
        "REGRESSION" in out
        and (
            tmp_path / out.split("run folder: ")[1].split()[0].split("/")[-1] / "logprobs.json"
        ).exists()
    )
    assert main(["logprobs", "--results", str(tmp_path), "--sim-candidate", "kv-cache-quant"]) == 0
    capsys.readouterr()
    bad = sim_url("http-500")
    assert (
        main(["logprobs", "--baseline", bad, "--candidate", bad, "--results", str(tmp_path)]) == 3
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--no-logprobs" in err[0]
