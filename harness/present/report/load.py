"""Read a run folder for the report: every input is optional but the folder itself.

Inputs (all written by other commands; the report reads them and recomputes no score):

- ``manifest.json``: :class:`harness.transcript.RunManifest`;
- ``transcripts.jsonl``: :class:`harness.transcript.RunRecord` lines;
- ``summary.json``: scores and verdicts (``harness.summary``, written by ``compare``/``score``);
- ``gsm8k.json``: :class:`harness.gsm8k.models.GSM8KSummary` (``harness gsm8k``);
- ``boot.json``: the boot checks' report (``harness boot``).

A file that is present but unreadable raises :class:`ReportInputError` naming the
file and the fix; a missing optional file is simply ``None``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from harness.errors import ReportInputError
from harness.present.report.lean import RunHead, read_lean, read_whole
from harness.present.report.select import MAX_RUNS, PER_SCENARIO, RunFacts, choose
from harness.summary import Summary
from harness.transcript import RunManifest, RunRecord, TargetInfo

__all__ = ["ReportInputError", "RunFolder", "load_run_folder"]

#: optional input -> (module, candidate model class names), tried in order
_MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gsm8k.json": ("harness.gsm8k.models", ("GSM8KSummary",)),
    "boot.json": ("harness.server.boot", ("BootReport", "BootSummary", "BootResult")),
    "matrix.json": ("harness.matrix.run", ("MatrixResult",)),
}


_M = TypeVar("_M", bound=BaseModel)


@dataclass
class RunFolder:
    """Everything the report reads from ``results/<run-id>/``.

    ``runs``: the facts of every run (:class:`~harness.present.report.select.RunFacts`);
    ``records``: only the runs rendered turn by turn; ``shown``: scenario id -> their
    (repeat, stream) keys; ``headers``: scenario id -> description, targets, messages.
    """

    path: Path
    manifest: RunManifest | None
    records: list[RunRecord]
    runs: list[RunFacts] = field(default_factory=list)
    shown: dict[str, list[tuple[int, bool]]] = field(default_factory=dict)
    headers: dict[str, dict[str, Any]] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    heads: dict[str, RunHead] = field(default_factory=dict)  # run_key -> summary head
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # place in summary.json
    summary: Summary | None = None  # its ``runs``: only the whole scores rendered (see lean)
    gsm8k: Any = None  # GSM8KSummary (or raw dict)
    boot: Any = None  # boot report model (or raw dict)
    matrix: Any = None  # harness.matrix.run.MatrixResult (harness matrix)
    raw: dict[str, Any] = field(default_factory=dict)  # file name -> parsed JSON


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReportInputError(
            f"{path}: cannot read as JSON ({exc}); re-create it with the command that wrote it"
        ) from None


def _model_class(name: str) -> type[BaseModel] | None:
    modname, classes = _MODELS[name]
    try:
        mod = importlib.import_module(modname)
    except ImportError:
        return None
    for cls_name in classes:
        cls = getattr(mod, cls_name, None)
        if isinstance(cls, type) and issubclass(cls, BaseModel):
            return cls
    return None


def _invalid(path: Path, exc: ValidationError) -> ReportInputError:
    err = exc.errors()[0]
    if err["type"] == "json_invalid":
        return ReportInputError(
            f"{path}: cannot read as JSON ({err['msg']}); re-create it with the command that wrote it"
        )
    loc = ".".join(str(p) for p in err["loc"])
    return ReportInputError(
        f"{path}: {loc}: {err['msg']}; it was written by another harness version, "
        "re-create it (e.g. `harness score`)"
    )


def _load_optional(folder: Path, name: str) -> tuple[Any, Any]:
    """``(parsed model or raw dict, raw dict)`` of an optional file, ``(None, None)`` if absent.

    ``summary.json`` (one score per run: large for large folders) is validated straight
    from its bytes and its raw dict is not kept (``None``).
    """
    path = folder / name
    if not path.exists():
        return None, None
    cls = _model_class(name)
    data = _read_json(path)
    if cls is None:
        return data, data
    try:
        return cls.model_validate(data), data
    except ValidationError as exc:
        raise _invalid(path, exc) from None


def _load_summary(rf: RunFolder) -> None:
    """``summary.json`` read run by run (:func:`harness.present.report.lean.read_lean`)."""
    path = rf.path / "summary.json"
    if not path.exists():
        return
    try:
        lean = read_lean(path)
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read ({exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportInputError(
            f"{path}: cannot read as JSON ({exc}); re-create it with the command that wrote it"
        ) from None
    except ValidationError as exc:
        raise _invalid(path, exc) from None
    rf.summary, rf.heads, rf.spans = lean.summary, lean.heads, lean.spans


def _fill_scores(rf: RunFolder, summary: Summary, wanted: set[str]) -> None:
    """Add the whole scores of the ``wanted`` runs to ``summary.runs``."""
    have = {r.run_key for r in summary.runs}
    spans = [rf.spans[k] for k in wanted - have if k in rf.spans]
    summary.runs = summary.runs + read_whole(rf.path / "summary.json", spans)


def _scan(path: Path) -> tuple[list[RunFacts], dict[str, dict[str, Any]], dict[str, Any]]:
    """First pass over ``transcripts.jsonl``: the facts of every run (a later line with
    the same ``run_key`` replaces an earlier one), each scenario's header (description,
    targets, opening messages) and the first run's sampling settings."""
    runs: dict[str, RunFacts] = {}
    headers: dict[str, dict[str, Any]] = {}
    targets: dict[str, TargetInfo] = {}
    sampling: dict[str, Any] = {}
    for offset, rec in _lines(path, None):
        target = targets.setdefault(rec.target.side or rec.target.label, rec.target)
        runs[rec.run_key] = RunFacts.of(rec, target, offset)
        if rec.scenario_id not in headers:
            sc = rec.scenario
            headers[rec.scenario_id] = {
                k: sc.get(k) for k in ("description", "targets", "messages")
            }
        sampling = sampling or {"": rec.sampling}
    return list(runs.values()), headers, sampling.get("", {})


def _lines(path: Path, offsets: list[int] | None) -> Iterator[tuple[int, RunRecord]]:
    """``(byte offset, record)`` of every line (or of the lines at ``offsets``), streaming.

    A truncated last line (a run killed while writing) is skipped, as
    :func:`harness.transcript.read_records` does.
    """
    if not path.exists():
        return
    with open(path, "rb") as fh:
        lines = _at(fh, offsets) if offsets is not None else _all(fh)
        for offset, line in lines:
            if not line.strip():
                continue
            try:
                yield offset, RunRecord.model_validate_json(line)
            except ValidationError as exc:
                if exc.errors()[0]["type"] == "json_invalid":
                    continue
                raise ReportInputError(
                    f"{path}: a line is not a RunRecord ({exc.errors()[0]['msg']})"
                ) from None


def _all(fh: BinaryIO) -> Iterator[tuple[int, bytes]]:
    offset = 0
    for line in fh:
        yield offset, line
        offset += len(line)


def _at(fh: BinaryIO, offsets: list[int]) -> Iterator[tuple[int, bytes]]:
    for offset in sorted(offsets):
        fh.seek(offset)
        yield offset, fh.readline()


def load_run_folder(
    path: str | Path, *, per_scenario: int = PER_SCENARIO, max_runs: int = MAX_RUNS
) -> RunFolder:
    """Load a run folder; raises :class:`ReportInputError` if it holds nothing to report.

    ``transcripts.jsonl`` is read streaming: every run's :class:`RunFacts`, and in
    ``records`` only the runs :func:`harness.present.report.select.choose` picks to render
    (``per_scenario`` keys per scenario, ``max_runs`` runs in all).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ReportInputError(f"{folder}: no such run folder; pass results/<run-id>")
    manifest = None
    if (folder / "manifest.json").exists():
        try:
            manifest = RunManifest.model_validate(_read_json(folder / "manifest.json"))
        except ValidationError as exc:
            raise ReportInputError(
                f"{folder / 'manifest.json'}: invalid manifest ({exc.errors()[0]['msg']})"
            ) from None
    rf = RunFolder(path=folder, manifest=manifest, records=[])
    _load_summary(rf)
    for name, attr in (
        ("gsm8k.json", "gsm8k"),
        ("boot.json", "boot"),
        ("matrix.json", "matrix"),
    ):
        model, raw = _load_optional(folder, name)
        setattr(rf, attr, model)
        if raw is not None:
            rf.raw[name] = raw
    _load_transcripts(rf, per_scenario, max_runs)
    if not rf.runs and rf.summary is None and rf.gsm8k is None and rf.boot is None:
        raise ReportInputError(
            f"{folder}: nothing to report (no transcripts.jsonl, summary.json, gsm8k.json "
            "or boot.json); run `harness run`, `compare`, `gsm8k` or `boot` first"
        )
    return rf


def _load_transcripts(rf: RunFolder, per_scenario: int, max_runs: int) -> None:
    path = rf.path / "transcripts.jsonl"
    rf.runs, rf.headers, rf.sampling = _scan(path)
    summary = rf.summary
    verdicts: dict[str, str] = (
        {c.scenario_id: c.verdict for c in summary.comparisons} if summary else {}
    )
    sides = list(dict.fromkeys(r.side for r in rf.runs))
    rf.shown = choose(
        rf.runs,
        sides,
        scores=rf.heads,
        verdicts=verdicts,
        per_scenario=per_scenario,
        max_runs=max_runs,
    )
    chosen = [r for r in rf.runs if r.key in rf.shown.get(r.scenario_id, ())]
    rf.records = [rec for _, rec in _lines(path, [r.offset for r in chosen])]
    if summary is not None:
        _fill_scores(rf, summary, {r.run_key for r in chosen})
