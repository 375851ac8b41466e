"""The harness's version: its release and, run from a git checkout, the commit.

:data:`RELEASE` is the release number (what ``pyproject.toml`` builds the package as, the
distribution :data:`DISTRIBUTION` on PyPI; the import package and the command are
``harness``). :data:`__version__` is what every file the harness writes records
(manifests, summaries, recordings: :func:`harness.recording.version_problem` reads it
back): the release with a PEP 440 local part naming the commit when the package runs from
a git checkout (``0.2.0+g510438a``; ``.dirty`` with uncommitted changes to tracked
files), else the installed package's own version (its metadata), else the release.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["DISTRIBUTION", "RELEASE", "__version__", "describe"]

RELEASE = "0.2.0"

#: the name of the distribution on PyPI (the import package and the command are ``harness``)
DISTRIBUTION = "toolcall-harness"


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

        return version(DISTRIBUTION)
    except (ImportError, PackageNotFoundError):
        return RELEASE


__version__ = _version()


def describe() -> str:
    """What ``harness --version`` prints: :data:`__version__` (``0.2.0``, or
    ``0.2.0+g1a2b3c4`` from a git checkout of the harness itself, not of the current
    folder: a server's repository says nothing of ours)."""
    return __version__
