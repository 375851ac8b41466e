"""The numerics step of the e2e job: ``harness logprobs`` on real llama.cpp servers.

Servers run with ``--logits_all true`` (llama-cpp-python returns prompt logprobs only
then; the adapter is ``llama-cpp``: ``/v1/completions`` with ``echo`` + ``logprobs``).
Three comparisons over the reference conversations of the first 10 files of
``scenarios/`` (the first :data:`MAX_TOKENS` tokens of each), baseline L (the default
configuration):

- ``logprobs A/A``: L against L2, a second process of the same configuration: must be
  NO CHANGE (a REGRESSION is a false alarm: the job fails, as for the other A/A steps);
- ``logprobs A/B rope``: L against the same model with a RoPE base 10x too low
  (``--rope_freq_base 10000``; SmolLM2-135M's is 100000): must be REGRESSION, else the job
  fails (:func:`failed`): the fault the behavioural compare missed;
- ``logprobs A/B kv-q4_0``: L against a q4_0 K and V cache (with flash attention): reported
  whatever it is (README, observed figures).

llama-cpp-python computes its top-k by sorting the whole vocabulary in Python for every
prompt token (and detokenises every prefix), so scoring costs 0.1-0.3 s a token on one
busy core: the step scores :data:`MAX_TOKENS` tokens of 10 sequences (3 scorings each).
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KV_ARGS", "LOGITS_ARGS", "MAX_TOKENS", "ROPE_ARGS", "failed", "logprobs_steps"]

LOGITS_ARGS = ("--logits_all", "true")
ROPE_ARGS = ("--rope_freq_base", "10000")
KV_ARGS = ("--type_k", "2", "--type_v", "2", "--flash_attn", "true")
MAX_TOKENS = 64
#: the first 10 reference conversations (the paired test needs at least 7 sequences; with
#: 10, two below the tolerance still leave p < 0.01)
SCENARIOS = sorted(str(p) for p in Path("scenarios").glob("*.yaml"))[:10]

Up = Callable[[str, Sequence[str]], contextlib.AbstractContextManager[str]]


def _argv(base: str, cand: str, run_id: str, out: Path) -> list[str]:
    return ["logprobs", *SCENARIOS, "--baseline", base, "--candidate", cand,
            "--logprobs-api", "llama-cpp", "--max-tokens", str(MAX_TOKENS),
            "--results", str(out), "--run-id", run_id]  # fmt: skip


def _figures(out: Path, run_id: str) -> dict[str, Any]:
    from harness.numerics.models import LogprobsResult
    from harness.runfolder import RunFolder

    res = RunFolder(out / run_id).read_model(RunFolder.LOGPROBS, LogprobsResult)
    if res is None:
        return {}
    st = res.stats
    return {"verdict": res.verdict, "message": res.message, "ab_mean_kl": st.ab_mean_kl,
            "aa_mean_kl": st.aa_mean_kl, "ab_top1_agreement": st.ab_top1_agreement,
            "sequences": st.sequences, "requests": res.requests}  # fmt: skip


def logprobs_steps(out: Path, up: Up, harness: Callable[[Any], Any], step_cls: type) -> list[Any]:
    """Run the three comparisons (module docstring); returns their ``Step``\\ s (figures
    filled). ``up(name, extra_args)`` starts a llama.cpp server, ``harness(step)`` runs one
    ``harness`` command as the driver does. A server that does not boot ends that
    comparison with exit code 2 (the rope one then fails the job)."""
    steps = []
    with up("L", LOGITS_ARGS) as base:
        plan = [("logprobs A/A", "logprobs-aa", ()), ("logprobs A/B rope", "logprobs-rope", ROPE_ARGS),
                ("logprobs A/B kv-q4_0", "logprobs-kv", KV_ARGS)]  # fmt: skip
        for name, run_id, extra in plan:
            try:
                with up(run_id, (*LOGITS_ARGS, *extra)) as cand:
                    step = harness(step_cls(name, _argv(base, cand, run_id, out)))
            except Exception as exc:  # E2EError: the server did not boot
                print(f"e2e: {name}: server ({shlex.join(extra)}) did not boot: {exc}")
                step = step_cls(name, [], exit_code=2, figures={"message": str(exc)})
            step.run_dir = str(out / run_id)
            step.figures = step.figures or _figures(out, run_id)
            steps.append(step)
    return steps


def failed(steps: Sequence[Any]) -> list[str]:
    """Why the numerics steps fail the job, one line per failing step (empty: they pass):
    the A/A is a REGRESSION or did not end with exit 0, or the wrong RoPE base is not a
    REGRESSION."""
    why = []
    for s in steps:
        verdict = s.figures.get("verdict")
        if s.name == "logprobs A/A" and (verdict == "REGRESSION" or s.exit_code not in (0,)):
            why.append(f"logprobs A/A: {verdict or 'no verdict'} (exit {s.exit_code}), "
                       "required: not REGRESSION")  # fmt: skip
        if s.name == "logprobs A/B rope" and verdict != "REGRESSION":
            why.append(f"logprobs rope: {verdict or 'no verdict'}, expected REGRESSION")
    return why
