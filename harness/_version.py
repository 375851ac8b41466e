"""The harness's version: the release number (``__version__``, what the wheel is built as
and what every file on disk records), and with :func:`describe` the git revision of the
checkout the package runs from, when it runs from one (an editable install)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["DISTRIBUTION", "__version__", "describe"]

__version__ = "0.2.0"

#: the name of the distribution on PyPI (the import package and the command are ``harness``)
DISTRIBUTION = "toolcall-harness"


def describe() -> str:
    """``0.2.0``, or ``0.2.0 (git 1a2b3c4+dirty)`` when the package's own folder is in a git
    checkout (not the current folder's: a server's repository says nothing of ours)."""
    here = Path(__file__).resolve().parent
    if not (here.parent / ".git").exists():  # an installed wheel, even inside another repo
        return __version__
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty=+dirty", "--exclude", "*"],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return __version__
    if rev.returncode != 0 or not rev.stdout.strip():
        return __version__
    return f"{__version__} (git {rev.stdout.strip()})"
