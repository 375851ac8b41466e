"""The numerics section of a compare run (``harness compare``, the pytest plugin).

Once the first round's runs are in (:func:`numerics_hook`, before any look),
:func:`logprobs_section` scores the conversations the baseline had (its first recorded
run of each scenario, ``transcripts.jsonl``) on both servers, teacher-forced, on the
decode path and their routed experts (against a recording: its recorded paths), and
writes ``logprobs.json`` beside ``summary.json``: an input of the verdict
(:func:`harness.stats.verdict.decide`, its numerics rule) and a section of the report.
It never breaks the comparison: a
server without a logprobs API, an HTTP error or a tokenisation mismatch is one line
saying so (and how to enable it), and no ``logprobs.json`` is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from harness.client.target import TargetConfig, server_root
from harness.errors import LogprobsError
from harness.numerics.experts_ab import compare_experts
from harness.numerics.models import LogprobsResult, RecordedScores, Sequence
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
    with it, on every path a live comparison runs: prefill
    (:func:`~harness.numerics.run.compare_recorded`), the decode path (``decode``) and
    the routed experts (``experts``) against the recorded side; a path the recording
    predates (format 1) is refused in ``missing_paths`` and ``notes``, that path None.
    Returns ``(result, None)``,
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


@dataclass
class _Side:
    """One side of a comparison with a recorded side: its recorded numerics and the
    recording (``scores``, ``rec``), or a live server's root (``url``)."""

    role: str
    scores: RecordedScores | None = None
    rec: Any = None
    url: str | None = None


#: per recorded path (a :class:`RecordedScores` field): its key in
#: :attr:`LogprobsResult.missing_paths` (:data:`~harness.numerics.models.PATHS`), how a
#: note names it, and what a recording without it holds
_PATH_NAMES = {"decode": ("decode", "decode path", "no decode path"),
               "experts": ("routed experts", "routed experts", "no routed experts")}  # fmt: skip


def record_again(rec: Any, role: str) -> str:
    """``record the baseline again: harness record ...``: the command that records
    ``rec`` (a :class:`~harness.recording.Recording`) again with its settings."""
    info = rec.info
    args = [f"--target {info.url}", f"--label {info.label}"]
    if info.repeats_per_round:
        args.append(f"--repeats {info.repeats_per_round}")
    args.append(f"--rounds {info.rounds}")
    if info.repeats_per_round == 0:
        args.append("--numerics-only")
    return f"record the {role} again: harness record {' '.join(args)}"


def _missing(res: LogprobsResult, path: str, side: _Side) -> None:
    """``res`` told that ``side``'s recording predates ``path``: a one-line refusal in
    ``missing_paths`` and ``notes``."""
    key, what, none = _PATH_NAMES[path]
    version = side.rec.info.harness_version
    line = (
        f"{what}: not compared: the recording {side.rec.path} holds {none} (recorded by an "
        f"earlier harness, {version}: its numerics.json is format 1, prefill only): "
        f"{record_again(side.rec, side.role)}"
    )
    res.missing_paths[key] = line
    res.notes.append(line)


def _not_recorded(res: LogprobsResult, path: str, side: _Side) -> None:
    """``side``'s recording could not record ``path`` (its server gave none): a note, as
    a live comparison notes a server that gives none."""
    _, what, none = _PATH_NAMES[path]
    why = side.scores.not_recorded.get(path, "not recorded") if side.scores else "not recorded"
    res.notes.append(f"{what}: not compared: the recording {side.rec.path} holds {none}: {why}")


def _recorded_decode(res: LogprobsResult, b: _Side, c: _Side, opts: LogprobsOptions) -> None:
    """The decode path of a comparison with a recorded side, into ``res.decode`` (as
    :func:`decode_path` does live): the recorded greedy units against the other side's
    (recorded, or decoded now by the live server)."""
    from harness.numerics.run import compare_recorded, record_logprobs

    if res.settings.get("generation"):
        return  # the prefill is the decode path already
    for side in (b, c):
        if side.scores is not None and side.scores.lacks("decode"):
            return _missing(res, "decode", side)
    for side in (b, c):
        if side.scores is not None and side.scores.decode is None:
            return _not_recorded(res, "decode", side)
    greedy = replace(opts, api="greedy")
    try:
        if b.scores is not None and b.scores.decode is not None:
            other = c.scores.decode if c.scores is not None else c.url
            assert other is not None
            res.decode = compare_recorded(b.scores.decode, other, greedy)
        else:  # a live baseline decodes the recorded candidate's units twice
            assert c.scores is not None and c.scores.decode is not None and b.url is not None
            cand = c.scores.decode
            seqs = [r.sequence() for r in cand.sequences]
            same = replace(greedy, top_k=cand.top_k, max_tokens=cand.max_tokens)
            res.decode = compare_recorded(
                record_logprobs(seqs, b.url, same, units=False), cand, opts
            )
    except LogprobsError as exc:
        res.notes.append(f"decode path: not compared: {exc}")


def _recorded_experts(res: LogprobsResult, b: _Side, c: _Side, opts: LogprobsOptions) -> None:
    """The routed experts of a comparison with a recorded side, into ``res.experts`` (as
    :func:`~harness.numerics.experts_ab.compare_experts` does live). A recording that
    predates them is refused only when the other side has routed experts (recorded, or
    the live server returns them to one probe request)."""
    from harness.numerics.experts_ab import (
        compare_recorded_experts,
        record_experts,
        returns_experts,
    )

    old = [s for s in (b, c) if s.scores is not None and s.scores.lacks("experts")]
    if old:
        other = c if old[0] is b else b
        if other.scores is not None:
            has = other.scores.experts is not None
        else:
            first = (
                old[0].scores.sequences[0] if old[0].scores and old[0].scores.sequences else None
            )
            text = (first.text or str(first.messages)) if first is not None else "Hello"
            has = other.url is not None and returns_experts(other.url, text, opts)
        if has and len(old) == 1:
            _missing(res, "experts", old[0])
        return
    for side in (b, c):
        if side.scores is not None and side.scores.experts is None:
            return _not_recorded(res, "experts", side)
    if b.scores is not None and b.scores.experts is not None:
        theirs = c.scores.experts if c.scores is not None else c.url
        assert theirs is not None
        res.experts = compare_recorded_experts(b.scores.experts, theirs, opts, notes=res.notes)
        return
    assert c.scores is not None and c.scores.experts is not None and b.url is not None
    base = record_experts([], b.url, opts, prompts=c.scores.experts.sequences)
    if isinstance(base, str):
        res.notes.append(f"routed experts: not compared: {base}")
        return
    res.experts = compare_recorded_experts(base, c.scores.experts, opts, notes=res.notes)


def _recorded_section(baseline: Any, candidate: Any, opts: LogprobsOptions) -> Any:
    """The numerics of a comparison with a recorded side: a :class:`LogprobsResult`, or
    a line saying why there is none. Every path a live comparison runs: prefill, then
    the decode path (``decode``) and the routed experts (``experts``) against the
    recorded side; a path a recording predates is refused in ``missing_paths``."""
    from harness.numerics.run import compare_recorded, record_logprobs
    from harness.recording import RecordedSide

    sides = []
    for role, side in (("baseline", baseline), ("candidate", candidate)):
        if isinstance(side, RecordedSide):
            scores = _recorded_sequences(side.recording)
            if isinstance(scores, str):
                return scores
            sides.append(_Side(role, scores=scores, rec=side.recording))
        else:
            sides.append(_Side(role, url=server_root(side.base_url)))
    b, c = sides
    if b.scores is not None:
        res = compare_recorded(b.scores, c.scores if c.scores is not None else c.url or "", opts)
    else:
        # a live baseline against a recorded candidate: the baseline scores the
        # candidate's recorded sequences twice, with the recording's API and top-k
        cand = c.scores
        assert cand is not None and b.url is not None
        seqs = [r.sequence() for r in cand.sequences]
        same = replace(opts, api=cand.api, top_k=cand.top_k, max_tokens=cand.max_tokens)
        res = compare_recorded(record_logprobs(seqs, b.url, same, units=False), cand, opts)
    _recorded_decode(res, b, c, opts)
    _recorded_experts(res, b, c, opts)
    res.notes = list(dict.fromkeys(res.notes))
    return res
