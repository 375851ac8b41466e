"""The shipped scenario library, and where a command looks for scenarios by default.

The library is package data (``harness/library/``: in a clone, the repository's
``scenarios/``), so an installed wheel has it too. Every command that takes scenario
paths, the reference server and the pytest plugin default to ``./scenarios`` when the
current folder has one (a clone, or your own set) and to the library otherwise.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LIBRARY", "default_scenarios"]

#: the shipped scenario files (``*.yaml``), inside the installed package
LIBRARY = Path(__file__).resolve().parents[1] / "library"


def default_scenarios() -> str:
    """``scenarios`` when the current folder has one, else the shipped library's folder
    (``scenarios`` again when the package has none: the loader's error then names it)."""
    if Path("scenarios").is_dir() or not LIBRARY.is_dir():
        return "scenarios"
    return str(LIBRARY)
