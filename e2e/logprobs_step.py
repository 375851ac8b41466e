"""The numerics step of the e2e job: ``harness record`` and ``harness logprobs`` on real
llama.cpp servers, one server at a time.

Servers run with ``--logits_all true`` (llama-cpp-python returns prompt logprobs only
then; the adapter is ``llama-cpp``: ``/v1/completions`` with ``echo`` + ``logprobs``).
Baseline L (the default configuration) is launched, its numerics recorded (``harness
record --numerics-only``: the reference conversations of the first 10 files of
``scenarios/``, the first :data:`MAX_TOKENS` tokens of each, scored twice: the A/A floor)
and stopped; then each candidate is started and compared with the recording:

- ``logprobs A/A``: L2, a new process of the same configuration: must be NO CHANGE (a
  REGRESSION is a false alarm: the job fails, as for the other A/A steps);
- ``logprobs A/B rope``: the same model with a RoPE base 10x too low
  (``--rope_freq_base 10000``; SmolLM2-135M's is 100000): must be REGRESSION, else the job
  fails (:func:`failed`): the fault the behavioural compare missed;
- ``logprobs A/B kv-q4_0``: a q4_0 K and V cache (with flash attention): reported
  whatever it is (docs/e2e-figures.md).

llama-cpp-python computes its top-k by sorting the whole vocabulary in Python for every
prompt token (and detokenises every prefix), so scoring costs 0.1-0.3 s a token on one
busy core: L scores :data:`MAX_TOKENS` tokens of 10 sequences twice, each candidate once.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "KV_ARGS",
    "by_class",
    "LOGITS_ARGS",
    "MAX_TOKENS",
    "RECORDING",
    "ROPE_ARGS",
    "Launch",
    "failed",
    "logprobs_steps",
]

LOGITS_ARGS = ("--logits_all", "true")
ROPE_ARGS = ("--rope_freq_base", "10000")
KV_ARGS = ("--type_k", "2", "--type_v", "2", "--flash_attn", "true")
MAX_TOKENS = 64
#: the first 10 reference conversations (the paired test needs at least 7 sequences; with
#: 10, two below the tolerance still leave p < 0.01)
SCENARIOS = sorted(str(p) for p in Path("scenarios").glob("*.yaml"))[:10]

Up = Callable[[str, Sequence[str]], contextlib.AbstractContextManager[str]]
#: ``launch(extra_args)``: ``--cmd CMD --url URL ...`` arguments of a server to launch
Launch = Callable[[Sequence[str]], list[str]]


def _record_argv(launch: Sequence[str], out: Path) -> list[str]:
    """``harness record --numerics-only`` of L: the reference conversations scored twice."""
    cmd, *rest = launch
    return ["record", "--cmd", cmd, *rest, "--label", "L", "--numerics-only",
            "--logprobs-api", "llama-cpp", "--logprobs-max-tokens", str(MAX_TOKENS),
            *SCENARIOS, "--results", str(out), "--run-id", RECORDING, "--no-progress"]  # fmt: skip


def _argv(cand: str, run_id: str, out: Path) -> list[str]:
    return ["logprobs", "--baseline", str(out / RECORDING), "--candidate", cand,
            "--results", str(out), "--run-id", run_id]  # fmt: skip


#: the run folder of L's numerics recording
RECORDING = "logprobs-record-L"


def _figures(out: Path, run_id: str) -> dict[str, Any]:
    from harness.numerics.models import LogprobsResult
    from harness.runfolder import RunFolder

    res = RunFolder(out / run_id).read_model(RunFolder.LOGPROBS, LogprobsResult)
    if res is None:
        return {}
    st = res.stats
    return {"verdict": res.verdict, "message": res.message, "ab_mean_kl": st.ab_mean_kl,
            "aa_mean_kl": st.aa_mean_kl, "ab_top1_agreement": st.ab_top1_agreement,
            "sequences": st.sequences, "requests": res.requests,
            "by_class": by_class(res.model_dump(mode="json"))}  # fmt: skip


def by_class(logprobs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per token class of a ``logprobs.json`` (its ``by_class``): positions, the A/B and
    A/A mean KLD (nats) and the A/B same top p (a fraction), in the file's order."""
    out = {}
    for c in logprobs.get("by_class") or []:
        ab, aa = c.get("ab") or {}, c.get("aa") or {}
        out[c["token_class"]] = {"positions": ab.get("positions"), "kld_mean": ab.get("kld_mean"),
                                 "aa_kld_mean": aa.get("kld_mean"),
                                 "same_top_p": ab.get("same_top_p")}  # fmt: skip
    return out


def logprobs_steps(
    out: Path, up: Up, harness: Callable[[Any], Any], step_cls: type, launch: Launch
) -> list[Any]:
    r"""Record L, then compare each candidate with the recording (module docstring);
    returns the ``Step``\ s (figures filled). ``launch(extra_args)`` gives ``--cmd``-style
    arguments for ``harness record`` (L launched, recorded, stopped), ``up(name,
    extra_args)`` starts a candidate, ``harness(step)`` runs one ``harness`` command as the
    driver does. A candidate that does not boot ends its comparison with exit code 2 (the
    rope one then fails the job); a recording that fails fails the A/A (exit code kept)."""
    record = harness(step_cls("logprobs record L", _record_argv(launch(LOGITS_ARGS), out)))
    record.run_dir = str(out / RECORDING)
    steps = [record]
    plan = [("logprobs A/A", "logprobs-aa", ()), ("logprobs A/B rope", "logprobs-rope", ROPE_ARGS),
            ("logprobs A/B kv-q4_0", "logprobs-kv", KV_ARGS)]  # fmt: skip
    for name, run_id, extra in plan:
        if record.exit_code != 0:
            step = step_cls(name, [], exit_code=record.exit_code,
                            figures={"message": "L's numerics were not recorded"})  # fmt: skip
        else:
            try:
                with up(run_id, (*LOGITS_ARGS, *extra)) as cand:
                    step = harness(step_cls(name, _argv(cand, run_id, out)))
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
