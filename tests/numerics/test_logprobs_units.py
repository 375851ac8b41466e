"""The numerics' unit of evidence: sequences whose compared tokens are identical count once,
and a GSM8K few-shot prompt keeps its question when it is cut.

Before: eight GSM8K prompts cut at 512 tokens fell inside the shared 5-shot preamble, came
out token for token identical, and the paired test counted them as eight independent
sequences (p = 0.0049 at n = 8 from one sequence's evidence).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.gsm8k.data import load_jsonl
from harness.numerics.decide import MIN_SEQUENCES, decide, independent
from harness.numerics.models import Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_gsm8k
from tests.conftest import GSM8K_TEST


def _questions() -> list:  # type: ignore[type-arg]
    if not GSM8K_TEST.exists():
        pytest.skip(f"{GSM8K_TEST} is missing")
    return load_jsonl(GSM8K_TEST)


@pytest.mark.parametrize("api", ["vllm", "sglang", "llama-cpp"])
def test_gsm8k_prompts_keep_their_question_when_cut(sim_url: Callable[..., str], api: str) -> None:
    """Eight GSM8K 5-shot prompts at the default 512 positions: eight different token
    spans (each ends with its own question), so eight independent sequences."""
    seqs = from_gsm8k(_questions(), 8)
    url = sim_url("healthy")
    res = compare_logprobs(seqs, url, url, LogprobsOptions(api=api))
    assert all(r.tokens <= 512 for r in res.sequences)
    assert len({r.span for r in res.sequences}) == 8
    assert res.stats.independent == 8


def test_identical_sequences_count_once(sim_url: Callable[..., str]) -> None:
    """Eight copies of one prompt are one sequence to the paired test: INCONCLUSIVE (one
    sequence cannot reach alpha), where counting copies gave a verdict."""
    text = "Question: Natalia sold clips to 48 of her friends in April. " * 6
    seqs = [Sequence(id=f"copy-{i}", source="gsm8k", text=text) for i in range(8)]
    url = sim_url("healthy")
    res = compare_logprobs(seqs, url, sim_url("kv-cache-quant"))
    assert res.stats.independent == 1
    assert res.verdict == "INCONCLUSIVE"
    assert "1 independent sequences" in res.message and "7 more were copies" in res.message
    # the same rows with the copies told apart would have been enough for a verdict
    distinct = [r.model_copy(update={"span": str(i)}) for i, r in enumerate(res.sequences)]
    assert len(independent(distinct)) == 8 >= MIN_SEQUENCES
    assert decide(distinct)[0] != "INCONCLUSIVE"
