"""``harness logprobs``: do two servers give the same tokens the same log-probabilities?

Teacher forcing: both servers score the same token ids (each scenario's reference
conversation; with ``--from-run RUN`` the conversations a compare run's baseline had;
with ``--gsm8k N`` also N GSM8K few-shot prompts). The baseline scores every sequence
twice (or ``--aa-baseline URL``, a second baseline server, scores it) for the noise floor;
the verdict tests the candidate's divergence against that floor
(:mod:`harness.numerics.decide`). Writes ``logprobs.json`` and the report into a run
folder. Without URLs, the built-in reference server plays both sides (``healthy`` vs
``fused-regression``; ``--sim-candidate PROFILE`` picks another, e.g. ``kv-cache-quant``).

Exit codes (as ``compare``): 0 NO CHANGE (also INCONCLUSIVE unless ``--strict``),
1 REGRESSION, 2 usage error or a tokenisation mismatch between the servers,
3 a server without logprobs, an HTTP error, a context overflow or a truncated answer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Literal

from harness.cli import ExitCode
from harness.cli._common import write_report_or_warn
from harness.client.target import server_root, target_from_options
from harness.errors import LogprobsError, TokenizationMismatch
from harness.numerics.adapters import ADAPTERS, MAX_TOKENS
from harness.numerics.decide import ALPHA, TOLERANCE
from harness.numerics.models import LogprobsResult, Sequence, SequenceResult
from harness.numerics.run import DEFAULT_TOP_K, LogprobsOptions, compare_logprobs
from harness.options import add_argument, http_url, positive_int, url_or_recording
from harness.present.console import make_console
from harness.present.logprobs import class_rows, largest_class_line, scored_with
from harness.recording import is_recording_ref
from harness.runfolder import RunFolder
from harness.scenario.library import default_scenarios

HELP = "Compare two servers' token log-probabilities on the same tokens (numerics A/B)."


def _positive_float(value: str) -> float:
    from harness.errors import OptionValueError

    try:
        x = float(value)
    except ValueError:
        x = -1.0
    if not x > 0 or x != x or x == float("inf"):
        raise OptionValueError(f"{value!r} is not a number > 0")
    return x


def add_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, prefix: str = "") -> None:
    """The scoring options ``harness logprobs`` and ``harness compare`` share."""
    p.add_argument(
        f"--{prefix}logprobs-api",
        dest="logprobs_api",
        choices=["auto", *ADAPTERS],
        default="auto",
        help="which logprobs API to use (default auto: detected on each side, the first that "
        "answers)",
    )
    p.add_argument(
        "--top-k", dest="top_k", type=positive_int, default=DEFAULT_TOP_K,
        help=f"top-k logprobs per position (default {DEFAULT_TOP_K})",
    )  # fmt: skip
    p.add_argument(
        "--tolerance", type=_positive_float, default=TOLERANCE,
        help=f"mean KL per token above the A/A floor called a regression (default {TOLERANCE})",
    )  # fmt: skip
    p.add_argument(
        "--max-tokens", dest="max_tokens", type=positive_int, default=MAX_TOKENS,
        help=f"positions scored per sequence at most (default {MAX_TOKENS})",
    )  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness logprobs``, added to ``p``."""
    p.add_argument("scenarios", nargs="*", help="scenario files or folders (default: scenarios)")
    add_argument(p, "baseline")
    p.add_argument(
        "--candidate", metavar="URL|DIR", type=url_or_recording,
        help="candidate server, or a recording's folder (harness record)",
    )  # fmt: skip
    p.add_argument(
        "--aa-baseline", metavar="URL", type=http_url,
        help="a second baseline server for the noise floor (default: the baseline scores twice)",
    )  # fmt: skip
    add_options(p)
    p.add_argument(
        "--from-run", metavar="FOLDER",
        help="score the conversations a compare run's baseline had (its run folder)",
    )  # fmt: skip
    p.add_argument("--gsm8k", type=int, default=0, metavar="N", help="add N GSM8K prompts")
    p.add_argument("--gsm8k-data", default=None, metavar="FILE", help="GSM8K jsonl file")
    p.add_argument(
        "--sim-candidate", default="fused-regression", metavar="PROFILE",
        help="without URLs: the reference server's candidate profile (default fused-regression)",
    )  # fmt: skip
    for name in ("model", "results", "request_timeout", "api_key_env"):
        add_argument(p, name)
    p.add_argument("--run-id", default=None, help="run folder name")
    p.add_argument("--strict", action="store_true", help="exit 1 on INCONCLUSIVE too")


def sequences_for(args: argparse.Namespace) -> list[Sequence]:
    """The sequences to score (scenarios, or a run's baseline transcripts; GSM8K prompts).

    Raises:
        HarnessError: a bad scenario file, run folder or GSM8K file (one line).
    """
    from harness.numerics.sequences import from_gsm8k, from_record, from_scenario
    from harness.scenario.model import load_scenarios

    if args.from_run:
        rf = RunFolder.open(args.from_run)
        seen: dict[str, Sequence] = {}
        for rec in rf.records():
            if rec.target.side == "baseline" and rec.scenario_id not in seen:
                seen[rec.scenario_id] = from_record(rec)
        seqs = list(seen.values())
    else:
        seqs = [from_scenario(s) for s in load_scenarios(args.scenarios or [default_scenarios()])]
    if args.gsm8k > 0:
        from harness.gsm8k.data import load_dataset

        seqs += from_gsm8k(load_dataset(args.gsm8k_data).questions, args.gsm8k)
    return seqs


def options_for(args: argparse.Namespace) -> LogprobsOptions:
    """The :class:`LogprobsOptions` of the parsed command line ``args``."""
    return LogprobsOptions(
        api=args.logprobs_api,
        model=args.model,
        top_k=args.top_k,
        tolerance=args.tolerance,
        max_tokens=args.max_tokens,
        alpha=ALPHA,
        timeout_s=args.request_timeout,
        aa_url=server_root(args.aa_baseline) if getattr(args, "aa_baseline", None) else None,
        api_key=os.environ.get(args.api_key_env),
    )


@contextlib.contextmanager
def _servers(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.baseline and args.candidate:
        yield server_root(args.baseline), server_root(args.candidate)
        return
    from harness.sim.server import serve_in_thread

    with (
        serve_in_thread("healthy", scenarios_dir=None, seed=0) as b,
        serve_in_thread(args.sim_candidate, scenarios_dir=None, seed=1) as c,
    ):
        yield b, c


def _line(r: SequenceResult) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.2g}"

    agree = "-" if r.ab.top1_agreement is None else f"{100 * r.ab.top1_agreement:.0f}%"
    first = "" if r.ab.first_over is None else f"first over at {r.ab.first_over.position}"
    return f"  {r.id[:28]:<28} {r.tokens:>5} {f(r.ab.mean_kl):>8} {f(r.aa.mean_kl):>8} {agree:>5}  {first}"


def print_result(res: LogprobsResult) -> None:
    """The per-sequence table and the verdict line (stdout)."""
    print(f"{'  sequence':<30} {'tokens':>5} {'A/B KL':>8} {'A/A KL':>8} {'top1':>5}")
    for r in res.sequences:
        print(_line(r))
    rows = class_rows(res)
    if rows:
        head = ("  token class", "positions", "A/B mean KLD ± SE", "A/A KLD", "A/B 99.0%",
                "RMS Δp", "same top A/B", "A/A")  # fmt: skip
        print(f"{head[0]:<14} {head[1]:>9} {head[2]:>21} {head[3]:>9} {head[4]:>9} "
              f"{head[5]:>7} {head[6]:>12} {head[7]:>7}")  # fmt: skip
        for c in rows:
            v = c.cells
            print(f"  {c.token_class:<12} {c.positions:>9} {v[0]:>21} {v[1]:>9} {v[2]:>9} "
                  f"{v[3]:>7} {v[4]:>12} {v[5]:>7}")  # fmt: skip
    print(f"logprobs ({scored_with(res)}): {res.message}")
    where = largest_class_line(res)
    if where:
        print(f"  {where}")
    for note in res.notes:
        print(f"  note: {note}")


def run(args: argparse.Namespace) -> int:
    """``harness logprobs``: the two servers' logprobs of the same sequences compared; the exit
    code."""
    if bool(args.baseline) != bool(args.candidate):
        print(
            "error: give both --baseline URL and --candidate URL (or neither: the built-in server)",
            file=sys.stderr,
        )
        return ExitCode.USAGE_ERROR
    if is_recording_ref(args.baseline) or is_recording_ref(args.candidate):
        return _run_recorded(args)
    seqs = sequences_for(args)
    if not seqs:
        print("error: no sequences to score (no scenario files, empty run folder)", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    try:
        with _servers(args) as (b, c):
            res = compare_logprobs(seqs, b, c, options_for(args))
    except TokenizationMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    except LogprobsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.INFRA_ERROR
    return _write(args, res)


def _run_recorded(args: argparse.Namespace) -> int:
    """A side given as a recording (:mod:`harness.recording`): its recorded sequences and
    scores (the conversations its runs had, scored twice), against the other side."""
    from harness.errors import RecordingError
    from harness.numerics.section import _recorded_section
    from harness.recording import RecordedSide, Recording

    if args.scenarios or args.from_run or args.gsm8k or args.aa_baseline:
        print(
            "error: a recording fixes the sequences and the A/A floor: drop the scenario "
            "paths, --from-run, --gsm8k and --aa-baseline",
            file=sys.stderr,
        )
        return ExitCode.USAGE_ERROR
    sides = []
    try:
        roles: tuple[Literal["baseline", "candidate"], ...] = ("baseline", "candidate")
        for role, ref in zip(roles, (args.baseline, args.candidate), strict=True):
            sides.append(
                RecordedSide(Recording.open(ref), role, role)
                if is_recording_ref(ref)
                else target_from_options(  # the model goes in the numerics options
                    ref, label=role, side=role, options=args, model=None
                )
            )
        res = _recorded_section(sides[0], sides[1], options_for(args))
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    except TokenizationMismatch as exc:
        print(f"error: {exc} (the recording can no longer serve: record it again)", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    except LogprobsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.INFRA_ERROR
    if isinstance(res, str):
        print(f"error: {res}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    return _write(args, res)


def _write(args: argparse.Namespace, res: LogprobsResult) -> int:
    """Write ``logprobs.json`` and the report into a new run folder, print the table;
    the exit code of the verdict."""
    rf = RunFolder.create("logprobs", results=args.results, run_id=args.run_id, args=vars(args))
    rf.write_model(RunFolder.LOGPROBS, res)
    print_result(res)
    print(f"run folder: {rf.path}")
    write_report_or_warn(rf, make_console())
    verdict = res.verdict_over_paths()  # every path decides (prefill, decode, routed experts)
    regressed = verdict == "REGRESSION" or (args.strict and verdict == "INCONCLUSIVE")
    return ExitCode.REGRESSION if regressed else ExitCode.OK
