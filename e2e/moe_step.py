"""The MoE step of the e2e job (``make e2e``; ``--no-moe`` skips it): the SmolLM2 MoE
(:mod:`e2e.moe`) on llama-server, healthy against one expert dropped and against one
benign change.

1. ``moe build``: the MoE GGUF built (or found in the cache).
2. ``moe vs dense`` (checked once per job): M (the MoE, all 8 experts routed) and D (the
   dense GGUF it was built from) side by side, one thread each. Decode speed: the same
   greedy completion of :data:`SPEED_TOKENS` tokens on each, :data:`SPEED_ROUNDS` times
   alternately, tokens/s (llama-server's ``timings.predicted_per_second``); the median of
   the rounds' D/M ratios must be at most :data:`SPEED_RATIO_MAX` (1.24-1.26 measured
   here with Q8_0 experts, 2.1 once with three other servers of the panel running). Numerics: M's recording (``harness record
   --numerics-only``, greedy chat adapter, the reference conversations of
   ``e2e/scenarios``) against D: its mean KL over the shared top-k must be at most
   :data:`DENSE_KL_MAX` (0.0025 measured here with Q8_0 experts; 0.003 with F16).
3. ``moe logprobs drop1``: ``harness logprobs`` of M's recording against M with
   ``--override-kv llama.expert_used_count=int:7`` (one expert dropped for every token in
   every layer): must be REGRESSION.
4. ``moe compare drop1``: ``harness compare`` of M against the same candidate, both live,
   on ``e2e/scenarios`` at the shipped defaults: must be REGRESSION.
5. ``moe logprobs benign``: M's recording against M with flash attention off
   (:data:`BENIGN_ARGS`): must not be REGRESSION.

:func:`failed` says why the step fails the job (the driver's exit-code contract: 1 a
verdict or bound did not hold; 2 a step did not run).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from e2e.logprobs_step import by_class
from e2e.moe import MoESpec, cached_build
from e2e.servers import E2EError, free_port, llama_server_command, serve

__all__ = [
    "BENIGN_ARGS",
    "DENSE_KL_MAX",
    "DROP_ARGS",
    "SPEED_RATIO_MAX",
    "failed",
    "moe_steps",
]

#: one of the 8 experts dropped for every token in every layer
DROP_ARGS = ("--override-kv", "llama.expert_used_count=int:7")
#: a benign change: flash attention off (llama-server's default, auto, turns it on here: the
#: panel measured "on" at the A/A's KL and "off" at 0.0019 nats/token, NO CHANGE)
BENIGN_ARGS = ("--flash-attn", "off")
#: M's mean KL to the dense model it was built from, at most (nats/token; a stated bound,
#: the numerics tolerance before the MoE panel set it to 0.003: Q8_0's rounding of the
#: experts puts M at 0.0025, about a q8_0 KV cache's shift)
DENSE_KL_MAX = 0.01
#: D's decode speed over M's, at most
SPEED_RATIO_MAX = 1.5
SPEED_TOKENS = 48
SPEED_ROUNDS = 3
SPEED_PROMPT = "Write three sentences about the sea."
HERE = Path(__file__).resolve().parent


def _decode_speed(url: str, timeout_s: float = 300.0) -> float:
    """Tokens/s of one greedy completion of SPEED_TOKENS tokens (llama-server's timings)."""
    body = json.dumps({"prompt": SPEED_PROMPT, "n_predict": SPEED_TOKENS, "temperature": 0,
                       "cache_prompt": False, "ignore_eos": True}).encode()  # fmt: skip
    req = urllib.request.Request(f"{url}/completion", data=body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (127.0.0.1)
        data = json.loads(resp.read())
    return float(data["timings"]["predicted_per_second"])


def _speeds(dense: str, moe: str) -> dict[str, Any]:
    d, m = [], []
    for _ in range(SPEED_ROUNDS):  # paired rounds: a ratio per round, load drift cancels
        d.append(_decode_speed(dense))
        m.append(_decode_speed(moe))
    return {"dense_tokens_per_s": round(statistics.median(d), 2),
            "moe_tokens_per_s": round(statistics.median(m), 2),
            "slowdown": round(statistics.median(x / y for x, y in zip(d, m, strict=True)), 3)}  # fmt: skip


def _kl(out: Path, run_id: str) -> dict[str, Any]:
    path = out / run_id / "logprobs.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    kld = data.get("kld") or {}
    return {"verdict": data.get("verdict"), "message": data.get("message"),
            "kl_mean": kld.get("kld_mean"), "kl_p99": (kld.get("kld") or {}).get("99.0%"),
            "requests": data.get("requests"), "by_class": by_class(data)}  # fmt: skip


def _verdict(out: Path, run_id: str) -> dict[str, Any]:
    path = out / run_id / "summary.json"
    if not path.is_file():
        return {}
    v = json.loads(path.read_text(encoding="utf-8")).get("verdict") or {}
    return {"verdict": v.get("verdict"), "message": v.get("message"),
            "regressed_kinds": v.get("regressed_kinds", [])}  # fmt: skip


def moe_steps(
    out: Path,
    binary: Path,
    dense: Path,
    harness: Callable[[Any], Any],
    step_cls: type,
    boot_timeout: float,
    scenarios: str = str(HERE / "scenarios"),
) -> list[Any]:
    """Run the MoE step (module docstring); returns its steps, figures filled.
    ``harness(step)`` runs one ``harness`` command as the driver does."""
    t = time.monotonic()
    try:
        model = cached_build(MoESpec(), dense)
    except E2EError as exc:
        return [step_cls("moe build", [], exit_code=2, figures={"error": str(exc)})]
    steps = [step_cls("moe build", [], exit_code=0, seconds=round(time.monotonic() - t, 1),
                      figures={"model": str(model)})]  # fmt: skip

    @contextlib.contextmanager
    def up(name: str, path: Path, extra: Sequence[str] = ()) -> Iterator[str]:
        cmd = llama_server_command(binary, path, free_port(), extra=extra)
        with serve(cmd, out / f"server-moe-{name}.log", timeout_s=boot_timeout) as url:
            yield url

    rec = "moe-record-M"

    def logprobs(name: str, cand: str, run_id: str) -> Any:
        step = harness(step_cls(name, ["logprobs", "--baseline", str(out / rec),
                                       "--candidate", cand, "--results", str(out),
                                       "--run-id", run_id]))  # fmt: skip
        step.run_dir = str(out / run_id)
        step.figures = _kl(out, run_id)
        return step

    try:
        with up("M", model) as m:
            with up("D", dense) as d:
                check = step_cls("moe vs dense", [], exit_code=0)
                t = time.monotonic()
                check.figures.update(_speeds(d, m))
                record = harness(step_cls("moe record M", [
                    "record", "--target", m, "--label", "M", "--numerics-only",
                    "--logprobs-api", "greedy", scenarios, "--results", str(out),
                    "--run-id", rec, "--no-progress"]))  # fmt: skip
                record.run_dir = str(out / rec)
                steps.append(record)
                if record.exit_code != 0:
                    return steps
                kl = logprobs("moe logprobs dense", d, "moe-logprobs-dense")
                check.figures.update({"kl_mean": kl.figures.get("kl_mean"),
                                      "kl_p99": kl.figures.get("kl_p99"),
                                      "kl_verdict": kl.figures.get("verdict")})  # fmt: skip
                check.exit_code = kl.exit_code if kl.exit_code not in (0, 1, 3) else 0
                check.seconds = round(time.monotonic() - t, 1)
                steps.append(check)
            with up("drop1", model, DROP_ARGS) as c:
                steps.append(logprobs("moe logprobs drop1", c, "moe-logprobs-drop1"))
                step = harness(step_cls("moe compare drop1", [
                    "compare", "--baseline", m, "--candidate", c, "--baseline-label", "M",
                    "--candidate-label", "drop1", "--no-logprobs", scenarios,
                    "--results", str(out), "--run-id", "moe-compare-drop1",
                    "--no-progress"]))  # fmt: skip
                step.run_dir = str(out / "moe-compare-drop1")
                step.figures = _verdict(out, "moe-compare-drop1")
                steps.append(step)
        with up("benign", model, BENIGN_ARGS) as c:
            steps.append(logprobs("moe logprobs benign", c, "moe-logprobs-benign"))
    except E2EError as exc:  # a server that did not boot
        print(f"e2e: the MoE step stopped: {exc}")
        steps.append(step_cls("moe server", [], exit_code=2, figures={"error": str(exc)}))
    return steps


def failed(steps: Sequence[Any]) -> list[tuple[int, str]]:
    """Why the MoE steps fail the job: ``(exit code, one line)`` per failing step (empty:
    they pass, or did not run): 2 a step did not run; 1 M slower than SPEED_RATIO_MAX x D,
    or further than DENSE_KL_MAX from it, drop1 not REGRESSION in numerics or behaviour,
    the benign change REGRESSION."""
    why: list[tuple[int, str]] = []
    names = {s.name for s in steps}
    for s in steps:
        if not s.name.startswith("moe"):
            continue
        f = s.figures
        v = f.get("verdict") or "no verdict"
        if s.exit_code not in (0, 1, 3) or (s.name == "moe record M" and s.exit_code):
            why.append((2, f"{s.name}: did not run (exit {s.exit_code}) {f.get('error', '')}"))
        elif s.name == "moe vs dense":
            if f.get("slowdown", 0) > SPEED_RATIO_MAX:
                why.append((1, f"moe vs dense: the MoE decodes {f['slowdown']}x slower than the "
                               f"dense model, required at most {SPEED_RATIO_MAX}x"))  # fmt: skip
            kl = f.get("kl_mean")
            if kl is None or kl > DENSE_KL_MAX:
                why.append((1, f"moe vs dense: mean KL {kl} to the dense model, required at "
                               f"most {DENSE_KL_MAX}"))  # fmt: skip
        elif s.name in ("moe logprobs drop1", "moe compare drop1") and v != "REGRESSION":
            why.append((1, f"{s.name}: {v}, required: REGRESSION"))
        elif s.name == "moe logprobs benign" and (v == "REGRESSION" or s.exit_code == 3):
            why.append((1, f"{s.name}: {v} (exit {s.exit_code}), required: not REGRESSION"))
    if "moe build" in names and "moe logprobs benign" not in names and not why:
        why.append((2, "the MoE step stopped before its last comparison"))
    return why
