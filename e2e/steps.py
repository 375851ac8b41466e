"""The e2e job's steps: a ``harness`` command run in this process (:class:`Step`,
:func:`run_harness`) and the figures read back from its run folder (:func:`record_figures`,
:func:`pass_rates`, :func:`compare_figures` with :func:`numerics_figures`,
:func:`gsm8k_figures`). Shared by the
llama-server job (:mod:`e2e.driver`), the BFCL step (:mod:`e2e.bfcl`) and the vLLM part
(:mod:`e2e.vllm`); imports none of them."""

from __future__ import annotations

import json
import shlex
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.runfolder import RunFolder
from harness.transcript import RunRecord

__all__ = [
    "CATCH_KIND",
    "Role",
    "Step",
    "compare_figures",
    "confirm_aa",
    "decode_path",
    "gsm8k_figures",
    "numerics_figures",
    "pass_rates",
    "record_figures",
    "run_harness",
]

#: the failure kind the broken-template A/B was meant to name (reported: e2e.driver.caught)
CATCH_KIND = "repeat_loop"

#: what a step's verdict must be for the job to pass: ``aa`` not REGRESSION, ``catch``
#: REGRESSION; ``run`` must run; ``bfcl`` must run to the end with no infrastructure error
#: the server did not cause (:func:`e2e.bfcl.failed`); ``report`` never fails the job;
#: ``aa-retried`` an A/A REGRESSION that an independent second A/A did not reproduce
#: (:func:`confirm_aa`): shown, never failing the job
Role = Literal["boot", "run", "aa", "aa-retried", "catch", "bfcl", "report"]


# ---------------------------------------------------------------- steps


@dataclass
class Step:
    """One ``harness`` command of the job: its argv, exit code, wall time (s) and folder.

    ``role`` says what the job requires of it (:data:`Role`).
    """

    name: str
    argv: list[str]
    role: Role = "report"
    exit_code: int | None = None
    seconds: float = 0.0
    run_dir: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def run_harness(step: Step) -> Step:
    """Run ``harness <argv>`` in this process (``harness.cli.main``), timing it."""
    from harness.cli import main as cli_main

    print(f"\n=== e2e: {step.name}: harness {shlex.join(step.argv)}", flush=True)
    t0 = time.monotonic()
    try:
        step.exit_code = cli_main(step.argv)
    except SystemExit as exc:  # argparse: a usage error
        step.exit_code = exc.code if isinstance(exc.code, int) else 2
    step.seconds = round(time.monotonic() - t0, 1)
    print(f"=== e2e: {step.name}: exit {step.exit_code} in {step.seconds:.1f}s", flush=True)
    if step.exit_code in (130, 143):  # Ctrl-C or SIGTERM inside: stop the servers, the job
        raise KeyboardInterrupt
    return step


def confirm_aa(first: Step, again: Callable[[], list[Step]]) -> list[Step]:
    """An A/A comparison's gate, replicated once: ``[first]`` unless ``first`` came out
    REGRESSION (``harness compare`` exit 1); then ``again()`` runs a second A/A on fresh
    request seeds (a fresh recording where the baseline is one) and returns its steps, the
    last of them the replica's ``aa`` step, and the first is kept as ``aa-retried``: shown in
    the figures, the job judged on the replica.

    Why: between equal servers the rule false-alarms at its alpha (0.01, and at most that
    under exchangeable runs: a permutation test), so every A/A gate of a job fails about 1%
    of healthy builds; a false alarm reproduces on independent runs with probability alpha
    again (a gate error of about alpha squared). The price is power: a difference between
    two launches that one comparison shows with probability p now fails the job with p
    squared, so a systematic one (state carried between runs, a server that is not what its
    flags say) still fails it nearly every time, and one that shows only now and then may
    not. An infrastructure failure (exit 3) or a step that did not run is never replicated."""
    if first.exit_code != 1:
        return [first]
    if first.role != "aa":  # a reported A/A: replicated for the figures, judged by none
        return [first, *again()]
    print(f"e2e: {first.name}: REGRESSION between equal servers; an independent A/A on "
          "fresh seeds decides (a false alarm does not reproduce)", flush=True)  # fmt: skip
    first.role = "aa-retried"
    return [first, *again()]


# ---------------------------------------------------------------- figures


def _quirks(rec: RunRecord) -> dict[str, int]:
    """Counts of llama-cpp-python's wire quirks in one run (see docs/e2e-llama-cpp-python.md)."""
    out = {"function_call_colon": 0, "null_content_with_tool_calls": 0}
    for t in rec.turns:
        r = t.response
        if r is None or not r.tool_calls:
            continue
        name = (r.function_call or {}).get("name")
        out["function_call_colon"] += isinstance(name, str) and name.endswith(":")
        out["null_content_with_tool_calls"] += r.content is None
    return out


def record_figures(run_dir: str | Path) -> dict[str, Any]:
    """Runs, tool calls, final answers, infra errors and quirk counts of ``transcripts.jsonl``.

    Returns a JSON-ready dict; per-side figures under ``sides`` keyed by side or label
    (``/stream`` appended for streamed runs), and :func:`pass_rates` under ``passed``.
    """
    sides: dict[str, dict[str, int]] = {}
    for rec in RunFolder(run_dir).records():
        key = f"{rec.target.side or rec.target.label}{'/stream' if rec.stream else ''}"
        s = sides.setdefault(key, dict.fromkeys(
            ("runs", "tool_calls", "final_answers", "turn_cap", "empty_stop", "infra_errors",
             "function_call_colon", "null_content_with_tool_calls"), 0))  # fmt: skip
        s["runs"] += 1
        s["tool_calls"] += sum(1 for _ in rec.all_tool_calls())
        s["final_answers"] += rec.stop_reason == "final_answer"
        s["turn_cap"] += rec.stop_reason == "turn_cap"
        s["empty_stop"] += rec.stop_reason == "empty_stop"
        s["infra_errors"] += rec.is_infra_error
        for k, v in _quirks(rec).items():
            s[k] += v
    return {"sides": sides, "passed": pass_rates(run_dir)}


def pass_rates(run_dir: str | Path) -> dict[str, str]:
    """``"k/n"`` passed runs per ``side/scenario/stream|nostream`` from ``scores.jsonl``.

    ``n`` counts the scored runs (infrastructure errors excluded, as in the verdict's
    rates; their number follows in brackets when there are any).
    """
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for _, s in RunFolder(run_dir).scores_with_offsets():
        c = counts[f"{s.side}/{s.scenario_id}/{'stream' if s.stream else 'nostream'}"]
        if s.termination == "error":
            c[2] += 1
            continue
        c[0] += s.passed
        c[1] += 1
    return {
        k: f"{p}/{n}" + (f" ({e} infra errors)" if e else "")
        for k, (p, n, e) in sorted(counts.items())
    }


def compare_figures(run_dir: Path) -> dict[str, Any]:
    out = record_figures(run_dir)
    path = run_dir / "summary.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        verdict = data.get("verdict") or {}
        out["verdict"] = verdict.get("verdict")
        out["message"] = verdict.get("message")
        out["regressed_kinds"] = verdict.get("regressed_kinds", [])
        out["names_repeat_loop"] = CATCH_KIND in out["regressed_kinds"]
        out["per_scenario"] = {c["scenario_id"]: c["verdict"] for c in data.get("comparisons", [])}
    out.update(numerics_figures(run_dir))
    return out


def decode_path(logprobs: dict[str, Any]) -> dict[str, Any] | None:
    """The decode path of a ``logprobs.json`` (as a dict): its ``decode`` section, or the
    whole result when it is itself generation-aligned (a server with no teacher-forced
    API: llama-server), else None."""
    if isinstance(logprobs.get("decode"), dict):
        return dict(logprobs["decode"])
    if (logprobs.get("settings") or {}).get("generation"):
        return logprobs
    return None


def numerics_figures(run_dir: Path) -> dict[str, Any]:
    """The numerics of a compare folder (``logprobs.json``): which paths it holds, and the
    decode path's verdict, message, KL (A/B and A/A along the common prefix) and the
    prompts whose greedy paths part within :data:`harness.numerics.decide.EARLY` tokens,
    A/B and A/A (``{}`` when there is no ``logprobs.json``)."""
    from harness.numerics.decide import EARLY

    path = run_dir / "logprobs.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    dec = decode_path(data)
    out: dict[str, Any] = {"numerics_verdict": data.get("verdict"),
                           "numerics_message": data.get("message"),
                           "prefill": dec is not data}  # fmt: skip
    if dec is None:
        return {**out, "decode_verdict": None}
    rows = dec.get("sequences") or []
    st = dec.get("stats") or {}

    def early(key: str) -> int:
        return sum(1 for r in rows if r.get(key) is not None and r[key] <= EARLY)

    return {**out, "decode_verdict": dec.get("verdict"), "decode_message": dec.get("message"),
            "decode_ab_mean_kl": st.get("ab_mean_kl"), "decode_aa_mean_kl": st.get("aa_mean_kl"),
            "decode_units": len(rows), "decode_parted_early": early("parted_at"),
            "decode_aa_parted_early": early("aa_parted_at")}  # fmt: skip


def gsm8k_figures(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "gsm8k.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    sides = {
        s["label"]: {k: s.get(k) for k in ("n", "n_errors", "correct", "accuracy", "invalid",
                                           "latency_s")}
        for s in data.get("sides", [])
    }  # fmt: skip
    paired = {k: v for k, v in (data.get("paired") or {}).items() if k != "discordant"}
    return {"sides": sides, "verdict": data.get("verdict"), "paired": paired}
