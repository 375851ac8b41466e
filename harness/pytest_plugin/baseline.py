"""The baseline of a plugin session (``--harness-baseline URL|DIR``) and the rounds that judge against it.

A baseline is a live server or a recording (``harness record``; a folder). Either way the
scenario tests are judged as ``harness compare`` judges a comparison
(:mod:`harness.pytest_plugin.judge`), from the same sequential design
(:mod:`harness.stats.sequential`): rounds of ``--harness-repeats`` runs per scenario and side
(default :data:`harness.cli.compare.DEFAULT_REPEATS`), at most ``--harness-rounds``
(default :data:`harness.stats.sequential.ROUNDS`), each look deciding at its spent level and
stopping with :func:`~harness.stats.sequential.should_stop`.

- Batching on (the default): :func:`harness.pipeline.compare` itself runs the rounds over
  every selected scenario into the session's run folder; each test then judges its
  scenario from that one final comparison.
- ``--harness-batch off``: each test is a comparison of its own scenario (and stream
  mode) alone, in rounds of its own (:func:`scenario_rounds`: the same rounds, levels and
  stopping rule, through :func:`harness.pipeline._run_round` and
  :func:`harness.pipeline.summarize`); there is no pool across scenarios.

A recording is opened and checked once, when the session's tests are collected
(:func:`open_recording`): against the selected scenarios' content hashes, the model the
target serves, the temperature, the sampling seed, the stream mode and the runs the rounds
may need (``repeats x rounds``). A recording that cannot serve is one line, raised as
:class:`~harness.errors.RecordingError` (the plugin makes it a ``pytest.UsageError``).
Only the selected scenarios are read from it (:class:`SelectedRecording`): ``-k`` or one
file against a recording of the whole suite is a comparison of what was selected.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from harness.recording import RecordedSide, Recording, is_recording_ref

if TYPE_CHECKING:
    from harness.client.target import TargetConfig
    from harness.pytest_plugin.options import HarnessSettings
    from harness.runfolder import RunFolder
    from harness.scenario.model import Scenario
    from harness.scoring.models import RunScore
    from harness.summary import Settings, Summary
    from harness.transcript import RunRecord

__all__ = [
    "SelectedRecording",
    "compare_settings",
    "open_recording",
    "per_round",
    "scenario_rounds",
    "served_model",
]


def per_round(settings: HarnessSettings) -> int:
    """Runs per scenario and side in one round: ``--harness-repeats``, else compare's default."""
    from harness.cli.compare import DEFAULT_REPEATS

    return settings.repeats or DEFAULT_REPEATS


def compare_settings(
    settings: HarnessSettings, scenario_ids: Sequence[str], stream: bool | str | None = None
) -> Settings:
    """The ``settings`` of the session's comparison: sequential, ``per_round`` repeats a
    round, at most ``--harness-rounds``, compare's alpha and decision rule. ``stream``: the
    stream mode of the runs (default the session's: ``"both"``, True or False)."""
    from harness.stats.verdict import ALPHA, DECISION_RULE
    from harness.summary import Settings

    mode = settings.stream_mode
    if stream is None:
        stream = "both" if mode == "both" else mode == "on"
    return Settings(
        repeats=per_round(settings), stream=stream, model=settings.model,
        concurrency=settings.concurrency, scenarios=list(scenario_ids), alpha=ALPHA,
        infra_error_limit=settings.max_infra_error_rate, min_pass_rate=settings.min_pass_rate,
        decision_rule=DECISION_RULE, temperature=settings.temperature,
        seed=settings.sampling_seed, sequential=True, rounds=settings.rounds,
    )  # fmt: skip


class SelectedRecording(Recording):
    """A recording read for some of its scenarios (and stream modes) only.

    Its ``info.scenarios`` holds the selected scenarios it recorded, so :meth:`check`
    does not count the others as missing (a selected scenario it did not record, or
    recorded from another file, is still a problem); :meth:`copy_runs` copies the runs of
    the selected scenarios alone (in ``streams`` when given), the last record of each
    recorded run, each at most once.
    """

    #: the recording with every scenario it recorded
    whole: Recording

    def __init__(self, recording: Recording, scenario_ids: Iterable[str], streams: Any = None):
        whole = recording.whole if isinstance(recording, SelectedRecording) else recording
        keep = set(scenario_ids)
        info = whole.info.model_copy(
            update={"scenarios": {k: v for k, v in whole.info.scenarios.items() if k in keep}}
        )
        super().__init__(whole.folder, info)
        self.whole = whole
        self.selected = keep
        self.streams: set[bool] | None = set(streams) if streams is not None else None

    def copy_runs(self, folder: RunFolder, side: str, label: str, repeats: int) -> int:
        """As :meth:`Recording.copy_runs`, for the selected scenarios and modes only."""
        present = {key for _, key in folder.run_keys_with_offsets()}
        last: dict[str, int] = {}
        for offset, key in self.folder.run_keys_with_offsets():
            last[key] = offset
        added = 0
        for _, rec in self.folder.records_at(last.values()):
            if rec.repeat >= repeats or rec.scenario_id not in self.selected:
                continue
            if self.streams is not None and rec.stream not in self.streams:
                continue
            mode = "stream" if rec.stream else "nostream"
            key = f"{side}/{rec.scenario_id}/{rec.repeat}/{mode}"
            if key in present:
                continue
            target = rec.target.model_copy(update={"side": side, "label": label})
            folder.append_record(rec.model_copy(update={"run_key": key, "target": target}))
            present.add(key)
            added += 1
        return added


def served_model(settings: HarnessSettings) -> str | None:
    """The model the target serves: ``--harness-model``, else the first of its ``GET /v1/models``
    (None when it does not answer: its runs will say why)."""
    if settings.model:
        return settings.model
    if not settings.target:
        return None
    import httpx

    from harness.client.target import server_root

    key = os.environ.get(settings.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(server_root(settings.target) + "/v1/models", headers=headers, timeout=10.0)
        return str(r.json()["data"][0]["id"])
    except Exception:
        return None


def open_recording(
    settings: HarnessSettings, scenarios: Sequence[Scenario], recording: Recording | None = None
) -> SelectedRecording | None:
    """The session's recorded baseline (``recording``, else opened from ``--harness-baseline``),
    checked against ``scenarios`` (the selected ones; none: opened only), or None when
    ``--harness-baseline`` is not a recording.

    Raises:
        RecordingError: not a finished recording, or one that cannot serve these
            scenarios and settings (one line naming what differs).
    """
    if not settings.baseline or not is_recording_ref(settings.baseline):
        return None
    whole = recording or Recording.open(settings.baseline)
    rec = SelectedRecording(whole, [s.id for s in scenarios])
    if scenarios:
        rec.check(
            "baseline", scenarios=list(scenarios),
            repeats=per_round(settings) * settings.rounds, stream=settings.stream_mode,
            temperature=settings.temperature, seed=settings.sampling_seed,
            model=served_model(settings), single_turn=False,
            reasoning_history=settings.reasoning_history,
        )  # fmt: skip
    return rec


def recorded_side(recording: Recording, label: str | None = None) -> RecordedSide:
    """The baseline side read from ``recording`` (labelled as it was recorded)."""
    return RecordedSide(recording, label or recording.info.label, "baseline")


def scenario_rounds(
    scenario: Scenario,
    stream: bool,
    targets: tuple[TargetConfig | RecordedSide, TargetConfig],
    folder: RunFolder,
    settings: HarnessSettings,
) -> tuple[list[RunRecord], list[RunScore], Summary]:
    """``--harness-batch off`` with a baseline: one scenario in one stream mode compared
    alone in rounds (the module docstring), its runs appended to ``folder``; returns its
    records, their scores and the comparison of the last look."""
    from harness.pipeline import FolderContext, _run_round, summarize
    from harness.stats.sequential import should_stop

    base, cand = targets
    if isinstance(base, RecordedSide):
        rec = SelectedRecording(base.recording, [scenario.id], [stream])
        base = RecordedSide(rec, base.label, "baseline")
    plan = compare_settings(settings, [scenario.id], stream)
    n = per_round(settings)
    for look in range(1, plan.rounds + 1):
        _run_round([scenario], (base, cand), plan, folder, look * n, False)
        latest = {
            r.run_key: r for r in folder.records()
            if r.scenario_id == scenario.id and r.stream == stream
            and r.side in ("baseline", "candidate")
        }  # fmt: skip
        records = list(latest.values())
        at = plan.model_copy(update={"look": look, "repeats": look * n})
        context = FolderContext(settings=at, kind="compare")
        summary, scores = summarize(records, run_id=folder.run_id, context=context)
        if should_stop(summary, look, plan.rounds):
            break
    return records, scores, summary
