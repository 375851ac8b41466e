"""Read a run folder for the report: every input is optional but the folder itself.

Inputs (all written by other commands; the report reads them and recomputes no score):

- ``manifest.json``: :class:`harness.transcript.RunManifest`;
- ``transcripts.jsonl``: :class:`harness.transcript.RunRecord` lines;
- ``summary.json``: scores and verdicts (``harness.summary``, written by ``compare``/``score``);
- ``gsm8k.json``: :class:`harness.gsm8k_models.GSM8KSummary` (``harness gsm8k``);
- ``boot.json``: the boot checks' report (``harness boot``).

A file that is present but unreadable raises :class:`ReportInputError` naming the
file and the fix; a missing optional file is simply ``None``.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.transcript import RunManifest, RunRecord, read_records

__all__ = ["ReportInputError", "RunFolder", "load_run_folder"]

#: optional input -> (module, candidate model class names), tried in order
_MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "summary.json": ("harness.summary", ("Summary", "RunSummary", "CompareSummary")),
    "gsm8k.json": ("harness.gsm8k_models", ("GSM8KSummary",)),
    "boot.json": ("harness.boot", ("BootReport", "BootSummary", "BootResult")),
    "matrix.json": ("harness.matrix", ("MatrixResult",)),
}


class ReportInputError(ValueError):
    """A run folder the report cannot read; ``str`` is one line naming file and fix."""


@dataclass
class RunFolder:
    """Everything the report reads from ``results/<run-id>/``."""

    path: Path
    manifest: RunManifest | None
    records: list[RunRecord]
    summary: Any = None  # harness.summary model (or the raw dict if the module is absent)
    gsm8k: Any = None  # GSM8KSummary (or raw dict)
    boot: Any = None  # boot report model (or raw dict)
    matrix: Any = None  # harness.matrix.MatrixResult (harness matrix)
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


def _load_optional(folder: Path, name: str) -> tuple[Any, Any]:
    """``(parsed model or raw dict, raw dict)`` of an optional file, ``(None, None)`` if absent."""
    path = folder / name
    if not path.exists():
        return None, None
    data = _read_json(path)
    cls = _model_class(name)
    if cls is None:
        return data, data
    try:
        return cls.model_validate(data), data
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ReportInputError(
            f"{path}: {loc}: {err['msg']}; it was written by another harness version, "
            "re-create it (e.g. `harness score`)"
        ) from None


def load_run_folder(path: str | Path) -> RunFolder:
    """Load a run folder; raises :class:`ReportInputError` if it holds nothing to report."""
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
    try:
        records = list(read_records(folder / "transcripts.jsonl"))
    except ValidationError as exc:
        raise ReportInputError(
            f"{folder / 'transcripts.jsonl'}: a line is not a RunRecord ({exc.errors()[0]['msg']})"
        ) from None
    rf = RunFolder(path=folder, manifest=manifest, records=records)
    for name, attr in (
        ("summary.json", "summary"),
        ("gsm8k.json", "gsm8k"),
        ("boot.json", "boot"),
        ("matrix.json", "matrix"),
    ):
        model, raw = _load_optional(folder, name)
        setattr(rf, attr, model)
        if raw is not None:
            rf.raw[name] = raw
    if not records and rf.summary is None and rf.gsm8k is None and rf.boot is None:
        raise ReportInputError(
            f"{folder}: nothing to report (no transcripts.jsonl, summary.json, gsm8k.json "
            "or boot.json); run `harness run`, `compare`, `gsm8k` or `boot` first"
        )
    return rf
