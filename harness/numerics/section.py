"""The numerics section of a compare run (``harness compare``, the pytest plugin).

Once the first round's runs are in (:func:`numerics_hook`, before any look),
:func:`logprobs_section` scores the conversations the baseline had (its first recorded
run of each scenario, ``transcripts.jsonl``) on both servers, teacher-forced and on the
decode path, and writes ``logprobs.json`` beside ``summary.json``: an input of the
verdict (:func:`harness.stats.verdict.decide`, its numerics rule) and a section of the
report. It never breaks the comparison: a
server without a logprobs API, an HTTP error or a tokenisation mismatch is one line
saying so (and how to enable it), and no ``logprobs.json`` is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.client.target import TargetConfig, server_root
from harness.errors import LogprobsError
from harness.numerics.experts_ab import compare_experts
from harness.numerics.models import LogprobsResult, Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_record
from harness.runfolder import RunFolder

__all__ = ["SectionDone", "baseline_sequences", "logprobs_section", "numerics_hook"]

#: what a caller of :func:`numerics_hook` is told: the result, or why there is none (a line)
SectionDone = Callable[[LogprobsResult | None, str | None], None]


def baseline_sequences(folder: RunFolder) -> list[Sequence]:
    """The baseline's first recorded run of each scenario, as sequences (recorded order)."""
    seen: dict[str, Sequence] = {}
    for rec in folder.records():
        if rec.target.side == "baseline" and rec.scenario_id not in seen and rec.turns:
            seen[rec.scenario_id] = from_record(rec)
    return list(seen.values())


def logprobs_section(
    folder: RunFolder,
    baseline: Any,
    candidate: Any,
    opts: LogprobsOptions | None = None,
) -> tuple[LogprobsResult | None, str | None]:
    """Score the folder's baseline conversations on both servers; write ``logprobs.json``.

    The servers are the comparison's targets: their roots, the baseline's API key
    (``TargetConfig.api_key``) and request timeout. A recorded side
    (:class:`~harness.recording.RecordedSide`) gives the sequences and scores recorded
    with it (:func:`~harness.numerics.run.compare_recorded`). Returns ``(result, None)``,
    or ``(None, why)`` when it could not be computed: one line,
    ``logprobs: not compared: ...`` (the console line of a result is
    :func:`harness.present.logprobs.section_line`'s). Never raises a
    :class:`~harness.errors.LogprobsError`.
    """
    from harness.recording import RecordedSide

    live = next((t for t in (baseline, candidate) if isinstance(t, TargetConfig)), None)
    opts = opts or LogprobsOptions()
    if live is not None:
        opts = replace(opts, api_key=live.api_key(), timeout_s=live.timeout_s)
    if isinstance(baseline, RecordedSide) or isinstance(candidate, RecordedSide):
        try:
            res = _recorded_section(baseline, candidate, opts)
        except LogprobsError as exc:
            return None, f"logprobs: not compared: {exc}"
        if isinstance(res, str):
            return None, f"logprobs: not compared: {res}"
        folder.write_model(RunFolder.LOGPROBS, res)
        return res, None
    baseline_url, candidate_url = server_root(baseline.base_url), server_root(candidate.base_url)

    seqs = baseline_sequences(folder)
    if not seqs:
        return None, "logprobs: not compared: the baseline recorded no conversation"
    try:
        res = compare_logprobs(seqs, baseline_url, candidate_url, opts)
    except LogprobsError as exc:
        return None, f"logprobs: not compared: {exc}"
    res.decode = decode_path(seqs, baseline_url, candidate_url, opts, res)
    res.experts = compare_experts(seqs, baseline_url, candidate_url, opts, notes=res.notes)
    folder.write_model(RunFolder.LOGPROBS, res)
    return res, None


def numerics_hook(
    baseline: Any, candidate: Any, opts: LogprobsOptions, done: SectionDone
) -> Callable[[RunFolder], None]:
    """The numerics section as :func:`harness.pipeline.compare`'s ``after_runs``: called
    once the first round's runs are in, before any look, so ``logprobs.json`` is an input
    of every decision; ``done(result, why)`` is told the outcome (for the console line).
    One builder for ``harness compare`` and the pytest plugin."""

    def hook(folder: RunFolder) -> None:
        done(*logprobs_section(folder, baseline, candidate, opts))

    return hook


def decode_path(
    seqs: list[Any], baseline_url: str, candidate_url: str, opts: LogprobsOptions,
    prefill: LogprobsResult,
) -> LogprobsResult | None:  # fmt: skip
    """The decode path beside a teacher-forced (prefill) result: the same conversations
    decoded greedily on both sides, one unit per assistant turn
    (:func:`~harness.numerics.run.decode_units`), each step's logprobs compared along the
    common prefix; prefill and decode run different kernels (paged decode attention, CUDA
    graphs captured for decode batches), so a fault in one is invisible to the other.
    None (with a note on ``prefill``) when a side gives no chat logprobs, or when the
    prefill result is itself generation-aligned. Never raises
    :class:`~harness.errors.LogprobsError`."""
    if prefill.settings.get("generation"):
        return None
    try:
        return compare_logprobs(seqs, baseline_url, candidate_url, replace(opts, api="greedy"))
    except LogprobsError as exc:
        prefill.notes.append(f"decode path: not compared: {exc}")
        return None


def _recorded_sequences(rec: Any) -> Any:
    """The recorded numerics of a recording, or why there are none (a line)."""
    scores = rec.numerics()
    if scores is None:
        why = rec.info.numerics or "not recorded"
        return f"{rec.path} holds no numerics ({why})"
    return scores


def _recorded_section(baseline: Any, candidate: Any, opts: LogprobsOptions) -> Any:
    """The numerics of a comparison with a recorded side: a :class:`LogprobsResult`, or
    a line saying why there is none."""
    from harness.numerics.run import compare_recorded, record_logprobs
    from harness.recording import RecordedSide

    if isinstance(baseline, RecordedSide):
        base = _recorded_sequences(baseline.recording)
        if isinstance(base, str):
            return base
        if isinstance(candidate, RecordedSide):
            cand = _recorded_sequences(candidate.recording)
            return cand if isinstance(cand, str) else compare_recorded(base, cand, opts)
        return compare_recorded(base, server_root(candidate.base_url), opts)
    # a live baseline against a recorded candidate: the baseline scores the candidate's
    # recorded sequences twice, with the recording's API and top-k
    cand = _recorded_sequences(candidate.recording)
    if isinstance(cand, str):
        return cand
    seqs = [r.sequence() for r in cand.sequences]
    same = replace(opts, api=cand.api, top_k=cand.top_k, max_tokens=cand.max_tokens)
    base = record_logprobs(seqs, server_root(baseline.base_url), same)
    return compare_recorded(base, cand, opts)
