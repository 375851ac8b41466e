"""Run folders under ``results/``: ids, creation and the manifest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness._version import __version__
from harness.transcript import RunManifest, TargetInfo

__all__ = ["DEFAULT_RESULTS", "git_revision", "new_run_id", "prepare_run_dir", "redact"]

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
            command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if command else command,
            harness_version=__version__,
            git_revision=git_revision(),
            targets=targets or [],
            args=redact(args or {}),
            extra=extra or {},
        )
        manifest_path.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    return folder
