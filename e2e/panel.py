"""The MoE panel: the healthy SmolLM2 MoE (:mod:`e2e.moe`) on llama-server against faults
and benign changes, each a launch (``make e2e-panel``; ``python -m e2e.panel --help``).

One healthy server H (all 8 experts routed, ``e2e/templates/chatml-tools.jinja``) stays up
for the whole panel. Its numerics are recorded once (``harness record --numerics-only``,
the greedy chat adapter: every turn's prefix of the conversations of ``scenarios/``, or
with ``--numerics-scenarios e2e`` the reference conversations of ``e2e/scenarios``, and
``--gsm8k`` GSM8K prompts, scored twice: the A/A floor). Then, for each pair of
:data:`PAIRS` and each repeat, the candidate is launched (a new process each repeat) and:

- numerics: ``harness logprobs --baseline <H's recording> --candidate <it>``: the verdict,
  the mean KL and its 99th percentile and maximum over positions (``logprobs.json``
  ``kld``), the candidate's requests and the wall time;
- behaviour (the first ``--behaviour-repeats`` repeats): ``harness compare --baseline <H>
  --candidate <it>`` on ``e2e/scenarios`` at the shipped defaults (sequential rounds),
  without the numerics section: the verdict, runs, requests (turns) and wall time. Each
  comparison has its own ``--sampling-seed`` (:func:`behaviour_seed`, recorded as
  ``sampling_seed``): at one seed, H's runs are largely the same draws in every comparison
  (llama-server honours the request seed), and the comparisons would not be independent
  trials. Comparisons stored without ``sampling_seed`` ran at the default seed 0.

The outside reference (``--perplexity``, llama.cpp's ``llama-perplexity`` built from the
same tree: ``scripts/build-llama-server.sh llama-perplexity``): H's full-vocabulary
log-probabilities on one text (the same conversations and prompts as ChatML, written to
the output folder) saved once with ``--kl-divergence-base``, then each candidate's
configuration run with ``--kl-divergence``: llama.cpp's mean, 99th percentile and maximum
KLD over the text's scored positions. A chat template is not a model flag: the
template fault has no reference figure.

Every step's figures are written to ``panel.json`` in the output folder as soon as they
exist (a panel cut short keeps what it measured); ``--render`` writes the table of a
``panel.json`` to ``docs/moe-panel.md`` (:func:`render`); ``--publish a.json [b.json]``
merges panels into ``e2e/panel.json`` first (:func:`merge`); ``--sweep FOLDER ...`` decides
every numerics comparison those panels stored again at each tolerance of :data:`GRID`, from
its per-sequence rows (:func:`sweep`, no server: ``e2e/panel-sweep.json``, a section of the
page), which is how the tolerance is calibrated against the panel; ``--sweep ... --add``
adds a later panel's counts to the committed ones (:func:`add_sweeps`: a session's run
folders do not outlive it).

``--numerics-scenarios shipped`` (the default) records H's numerics on ``scenarios/``
(but :data:`TOO_LONG`) instead of the e2e's three: 75 turns' prefixes instead of 10
sequences, so that a fault that moves only some turns (the template that drops tool
results: the turns after a tool result) is decided; its pairs are named with
``{scenarios/}``. The page's summary (:func:`summary`) reads its numerics from those
pairs, and says pair by pair whether the panel's requirement holds.

``--no-prompt-cache`` launches every server, H's included, in one slot with llama-server's
prompt cache off (:data:`NO_PROMPT_CACHE`), its pairs named with
:data:`NO_PROMPT_CACHE_SUFFIX`: what llama-server's prompt cache adds to our KL, which
llama-perplexity (fixed chunks, each evaluated afresh) never sees; the page says pair by
pair whether ours stays a lower bound of llama-perplexity's KLD (:func:`lower_bound`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from e2e.moe import MoESpec, cached_build
from e2e.servers import (
    BROKEN_TEMPLATE,
    TEMPLATE,
    E2EError,
    find_llama_server,
    free_port,
    llama_server_command,
    serve,
)
from harness.cli import catch_sigterm, interrupted_code
from harness.numerics.decide import TEST as SHIPPED_TEST
from harness.numerics.decide import TOLERANCE as SHIPPED_TOLERANCE

__all__ = [
    "DOC",
    "PAIRS",
    "PANEL_JSON",
    "Pair",
    "add_sweeps",
    "behaviour_seed",
    "calibration",
    "lower_bound",
    "main",
    "merge",
    "numerics_scenarios",
    "parse_kld",
    "render",
    "render_sweep",
    "sweep",
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the committed figures and the page generated from them
PANEL_JSON = HERE / "panel.json"
DOC = ROOT / "docs" / "moe-panel.md"
SCENARIOS = HERE / "scenarios"
#: the shipped scenarios that do not fit a slot's context (``--ctx-size 8192`` over 2 slots:
#: 4,096 tokens; long_context_logs' reference conversation is 7,860): left out of
#: ``--numerics-scenarios shipped``, as llama-server would refuse them (HTTP 400)
TOO_LONG = ("long_context_logs",)
#: ``--numerics-scenarios``: the scenario files H's numerics are recorded on. ``e2e``: the
#: e2e's three (with ``--gsm8k`` prompts, 10 sequences); ``shipped``: ``scenarios/`` but
#: :data:`TOO_LONG` (75 turns' prefixes): a fault that moves only some turns (a template
#: that drops tool results moves the turns after a tool result) is decided with them
NUMERICS_SETS = ("e2e", "shipped")
NUMERICS_SUFFIX = {"e2e": "", "shipped": " {scenarios/}"}


def numerics_scenarios(which: str) -> list[Path]:
    """The scenario files of a :data:`NUMERICS_SETS` name (sorted).

    Raises:
        ValueError: an unknown name."""
    if which == "e2e":
        return sorted(SCENARIOS.glob("*.yaml"))
    if which == "shipped":
        return sorted(f for f in (ROOT / "scenarios").glob("*.yaml") if f.stem not in TOO_LONG)
    raise ValueError(f"--numerics-scenarios {which!r}: one of {', '.join(NUMERICS_SETS)}")


#: the numerics decision's shipped tolerance (``harness logprobs --tolerance``), nats/token
TOLERANCE = SHIPPED_TOLERANCE
#: every stored numerics comparison decided again at each of these tolerances (``--sweep``)
SWEEP_JSON = HERE / "panel-sweep.json"
GRID = (0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01)
#: the numerics decision a sweep decides by (``sweep.json`` ``rule``); a sweep without one
#: was decided by :data:`OLD_RULE`, the signed-rank test alone (until 2026-12-03)
RULE = SHIPPED_TEST
OLD_RULE = "one-sided Wilcoxon signed-rank on (A/B - A/A mean KL per sequence) - tolerance"

#: ``limit``: a fault about as large as a benign change (our KL and llama-perplexity's KLD
#: level with a q8_0 KV cache's): the panel's probe of where the shipped tolerance stops
#: seeing a fault, exempt from the requirement that a fault be REGRESSION
Kind = Literal["aa", "fault", "limit", "benign"]
#: ``--no-prompt-cache``: llama-server flags added to every launch (H's too), and the suffix
#: of the pairs' names. llama-server reuses a slot's cached prefix (and its host-memory
#: prompt cache) and evaluates the rest in another batch split than a fresh request: a
#: floating-point difference that llama-perplexity, evaluating fixed chunks afresh, never has
NO_PROMPT_CACHE = ("--parallel", "1", "--no-cache-prompt", "--cache-ram", "0")
NO_PROMPT_CACHE_SUFFIX = " (prompt cache off)"


@dataclass(frozen=True)
class Pair:
    """One candidate against the healthy MoE: its name, kind, model, flags and template."""

    name: str
    kind: Kind
    spec: MoESpec = MoESpec()
    extra: tuple[str, ...] = ()
    template: Path = TEMPLATE
    #: llama-perplexity takes the same flags (None: no reference figure, e.g. a template)
    reference: bool = True
    #: flags for llama-perplexity when they differ from ``extra`` (server-only flags out)
    reference_extra: tuple[str, ...] | None = None
    notes: dict[str, Any] = field(default_factory=dict)


_N_LAYERS = 30


def _used(drop_in: Sequence[int]) -> tuple[int, ...]:
    return tuple(7 if i in drop_in else 8 for i in range(_N_LAYERS))


#: blunt to subtle faults, then benign changes; the A/A first
PAIRS: tuple[Pair, ...] = (
    Pair("A/A (healthy again)", "aa"),
    Pair("one expert dropped, every layer", "fault",
         extra=("--override-kv", "llama.expert_used_count=int:7")),
    Pair("wrong RoPE base (10000)", "fault", extra=("--rope-freq-base", "10000")),
    Pair("template drops tool results", "fault", template=BROKEN_TEMPLATE, reference=False),
    Pair("one expert dropped in layers 10 and 20", "fault", spec=MoESpec(used_per_layer=_used((10, 20)))),
    Pair("expert 0's down projection +10%", "fault", spec=MoESpec(expert_scale=(0, 1.10))),
    Pair("expert 0's down projection +3%", "limit", spec=MoESpec(expert_scale=(0, 1.03))),
    Pair("flash attention on", "benign", extra=("--flash-attn", "on")),
    Pair("flash attention off", "benign", extra=("--flash-attn", "off")),
    Pair("q8_0 KV cache", "benign", extra=("--cache-type-k", "q8_0", "--cache-type-v", "q8_0")),
    Pair("2 threads", "benign", extra=("--threads", "2", "--threads-batch", "2")),
    Pair("ubatch 32", "benign", extra=("--ubatch-size", "32", "--batch-size", "32")),
    Pair("4 parallel slots", "benign", extra=("--parallel", "4", "--ctx-size", "16384"),
         reference_extra=()),
)  # fmt: skip


# ---------------------------------------------------------------- running


def _harness(argv: list[str]) -> int:
    """``harness <argv>`` in this process: its exit code.

    Raises:
        KeyboardInterrupt: the command was stopped (exit 130 or 143: Ctrl-C or SIGTERM),
            so the panel stops too instead of going on to the next comparison."""
    from harness.cli import main as cli_main

    print(f"panel: harness {shlex.join(argv)}", flush=True)
    try:
        code = int(cli_main(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if code in (130, 143):
        raise KeyboardInterrupt
    return code


@contextlib.contextmanager
def _up(
    binary: Path, pair: Pair, out: Path, tag: str, timeout_s: float, first: Sequence[str] = ()
) -> Iterator[str]:
    """``pair``'s llama-server up (``first``: flags before the pair's own, which win)."""
    model = cached_build(pair.spec)
    cmd = llama_server_command(binary, model, free_port(), pair.template, (*first, *pair.extra))
    with serve(cmd, out / "logs" / f"server-{tag}.log", timeout_s=timeout_s) as url:
        yield url


def _numerics(out: Path, run_id: str) -> dict[str, Any]:
    data = json.loads((out / run_id / "logprobs.json").read_text(encoding="utf-8"))
    kld = data.get("kld") or {}
    pct = kld.get("kld") or {}
    return {"verdict": data.get("verdict"), "message": data.get("message"),
            "kl_mean": kld.get("kld_mean"), "kl_p99": pct.get("99.0%"),
            "kl_max": pct.get("Maximum"), "positions": kld.get("positions"),
            "aa_kl_mean": (data.get("stats") or {}).get("aa_mean_kl"),
            "requests": (data.get("requests") or {}).get("candidate")}  # fmt: skip


def behaviour_seed(out: Path, tag: str) -> int:
    """The ``--sampling-seed`` of one behavioural comparison: the first 31 bits of
    ``sha256("<output folder's name>/<tag>")`` (``tag``: ``p<pair>-r<repeat>``). Another
    for each comparison of a panel and across panels written to other folders; the same
    when a panel is run again into the same folder."""
    digest = hashlib.sha256(f"{out.name}/{tag}".encode()).hexdigest()
    return int(digest[:8], 16) & 0x7FFFFFFF


def _behaviour(out: Path, run_id: str) -> dict[str, Any]:
    from harness.runfolder import RunFolder

    folder = out / run_id
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    verdict = summary.get("verdict") or {}
    runs = requests = 0
    for rec in RunFolder(folder).records():
        runs += 1
        requests += len(rec.turns)
    return {"verdict": verdict.get("verdict"), "message": verdict.get("message"),
            "regressed_kinds": verdict.get("regressed_kinds", []), "runs": runs,
            "requests": requests}  # fmt: skip


_KLD_LINE = re.compile(r"(Mean|Maximum|99\.0%)\s+KLD:\s+([-+0-9.eE]+)")


def parse_kld(text: str) -> dict[str, float]:
    """``llama-perplexity --kl-divergence``'s summary: ``{"mean", "p99", "max"}`` (nats per
    token, over the scored positions) from its log text (``Mean    KLD:``, ``99.0%   KLD:``,
    ``Maximum KLD:`` lines, tools/perplexity/perplexity.cpp). Raises E2EError when a line
    is missing (the run failed)."""
    found = {m.group(1): float(m.group(2)) for m in _KLD_LINE.finditer(text)}
    if set(found) != {"Mean", "Maximum", "99.0%"}:
        raise E2EError(f"llama-perplexity printed no KLD summary (found {sorted(found)})")
    return {"mean": found["Mean"], "p99": found["99.0%"], "max": found["Maximum"]}


def _reference_text(out: Path, gsm8k: int, gsm8k_data: str, which: str = "e2e") -> Path:
    """The scored conversations and prompts as ChatML, one after the other."""
    from harness.gsm8k.data import load_jsonl
    from harness.numerics.adapters import chatml
    from harness.numerics.sequences import from_gsm8k, from_scenario
    from harness.scenario import load_scenario

    parts = []
    for path in numerics_scenarios(which):
        seq = from_scenario(load_scenario(path))
        parts.append(chatml(list(seq.messages)) if seq.messages else seq.text or "")
    if gsm8k:
        for seq in from_gsm8k(load_jsonl(gsm8k_data), gsm8k):
            parts.append(seq.text or chatml(list(seq.messages or ())))
    path = out / "reference-text.txt"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _perplexity(binary: Path, model: Path, text: Path, extra: Sequence[str], kld: Path,
                base: bool, log: Path, ctx: int) -> dict[str, float] | None:  # fmt: skip
    argv = [str(binary), "-m", str(model), "-f", str(text), "-c", str(ctx), "-b", str(ctx),
            "-t", "1", *extra, "--kl-divergence-base", str(kld)]  # fmt: skip
    if not base:
        argv.append("--kl-divergence")
    print(f"panel: {shlex.join(argv)}", flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise E2EError(f"llama-perplexity exited {done.returncode} (log: {log})")
    return None if base else parse_kld(done.stdout + done.stderr)


class _Panel:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args = args
        self.out = out
        self.binary = find_llama_server(args.llama_server)
        no_cache = bool(getattr(args, "no_prompt_cache", False))
        flags = tuple(shlex.split(getattr(args, "server_flags", None) or ""))
        #: --server-flags, which llama-perplexity takes too (llama.cpp's common flags)
        self.flags = flags
        #: flags of every launch, and the suffix of every pair's name (--no-prompt-cache,
        #: --server-flags)
        self.first: tuple[str, ...] = (*(NO_PROMPT_CACHE if no_cache else ()), *flags)
        self.which = str(getattr(args, "numerics_scenarios", None) or "e2e")
        self.suffix = (
            (NO_PROMPT_CACHE_SUFFIX if no_cache else "")
            + (f" [{shlex.join(flags)}]" if flags else "")
            + NUMERICS_SUFFIX[self.which]
        )
        self.data: dict[str, Any] = {
            "command": "python -m e2e.panel " + shlex.join(args.argv),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "settings": {
                "numerics_repeats": args.repeats,
                "aa_repeats": args.aa_repeats,
                "behaviour_repeats": args.behaviour_repeats,
                "gsm8k": args.gsm8k,
                "max_tokens": args.max_tokens,
                "tolerance": TOLERANCE,
                "perplexity_ctx": args.ctx,
                "server_flags": shlex.join(self.first),
                "numerics_scenarios": self.which,
            },  # fmt: skip
            "pairs": [],
        }

    def save(self) -> None:
        tmp = self.out / "panel.json.tmp"
        tmp.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        tmp.replace(self.out / "panel.json")

    def run(self, pairs: Sequence[Pair]) -> None:
        t0 = time.monotonic()
        if self.args.reference_only:  # llama-perplexity only: no server
            self.data["pairs"] = [self._row(p) for p in pairs]
            self._reference(pairs)
            self.data["seconds"] = round(time.monotonic() - t0, 1)
            self.save()
            return
        healthy = Pair("healthy", "aa")
        with _up(self.binary, healthy, self.out, "H", self.args.boot_timeout, self.first) as h:
            if self.args.no_numerics:  # behaviour only: no recording, no reference
                for i, pair in enumerate(pairs):
                    self.data["pairs"].append(self._pair(h, pair, i))
                    self.save()
                self.data["seconds"] = round(time.monotonic() - t0, 1)
                self.save()
                return
            rec = ["record", "--target", h, "--label", "H", "--numerics-only",
                   "--logprobs-api", "greedy", "--logprobs-max-tokens", str(self.args.max_tokens),
                   *(["--logprobs-gsm8k", str(self.args.gsm8k), "--gsm8k-data",
                      self.args.gsm8k_data] if self.args.gsm8k else []),
                   *map(str, numerics_scenarios(self.which)), "--results", str(self.out),
                   "--run-id", "record-H",
                   "--no-progress"]  # fmt: skip
            t = time.monotonic()
            code = _harness(rec)
            self.data["recording"] = {"exit_code": code, "seconds": round(time.monotonic() - t, 1)}
            self.save()
            if code != 0:
                raise E2EError(f"recording H's numerics failed (exit {code})")
            for i, pair in enumerate(pairs):
                self.data["pairs"].append(self._pair(h, pair, i))
                self.save()
        if self.args.perplexity:
            self._reference(pairs)
        self.data["seconds"] = round(time.monotonic() - t0, 1)
        self.save()

    def _row(self, pair: Pair) -> dict[str, Any]:
        return {"name": pair.name + self.suffix, "kind": pair.kind,
                "flags": shlex.join((*self.first, *pair.extra)),
                "model": pair.spec.name(), "template": pair.template.name, "numerics": [],
                "behaviour": []}  # fmt: skip

    def _pair(self, h: str, pair: Pair, index: int) -> dict[str, Any]:
        row = self._row(pair)
        repeats = self.args.aa_repeats if pair.kind == "aa" else self.args.repeats
        if self.args.no_numerics:
            repeats = self.args.behaviour_repeats
        for r in range(repeats):
            tag = f"p{index:02d}-r{r:02d}"
            try:
                with _up(self.binary, pair, self.out, tag, self.args.boot_timeout,
                         self.first) as c:  # fmt: skip
                    if not self.args.no_numerics:
                        row["numerics"].append(self._logprobs(c, tag))
                    if r < self.args.behaviour_repeats:
                        row["behaviour"].append(self._compare(h, c, tag))
            except E2EError as exc:  # did not boot: a row that says so
                row["numerics"].append({"exit_code": 2, "message": str(exc)})
            self.data["pairs"] = [*self.data["pairs"][:index], row]
            self.save()
        return row

    def _logprobs(self, c: str, tag: str) -> dict[str, Any]:
        t = time.monotonic()
        code = _harness(["logprobs", "--baseline", str(self.out / "record-H"), "--candidate", c,
                         "--results", str(self.out), "--run-id", f"logprobs-{tag}"])  # fmt: skip
        n: dict[str, Any] = {"exit_code": code, "seconds": round(time.monotonic() - t, 1)}
        with contextlib.suppress(OSError, ValueError):
            n.update(_numerics(self.out, f"logprobs-{tag}"))
        return n

    def _compare(self, h: str, c: str, tag: str) -> dict[str, Any]:
        t = time.monotonic()
        seed = behaviour_seed(self.out, tag)
        code = _harness(["compare", "--baseline", h, "--candidate", c, "--baseline-label", "H",
                         "--candidate-label", "C", "--no-logprobs", "--concurrency", "4",
                         "--sampling-seed", str(seed), str(SCENARIOS), "--results",
                         str(self.out), "--run-id", f"compare-{tag}", "--no-progress"])  # fmt: skip
        b: dict[str, Any] = {"exit_code": code, "seconds": round(time.monotonic() - t, 1),
                             "sampling_seed": seed}  # fmt: skip
        with contextlib.suppress(OSError, ValueError):
            b.update(_behaviour(self.out, f"compare-{tag}"))
        return b

    def _reference(self, pairs: Sequence[Pair]) -> None:
        ppl = Path(self.args.perplexity)
        text = _reference_text(self.out, self.args.gsm8k, self.args.gsm8k_data, self.which)
        kld = self.out / "healthy.kld"
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        healthy = cached_build(MoESpec())
        t = time.monotonic()
        _perplexity(ppl, healthy, text, self.flags, kld, True, logs / "ppl-base.log",
                    self.args.ctx)  # fmt: skip
        self.data["reference_base_seconds"] = round(time.monotonic() - t, 1)
        for i, pair in enumerate(pairs):
            row = self.data["pairs"][i]
            if not pair.reference:
                row["reference"] = None
                continue
            extra = pair.extra if pair.reference_extra is None else pair.reference_extra
            extra = (*self.flags, *extra)  # as the server got them (not the prompt cache's)
            t = time.monotonic()
            try:
                ref = _perplexity(ppl, cached_build(pair.spec), text, extra, kld, False,
                                  logs / f"ppl-p{i:02d}.log", self.args.ctx)  # fmt: skip
                row["reference"] = {**(ref or {}), "seconds": round(time.monotonic() - t, 1)}
            except (E2EError, subprocess.TimeoutExpired) as exc:
                row["reference"] = {"error": str(exc)}
            self.save()


# ---------------------------------------------------------------- the table


def _rate(k: int, n: int) -> str:
    from harness.stats.tests import wilson_interval

    if n == 0:
        return "-"
    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} [{lo:.2f}, {hi:.2f}]"


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}" if x < 0.01 else f"{x:.3f}"


def _verdict(r: dict[str, Any]) -> str | None:
    """A comparison's verdict, or None when it did not finish (an exit code other than 0
    or 1: stopped, or a server or recording that failed, whatever its folder says)."""
    return r.get("verdict") if r.get("exit_code", 0) in (0, 1) else None


def _counts(rows: list[dict[str, Any]]) -> str:
    found: dict[str, int] = {}
    for r in rows:
        v = _verdict(r) or f"exit {r.get('exit_code')}"
        found[v] = found.get(v, 0) + 1
    return ", ".join(f"{v} {n}" for v, n in sorted(found.items())) or "-"


def base_name(name: str) -> str:
    """A stored pair's name without the suffixes a run adds (``{scenarios/}``, ``(prompt
    cache off)``, `` [FLAGS]``): the name of its :data:`PAIRS` entry."""
    for suffix in (NUMERICS_SUFFIX["shipped"], NO_PROMPT_CACHE_SUFFIX):
        if suffix in name:
            name = name[: name.index(suffix)]
    return re.sub(r" \[[^]]*\]$", "", name)


_KINDS = {pair.name: pair.kind for pair in PAIRS}


def with_kinds(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a ``panel.json`` or a ``--sweep`` JSON) with each pair's kind taken from
    :data:`PAIRS` by its base name (:func:`base_name`), not from what the run stored: a
    pair's kind is the panel's definition, and a panel stored before a kind changed (the
    +3% pair became ``limit``) renders as the panel defines it today."""
    pairs = [
        {**p, "kind": _KINDS.get(base_name(p["name"]), p["kind"])} for p in data.get("pairs", [])
    ]
    return {**data, "pairs": pairs}


def _committed_sweep(swept: dict[str, Any] | None) -> dict[str, Any] | None:
    """``swept``, or the committed ``--sweep`` JSON (:data:`SWEEP_JSON`) when it is None."""
    if swept is None and SWEEP_JSON.is_file():
        return json.loads(SWEEP_JSON.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    return swept


def _at_tolerance(
    data: dict[str, Any], swept: dict[str, Any] | None
) -> tuple[float, dict[str, dict[str, int]]]:
    """The tolerance the page decides at and each pair's numerics verdict counts there: the
    shipped tolerance from the sweep (``--sweep``) when it holds that column, else the
    tolerance the panel ran at and its own verdicts (``{}``: read the rows)."""
    key = f"{TOLERANCE:g}"
    if swept and key in swept.get("grid", []):
        return TOLERANCE, {p["name"]: p["verdicts"][key] for p in swept["pairs"]}
    return data.get("settings", {}).get("tolerance", TOLERANCE), {}


def _verdicts(p: dict[str, Any], redecided: dict[str, dict[str, int]]) -> list[str]:
    """A pair's numerics verdicts: re-decided ones, plus the comparisons that gave none."""
    if p["name"] not in redecided:
        return [_verdict(n) or f"exit {n.get('exit_code')}" for n in p["numerics"]]
    out = [v for v, k in redecided[p["name"]].items() for _ in range(k)]
    return out + [f"exit {n.get('exit_code')}" for n in p["numerics"] if not _verdict(n)]


def _references(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each pair's llama-perplexity figure by name; a ``--no-prompt-cache`` pair takes its
    base pair's (llama-perplexity has no prompt cache: the same flags, the same run)."""
    refs = {p["name"]: p["reference"] for p in data.get("pairs", [])
            if (p.get("reference") or {}).get("mean") is not None}  # fmt: skip
    for p in data.get("pairs", []):
        name = p["name"]
        if name.endswith(NO_PROMPT_CACHE_SUFFIX) and name not in refs:
            base = refs.get(name[: -len(NO_PROMPT_CACHE_SUFFIX)])
            if base is not None:
                refs[name] = base
    return refs


def _median_kl(p: dict[str, Any]) -> float | None:
    return _median([n["kl_mean"] for n in p["numerics"] if n.get("kl_mean") is not None])


def lower_bound(data: dict[str, Any]) -> list[str]:
    """Sentences on whether our top-k mean KL is a lower bound of llama-perplexity's
    full-vocabulary KLD (it is stated to be one: the top-k leaves out the tail's mass),
    pair by pair, and what llama-server's prompt cache adds (the ``--no-prompt-cache``
    pairs, when the panel holds them)."""
    refs = _references(data)
    rows = [(p["name"], _median_kl(p), refs[p["name"]]["mean"]) for p in data.get("pairs", [])
            if p["name"] in refs and _median_kl(p) is not None]  # fmt: skip
    if not rows:
        return []
    above = [(n, ours, ref) for n, ours, ref in rows if ours is not None and ours > max(ref, 0.0)]
    ratios = sorted(ours / ref for _, ours, ref in rows if ours is not None and ref > 1e-4)
    lines = [f"- Ours at or below llama-perplexity's KLD in {len(rows) - len(above)} of "
             f"{len(rows)} pairs with a reference"
             + (f"; where the KLD is above 1e-4, ours is {ratios[0]:.2f}-{ratios[-1]:.2f} of "
                f"it (median {_median(ratios):.2f})" if ratios else "") + "."]  # fmt: skip
    if above:
        lines.append("- Above it: " + "; ".join(
            f"{n} (ours {_fmt(o)}, llama-perplexity's {_fmt(r)})" for n, o, r in above) + ".")  # fmt: skip
    by_name = {p["name"]: p for p in data.get("pairs", [])}
    for name, base in by_name.items():
        variants = [v for n, v in by_name.items() if n.startswith(name + NO_PROMPT_CACHE_SUFFIX)]
        if _median_kl(base) is None or not variants:
            continue
        parts = [f"ours {_fmt(_median_kl(base))} with llama-server's prompt cache (its default)"]
        for v in variants:
            kl = _median_kl(v)
            if kl is None:
                continue
            more = v["name"][len(name + NO_PROMPT_CACHE_SUFFIX) :]
            if more.startswith(" [") and more.endswith("]"):
                more = more[2:-1]
            parts.append(f"{_fmt(kl)} with it off" + (f" and {more}" if more else "")
                         + f" ({len(v['numerics'])} comparison"
                         + ("s)" if len(v["numerics"]) != 1 else ")"))  # fmt: skip
        ref = refs.get(name, {}).get("mean")
        lines.append(f"- {name}: " + "; ".join(parts)
                     + (f"; llama-perplexity's {_fmt(ref)}." if ref is not None else "."))  # fmt: skip
    if any(n.endswith("]") and NO_PROMPT_CACHE_SUFFIX in n for n in by_name):
        lines.append(
            f"\n(H launched with the same flags each time; with the prompt cache off every "
            f"launch runs `{' '.join(NO_PROMPT_CACHE)}`. With the prompt cache on, a request "
            "that shares a prefix with an earlier one evaluates only the rest, in another "
            "batch split than a fresh request: a floating-point difference between any two "
            "launches, which llama-perplexity, evaluating fixed chunks afresh, never has. "
            "And ours scores what the server decodes, llama-perplexity only what it "
            "evaluates as prompts: a change that moves the decode path alone, such as "
            "flash attention's decode with another thread count, shows in ours and not in "
            "its.)"
        )
    return lines


def calibration(data: dict[str, Any], swept: dict[str, Any] | None = None) -> list[str]:
    """Sentences on whether the tolerance separates benign changes from faults (numerics),
    from the panel's median mean-KL per pair and its verdicts (at the shipped tolerance,
    re-decided, when ``swept``, the ``--sweep`` JSON, holds it), one part per set of
    numerics sequences: KLs on different sequences are not compared."""
    suffix = NUMERICS_SUFFIX["shipped"]
    data = with_kinds(data)
    pairs = data.get("pairs", [])
    shipped = [p for p in pairs if p["name"].endswith(suffix)]
    rest = [p for p in pairs if not p["name"].endswith(suffix)]
    if not shipped or not rest:
        return _calibration(data, swept)
    return [
        "On `scenarios/` (the shipped rule):", "",
        *_calibration({**data, "pairs": shipped}, swept), "",
        "On `e2e/scenarios` (the e2e's conversations and GSM8K prompts):", "",
        *_calibration({**data, "pairs": rest}, swept),
    ]  # fmt: skip


def _calibration(data: dict[str, Any], swept: dict[str, Any] | None) -> list[str]:
    tol, redecided = _at_tolerance(data, swept)
    by_kind: dict[str, list[tuple[str, float]]] = {"fault": [], "limit": [], "benign": [], "aa": []}
    for p in data.get("pairs", []):
        kl = _median([n["kl_mean"] for n in p["numerics"] if n.get("kl_mean") is not None])
        if kl is not None:
            by_kind[p["kind"]].append((p["name"], kl))
    lines = []
    benign = by_kind["benign"] + by_kind["aa"]
    if benign and by_kind["fault"]:
        top = max(benign, key=lambda x: x[1])
        low = min(by_kind["fault"], key=lambda x: x[1])
        side = "below" if top[1] < tol else "above"
        lines.append(f"- Largest benign or A/A mean KL: {_fmt(top[1])} ({top[0]}), {side} the "
                     f"tolerance {tol:g}.")  # fmt: skip
        lines.append(f"- Smallest fault mean KL: {_fmt(low[1])} ({low[0]}), "
                     f"{'above' if low[1] > tol else 'below'} the tolerance.")  # fmt: skip
        under = [n for n, kl in by_kind["fault"] if kl <= tol]
        if top[1] < low[1] and not under:
            limits = [n for n, _ in by_kind["limit"]]
            lines.append("- The tolerance separates every benign change from every fault"
                         + (f" but the limit pair ({', '.join(limits)}), a fault it misses"
                            if limits else "") + ".")  # fmt: skip
        else:
            lines.append(f"- Overlap: faults at or below the tolerance: {', '.join(under) or 'none'}; "
                         f"a benign change at {_fmt(top[1])} against a fault at {_fmt(low[1])}.")  # fmt: skip
    if benign:
        top = max(benign, key=lambda x: x[1])
        for name, kl in by_kind["limit"]:
            got = _verdicts(next(p for p in data["pairs"] if p["name"] == name), redecided)
            lines.append(f"- Limit, {name}: mean KL {_fmt(kl)}, "
                         f"{'at or below' if kl <= top[1] else 'above'} the largest benign "
                         f"change's {_fmt(top[1])} ({top[0]}); "
                         f"{_counts([{'verdict': v} for v in got])}.")  # fmt: skip
    ref = {p["name"]: p["reference"]["mean"] for p in data.get("pairs", [])
           if (p.get("reference") or {}).get("mean") is not None}  # fmt: skip
    for name, _ in by_kind["fault"] + by_kind["limit"]:
        if name not in ref:
            continue
        bigger = [(b, ref[b]) for b, _ in by_kind["benign"] if ref.get(b, -1.0) >= ref[name]]
        if bigger:
            b, kld = max(bigger, key=lambda x: x[1])
            lines.append(f"- {name}: llama-perplexity's full-vocabulary KLD {_fmt(ref[name])} is no "
                         f"larger than a benign change's ({b}: {_fmt(kld)}): no tolerance on the "
                         "size of the divergence separates them.")  # fmt: skip
    for p in data.get("pairs", []):
        if p["kind"] == "limit":
            continue
        got = _verdicts(p, redecided)
        wrong = [v for v in got if (p["kind"] == "fault") != (v == "REGRESSION")]
        if wrong:
            want = "REGRESSION" if p["kind"] == "fault" else "not REGRESSION"
            lines.append(f"- {p['name']}: {len(wrong)} of {len(got)} numerics verdicts "
                         f"are not {want} ({', '.join(sorted(set(wrong)))}).")  # fmt: skip
    return lines


def sweep(folders: Sequence[Path], grid: Sequence[float] = GRID) -> dict[str, Any]:
    """Every numerics comparison the panels in ``folders`` stored (``logprobs-pNN-rMM/
    logprobs.json``, pair NN of that folder's ``panel.json``) decided again by
    :func:`harness.numerics.decide.decide` at each tolerance of ``grid`` (nats/token), from
    its per-sequence rows: no server. Returns ``{"grid", "pairs": [{"name", "kind",
    "verdicts": {tolerance: {verdict: count}}}]}`` in the first folder's pair order.

    Raises:
        FileNotFoundError: a folder without ``panel.json``.
    """
    from harness.numerics.decide import decide
    from harness.numerics.models import LogprobsResult

    rows: dict[str, dict[str, Any]] = {}
    for folder in folders:
        pairs = json.loads((folder / "panel.json").read_text(encoding="utf-8"))["pairs"]
        for path in sorted(folder.glob("logprobs-p*-r*/logprobs.json")):
            m = re.search(r"logprobs-p(\d+)-r\d+", str(path))
            if m is None or int(m.group(1)) >= len(pairs):
                continue
            pair = pairs[int(m.group(1))]
            row = rows.setdefault(pair["name"], {"name": pair["name"], "kind": pair["kind"],
                                                 "verdicts": {f"{t:g}": {} for t in grid}})  # fmt: skip
            result = LogprobsResult.model_validate_json(path.read_text(encoding="utf-8"))
            greedy = bool(result.settings.get("generation"))  # as the run decided: parting first
            for t in grid:
                verdict = decide(result.sequences, tolerance=t, generation=greedy)[0]
                counts = row["verdicts"][f"{t:g}"]
                counts[verdict] = counts.get(verdict, 0) + 1
    return {"grid": [f"{t:g}" for t in grid], "folders": [str(f) for f in folders],
            "rule": RULE, "pairs": list(rows.values())}  # fmt: skip


def add_sweeps(first: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two ``--sweep`` results as one (``--sweep ... --add``: comparisons of a later session,
    whose panel folders are gone, added to the committed counts): verdict counts summed per
    pair and tolerance, pairs in ``first``'s order then ``more``'s new ones, the commands
    joined. Raises ValueError when the grids differ."""
    if first["grid"] != more["grid"]:
        raise ValueError(f"sweep grids differ: {first['grid']} and {more['grid']}")
    if first.get("rule", OLD_RULE) != more.get("rule", OLD_RULE):
        raise ValueError("sweep rules differ: the committed counts were decided by "
                         f"{first.get('rule', OLD_RULE)!r}, these by {more.get('rule', OLD_RULE)!r}")  # fmt: skip
    again = sorted(set(first.get("folders", [])) & set(more.get("folders", [])))
    if again:
        raise ValueError(f"already counted in the sweep: {', '.join(again)}")
    pairs = {p["name"]: {**p, "verdicts": {t: dict(c) for t, c in p["verdicts"].items()}}
             for p in first["pairs"]}  # fmt: skip
    for p in more["pairs"]:
        row = pairs.setdefault(p["name"], {**p, "verdicts": {t: {} for t in first["grid"]}})
        for t, counts in p["verdicts"].items():
            for verdict, n in counts.items():
                row["verdicts"][t][verdict] = row["verdicts"][t].get(verdict, 0) + n
    command = " ; ".join(c for c in (first.get("command"), more.get("command")) if c)
    folders = [*first.get("folders", []), *more.get("folders", [])]
    return {**first, "command": command, "folders": folders, "pairs": list(pairs.values())}


def render_sweep(data: dict[str, Any]) -> list[str]:
    """The ``--sweep`` table (verdict counts per pair and tolerance) and, per tolerance,
    whether it puts every fault on one side and every benign change and A/A on the other,
    and whether it sees the limit pairs."""
    data = with_kinds(data)
    grid = data["grid"]
    short = {"REGRESSION": "R", "NO CHANGE": "N", "INCONCLUSIVE": "I"}
    lines = [
        "| kind | pair | " + " | ".join(grid) + " |",
        "| --- | --- | " + " | ".join("---" for _ in grid) + " |",
    ]
    for p in data["pairs"]:
        cells = [" ".join(f"{n} {short.get(v, v)}" for v, n in sorted(p["verdicts"][t].items()))
                 for t in grid]  # fmt: skip
        lines.append(f"| {p['kind']} | {p['name']} | " + " | ".join(cells) + " |")
    lines += ["", "R REGRESSION, N NO CHANGE, I INCONCLUSIVE (counts of stored comparisons).", ""]
    for t in grid:
        missed = [p["name"] for p in data["pairs"] if p["kind"] == "fault"
                  and set(p["verdicts"][t]) != {"REGRESSION"}]  # fmt: skip
        alarms = [p["name"] for p in data["pairs"] if p["kind"] in ("aa", "benign")
                  and "REGRESSION" in p["verdicts"][t]]  # fmt: skip
        seen = [p["name"] for p in data["pairs"] if p["kind"] == "limit"
                and set(p["verdicts"][t]) == {"REGRESSION"}]  # fmt: skip
        has_limit = any(p["kind"] == "limit" for p in data["pairs"])
        lines.append(f"- tolerance {t}: faults not REGRESSION in every comparison: "
                     f"{', '.join(missed) or 'none'}; benign or A/A pairs with a REGRESSION: "
                     f"{', '.join(alarms) or 'none'}"
                     + (f"; limit pairs REGRESSION in every comparison: {', '.join(seen) or 'none'}"
                        if has_limit else "") + ".")  # fmt: skip
    return lines


def merge(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One panel from several ``panel.json`` (e.g. numerics and behaviour run as two
    processes): pairs joined by name in the first part's order, their numerics and
    behaviour lists concatenated, the first reference figure kept; the commands listed, the
    wall time the longest part's (they ran side by side)."""
    if len(parts) == 1:
        return dict(parts[0])
    out: dict[str, Any] = {**parts[0], "pairs": [], "command": " ; ".join(
        str(p.get("command")) for p in parts)}  # fmt: skip
    out["settings"] = {**parts[0].get("settings", {})}
    out["settings"]["behaviour_repeats"] = max(
        p.get("settings", {}).get("behaviour_repeats", 0) for p in parts
    )
    secs = [p.get("seconds") for p in parts]
    out["seconds"] = None if None in secs else max(s for s in secs if s is not None)
    rows: dict[str, dict[str, Any]] = {}
    for part in parts:
        for p in part.get("pairs", []):
            row = rows.get(p["name"])
            if row is None:
                rows[p["name"]] = row = {**p, "numerics": [], "behaviour": []}
                out["pairs"].append(row)
            row["numerics"] = row["numerics"] + p.get("numerics", [])
            row["behaviour"] = row["behaviour"] + p.get("behaviour", [])
            if row.get("reference") is None and p.get("reference") is not None:
                row["reference"] = p["reference"]
    return out


def render(data: dict[str, Any], swept: dict[str, Any] | None = None) -> str:
    """The Markdown page of a ``panel.json`` (``docs/moe-panel.md``): one row per pair.

    ``swept``: the ``--sweep`` JSON (default: ``e2e/panel-sweep.json`` when it exists);
    the numerics verdicts are then those at the shipped tolerance, decided again from the
    stored rows, and the sweep's table follows."""
    swept = _committed_sweep(swept)
    data = with_kinds(data)
    s = data.get("settings", {})
    tol, redecided = _at_tolerance(data, swept)
    lines = [
        "# The MoE panel on llama-server",
        "",
        "<!-- generated by `python -m e2e.panel --render` from e2e/panel.json; do not edit -->",
        "",
    ]
    if top := summary(data, swept):
        lines += [
            "## Summary",
            "",
            "The healthy MoE (all 8 routed experts) against each change, every change a launch of "
            "its own. Numerics on `scenarios/` (its turns' prefixes: the pairs run with "
            "`--numerics-scenarios shipped`), decided as they ran by the shipped rule "
            f"({RULE}) at the shipped tolerance {TOLERANCE:g} nats/token; numerics on "
            "`e2e/scenarios` (its conversations and GSM8K prompts) as in the sweep below; "
            "behaviour: `harness compare` "
            "on `e2e/scenarios` at its defaults, each comparison at its own sampling seed; "
            "llama-perplexity's full-vocabulary KLD on the same text as ours (the "
            "`scenarios/` text where it was measured, else the e2e's conversations and "
            "GSM8K prompts). "
            "Required: a fault REGRESSION in every numerics comparison on `scenarios/`; an "
            "A/A or a benign change never REGRESSION. The `limit` pair is a fault too, and "
            "about as large as a benign change: its mean KL is below the q8_0 KV cache's on "
            "`scenarios/` and above it on the e2e's sequences, and llama-perplexity's "
            "full-vocabulary KLD puts the two level. No tolerance on the size of the "
            "divergence can call it REGRESSION without calling a q8_0 KV cache one too, so "
            "it is exempt from the requirement, and its row says whether the rule sees it: "
            "where the shipped tolerance stops seeing a fault.",
            "",
            *top,
            "",
            *severity(data),
            "",
            "## Every comparison",
            "",
        ]
    lines += [
        f"Command: `{data.get('command')}` (started {data.get('started')}; "
        f"{_fmt_s(data.get('seconds'))} wall).",
        f"Numerics comparisons per pair: {_spread(data, 'numerics', 'fault', 'limit', 'benign')} "
        f"(A/A: {_spread(data, 'numerics', 'aa')}); behavioural comparisons per pair: "
        f"{_spread(data, 'behaviour', 'aa', 'fault', 'limit', 'benign')} (`harness compare` at its "
        "defaults); "
        f"the first run's settings (each run's are in its command): GSM8K prompts "
        f"{s.get('gsm8k')}, at most {s.get('max_tokens')} tokens each, "
        f"tolerance {s.get('tolerance')} nats/token"
        + (
            f"; the numerics verdicts below are at the shipped tolerance {tol:g}, decided again "
            "from each comparison's stored per-sequence rows (`--sweep`, below)" + _rule_note(swept)
            if redecided
            else "."
        ),
        "",
        "KL columns: ours is the median over repeats of `harness logprobs`'s mean KL over the "
        "shared top-k (with its 99th percentile and maximum over positions); llama-perplexity's "
        "is the full-vocabulary KLD on the same conversations and prompts as ChatML "
        f"(`-c {s.get('perplexity_ctx')}`). The ratio is ours / llama-perplexity's.",
        "",
        "Behaviour verdicts: each comparison's sampling seed is its own (`--sampling-seed`, "
        "from the panel folder and the comparison); the comparisons stored without one ran "
        "at the default seed 0, where H's runs and the candidate's are largely the same draws "
        "in every comparison of a pair: `seeds` says how many distinct seeds a cell's "
        "comparisons ran at, an upper bound on its independent trials.",
        "",
        "| kind | pair | numerics REGRESSION [95% CI] of the decided | numerics verdicts | KL mean (p99, max) "
        "| llama-perplexity KLD mean (p99, max) | ratio | behaviour verdicts | requests: "
        "numerics / behaviour | wall s: numerics / behaviour |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    refs = _references(data)
    for p in data.get("pairs", []):
        num = p["numerics"]
        got = _verdicts(p, redecided)
        reg = sum(v == "REGRESSION" for v in got)
        judged = sum(not v.startswith("exit ") for v in got)  # a comparison that gave a verdict

        def med(key: str, rows: list[dict[str, Any]] = num) -> float | None:
            """The median over the comparisons that finished."""
            return _median([r[key] for r in rows if r.get(key) is not None and _verdict(r)])

        ref = refs.get(p["name"]) or p.get("reference")
        ref_txt, ratio = "-", "-"
        if ref and "mean" in ref:
            ref_txt = f"{_fmt(ref['mean'])} ({_fmt(ref['p99'])}, {_fmt(ref['max'])})"
            ours = med("kl_mean")
            if ours is not None and ref["mean"] > 0:
                ratio = f"{ours / ref['mean']:.2f}"
        elif ref and "error" in ref:
            ref_txt = "failed"
        beh = p["behaviour"]
        lines.append(
            f"| {p['kind']} | {p['name']} | {_rate(reg, judged)} | "
            f"{_counts([{'verdict': v} for v in got])} | "
            f"{_fmt(med('kl_mean'))} ({_fmt(med('kl_p99'))}, {_fmt(med('kl_max'))}) | "
            f"{ref_txt} | {ratio} | {_behaviour_cell(beh)} | "
            f"{_fmt_n(med('requests'))} / {_fmt_n(med('requests', beh))} | "
            f"{_fmt_n(med('seconds'))} / {_fmt_n(med('seconds', beh))} |"
        )
    lines += ["", "## Calibration (numerics)", "", *calibration(data, swept), ""]
    if bound := lower_bound(data):
        lines += ["## Ours against llama-perplexity's", "", *bound, ""]
    if swept:
        lines += ["## The tolerance swept", "",
                  f"Command: `{swept.get('command')}`. Every numerics comparison above decided "
                  "again, from its stored per-sequence rows, at each tolerance (nats/token):", "",
                  *render_sweep(swept), ""]  # fmt: skip
    return "\n".join(lines)


def summary(data: dict[str, Any], swept: dict[str, Any] | None = None) -> list[str]:
    """The page's first table: one row per pair of :data:`PAIRS` that the panel holds, its
    numerics on ``scenarios/`` (the ``{scenarios/}`` rows: the shipped rule, as they ran),
    its numerics on ``e2e/scenarios`` (the sweep's verdicts at the shipped tolerance when
    ``swept`` holds them), llama-perplexity's KLD, its behaviour, and whether it meets the
    panel's requirement: a fault REGRESSION in every numerics comparison on ``scenarios/``;
    an A/A or a benign change never REGRESSION; a ``limit`` pair none (it shows where the
    rule stops seeing a fault). Markdown lines; ``[]`` when the panel holds no such pair.
    ``swept`` as for :func:`render`."""
    swept = _committed_sweep(swept)
    data = with_kinds(data)
    _, redecided = _at_tolerance(data, swept)
    by_name = {p["name"]: p for p in data.get("pairs", [])}
    refs = _references(data)
    shipped_suffix = NUMERICS_SUFFIX["shipped"]
    lines = [
        "| kind | pair | numerics on `scenarios/`: REGRESSION [95% CI] | verdicts | KL mean "
        "| numerics on `e2e/scenarios` | llama-perplexity KLD | behaviour | behaviour requests "
        "(median) | as required |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pair in PAIRS:
        base, shipped = by_name.get(pair.name), by_name.get(pair.name + shipped_suffix)
        if base is None and shipped is None:
            continue
        kind = pair.kind
        got = _verdicts(shipped, redecided) if shipped else []
        judged = [v for v in got if not v.startswith("exit ")]
        reg = sum(v == "REGRESSION" for v in judged)
        e2e_got = _verdicts(base, redecided) if base else []
        beh = (base or {}).get("behaviour", []) + (shipped or {}).get("behaviour", [])
        ref = refs.get(pair.name + shipped_suffix) or refs.get(pair.name) or {}
        everything = [v for v in got + e2e_got if not v.startswith("exit ")]
        everything += [v for r in beh if (v := _verdict(r))]
        if kind == "fault":
            met = bool(judged) and reg == len(judged)
        else:  # and at least one comparison that gave a verdict
            met = bool(everything) and "REGRESSION" not in everything
        if kind == "limit":
            req = f"exempt (the limit): {'seen' if judged and reg == len(judged) else 'missed'}"
        else:
            req = "yes" if met else "**no**"
        beh_req = _median([r["requests"] for r in beh if _verdict(r) and r.get("requests")])
        lines.append(
            f"| {kind} | {pair.name} | {_rate(reg, len(judged))} | "
            f"{_counts([{'verdict': v} for v in got]) if shipped else '-'} | "
            f"{_fmt(_median_kl(shipped)) if shipped else '-'} | "
            f"{_counts([{'verdict': v} for v in e2e_got]) if base else '-'} | "
            f"{_fmt(ref.get('mean'))} | {_behaviour_cell(beh)} | {_fmt_n(beh_req)} | {req} |"
        )
    return lines if len(lines) > 2 else []


def severity(data: dict[str, Any]) -> list[str]:
    """Where behaviour stops seeing a fault, blunt to subtle (:data:`PAIRS`' order), and
    what it costs where it does: each fault's behavioural REGRESSION rate and median
    requests (turns) and wall time of its comparisons. Markdown lines."""
    beh_of: dict[str, list[dict[str, Any]]] = {}
    for p in data.get("pairs", []):
        if p["name"] in (base_name(p["name"]), base_name(p["name"]) + NUMERICS_SUFFIX["shipped"]):
            beh_of.setdefault(base_name(p["name"]), []).extend(p.get("behaviour", []))
    seen: list[str] = []
    unseen: list[str] = []
    for pair in PAIRS:
        if pair.kind not in ("fault", "limit"):
            continue
        beh = [r for r in beh_of.get(pair.name, []) if _verdict(r)]
        if not beh:
            continue
        reg = [r for r in beh if _verdict(r) == "REGRESSION"]
        cost = ""
        if reg:
            cost = (f"; {_fmt_n(_median([r['requests'] for r in reg if r.get('requests')]))} "
                    f"requests, {_fmt_n(_median([r['seconds'] for r in reg if r.get('seconds')]))} s")  # fmt: skip
        text = f"{pair.name} ({len(reg)}/{len(beh)}{cost})"
        if len(beh) == 1 and not reg:
            text = f"{pair.name} ({_verdict(beh[0])} in its one comparison)"
        (seen if len(reg) * 2 > len(beh) else unseen).append(text)
    if not seen and not unseen:
        return []
    return [
        "Behaviour, blunt to subtle (REGRESSION in how many comparisons; the median requests "
        "and wall time of those that were): sees "
        + ("; ".join(seen) or "none")
        + ". Does not see "
        + ("; ".join(unseen) or "none")
        + "."
    ]


def _rule_note(swept: dict[str, Any] | None) -> str:
    """What decided the swept verdicts, when it is not the shipped rule."""
    rule = (swept or {}).get("rule", OLD_RULE)
    if rule == RULE:
        return "."
    return (
        f", by the rule of the time ({rule}: the signed-rank test alone, without the "
        "shipped rule's t-test of the mean; those panels' folders are gone, so their "
        "comparisons cannot be decided again). Pairs not in the sweep (named "
        f"`{NUMERICS_SUFFIX['shipped'].strip()}`) show the verdicts the shipped rule gave "
        "when they ran."
    )


def _behaviour_cell(rows: list[dict[str, Any]]) -> str:
    """The behaviour verdicts' counts and, over the judged ones, the REGRESSION rate with
    its Wilson 95% interval."""
    if not rows:
        return "-"
    judged = [v for r in rows if (v := _verdict(r))]
    if not judged:
        return _counts(rows)
    reg = sum(v == "REGRESSION" for v in judged)
    seeds = len({r.get("sampling_seed", 0) for r in rows if _verdict(r)})
    return f"{_counts(rows)}; REGRESSION {_rate(reg, len(judged))}; seeds {seeds}"


def _spread(data: dict[str, Any], key: str, *kinds: str) -> str:
    """How many comparisons the pairs of ``kinds`` hold: ``n`` or ``lo-hi``."""
    counts = sorted({len(p[key]) for p in data.get("pairs", []) if p["kind"] in kinds})
    if not counts:
        return "0"
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def _fmt_n(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _fmt_s(x: float | None) -> str:
    return "not finished" if x is None else f"{x / 60:.0f} min"


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m e2e.panel", description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output folder (default results/moe-panel-<UTC time>)")
    p.add_argument("--llama-server", help="llama-server binary ($HARNESS_LLAMA_SERVER)")
    p.add_argument("--perplexity", help="llama-perplexity binary (none: no reference column)")
    p.add_argument("--repeats", type=int, default=5, help="numerics repeats per pair (5)")
    p.add_argument("--aa-repeats", type=int, default=20, help="numerics repeats of the A/A (20)")
    p.add_argument("--behaviour-repeats", type=int, default=1,
                   help="behavioural compares per pair (1)")  # fmt: skip
    p.add_argument("--gsm8k", type=int, default=None,
                   help="GSM8K prompts added to the numerics sequences (default: 0 with "
                        "--numerics-scenarios shipped, 8 with e2e)")  # fmt: skip
    p.add_argument("--gsm8k-data", default="../shared/data/gsm8k/test.jsonl")
    p.add_argument("--max-tokens", type=int, default=32, help="positions per sequence (32)")
    p.add_argument("--ctx", type=int, default=256, help="llama-perplexity's -c (256)")
    p.add_argument("--no-numerics", action="store_true",
                   help="behaviour only (--behaviour-repeats compares per pair)")  # fmt: skip
    p.add_argument("--reference-only", action="store_true",
                   help="llama-perplexity's KLD only (needs --perplexity; no server)")  # fmt: skip
    p.add_argument("--only", help="comma-separated pair indices (default: all)")
    p.add_argument("--boot-timeout", type=float, default=300.0)
    p.add_argument("--render", action="store_true",
                   help="write docs/moe-panel.md from e2e/panel.json")  # fmt: skip
    p.add_argument("--sweep", nargs="+", metavar="FOLDER",
                   help="decide these panels' stored numerics again at each tolerance of "
                        f"{', '.join(map(str, GRID))}: write {SWEEP_JSON.name}, then --render")  # fmt: skip
    p.add_argument("--add", action="store_true",
                   help=f"with --sweep: add the counts to {SWEEP_JSON.name}'s instead of "
                        "replacing them (the earlier panels' folders gone)")  # fmt: skip
    p.add_argument("--no-prompt-cache", action="store_true",
                   help="every launch, H's included, in one slot with llama-server's prompt "
                        f"cache off ({' '.join(NO_PROMPT_CACHE)}): each request evaluated "
                        "afresh, as llama-perplexity evaluates its chunks; the pairs' names "
                        f"end in '{NO_PROMPT_CACHE_SUFFIX}'")  # fmt: skip
    p.add_argument("--server-flags", metavar="FLAGS",
                   help="llama-server flags for every launch, H's included (after "
                        "--no-prompt-cache's; a pair's own come last and win); the pairs' "
                        "names end in ' [FLAGS]'")  # fmt: skip
    p.add_argument("--numerics-scenarios", choices=NUMERICS_SETS, default="shipped",
                   help="the scenarios H's numerics are recorded on: shipped (the default: "
                        "scenarios/ but the ones longer than a slot's context; the pairs' "
                        "names end in '{scenarios/}') or e2e (e2e/scenarios' 3 conversations "
                        "and --gsm8k prompts: too few sequences for a fault that moves only "
                        "some turns)")  # fmt: skip
    p.add_argument("--publish", nargs="+", metavar="PANEL_JSON",
                   help="merge these panel.json into e2e/panel.json, then --render")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the panel (exit 0; 2 when a server or the recording fails) or ``--render``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.gsm8k is None:
        args.gsm8k = 0 if args.numerics_scenarios == "shipped" else 8
    args.argv = argv
    if args.publish:
        parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.publish]
        PANEL_JSON.write_text(json.dumps(merge(parts), indent=1) + "\n", encoding="utf-8")
    if args.sweep:
        sw = {"command": "python -m e2e.panel " + shlex.join(argv),
              **sweep([Path(f) for f in args.sweep])}  # fmt: skip
        if args.add and SWEEP_JSON.is_file():
            try:
                sw = add_sweeps(json.loads(SWEEP_JSON.read_text(encoding="utf-8")), sw)
            except ValueError as exc:
                print(f"panel: --sweep --add: {exc}", file=sys.stderr)
                return 2
        SWEEP_JSON.write_text(json.dumps(sw, indent=1) + "\n", encoding="utf-8")
    if args.render or args.publish or args.sweep:
        DOC.write_text(render(json.loads(PANEL_JSON.read_text(encoding="utf-8"))),
                       encoding="utf-8")  # fmt: skip
        print(DOC)
        return 0
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = Path(args.out or f"results/moe-panel-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    pairs = PAIRS
    if args.only:
        pairs = tuple(PAIRS[int(i)] for i in args.only.split(","))
    previous = catch_sigterm()  # a time limit's SIGTERM: every server stopped, exit 143
    try:
        _Panel(args, out).run(pairs)
    except E2EError as exc:
        print(f"panel: FAILED: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"panel: interrupted (servers stopped); the comparisons that finished are in "
              f"{out / 'panel.json'}: run the rest with --only and add them with --publish",
              file=sys.stderr)  # fmt: skip
        return interrupted_code(exc)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(f"panel: {out / 'panel.json'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
