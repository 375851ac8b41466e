"""The data flow: run -> record -> score -> summarize -> decide (see ARCHITECTURE.md).

- :func:`compare`: run the scenarios against a baseline and a candidate into one
  :class:`~harness.runfolder.RunFolder`, record both servers' fusion engagement, then
  :func:`score_folder`.
- :func:`score_folder`: stream ``transcripts.jsonl`` through :func:`score_run` into
  ``scores.jsonl`` (one record and one score in memory at a time), aggregate, decide
  (:func:`harness.stats.verdict.decide`), find each scenario's first divergence and the
  stream/non-stream parity, and write ``summary.json`` once.
- :func:`summarize`: the same in memory for a handful of records (the pytest plugin judges
  each scenario test this way; the power benchmark decides thousands of comparisons).
- :func:`write_verifier`: a single-turn comparison's vendor-verifier figures
  (:func:`harness.scoring.trigger.verifier_figures`) into ``verifier.json``; written by
  :func:`compare` with ``single_turn`` and rewritten by :func:`score_folder` in a folder
  that has one.

Memory is bounded by the number of scenarios, not of runs: per run only the byte offset
of its record is kept, and the few records the divergence and parity need are read back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.client.target import TargetConfig
from harness.errors import RunFolderError
from harness.kinds import plural
from harness.recording import RecordedSide
from harness.runfolder import RunFolder
from harness.scenario.model import Scenario
from harness.scoring.divergence import first_divergence, pick_pair
from harness.scoring.models import Divergence, RunScore
from harness.scoring.parity import ParityDiff, pair_diffs
from harness.scoring.score import score_run
from harness.scoring.trigger import VerifierFigures, verifier_figures
from harness.server import fusion
from harness.stats.aggregate import AggregateBuilder
from harness.stats.sequential import Look, first_look, look_alpha, should_stop
from harness.stats.verdict import NumericsFinding, RecordedBudget, decide, judge_run
from harness.summary import Aggregate, Settings, SideInfo, Summary, Verdict
from harness.transcript import RunRecord, TargetInfo

__all__ = [
    "FolderContext",
    "Target",
    "attach_boot",
    "compare",
    "engagement",
    "score_folder",
    "summarize",
    "write_verifier",
]

#: one side of a comparison: a live server, or a recording of one
Target = TargetConfig | RecordedSide


@dataclass
class FolderContext:
    """What a folder's transcripts do not say: how the runs were made and decided, and what
    the servers said about themselves (fusion engagement, arguments that differ)."""

    settings: Settings = field(default_factory=Settings)
    sides: dict[str, SideInfo] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    server_args_diff: dict[str, list[Any]] | None = None
    #: the command that made the folder (the manifest's ``kind``); ``"compare"`` keeps a
    #: comparison with a side not run yet (interrupted) a comparison, INCONCLUSIVE
    kind: str | None = None
    #: also judge the candidate alone (``Summary.outcome``): its tests' pass/fail under the
    #: pytest plugin with a baseline, shown beside the verdict
    judge_candidate: bool = False


class _Previous(BaseModel):
    """The parts of an existing ``summary.json`` that :func:`score_folder` keeps."""

    model_config = ConfigDict(extra="ignore")
    settings: Settings = Settings()
    sides: list[SideInfo] = []
    warnings: list[str] = []
    server_args_diff: dict[str, list[Any]] | None = None
    kind: str | None = None
    outcome: dict[str, Any] | None = None


#: the manifest's ``extra`` key of the context :func:`compare` saves before its runs
CONTEXT_KEY = "context"


def _save_context(folder: RunFolder, context: FolderContext) -> None:
    """Record ``context`` in the manifest before the runs, so a comparison interrupted
    before its ``summary.json`` keeps its settings and fusion engagement when re-scored."""
    saved = _Previous(
        settings=context.settings,
        sides=list(context.sides.values()),
        warnings=context.warnings,
        server_args_diff=context.server_args_diff,
        kind=context.kind,
    )
    folder.set_extra(CONTEXT_KEY, saved.model_dump(mode="json"), replace=True)


def _previous_context(folder: RunFolder) -> FolderContext:
    """The context recorded in the folder's ``summary.json`` (of any schema version), else
    the one :func:`compare` saved in the manifest before its runs, else a default one."""
    try:
        old: _Previous | None = folder.read_model(RunFolder.SUMMARY, _Previous)
        manifest = folder.manifest() if old is None else None
    except RunFolderError:
        return FolderContext()
    if old is None and manifest is not None and CONTEXT_KEY in manifest.extra:
        old = _Previous.model_validate(manifest.extra[CONTEXT_KEY])
    if old is None:
        return FolderContext()
    sides = {s.side: s for s in old.sides}
    judged = old.kind == "compare" and old.outcome is not None
    return FolderContext(
        old.settings, sides, old.warnings, old.server_args_diff, judge_candidate=judged
    )


# ------------------------------------------------------------------ summarizing


def _side_order(sides: Iterable[str]) -> list[str]:
    rank = {"baseline": 0, "candidate": 1}
    return sorted(set(sides), key=lambda s: (rank.get(s, 2), s))


@dataclass
class _Side:
    """What the summary keeps of one side besides its aggregates."""

    label: str
    target: TargetInfo
    runs: int = 0
    infra: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)


@dataclass
class _Summarizer:
    """Takes each run's score and the key of its record; builds the :class:`Summary`.

    Keeps counters per (side, scenario) and, per run, only the key (a byte offset, an
    index) of its record: the divergence and parity read the few records they need back
    through ``fetch``.
    """

    builders: dict[tuple[str, str], AggregateBuilder] = field(default_factory=dict)
    sides: dict[str, _Side] = field(default_factory=dict)
    #: (side, scenario) -> repeat -> record key, scored runs of the first stream mode seen
    repeats: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    #: (side, scenario, repeat) -> stream -> record key, scored runs
    modes: dict[tuple[str, str, int], dict[bool, int]] = field(default_factory=dict)
    #: scenarios with a greedy scored run (temperature absent or 0): repeats not independent
    greedy: set[str] = field(default_factory=set)

    def add(self, score: RunScore, target: TargetInfo, key: int, greedy: bool = False) -> None:
        side = self.sides.setdefault(score.side, _Side(score.label, target))
        if greedy and score.infra_error is None:
            self.greedy.add(score.scenario_id)
        side.runs += 1
        for sid in (score.scenario_id, "*"):
            b = self.builders.get((score.side, sid))
            if b is None:
                b = self.builders[(score.side, sid)] = AggregateBuilder(
                    score.side, score.label, sid
                )
            b.add(score)
        if score.infra_error is not None:
            side.infra[score.infra_error.kind] += 1
            side.examples.setdefault(score.infra_error.kind, score.infra_error.message)
            return
        self.repeats.setdefault((score.side, score.scenario_id), {}).setdefault(score.repeat, key)
        self.modes.setdefault((score.side, score.scenario_id, score.repeat), {})[score.stream] = key

    def summary(
        self,
        run_id: str,
        context: FolderContext,
        fetch: Callable[[int], RunRecord],
        numerics: Sequence[NumericsFinding] = (),
    ) -> Summary:
        order = _side_order(self.sides)
        aggregates = self._aggregates(order)
        infos = [self._side_info(side, context.sides.get(side)) for side in order]
        compared = context.kind == "compare" or order == ["baseline", "candidate"]
        summary = Summary(
            kind="compare" if compared else "run",
            run_id=run_id,
            settings=context.settings,
            sides=infos,
            server_args_diff=context.server_args_diff,
            warnings=list(context.warnings),
            aggregates=aggregates,
        )
        summary.parity, summary.parity_pairs = self._parity(fetch)
        if summary.kind == "compare":
            self._decide(summary, fetch, numerics)
        judged = ["candidate"] if summary.kind == "compare" and context.judge_candidate else None
        if summary.kind != "compare" or judged:
            summary.outcome = judge_run(
                [a for a in aggregates if judged is None or a.side in judged],
                [i for i in infos if judged is None or i.side in judged],
                min_pass_rate=context.settings.min_pass_rate,
                infra_error_limit=context.settings.infra_error_limit,
            )  # fmt: skip
        return summary

    def _aggregates(self, order: list[str]) -> list[Aggregate]:
        ids = sorted({sid for _, sid in self.builders if sid != "*"})
        out = []
        for sid in [*ids, "*"]:
            kinds = {
                k for side in order if (b := self.builders.get((side, sid))) for k in b.kinds()
            }
            out += [
                (side, self.builders[(side, sid)].build(kinds))
                for side in order
                if (side, sid) in self.builders
            ]
        rank = {side: i for i, side in enumerate(order)}
        return [a for _, a in sorted(out, key=lambda x: rank[x[0]])]

    def _side_info(self, side: str, given: SideInfo | None) -> SideInfo:
        s = self.sides[side]
        info = given.model_copy() if given else SideInfo(side=side, label=s.label)
        info.target = info.target or s.target
        info.runs, info.infra_errors = s.runs, sum(s.infra.values())
        info.infra_error_kinds, info.infra_error_examples = dict(s.infra), dict(s.examples)
        return info

    def _decide(
        self,
        summary: Summary,
        fetch: Callable[[int], RunRecord],
        numerics: Sequence[NumericsFinding] = (),
    ) -> None:
        base = {a.scenario_id: a for a in summary.aggregates if a.side == "baseline"}
        cand = {a.scenario_id: a for a in summary.aggregates if a.side == "candidate"}
        unfinished = _unfinished(base, cand, summary.settings.scenarios)
        if unfinished:
            summary.verdict = Verdict(
                verdict="INCONCLUSIVE",
                message=f"INCONCLUSIVE: {unfinished} (interrupted? finish it with --resume)",
            )
            return
        settings = summary.settings
        alpha, look = settings.alpha, None
        if settings.sequential and settings.look:
            alpha = look_alpha(settings.alpha, settings.look, settings.rounds)
            look = Look(settings.look, settings.rounds, settings.alpha)
        decision = decide(
            base, cand, summary.sides,
            alpha=alpha, infra_error_limit=settings.infra_error_limit,
            permutations=settings.permutations, seed=settings.seed, greedy=sorted(self.greedy),
            look=look, copies=copied_sides(summary.sides), numerics=numerics,
            recorded=recorded_budget(summary.sides, settings),
        )  # fmt: skip
        summary.comparisons = [  # the evidence beside each decision; decisions unchanged
            c.model_copy(update={"first_divergence": self._divergence(c.scenario_id, fetch)})
            for c in decision.comparisons
        ]
        summary.verdict = _sequential_note(decision.verdict, settings, alpha, base)

    def _divergence(self, sid: str, fetch: Callable[[int], RunRecord]) -> Divergence | None:
        """The first divergence of scenario ``sid`` (none for the pool ``"*"``)."""
        pair = pick_pair(
            self.repeats.get(("baseline", sid), {}), self.repeats.get(("candidate", sid), {})
        )
        if sid == "*" or pair is None:
            return None
        return first_divergence(fetch(pair[0]), fetch(pair[1]))

    def _parity(self, fetch: Callable[[int], RunRecord]) -> tuple[list[ParityDiff], int]:
        diffs: list[ParityDiff] = []
        pairs = 0
        for _, modes in sorted(self.modes.items()):
            if len(modes) == 2:
                pairs += 1
                diffs += pair_diffs(fetch(modes[True]), fetch(modes[False]))
        return diffs, pairs


def recorded_budget(sides: Sequence[SideInfo], settings: Settings) -> RecordedBudget | None:
    """The comparison's recorded sides (``SideInfo.recorded``) and its budget so far, for
    :func:`harness.stats.verdict.decide` (what to record to settle an INCONCLUSIVE);
    None when both sides are live."""
    roles = tuple(s.side for s in sides if s.recorded)
    if not roles or not settings.repeats:
        return None
    spent = settings.look if settings.sequential and settings.look else 1
    return RecordedBudget(roles, settings.repeats, spent)


def _sequential_note(
    verdict: Verdict, settings: Settings, alpha: float, base: dict[str, Aggregate]
) -> Verdict:
    """The verdict with, in sequential mode, the round it was decided at and its level."""
    if not (settings.sequential and settings.look) or verdict.power is None:
        return verdict  # (no power: no test was run, a side could not be judged)
    runs = 2 * sum(a.runs for sid, a in base.items() if sid != "*")
    most = runs // settings.look * settings.rounds
    note = (
        f"sequential (group-sequential, alpha spending rho 2): decided at round "
        f"{settings.look} of {settings.rounds} at alpha {alpha:.2g}; {runs} runs spent "
        f"(at most {most})"
    )
    if verdict.verdict == "NO CHANGE" and settings.look < settings.rounds:
        note += (
            " (stopped early: nothing looked worse and no failure kind showed only in the "
            "candidate)"
        )
    power = f"{note}; {verdict.power}" if verdict.power else note
    return verdict.model_copy(update={"power": power})


def _unfinished(
    base: dict[str, Aggregate], cand: dict[str, Aggregate], planned: Sequence[str]
) -> str | None:
    """Why a comparison's runs are not all there, or None.

    A finished comparison has, per scenario, as many runs on each side (infrastructure
    errors are runs too) and a run of every planned scenario. An interrupted one is not
    judged: its pooled tests would weigh the scenarios differently on the two sides.
    """
    if not base or not cand:
        return f"the {'baseline' if not base else 'candidate'} has no runs yet"
    base_n = {sid: a.runs for sid, a in base.items() if sid != "*"}
    cand_n = {sid: a.runs for sid, a in cand.items() if sid != "*"}
    uneven = sorted(
        sid for sid in base_n.keys() | cand_n.keys() if base_n.get(sid, 0) != cand_n.get(sid, 0)
    )
    absent = [sid for sid in planned if sid not in base_n and sid not in cand_n]
    if not uneven and not absent:
        return None
    parts = []
    if uneven:
        counts = ", ".join(
            f"{sid} {base_n.get(sid, 0)} vs {cand_n.get(sid, 0)}" for sid in uneven[:4]
        )
        more = f" and {len(uneven) - 4} more" if len(uneven) > 4 else ""
        parts.append(f"unfinished: runs per side differ ({counts}{more})")
    if absent:
        parts.append(f"{plural(len(absent), 'planned scenario')} not run on either side")
    return "; ".join(parts)


def copied_sides(sides: Iterable[SideInfo]) -> list[str]:
    """The sides whose contract pre-flight found temperature and seed ignored: their
    repeats are copies, counted once per scenario (:mod:`harness.stats.family`)."""
    return [s.side for s in sides if s.contract is not None and s.contract.sampling_ignored]


def _greedy(record: RunRecord) -> bool:
    """Whether the run was greedy: temperature 0 sent (its repeats are copies). A request
    without a temperature samples at the server's default (1.0 for OpenAI and vLLM, 0.8
    for llama.cpp): not greedy."""
    return record.sampling.get("temperature") == 0


def score_folder(folder: RunFolder, context: FolderContext | None = None) -> Summary:
    """Score ``folder``'s transcripts into ``scores.jsonl`` and (re)write ``summary.json``.

    A later record with the same ``run_key`` replaces an earlier one. What is not in the
    transcripts (``context``: settings, fusion engagement, warnings) defaults to what the
    folder's existing ``summary.json`` recorded. A single-turn comparison's
    ``verifier.json`` (:func:`write_verifier`), when the folder has one, is rewritten too.

    Raises:
        RunFolderError: the folder has no recorded run.
    """
    last = {key: offset for offset, key in folder.run_keys_with_offsets()}
    keep = set(last.values())
    acc = _Summarizer()
    with folder.score_writer() as write:
        for offset, record in folder.records_with_offsets():
            if offset in keep:
                score = score_run(record)
                write(score)
                acc.add(score, record.target, offset, _greedy(record))
    if not acc.sides:
        raise RunFolderError(f"{folder.transcripts}: no recorded runs (is this a run folder?)")
    context = context or _previous_context(folder)
    if context.kind is None:
        context = replace(context, kind=folder.kind())
    summary = acc.summary(folder.run_id, context, folder.record_at, _numerics(folder))
    folder.write_summary(summary)
    if folder.has(RunFolder.VERIFIER):
        write_verifier(folder)
    return summary


def write_verifier(folder: RunFolder) -> VerifierFigures:
    """The vendor-verifier figures of ``folder``'s transcripts (``compare --single-turn``:
    :func:`harness.scoring.trigger.verifier_figures`, the first response of each run paired
    across the sides), written to ``verifier.json``; returns them."""
    figures = verifier_figures(folder.records())
    folder.write_model(RunFolder.VERIFIER, figures)
    return figures


def attach_boot(folder: RunFolder, side: str, boot: dict[str, Any]) -> Summary:
    """Record a launched side's boot checks (``SideInfo.boot``, finished once the server is
    stopped) in the folder's context and summary; returns the summary re-written."""
    context = _previous_context(folder)
    context = replace(context, kind=context.kind or folder.kind())
    info = context.sides.get(side) or SideInfo(side=side, label=side)
    context.sides[side] = info.model_copy(update={"boot": boot})
    _save_context(folder, context)
    return score_folder(folder, context)


def _numerics(folder: RunFolder) -> list[NumericsFinding]:
    """The folder's numerics section (``logprobs.json``), read once: one finding per path
    it ran (prefill, decode, routed experts), each an input of the decision
    (:func:`harness.stats.verdict.decide`, rule 7); empty when there is none."""
    from harness.numerics.models import LogprobsResult

    res = folder.read_model(RunFolder.LOGPROBS, LogprobsResult)
    if res is None:
        return []
    return [NumericsFinding(p.verdict, p.message, p.path) for p in res.paths()]


def summarize(
    records: Sequence[RunRecord], *, run_id: str, context: FolderContext | None = None
) -> tuple[Summary, list[RunScore]]:
    """Score ``records`` and summarize them in memory (pure): the summary, and the scores
    in record order (a later record with the same ``run_key`` replaces an earlier one)."""
    latest = {r.run_key: i for i, r in enumerate(records)}
    acc = _Summarizer()
    scores = []
    for i in sorted(latest.values()):
        score = score_run(records[i])
        scores.append(score)
        acc.add(score, records[i].target, i, _greedy(records[i]))
    return acc.summary(run_id, context or FolderContext(), records.__getitem__), scores


# ------------------------------------------------------------------ comparing two servers


def engagement(
    baseline: Target,
    candidate: Target,
    logs: tuple[str | None, str | None] = (None, None),
    *,
    aa: bool = False,
) -> tuple[dict[str, SideInfo], list[str], dict[str, list[Any]] | None]:
    """Both sides' fusion engagement (:mod:`harness.server.fusion`), the warning when the
    feature under test does not differ (none under ``aa``: one server against itself), and
    the server arguments that differ (``{arg: [baseline, candidate]}``). A recorded side
    (:class:`~harness.recording.RecordedSide`) gives the facts recorded with it."""
    sides = {
        "baseline": SideInfo(side="baseline", label=baseline.label),
        "candidate": SideInfo(side="candidate", label=candidate.label),
    }
    found: dict[str, fusion.FusionEngagement] = {}
    for (name, t), log in zip(
        (("baseline", baseline), ("candidate", candidate)), logs, strict=True
    ):
        if isinstance(t, RecordedSide):  # the facts recorded with it
            sides[name] = t.recording.side_info(name, t.label)
            if sides[name].fusion:
                found[name] = fusion.FusionEngagement.model_validate(sides[name].fusion)
            continue
        try:
            found[name] = fusion.collect_engagement(t.base_url, log_path=log)
        except Exception as exc:  # never let the engagement probe break a comparison
            return sides, [f"fusion engagement not collected: {type(exc).__name__}: {exc}"], None
        sides[name].fusion = found[name].model_dump(mode="json")
    if len(found) < 2:
        return sides, [], None
    eb, ec = found["baseline"], found["candidate"]
    warning = None if aa else fusion.fusion_warning(eb, ec)
    diff = fusion.args_diff_pairs(eb.server_args, ec.server_args)
    return sides, [warning] if warning else [], diff


def compare(
    scenarios: Sequence[Scenario],
    baseline: Target,
    candidate: Target,
    *,
    settings: Settings,
    folder: RunFolder,
    logs: tuple[str | None, str | None] = (None, None),
    progress: bool = True,
    after_runs: Callable[[RunFolder], None] | None = None,
    single_turn: bool = False,
) -> Summary:
    """Run ``scenarios`` against both targets into ``folder``, score and decide.

    Fusion engagement is collected first, then (unless ``settings.skip_contract``) each
    live side's contract pre-flight (:func:`harness.preflight.check_sides`: ``contract.json``,
    ``SideInfo.contract``; a recorded side brings its own; a difference between the sides
    is a warning), and both are saved in the manifest with the settings (a comparison
    killed before its summary is re-scored with them).
    ``baseline.side``/``candidate.side`` are set to ``"baseline"``/``"candidate"``.
    Repeats, stream mode, concurrency, A/A, the temperature and the seed come from
    ``settings``. Runs already in the folder are not made again (resume). With
    ``settings.sequential`` the runs come in rounds of ``repeats`` per scenario and side,
    each followed by a look at its level, until one says stop
    (:mod:`harness.stats.sequential`); the summary says which round decided.
    ``after_runs(folder)`` is called once, the servers still up, as soon as the first
    round's runs are in (it reads the baseline's first run of each scenario: the numerics
    section, :func:`harness.numerics.section.logprobs_section`) and before any look is
    scored, so that what it writes (``logprobs.json``) is an input of every decision
    (:func:`harness.stats.verdict.decide`): the verdict is decided once, the folder
    scored once per look.

    Either side may be a recording (:class:`~harness.recording.RecordedSide`, checked by
    the caller with :meth:`~harness.recording.Recording.check`): before each round its
    recorded runs of that round are copied into ``folder`` as that side
    (:meth:`~harness.recording.Recording.copy_runs`), and only live sides run.

    With ``single_turn`` (the scenarios cut to their first response,
    :func:`harness.scoring.trigger.single_turn`) the vendor-verifier figures are written
    to ``verifier.json`` once the comparison is decided (:func:`write_verifier`).
    """
    baseline.side, candidate.side = "baseline", "candidate"
    sides, warnings, diff = engagement(baseline, candidate, logs, aa=settings.aa)
    if not settings.skip_contract:  # before any scenario: what each side honours
        from harness.preflight import check_sides

        live = {t.side: t for t in (baseline, candidate) if isinstance(t, TargetConfig)}
        found = check_sides(folder, sides, live)  # type: ignore[arg-type]
        warnings += [f"the contract differs between the sides: {d}" for d in found]
    context = FolderContext(settings, sides, warnings, diff, kind="compare")
    _save_context(folder, context)
    if not settings.sequential:
        _run_round(scenarios, (baseline, candidate), settings, folder, settings.repeats, progress)
        if after_runs is not None:
            after_runs(folder)
        summary = score_folder(folder, context)
    else:
        summary = _rounds(scenarios, (baseline, candidate), folder, context, progress, after_runs)
    if single_turn:
        write_verifier(folder)
    return summary


def _rounds(
    scenarios: Sequence[Scenario],
    targets: tuple[Target, Target],
    folder: RunFolder,
    context: FolderContext,
    progress: bool,
    after_runs: Callable[[RunFolder], None] | None = None,
) -> Summary:
    """Sequential mode: rounds of ``repeats`` runs per scenario and side, each scored at
    its look's level, until :func:`harness.stats.sequential.should_stop` says stop;
    ``after_runs`` once, after the first round run here and before its look."""
    settings = context.settings
    per_round = settings.repeats or 5
    modes = 2 if settings.stream == "both" else 1
    start = first_look(
        len(folder.finished_keys()), 2 * len(scenarios) * per_round * modes, settings.rounds
    )
    for look in range(start, settings.rounds + 1):
        _run_round(scenarios, targets, settings, folder, look * per_round, progress)
        if after_runs is not None:
            after_runs(folder)
            after_runs = None
        look_settings = settings.model_copy(update={"look": look, "repeats": look * per_round})
        at_look = replace(context, settings=look_settings)
        _save_context(folder, at_look)  # a re-score decides at this look's level too
        summary = score_folder(folder, at_look)
        if should_stop(summary, look, settings.rounds):
            break
    return summary


def _run_round(
    scenarios: Sequence[Scenario],
    targets: tuple[Target, Target],
    settings: Settings,
    folder: RunFolder,
    repeats: int | None,
    progress: bool,
) -> None:
    """Run every scenario up to ``repeats`` per side (runs already there are kept); a
    recorded side's runs up to ``repeats`` are copied from its recording."""
    from harness.runner import SamplingPolicy, run_many_sync

    live = [t for t in targets if isinstance(t, TargetConfig)]
    for t in targets:
        if isinstance(t, RecordedSide):
            n = repeats if repeats is not None else max(s.repeats for s in scenarios)
            t.recording.copy_runs(folder, t.side, t.label, n)
    if not live:
        return
    run_many_sync(
        scenarios,
        live,
        repeats=repeats,
        stream=settings.stream if settings.stream == "both" else bool(settings.stream),
        concurrency=settings.concurrency or 8,
        out_dir=folder,
        progress=progress,
        keep=False,
        sampling=SamplingPolicy(
            settings.temperature,
            settings.seed,
            settings.reasoning_history,  # type: ignore[arg-type]  # checked by the option
            settings.history_fields,  # type: ignore[arg-type]  # checked by the option
        ),
    )
