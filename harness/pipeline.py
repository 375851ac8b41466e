"""Compare a candidate target against a baseline: run, score, decide, write ``summary.json``.

- :func:`compare`: run the scenarios against both targets into one run folder
  (:func:`harness.runner.run_many_sync`), record the servers' fusion engagement when
  :mod:`harness.server.fusion` is available, score, decide and write ``summary.json`` (and
  ``report.html`` when :mod:`harness.present.report` is available).
- :func:`score_dir`: re-score an existing run folder and rewrite its ``summary.json``,
  streaming ``transcripts.jsonl`` through a :class:`Scorer` (one record in memory at a
  time; per run only its score and its :class:`CallSequence` are kept).
- :func:`summarize`: the pure function from records to :class:`~harness.summary.Summary`.

The decision rule is documented in :mod:`harness.stats.verdict`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client.target import TargetConfig
from harness.runfolder import prepare_run_dir
from harness.scenario.model import Scenario
from harness.scoring.drift import canonical_json, excerpt
from harness.scoring.parity import ParityDiff, parity_report
from harness.scoring.score import run_side, score_run
from harness.stats.verdict import aggregate, compare_sides
from harness.summary import (
    Aggregate,
    Divergence,
    RunScore,
    Settings,
    SideInfo,
    Summary,
    read_summary,
    write_summary,
)
from harness.transcript import (
    ResponseRecord,
    RunManifest,
    RunRecord,
    TargetInfo,
    TurnRecord,
)

__all__ = [
    "CallSequence",
    "Scorer",
    "compare",
    "engagement",
    "first_divergence",
    "score_dir",
    "summarize",
    "write_report",
]

# ------------------------------------------------------------------ first divergence

#: call identities longer than this are kept as a digest (they are only compared)
_IDENT_LIMIT = 96


def _ident(text: str) -> str:
    if len(text) <= _IDENT_LIMIT:
        return text
    return "#" + hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _turn_calls(turn: TurnRecord) -> list[tuple[str, str]]:
    """``(identity, shown)`` per call of a turn; identity is tool + canonical arguments."""
    r = turn.response
    if r is None:
        return [("(no response)", "(no response)")]
    if not r.tool_calls:
        text = (r.content or "").strip()
        return [("(answer)", f"final answer: {excerpt(text, 80)}" if text else "(empty answer)")]
    out = []
    for c in r.tool_calls:
        try:
            args = json.loads(c.arguments) if isinstance(c.arguments, str) else c.arguments
            ident, shown = canonical_json(args), json.dumps(args, ensure_ascii=False)
        except (json.JSONDecodeError, RecursionError):
            ident = shown = str(c.arguments)
        out.append((_ident(f"{c.name} {ident}"), f"{c.name} {excerpt(shown, 160)}"))
    return out


@dataclass(frozen=True)
class CallSequence:
    """The calls of one run, turn by turn: what :func:`first_divergence` compares.

    ``turns``: per turn, ``(identity, shown)`` per call (identity: tool + canonical
    arguments, long ones as a digest; shown: ``tool {args}`` cut to 160 characters, or
    ``final answer: ...``). A few hundred bytes per run instead of the whole record.
    """

    run_key: str
    repeat: int
    stop_reason: str
    is_infra_error: bool
    turns: tuple[tuple[tuple[str, str], ...], ...]

    @classmethod
    def of(cls, r: RunRecord) -> CallSequence:
        turns = tuple(tuple(_turn_calls(t)) for t in r.turns)
        return cls(r.run_key, r.repeat, r.stop_reason, r.is_infra_error, turns)


def _ended(r: CallSequence) -> list[tuple[str, str]]:
    return [(f"(ended: {r.stop_reason})", f"(ended: {r.stop_reason})")]


def first_divergence(
    base: Sequence[RunRecord | CallSequence], cand: Sequence[RunRecord | CallSequence]
) -> Divergence | None:
    """First turn where the call sequences of a baseline and a candidate run differ.

    Uses the lowest repeat scored on both sides (else the first scored run of each). Calls
    within a turn compare as a set of ``tool canonical-args``; two final answers compare
    equal whatever their text. ``None`` when the sequences agree or a side has no run.
    Takes records or their :class:`CallSequence`.
    """
    bs = [r if isinstance(r, CallSequence) else CallSequence.of(r) for r in base]
    cs = [r if isinstance(r, CallSequence) else CallSequence.of(r) for r in cand]
    b_ok = sorted((r for r in bs if not r.is_infra_error), key=lambda r: r.repeat)
    c_ok = sorted((r for r in cs if not r.is_infra_error), key=lambda r: r.repeat)
    if not b_ok or not c_ok:
        return None
    common = sorted({r.repeat for r in b_ok} & {r.repeat for r in c_ok})
    b = next((r for r in b_ok if common and r.repeat == common[0]), b_ok[0])
    c = next((r for r in c_ok if common and r.repeat == common[0]), c_ok[0])
    for i in range(max(len(b.turns), len(c.turns))):
        tb = list(b.turns[i]) if i < len(b.turns) else _ended(b)
        tc = list(c.turns[i]) if i < len(c.turns) else _ended(c)
        if sorted(x for x, _ in tb) != sorted(x for x, _ in tc):
            return Divergence(
                turn=i,
                baseline_run=b.run_key,
                candidate_run=c.run_key,
                baseline=[y for _, y in tb],
                candidate=[y for _, y in tc],
            )
    return None


# ------------------------------------------------------------------ summary of a folder


def _side_order(sides: Iterable[str]) -> list[str]:
    rank = {"baseline": 0, "candidate": 1}
    return sorted(set(sides), key=lambda s: (rank.get(s, 2), s))


def _parity_skeleton(r: RunRecord, target: TargetInfo) -> RunRecord:
    """The fields :func:`harness.scoring.parity.parity_report` compares, nothing else."""
    turns = [
        TurnRecord(
            index=t.index,
            response=None
            if t.response is None
            else ResponseRecord(
                finish_reason=t.response.finish_reason, tool_calls=t.response.tool_calls
            ),
        )
        for t in r.turns
    ]
    return r.model_copy(
        update={"scenario": {}, "tools": [], "sampling": {}, "turns": turns, "target": target}
    )


@dataclass
class _Run:
    """What the summary keeps of one run once its record is scored.

    ``parity``: the fields stream/non-stream parity compares, kept only when the record
    cannot be read again (else ``offset``: its line's byte offset in ``Scorer.path``).
    """

    score: RunScore
    calls: CallSequence
    side: str
    target: TargetInfo
    infra: bool
    parity: RunRecord | None = None
    offset: int | None = None


@dataclass
class Scorer:
    """Scores records one at a time and builds the :class:`~harness.summary.Summary`.

    Keeps per run only its :class:`~harness.summary.RunScore`, its
    :class:`CallSequence` and the few fields stream/non-stream parity compares, never
    the records: ``score_dir`` streams ``transcripts.jsonl`` through it. A later record
    with the same ``run_key`` replaces an earlier one (keeping the first one's place).
    """

    path: Path | None = None  # transcripts.jsonl, when records are added with offsets
    runs: dict[str, _Run] = field(default_factory=dict)
    _targets: dict[str, TargetInfo] = field(default_factory=dict)  # interned by JSON

    def __bool__(self) -> bool:
        return bool(self.runs)

    def add(self, record: RunRecord, offset: int | None = None) -> None:
        """Score ``record`` (:func:`harness.scoring.score.score_run`) and keep what is needed.

        ``offset``: byte offset of the record's line in ``path``; stream/non-stream
        parity then reads the record again if it has a partner, instead of keeping it.
        """
        key = record.target.model_dump_json()
        target = self._targets.setdefault(key, record.target)
        run = _Run(
            score_run(record),
            CallSequence.of(record),
            run_side(record),
            target,
            record.is_infra_error,
            offset=offset,
        )
        if offset is None or self.path is None:
            run.parity = _parity_skeleton(record, target)
        self.runs[record.run_key] = run

    def parity(self) -> list[ParityDiff]:
        """:func:`harness.scoring.parity.parity_report` of the runs, one pair in memory at a time."""
        by: dict[tuple[str, str, int], dict[bool, _Run]] = {}
        for r in self.runs.values():
            if not r.infra:
                by.setdefault((r.side, r.score.scenario_id, r.score.repeat), {})[r.score.stream] = r
        out: list[ParityDiff] = []
        for _, pair in sorted(by.items()):
            if len(pair) == 2:
                out += parity_report([self._record(pair[True]), self._record(pair[False])])
        return out

    def _record(self, run: _Run) -> RunRecord:
        if run.parity is not None:
            return run.parity
        assert self.path is not None and run.offset is not None
        with open(self.path, "rb") as fh:
            fh.seek(run.offset)
            return RunRecord.model_validate_json(fh.readline())

    def summary(
        self,
        *,
        run_id: str,
        settings: Settings | None = None,
        sides: dict[str, SideInfo] | None = None,
        warnings: Sequence[str] = (),
        server_args_diff: dict[str, list[Any]] | None = None,
    ) -> Summary:
        """The summary of every run added so far (see :func:`summarize`)."""
        runs = list(self.runs.values())
        scores = [r.score for r in runs]
        settings = settings or Settings()
        kinds = sorted({k for s in scores for k in s.failures})
        order = _side_order(s.side for s in scores)
        infos = [_side_info(side, runs, (sides or {}).get(side)) for side in order]
        summary = Summary(
            kind="compare" if order == ["baseline", "candidate"] else "score",
            run_id=run_id,
            settings=settings,
            sides=infos,
            runs=scores,
            aggregates=_aggregates(scores, order, kinds),
            infra_errors={i.side: i.infra_errors for i in infos},
            warnings=list(warnings),
            server_args_diff=server_args_diff,
            parity=self.parity(),
        )
        if summary.kind == "compare":
            _add_comparison(summary, runs, kinds)
        return summary


def summarize(
    records: Iterable[RunRecord],
    *,
    run_id: str,
    settings: Settings | None = None,
    sides: dict[str, SideInfo] | None = None,
    warnings: Sequence[str] = (),
    server_args_diff: dict[str, list[Any]] | None = None,
) -> Summary:
    """Score ``records`` and build the :class:`~harness.summary.Summary` (pure).

    Two sides named ``baseline`` and ``candidate`` give comparisons and a verdict; any
    other set of sides gives aggregates only (``kind="score"``). A later record with the
    same ``run_key`` replaces an earlier one. ``records`` may be any iterable (it is
    consumed once, record by record: see :class:`Scorer`).
    """
    acc = Scorer()
    for r in records:
        acc.add(r)
    return acc.summary(
        run_id=run_id,
        settings=settings,
        sides=sides,
        warnings=warnings,
        server_args_diff=server_args_diff,
    )


def _aggregates(scores: list[RunScore], order: list[str], kinds: list[str]) -> list[Aggregate]:
    by: dict[tuple[str, str], list[RunScore]] = {}
    labels: dict[str, str] = {}
    for s in scores:
        by.setdefault((s.side, s.scenario_id), []).append(s)
        by.setdefault((s.side, "*"), []).append(s)
        labels.setdefault(s.side, s.label)
    scenario_ids = sorted({s.scenario_id for s in scores})
    return [
        aggregate(side, labels[side], sid, by[(side, sid)], kinds)
        for side in order
        for sid in [*scenario_ids, "*"]
        if (side, sid) in by
    ]


def _side_info(side: str, runs: list[_Run], given: SideInfo | None) -> SideInfo:
    mine = [r.score for r in runs if r.score.side == side]
    errs = [s.infra_error.kind for s in mine if s.infra_error is not None]
    target = next((r.target for r in runs if r.side == side), None)
    info = given.model_copy() if given else SideInfo(side=side, label=mine[0].label)
    info.target = info.target or target
    info.runs, info.infra_errors, info.infra_error_kinds = len(mine), len(errs), dict(Counter(errs))
    return info


def _add_comparison(summary: Summary, runs: list[_Run], kinds: list[str]) -> None:
    base = {a.scenario_id: a for a in summary.aggregates if a.side == "baseline"}
    cand = {a.scenario_id: a for a in summary.aggregates if a.side == "candidate"}
    result = compare_sides(base, cand, kinds, alpha=summary.settings.alpha)
    by: dict[tuple[str, str], list[CallSequence]] = {}  # one pass: scenarios x runs was O(n^2)
    for r in runs:
        by.setdefault((r.score.scenario_id, r.side), []).append(r.calls)
    for comp in result.scenarios:
        if comp.scenario_id != "*":
            b = by.get((comp.scenario_id, "baseline"), [])
            c = by.get((comp.scenario_id, "candidate"), [])
            comp.first_divergence = first_divergence(b, c)
    summary.comparisons = result.scenarios
    verdict = result.verdict
    limit = summary.settings.infra_error_limit
    over = [i for i in summary.sides if i.runs and i.infra_errors / i.runs > limit]
    if over:
        names = ", ".join(f"{i.label} {i.infra_errors}/{i.runs}" for i in over)
        verdict.exit_code = 3
        verdict.reasons.insert(
            0, f"too many infrastructure errors to judge ({names} runs; limit {limit:.0%})"
        )
        if verdict.verdict != "REGRESSION":
            verdict.verdict = "INCONCLUSIVE"
            verdict.message = f"INCONCLUSIVE: too many infrastructure errors ({names} runs)"
    summary.verdict = verdict


# ------------------------------------------------------------------ folders and runs


def _previous(run_dir: Path) -> Summary | None:
    try:
        return read_summary(run_dir)
    except (OSError, ValueError):
        return None


def score_dir(
    run_dir: str | Path,
    *,
    settings: Settings | None = None,
    sides: dict[str, SideInfo] | None = None,
    warnings: Sequence[str] | None = None,
    server_args_diff: dict[str, list[Any]] | None = None,
) -> Summary:
    """Re-score ``run_dir/transcripts.jsonl`` and (re)write ``run_dir/summary.json``.

    What is not in the transcripts (settings, fusion engagement, warnings) is taken from
    the arguments, else kept from an existing ``summary.json``.

    Raises:
        FileNotFoundError: the folder has no ``transcripts.jsonl`` or it holds no run.
    """
    folder = Path(run_dir)
    path = folder / "transcripts.jsonl"
    acc = Scorer(path)
    for offset, record in _read_with_offsets(path):  # streaming: one record at a time
        acc.add(record, offset)
    if not acc:
        raise FileNotFoundError(f"{path}: no recorded runs (is this a run folder?)")
    old = _previous(folder)
    if old is not None:
        settings = settings or old.settings
        sides = sides if sides is not None else {s.side: s for s in old.sides}
        warnings = warnings if warnings is not None else old.warnings
        server_args_diff = (
            server_args_diff if server_args_diff is not None else old.server_args_diff
        )
    summary = acc.summary(
        run_id=_run_id(folder),
        settings=settings,
        sides=sides,
        warnings=warnings or (),
        server_args_diff=server_args_diff,
    )
    write_summary(folder, summary)
    return summary


def _read_with_offsets(path: Path) -> Iterator[tuple[int, RunRecord]]:
    """``(byte offset of the line, record)``, as :func:`harness.transcript.read_records`
    reads them (blank lines and a truncated last line skipped)."""
    if not path.exists():
        return
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            yield start, RunRecord.model_validate(data)


def _run_id(folder: Path) -> str:
    try:
        return RunManifest.model_validate_json((folder / "manifest.json").read_text("utf-8")).run_id
    except (OSError, ValueError):
        return folder.name


def engagement(
    baseline: TargetConfig,
    candidate: TargetConfig,
    logs: tuple[str | None, str | None] = (None, None),
) -> tuple[dict[str, SideInfo], list[str], dict[str, list[Any]] | None]:
    """Both sides' fusion engagement (:mod:`harness.server.fusion`, if present), the fusion
    warning, and the server arguments that differ (``{arg: [baseline, candidate]}``)."""
    sides = {
        "baseline": SideInfo(side="baseline", label=baseline.label),
        "candidate": SideInfo(side="candidate", label=candidate.label),
    }
    try:
        from harness.server import fusion
    except ImportError:
        return sides, [], None
    try:
        eb = fusion.collect_engagement(baseline.base_url, log_path=logs[0])
        ec = fusion.collect_engagement(candidate.base_url, log_path=logs[1])
    except Exception as exc:  # never let the engagement probe break a comparison
        return sides, [f"fusion engagement not collected: {type(exc).__name__}: {exc}"], None
    sides["baseline"].fusion = eb.model_dump(mode="json")
    sides["candidate"].fusion = ec.model_dump(mode="json")
    warning = fusion.fusion_warning(eb, ec)
    diff = fusion.server_args_diff(eb.server_args, ec.server_args)
    return (
        sides,
        [warning] if warning else [],
        {k: [v["baseline"], v["candidate"]] for k, v in diff.items()},
    )


def write_report(run_dir: Path) -> Path | None:
    """``report.html`` via :func:`harness.present.report.write_report` if that exists (else None).

    A failing report never fails the comparison: the error is returned as a warning by
    the caller's console output instead.
    """
    try:
        from harness.present import report
    except ImportError:
        return None
    writer = getattr(report, "write_report", None)
    if writer is None:
        return None
    out = writer(run_dir)
    return Path(out) if out is not None else None


def compare(
    scenarios: Sequence[Scenario],
    baseline: TargetConfig,
    candidate: TargetConfig,
    *,
    settings: Settings,
    results: str | Path | None = None,
    run_id: str | None = None,
    logs: tuple[str | None, str | None] = (None, None),
    progress: bool = True,
    args: dict[str, Any] | None = None,
) -> tuple[Path, Summary]:
    """Run ``scenarios`` against both targets, score, decide; returns (run folder, summary).

    ``baseline.side``/``candidate.side`` are set to ``"baseline"``/``"candidate"``.
    Repeats, stream mode and concurrency come from ``settings``. Writes ``manifest.json``,
    ``transcripts.jsonl`` and ``summary.json`` in ``results/<run-id>/``.
    """
    baseline.side, candidate.side = "baseline", "candidate"
    folder = prepare_run_dir("compare", results=results, run_id=run_id, args=args)
    from harness.runner import run_many_sync

    run_many_sync(
        scenarios,
        [baseline, candidate],
        repeats=settings.repeats,
        stream=settings.stream,
        concurrency=settings.concurrency or 8,
        out_dir=folder,
        progress=progress,
    )
    sides, warnings, diff = engagement(baseline, candidate, logs)
    summary = score_dir(
        folder, settings=settings, sides=sides, warnings=warnings, server_args_diff=diff
    )
    return folder, summary
