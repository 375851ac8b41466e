"""Recorded baselines: one server at a time.

On a box that fits one server (a TP-8 model on 8 GPUs), the baseline build is recorded,
stopped, and the candidate compared against the recording later (``harness record``,
then ``harness compare --baseline results/<id> --candidate URL``). A recording is a run
folder (``manifest.json`` of kind ``record``) holding everything a later comparison needs
from the one server:

- ``transcripts.jsonl``: the scenario runs at the full budget of ``compare``'s defaults
  (``repeats_per_round x rounds`` per scenario and stream mode, every sequential round),
  recorded as the ``baseline`` side with the request seeds a live baseline would get;
- ``numerics.json``: every numerics path a live comparison runs, each scored twice (the
  baseline's own A/A floor; :class:`~harness.numerics.models.RecordedScores`,
  :func:`~harness.numerics.run.record_numerics`): the numerics sequences (its first run of
  each scenario, the scenarios' references) teacher-forced, their greedy decodes (the
  decode path) and their routed experts where the server returns them;
- ``gsm8k/``: GSM8K answers, when asked (``--gsm8k N``);
- the manifest's ``recording`` (:class:`RecordingInfo`): the server's facts (model,
  ``/server_info``, fusion engagement, the boot checks when it was launched), the scenario
  files' content hashes, the sampling settings and the harness version.

A comparison reads the recording round by round (:meth:`Recording.copy_runs`: at round k
the baseline side holds the recorded runs with repeat < k x repeats, as a live baseline
would), so the sequential design and its error rates are those of a live comparison.
A recording that cannot serve a comparison is refused in one line naming what differs
(:meth:`Recording.check`); nothing is ever compared in part.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness._version import __version__
from harness.errors import RecordingError, RunFolderError
from harness.runfolder import RunFolder
from harness.scenario.model import Scenario
from harness.summary import SideInfo
from harness.transcript import RunRecord

__all__ = [
    "RECORD_KIND",
    "RECORDING_KEY",
    "RecordedSide",
    "Recording",
    "RecordingInfo",
    "is_recording_ref",
]

#: the manifest ``kind`` of a recording
RECORD_KIND = "record"
#: the manifest's ``extra`` key of :class:`RecordingInfo`
RECORDING_KEY = "recording"
#: the file of the recorded numerics sequences
NUMERICS = "numerics.json"


class RecordingInfo(BaseModel):
    """What a recording holds and how it was made (the manifest's ``recording``).

    ``repeats_per_round`` x ``rounds`` runs per scenario and stream mode were recorded
    (:attr:`repeats`); ``stream`` is ``on``, ``off`` or ``both``; ``temperature`` and
    ``seed`` the sampling policy (``--temperature``, ``--sampling-seed``); ``scenarios``
    scenario id -> content hash; ``side``: the server's facts (target, fusion engagement,
    server arguments); ``boot``: the boot checks when ``harness record --cmd`` launched it;
    ``numerics``: one line (recorded, or why not); ``gsm8k``: the GSM8K configuration when
    answers were recorded; ``complete``: every part finished (a killed ``record`` resumes).
    """

    model_config = ConfigDict(extra="ignore")

    format: int = 1
    label: str
    url: str
    model: str | None = None
    scenarios: dict[str, str] = Field(default_factory=dict)
    repeats_per_round: int
    rounds: int
    stream: str = "off"
    temperature: float | None = None
    seed: int | None = None
    #: the reasoning of earlier turns sent back (``--reasoning-history``; None: each
    #: scenario's, else ``auto``)
    reasoning_history: str | None = None
    single_turn: bool = False
    harness_version: str = __version__
    side: SideInfo | None = None
    boot: dict[str, Any] | None = None
    numerics: str | None = None
    gsm8k: dict[str, Any] | None = None
    complete: bool = False

    @property
    def repeats(self) -> int:
        """Runs recorded per scenario and stream mode."""
        return self.repeats_per_round * self.rounds


def is_recording_ref(value: str | None) -> bool:
    """Whether a ``--baseline``/``--candidate`` value names a recording (a folder), not a
    server URL."""
    return bool(value) and not str(value).lower().startswith(("http://", "https://"))


def _some(names: Sequence[str], most: int = 5) -> str:
    """``a, b, c and 4 more``: a list kept to one readable line."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _same_float(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=0, abs_tol=1e-12)


class Recording:
    """A recorded baseline folder (:meth:`open`), checked against a comparison
    (:meth:`check`) and read round by round (:meth:`copy_runs`)."""

    def __init__(self, folder: RunFolder, info: RecordingInfo) -> None:
        self.folder, self.info = folder, info

    @property
    def path(self) -> Path:
        """The recording's folder."""
        return self.folder.path

    @classmethod
    def open(cls, path: str | Path, *, complete: bool = True) -> Recording:
        """The recording at ``path``.

        Raises:
            RecordingError: no such folder, not a recording (another command's run folder),
                unreadable, or (with ``complete``) a recording that did not finish.
        """
        folder = RunFolder(path)
        if not folder.path.is_dir():
            raise RecordingError(
                f"{path}: no such recording (a folder written by harness record, e.g. "
                "results/<id>; or give a server URL starting with http://)"
            )
        try:
            manifest = folder.manifest()
        except RunFolderError as exc:
            raise RecordingError(str(exc)) from None
        if (
            manifest is not None
            and manifest.kind == RECORD_KIND
            and RECORDING_KEY not in manifest.extra
        ):
            raise RecordingError(  # harness record's folder, nothing recorded yet
                f"{path}: the recording did not finish (its server did not boot, or it was "
                f"killed at the start); finish it with harness record ... --resume "
                f"{folder.path.name}"
            )
        if manifest is None or manifest.kind != RECORD_KIND or RECORDING_KEY not in manifest.extra:
            made = f" (made by harness {manifest.kind})" if manifest and manifest.kind else ""
            raise RecordingError(
                f"{path}: not a recording{made}; record the baseline with "
                "harness record --target URL (or --cmd ...) and pass its folder"
            )
        try:
            info = RecordingInfo.model_validate(manifest.extra[RECORDING_KEY])
        except ValueError as exc:  # pydantic's ValidationError: an edited or foreign file
            first = str(exc).splitlines()[1:2] or [str(exc)]
            raise RecordingError(
                f"{folder.manifest_path}: extra.recording is not a recording's description "
                f"({first[0].strip()}); record the baseline again"
            ) from None
        if complete and not info.complete:
            raise RecordingError(
                f"{path}: the recording did not finish (killed?); finish it with "
                f"harness record ... --resume {folder.path.name}"
            )
        return cls(folder, info)

    # ---------------------------------------------------------------- checks

    def problems(
        self,
        scenarios: Sequence[Scenario],
        *,
        repeats: int,
        stream: str,
        temperature: float | None,
        seed: int | None,
        model: str | None = None,
        single_turn: bool = False,
        reasoning_history: str | None = None,
    ) -> list[str]:
        """What keeps this recording from serving a comparison of ``scenarios`` with
        ``repeats`` runs per scenario at most (every round), or ``[]``. The reasoning
        history (``--reasoning-history``) must be the recorded one (None: each scenario's)."""
        info, out = self.info, []
        given = {s.id: (s, s.content_hash()) for s in scenarios}
        changed = [
            f"{sid} ({Path(s.source).name if s.source else sid})"
            for sid, (s, h) in given.items()
            if sid in info.scenarios and info.scenarios[sid] != h
        ]
        added = [sid for sid in given if sid not in info.scenarios]
        missing = [sid for sid in info.scenarios if sid not in given]
        if changed:
            out.append("scenario file changed since it was recorded: " + _some(changed))
        if added:
            out.append("scenario not in the recording (added since): " + _some(added))
        if missing:
            out.append("recorded scenario not given now (missing): " + _some(missing))
        if model is not None and info.model is not None and model != info.model:
            out.append(f"model {info.model!r} recorded, {model!r} now")
        if not _same_float(temperature, info.temperature):
            out.append(f"temperature {info.temperature} recorded, {temperature} now")
        if seed != info.seed:
            out.append(f"sampling seed {info.seed} recorded, {seed} now")
        if reasoning_history != info.reasoning_history:
            out.append(
                f"--reasoning-history {info.reasoning_history or 'unset'} recorded, "
                f"{reasoning_history or 'unset'} now"
            )
        if stream != info.stream:
            out.append(f"stream mode {info.stream} recorded, {stream} now")
        if single_turn != info.single_turn:
            rec = "single-turn" if info.single_turn else "multi-turn"
            out.append(f"recorded {rec}, the comparison is not")
        if repeats > info.repeats and info.repeats == 0:
            out.append("a numerics-only recording (harness record --numerics-only): no runs")
        elif repeats > info.repeats:
            out.append(
                f"too few runs: {info.repeats} per scenario recorded "
                f"({info.repeats_per_round} x {info.rounds} rounds), the comparison asks up "
                f"to {repeats}"
            )
        return out

    def check(self, role: str = "baseline", **kw: Any) -> None:
        """:meth:`problems` as one line.

        Raises:
            RecordingError: ``<path> cannot serve as the <role>: <what differs>; <fix>``.
        """
        found = self.problems(**kw)
        if found:
            raise RecordingError(
                f"{self.path} cannot serve as the {role}: {'; '.join(found)}; record it again "
                "with these scenarios and settings (harness record), or compare with the "
                "recorded ones"
            )

    # ---------------------------------------------------------------- reading

    def side_info(self, side: str, label: str) -> SideInfo:
        """The recorded server's facts as side ``side`` of a comparison."""
        base = self.info.side.model_copy() if self.info.side else SideInfo(side=side, label=label)
        return base.model_copy(update={"side": side, "label": label, "recorded": str(self.path)})

    def runs(self) -> list[RunRecord]:
        """Every recorded run (the last record of each ``run_key``)."""
        last: dict[str, RunRecord] = {}
        for rec in self.folder.records():
            last[rec.run_key] = rec
        return list(last.values())

    def copy_runs(self, folder: RunFolder, side: str, label: str, repeats: int) -> int:
        """Append the recorded runs with ``repeat < repeats`` to ``folder`` as side
        ``side`` (labelled ``label``), skipping those already there; returns how many."""
        # every key already there, infrastructure errors included (a recorded error is
        # copied once, not again at every round)
        done = (
            {key for _, key in folder.run_keys_with_offsets()}
            if folder.transcripts.exists()
            else set()
        )
        # the last record of each run (a resumed recording re-ran its infrastructure
        # errors: the later record replaces the earlier one, as when it was scored)
        latest = {key: offset for offset, key in self.folder.run_keys_with_offsets()}
        keep = set(latest.values())
        added = 0
        for offset, rec in self.folder.records_with_offsets():
            if offset not in keep or rec.repeat >= repeats:
                continue
            mode = "stream" if rec.stream else "nostream"
            key = f"{side}/{rec.scenario_id}/{rec.repeat}/{mode}"
            if key in done:
                continue
            target = rec.target.model_copy(update={"side": side, "label": label})
            folder.append_record(rec.model_copy(update={"run_key": key, "target": target}))
            done.add(key)
            added += 1
        return added

    def numerics(self) -> Any:
        """The recorded numerics (:class:`~harness.numerics.models.RecordedScores`), or
        None when none were recorded."""
        from harness.numerics.models import RecordedScores

        if not self.folder.has(NUMERICS):
            return None
        try:
            return self.folder.read_model(NUMERICS, RecordedScores)
        except RunFolderError as exc:
            raise RecordingError(str(exc)) from None

    def gsm8k_folder(self) -> RunFolder | None:
        """The recorded GSM8K run folder, or None."""
        sub = self.folder.sub(RunFolder.GSM8K_DIR)
        return sub if sub.has(RunFolder.GSM8K_RECORDS) else None


@dataclass
class RecordedSide:
    """A comparison side read from a recording instead of a live server (``side`` and
    ``label`` as :class:`~harness.client.target.TargetConfig`'s)."""

    recording: Recording
    label: str
    side: str = "baseline"
    model: str | None = None

    def __post_init__(self) -> None:
        self.model = self.model or self.recording.info.model

    @property
    def base_url(self) -> str:
        """The recorded server's URL."""
        return self.recording.info.url

    @property
    def name(self) -> str:
        """The side's key in the comparison (``baseline``), else its label."""
        return self.side or self.label


# ------------------------------------------------------------------ recording


def save_info(folder: RunFolder, info: RecordingInfo) -> None:
    """Write ``info`` into the folder's manifest (``extra.recording``)."""
    folder.set_extra(RECORDING_KEY, info.model_dump(mode="json"), replace=True)


def record(
    scenarios: Sequence[Scenario],
    target: Any,
    folder: RunFolder,
    info: RecordingInfo,
    *,
    log: str | None = None,
    numerics: Any = None,
    gsm8k: dict[str, Any] | None = None,
    concurrency: int = 8,
    progress: bool = True,
    extra_sequences: Sequence[Any] = (),
    contract: bool = True,
) -> RecordingInfo:
    """Record ``target`` (a :class:`~harness.client.target.TargetConfig`) into ``folder``
    as a baseline (module docstring); returns the finished :class:`RecordingInfo`.

    ``info`` carries the settings (repeats per round, rounds, stream, temperature, seed,
    label); ``log``: the server's log (fusion engagement); ``numerics``: a
    :class:`~harness.numerics.run.LogprobsOptions` to record the numerics sequences (None:
    not recorded); ``gsm8k``: :class:`~harness.gsm8k.run.GSM8KOptions` fields to record
    GSM8K answers (None: not recorded); ``extra_sequences``: more numerics sequences
    (:class:`~harness.numerics.models.Sequence`, e.g. GSM8K prompts) after the
    conversations and the scenario references. Runs already in the folder are kept (resume).
    ``contract``: run the contract pre-flight first (:mod:`harness.preflight`; kept in
    ``info.side.contract`` and ``contract.json``, so a comparison against the recording
    shows it and counts a server that ignores sampling once per scenario).
    A server without a logprobs API is said in ``info.numerics``, not raised.

    Raises:
        GSM8KDataError: GSM8K was asked for and its data cannot be loaded.
    """
    from harness.client.target import server_root
    from harness.errors import LogprobsError
    from harness.pipeline import FolderContext, score_folder
    from harness.runner import SamplingPolicy, run_many_sync
    from harness.server import fusion
    from harness.summary import Settings

    target.side = "baseline"
    info.scenarios = {s.id: s.content_hash() for s in scenarios}
    side = info.side or SideInfo(side="baseline", label=target.label)
    try:
        eng = fusion.collect_engagement(target.base_url, log_path=log)
        side.fusion = eng.model_dump(mode="json")
    except Exception as exc:  # never let the engagement probe break a recording
        side.fusion = {"state": "UNKNOWN", "reason": f"not collected: {type(exc).__name__}: {exc}"}
    info.side = side
    if contract and info.repeats > 0:
        from harness.preflight import check_sides

        check_sides(folder, {"baseline": side}, {"baseline": target})
    save_info(folder, info)
    stream: Any = "both" if info.stream == "both" else info.stream == "on"
    if info.repeats > 0:  # 0: a numerics-only recording (harness record --numerics-only)
        run_many_sync(
            scenarios, [target], repeats=info.repeats, stream=stream, concurrency=concurrency,
            out_dir=folder, progress=progress, keep=False,
            sampling=SamplingPolicy(info.temperature, info.seed, info.reasoning_history),  # type: ignore[arg-type]
        )  # fmt: skip
        settings = Settings(
            repeats=info.repeats, stream=stream, scenarios=[s.id for s in scenarios],
            temperature=info.temperature, seed=info.seed or 0,
            reasoning_history=info.reasoning_history,
        )  # fmt: skip
        score_folder(folder, FolderContext(settings, {"baseline": side}, kind=RECORD_KIND))
    manifest = folder.manifest()
    models = [t.model for t in (manifest.targets if manifest else []) if t.model]
    info.model = info.model or (models[0] if models else None)
    if side.target is None and manifest is not None and manifest.targets:
        side.target = manifest.targets[0]
    if numerics is not None and not folder.has(NUMERICS):
        from dataclasses import replace

        from harness.numerics.run import record_numerics
        from harness.numerics.section import baseline_sequences
        from harness.numerics.sequences import from_scenario

        # its own conversations (what a live candidate is scored on, as in a live
        # comparison) and the scenarios' reference conversations (the same in every
        # recording: what two recordings are compared on)
        seqs = [*baseline_sequences(folder), *_references(scenarios, from_scenario),
                *extra_sequences]  # fmt: skip
        # the server's key and request timeout, as the runs had (logprobs_section's way)
        opts = replace(numerics, api_key=numerics.api_key or target.api_key(),
                       timeout_s=target.timeout_s)  # fmt: skip
        try:
            scores = record_numerics(seqs, server_root(target.base_url), opts)
        except LogprobsError as exc:
            info.numerics = f"not recorded: {exc}"
        else:
            folder.write_model(NUMERICS, scores)
            info.model = info.model or scores.model
            from collections import Counter

            n = Counter(r.source for r in scores.sequences)
            parts = [f"{n[k]} {name}" for k, name in (("transcript", "conversations"),
                     ("scenario", "scenario references"), ("gsm8k", "GSM8K prompts")) if n[k]]  # fmt: skip
            info.numerics = (
                f"recorded: {', '.join(parts) or 'no sequence'} scored twice ({scores.api}, "
                f"top-{scores.top_k}){_paths_line(scores)}"
            )
    if gsm8k is not None:
        from harness.gsm8k.run import run_gsm8k

        sub = folder.sub(RunFolder.GSM8K_DIR)
        if not sub.has(RunFolder.GSM8K_SUMMARY):
            run_gsm8k(target, label=target.label, results=folder.path, run_id=RunFolder.GSM8K_DIR,
                      **gsm8k)  # fmt: skip
        manifest = sub.manifest()
        info.gsm8k = manifest.extra.get("gsm8k_config") if manifest else None
    info.complete = True
    save_info(folder, info)
    return info


def _paths_line(scores: Any) -> str:
    """``; decode path: 40 units; routed experts: 12 sequences`` (or why not): the
    recorded paths beyond prefill, for ``info.numerics``."""
    parts = []
    if scores.decode is not None:
        parts.append(f"decode path: {len(scores.decode.sequences)} greedy units")
    if scores.experts is not None:
        parts.append(f"routed experts: {len(scores.experts.sequences)} sequences")
    parts += [f"no {k.replace('experts', 'routed experts').replace('decode', 'decode path')} "
              f"({why})" for k, why in scores.not_recorded.items()]  # fmt: skip
    return "".join(f"; {p}" for p in parts)


def _references(scenarios: Sequence[Scenario], make: Any) -> list[Any]:
    """The scenarios' reference conversations (those that have one: a BFCL task's
    expectation is a state, not a conversation)."""
    from dataclasses import replace

    out = []
    for sc in scenarios:
        try:
            seq = make(sc)
        except Exception:  # noqa: S112 - no reference conversation for this scenario
            continue
        out.append(replace(seq, id=f"{seq.id} (reference)"))  # ids name one sequence each
    return out
