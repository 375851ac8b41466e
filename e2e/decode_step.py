"""The decode-only fault of the e2e job (``make e2e``; ``--no-decode-fault`` skips it): a
real llama-server whose greedy decoding differs while the model's logits do not, caught by
``harness compare`` live and against a recording (issue 46: every numerics path decides).

The fault (:data:`FAULT_ARGS`): server A launched with a repeat penalty as its default
sampling setting. llama-server applies it in its sampler chain (``common/sampling.cpp``:
logit bias, then penalties, ..., then temperature; at temperature 0 the top token after
them), over the last ``--repeat-last-n`` tokens, prompt tokens included
(``server-context.cpp``: the prompt is accepted into the sampler), so the token a greedy
request picks changes; the harness never sends ``repeat_penalty``, so every request gets
it. The logprobs it returns are the model's own, taken before the sampler chain
(``populate_token_probs`` without ``post_sampling_probs``): the forward pass, prefill and
decode, is A's. What moves is which token is decoded next: a decode-only change, as a
decode kernel fault is, seen by the numerics' decode path (greedy, per-step logprobs along
the common prefix; :func:`harness.numerics.decide.parting`) and by no teacher-forced score.
Measured: docs/e2e.md ("The decode-only fault").

Two steps, both ``catch`` (REGRESSION required; :func:`failed` adds that the decode path
itself must be REGRESSION, so a behavioural regression alone does not pass them):

1. ``compare decode-fault live``: A and F (A with :data:`FAULT_ARGS`) side by side, one
   thread each; ``harness compare --baseline A --candidate F`` on ``e2e/scenarios`` at
   :data:`REPEATS` repeats, numerics on (llama-server answers the greedy chat adapter
   only: its numerics are the decode path).
2. ``compare decode-fault recorded``: ``harness compare --baseline <A's recording>
   --candidate-cmd <F>`` (the job's recording of A, numerics recorded with it), one server
   at a time.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "FAULT_ARGS",
    "LIVE",
    "RECORDED",
    "LABEL",
    "REPEATS",
    "failed",
    "live_argv",
    "run_id",
]

#: the decode-only fault: a repeat penalty as the server's default sampling setting
FAULT_ARGS = ("--repeat-penalty", "1.5")
#: repeats per scenario and side of both comparisons (their behaviour is reported; the
#: numerics section decides them, scored on the baseline's conversations)
REPEATS = 2
#: server F's label in both comparisons
LABEL = "F-repeat-penalty"
LIVE = "compare decode-fault live"
RECORDED = "compare decode-fault recorded"
NAMES = (LIVE, RECORDED)


def live_argv(a: str, f: str, scenarios: str, out: Path, concurrency: int) -> list[str]:
    """``harness compare`` of F (``f``) against A (``a``), both live, numerics on."""
    return ["compare", "--baseline", a, "--candidate", f, "--baseline-label", "A",
            "--candidate-label", LABEL, "--repeats", str(REPEATS),
            "--stream", "off", "--no-sequential", "--concurrency", str(concurrency),
            scenarios, "--results", str(out), "--run-id", run_id(LIVE),
            "--no-progress"]  # fmt: skip


def run_id(name: str) -> str:
    """The run folder of step ``name``."""
    return name.replace(" ", "-")


def failed(steps: Sequence[Any]) -> list[tuple[int, str]]:
    """Why the decode-fault steps fail the job beyond their ``catch`` role (which requires
    the comparison's REGRESSION: :func:`e2e.driver.failures`): a step that ran and judged
    (exit 0 or 1) whose decode path is not REGRESSION, one line each naming what it said
    (a behavioural regression alone does not catch a decode-only fault)."""
    why: list[tuple[int, str]] = []
    for s in steps:
        if s.name not in NAMES or s.exit_code not in (0, 1):
            continue
        v = s.figures.get("decode_verdict")
        if v != "REGRESSION":
            said = s.figures.get("decode_message") or s.figures.get("numerics_message")
            why.append((1, f"{s.name}: the decode path is {v or 'not compared'}"
                           f"{f' ({said})' if said else ''}, required: REGRESSION"))  # fmt: skip
    return why


# ---------------------------------------------------------------- the measurement

#: the measured figures (``python -m e2e.decode_step --measure``) and the block of
#: docs/e2e.md they give (``python -m e2e.decode_step``; ``--check`` in the docs tests)
MEASURED = Path(__file__).resolve().parent / "decode-fault.json"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "e2e.md"
BEGIN, END = "<!-- decode-fault:begin -->", "<!-- decode-fault:end -->"
#: the conversations measured: the job's scenarios, and the first 10 reference
#: conversations of ``scenarios/`` but ``long_context_logs`` (over a llama-server slot)
E2E_SCENARIOS = str(Path(__file__).resolve().parent / "scenarios")


def _measured_files() -> list[str]:
    root = Path(__file__).resolve().parents[1] / "scenarios"
    files = sorted(str(p) for p in root.glob("*.yaml"))[:10]
    return [E2E_SCENARIOS, *(f for f in files if Path(f).stem != "long_context_logs")]


def _pair(harness: Any, step_cls: type, a: str, b: str, run_id: str, out: Path) -> dict[str, Any]:
    """``harness logprobs --logprobs-api greedy`` of ``b`` against ``a``: the figures."""
    from e2e.steps import numerics_figures

    step = harness(step_cls(run_id, ["logprobs", "--baseline", a, "--candidate", b,
                                     "--logprobs-api", "greedy", *_measured_files(),
                                     "--results", str(out), "--run-id", run_id]))  # fmt: skip
    figures = numerics_figures(out / run_id)
    data = json.loads((out / run_id / "logprobs.json").read_text(encoding="utf-8"))
    st = data.get("stats") or {}
    return {"exit_code": step.exit_code, "seconds": step.seconds,
            "ab_top1_agreement": st.get("ab_top1_agreement"),
            "aa_top1_agreement": st.get("aa_top1_agreement"),
            **{k: v for k, v in figures.items() if k.startswith("decode_")}}  # fmt: skip


def measure(out: Path, binary: Path, model: Path, boot_timeout: float = 300.0) -> dict[str, Any]:
    """A and A2 (the same configuration) and F (A with :data:`FAULT_ARGS`), one thread each,
    A beside each in turn: ``harness logprobs`` A/A (A2 against A) and A/B (F against A)
    on the decode path; returns what :data:`MEASURED` keeps."""
    from e2e.servers import free_port, llama_server_command, serve
    from e2e.steps import Step, run_harness

    def up(name: str, extra: Sequence[str] = ()) -> Any:
        cmd = llama_server_command(binary, model, free_port(), extra=extra)
        return serve(cmd, out / f"server-{name}.log", timeout_s=boot_timeout)

    result: dict[str, Any] = {"fault_args": list(FAULT_ARGS)}
    with up("A") as a:
        with up("A2") as a2:
            result["aa"] = _pair(run_harness, Step, a, a2, "decode-fault-aa", out)
        with up("F", FAULT_ARGS) as f:
            result["ab"] = _pair(run_harness, Step, a, f, "decode-fault-ab", out)
    return result


def _pct(x: Any) -> str:
    return f"{x:.1%}" if isinstance(x, (int, float)) else "?"


def _kl(x: Any) -> str:
    return f"{x:.2g}" if isinstance(x, (int, float)) else "?"


def render(kept: dict[str, Any]) -> str:
    """The block of docs/e2e.md (between :data:`BEGIN` and :data:`END`) from
    :data:`MEASURED`'s content."""
    m, aa, ab = kept["measured"], kept["aa"], kept["ab"]
    rows = [
        "| pair | verdict | prompts parted within 8 tokens (A/B) | the same, A's two "
        "scorings | mean KL along the common prefix, A/B vs A/A | top-1 agreement |",
        "|---|---|---|---|---|---|",
    ]
    for name, f in (("A/A: A2 against A", aa), (f"A/B: F (`{shlex.join(kept['fault_args'])}`)"
                                                 " against A", ab)):  # fmt: skip
        rows.append(
            f"| {name} | {f.get('decode_verdict')} | {f.get('decode_parted_early')} of "
            f"{f.get('decode_units')} | {f.get('decode_aa_parted_early')} of "
            f"{f.get('decode_units')} | {_kl(f.get('decode_ab_mean_kl'))} vs "
            f"{_kl(f.get('decode_aa_mean_kl'))} | {_pct(f.get('ab_top1_agreement'))} |"
        )
    version = str(m.get("version") or "llama-server").removeprefix("version: ")
    said = [f"- {name}: {f.get('decode_message')}" for name, f in (("A/A", aa), ("A/B", ab))]
    return "\n".join([
        BEGIN,
        "<!-- generated by `python -m e2e.decode_step` from e2e/decode-fault.json: "
        "do not edit by hand -->",
        "",
        f"Measured {m['date']} on {m['machine']}, llama-server {version}: "
        f"`{m['command']}` (the decode path, `harness logprobs --logprobs-api greedy`, "
        "over the job's scenarios and the first 10 files of `scenarios/` less "
        "`long_context_logs`, longer than a slot; one thread a server, A beside A2, then "
        "beside F).",
        "",
        *rows,
        "",
        *said,
        END,
    ])  # fmt: skip


def _page(text: str, block: str) -> str:
    if BEGIN not in text or END not in text:
        raise ValueError(f"{PAGE}: no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def main(argv: Sequence[str] | None = None) -> int:
    """``--measure``: measure and keep (:data:`MEASURED`), then write the block; else write
    (or ``--check``) the block of docs/e2e.md; 0 written or fresh, 1 stale."""
    import argparse
    import os
    import time

    p = argparse.ArgumentParser(
        prog="python -m e2e.decode_step", description=__doc__.split("\n")[0]
    )
    p.add_argument("--measure", action="store_true", help="measure on llama-server, keep it")
    p.add_argument("--llama-server", help="llama-server binary ($HARNESS_LLAMA_SERVER)")
    p.add_argument("--out", type=Path, help="results folder (results/decode-fault-<UTC time>)")
    p.add_argument("--check", action="store_true", help="exit 1 when the block is stale")
    p.add_argument("--page", type=Path, default=PAGE, help=f"the page (default {PAGE})")
    args = p.parse_args(argv)
    if args.measure:
        from e2e.figures import _machine
        from e2e.servers import find_llama_server, find_model

        binary, model = find_llama_server(args.llama_server), find_model()
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        out = (
            args.out or Path(os.environ.get("HARNESS_RESULTS", "results")) / f"decode-fault-{stamp}"
        )
        out.mkdir(parents=True, exist_ok=True)
        import subprocess

        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                                 timeout=30, check=False)  # fmt: skip
        line = next((ln for ln in (version.stdout + version.stderr).splitlines()
                     if ln.startswith("version")), None)  # fmt: skip
        kept = {"measured": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                             "machine": _machine(), "version": line,
                             "command": "python -m e2e.decode_step --measure"},
                **measure(out, binary, model)}  # fmt: skip
        MEASURED.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    block = render(json.loads(MEASURED.read_text(encoding="utf-8")))
    old = args.page.read_text(encoding="utf-8")
    new = _page(old, block)
    if args.check:
        if old != new:
            print(f"{args.page}: the decode-fault block is stale; run `python -m "
                  "e2e.decode_step`", file=sys.stderr)  # fmt: skip
        return 0 if old == new else 1
    args.page.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
