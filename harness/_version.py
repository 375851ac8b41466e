"""The harness's version: its release and, run from a git checkout, the commit.

:data:`RELEASE` is the release number (what ``pyproject.toml`` builds the package as).
:data:`__version__` is what every file the harness writes records (manifests, summaries,
recordings: :func:`harness.recording.version_problem` reads it back): the release with a
PEP 440 local part naming the commit when the package runs from a git checkout
(``0.1.0+g510438a``; ``.dirty`` with uncommitted changes to tracked files), else the
installed package's own version (its metadata), else the release.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["RELEASE", "__version__"]

RELEASE = "0.1.0"


def _git(*args: str) -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), *args], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version() -> str:
    top = _git("rev-parse", "--show-toplevel")
    if top and (Path(top) / "harness" / "_version.py").resolve() == Path(__file__).resolve():
        rev = _git("rev-parse", "--short", "HEAD")
        if rev:
            dirty = _git("status", "--porcelain", "--untracked-files=no")
            return f"{RELEASE}+g{rev}" + (".dirty" if dirty else "")
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("harness")
    except (ImportError, PackageNotFoundError):
        return RELEASE


__version__ = _version()
