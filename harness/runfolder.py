"""Run folders under ``results/``: ids, creation and the manifest."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness._version import __version__
from harness.transcript import RunManifest, TargetInfo

__all__ = [
    "DEFAULT_RESULTS",
    "git_revision",
    "new_run_id",
    "prepare_run_dir",
    "redact",
    "resume_mismatch",
]

#: results root; override with $HARNESS_RESULTS
DEFAULT_RESULTS = Path(os.environ.get("HARNESS_RESULTS", "results"))

_SECRET = re.compile(r"(^|_)(api_?key|key|token|secret|password|authorization)$", re.I)


def new_run_id(command: str) -> str:
    """``<command>-YYYYmmdd-HHMMSS-<pid>``: sortable and unique per process."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{command}-{stamp}-{os.getpid()}"


def git_revision() -> str | None:
    """The git revision of the working directory's checkout (``+dirty`` if modified)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def redact(args: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``args`` with values of secret-looking keys replaced by ``"***"``."""
    out: dict[str, Any] = {}
    for k, v in args.items():
        if _SECRET.search(k) and not k.endswith("_env"):
            out[k] = "***" if v else v
        elif isinstance(v, (str, int, float, bool, type(None))):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [str(x) for x in v]
        else:
            out[k] = str(v)
    return out


def prepare_run_dir(
    command: str,
    *,
    results: str | Path | None = None,
    run_id: str | None = None,
    targets: list[TargetInfo] | None = None,
    args: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Create ``results/<run-id>/`` and write ``manifest.json`` (kept if it exists: resume).

    Returns the folder's path.
    """
    root = Path(results) if results is not None else DEFAULT_RESULTS
    rid = run_id or new_run_id(command)
    folder = root / rid
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        manifest = RunManifest(
            run_id=rid,
            command=shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if command else command,
            harness_version=__version__,
            git_revision=git_revision(),
            targets=targets or [],
            args=redact(args or {}),
            extra=extra or {},
        )
        manifest_path.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    return folder


def _norm(key: str, value: Any) -> Any:
    """Values as compared on resume: URLs without ``/`` or ``/v1`` at the end, stream modes."""
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return value.rstrip("/").removesuffix("/v1").rstrip("/")
    if key == "stream":
        text = str(value).lower()
        return {"on": "true", "false": "off", "none": "off"}.get(text, text)
    return value


def _changed_scenarios(path: Path, hashes: Mapping[str, str]) -> list[str]:
    """Scenario ids whose recorded ``scenario_hash`` differs from ``hashes`` (JSON lines,
    read without validating whole records; unreadable lines skipped)."""
    changed: dict[str, None] = {}
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            sid = rec.get("scenario_id") if isinstance(rec, dict) else None
            now = hashes.get(sid) if isinstance(sid, str) else None
            if now is not None and now != rec.get("scenario_hash"):
                changed[str(sid)] = None
    return list(changed)


def resume_mismatch(
    folder: str | Path,
    args: Mapping[str, Any],
    keys: Sequence[str],
    scenario_hashes: Mapping[str, str],
) -> str | None:
    """Why resuming ``folder`` with ``args`` would mix two different runs, or None.

    Compares ``args[key]`` for each of ``keys`` (target URLs, model, repeats, stream...)
    with the ``args`` recorded in ``folder/manifest.json`` (keys it lacks are skipped; a
    manifest without ``keys[0]``, e.g. ``target``, was written by another command),
    and ``scenario_hashes`` (scenario id -> :meth:`Scenario.content_hash`) with the
    ``scenario_hash`` of the records in ``transcripts.jsonl`` (ids on both sides only).
    Returns one line listing what differs; None for a folder without a manifest (new).
    """
    path = Path(folder) / "manifest.json"
    if not path.exists():
        return None
    try:
        manifest = RunManifest.model_validate_json(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        return f"{path}: unreadable manifest ({exc}); start a new run instead"
    old = manifest.args
    if old and keys and keys[0] not in old:  # keys[0] names the command's target(s)
        return f"{Path(folder)} was recorded by another command ({manifest.command!r})"
    diffs = [
        f"--{k.replace('_', '-')} {old[k]!r} (now {args.get(k)!r})"
        for k in keys
        if k in old and _norm(k, old[k]) != _norm(k, args.get(k))
    ]
    changed = _changed_scenarios(Path(folder) / "transcripts.jsonl", scenario_hashes)
    if changed:
        diffs.append("scenario file(s) changed since: " + ", ".join(changed))
    if not diffs:
        return None
    return f"{Path(folder)} was recorded with " + "; ".join(diffs)
