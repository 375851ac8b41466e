"""Which files are scenarios, and whether the plugin collects them at all.

The plugin is inert unless asked: a pytest session in an environment where the package
is installed (another project's suite, the server's own tests) collects no scenario file
and adds no test, unless a target is set (``--harness-target``, env ``HARNESS_TARGET`` or
ini ``harness_target``; :func:`enabled`). This module imports nothing heavy, so a session
that never asks pays for none of the harness.

Once enabled, a ``.yaml``, ``.yml`` or ``.json`` file is a scenario (:func:`is_scenario_file`)
when it

- has a directory named ``scenarios`` among its parents (inside the rootdir), e.g.
  ``scenarios/entropy.yaml`` or ``lab/scenarios/long/x.yaml``; or
- lies under a path of the ini option ``harness_scenarios`` (default places for
  scenario files, e.g. ``harness_scenarios = scenarios/imported lab/cases``; with no such
  option, no ``testpaths`` and no folder ``scenarios`` in the project, a bare ``pytest``
  walks the shipped library, :data:`harness.scenario.library.LIBRARY`); or
- was named on the command line (``pytest my_case.yaml``), or lies under a directory
  named there (``pytest tmp/imported --harness-target URL``; not the rootdir of a project
  with an ini file, and not the ``testpaths`` a bare ``pytest`` walks).

So a repository's other YAML (``.github/``, ``e2e/``, ``docker-compose.yml``) is never
collected by accident, and pytest's own ``norecursedirs``/``--ignore`` apply as usual.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.pytest_plugin.session import state_key
from harness.scenario.library import LIBRARY

__all__ = ["SUFFIXES", "add_default_places", "enabled", "is_scenario_file", "named"]

#: the suffixes of scenario files (as :data:`harness.scenario.model.SCENARIO_SUFFIXES`)
SUFFIXES = (".yaml", ".yml", ".json")


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _named_dirs(config: pytest.Config) -> list[Path]:
    """Directories named on the command line (not ``testpaths``, nor a project's rootdir:
    the folder of its ini file, whose own YAML is the project's, not scenarios)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return []
    base = config.invocation_params.dir
    root = config.rootpath.resolve() if config.inipath is not None else None
    out = []
    for arg in config.args:
        p = (base / arg.split("::")[0]).resolve()
        if p.is_dir() and p != root:
            out.append(p)
    return out


def enabled(config: pytest.Config) -> bool:
    """Whether the session asked for scenario tests: a target is set (flag, env or ini)."""
    state = config.stash.get(state_key(), None)
    return state is not None and bool(state.settings.target)


def add_default_places(config: pytest.Config) -> None:
    """A bare ``pytest`` (no paths given) with a target also walks the ``harness_scenarios``
    paths that lie outside what it walks already (``testpaths`` or the current directory)."""
    state = config.stash.get(state_key(), None)
    if config.args_source == pytest.Config.ArgsSource.ARGS or not enabled(config):
        return
    assert state is not None
    base = config.invocation_params.dir
    walked = [(base / a).resolve() for a in config.args]
    bare = config.args_source == pytest.Config.ArgsSource.INVOCATION_DIR  # no testpaths
    if bare and not state.settings.scenario_paths and not _has_scenarios(config):
        state.settings.scenario_paths = [LIBRARY]  # an install outside a clone: the library
    for place in state.settings.scenario_paths:
        p = (config.rootpath / place).resolve()
        if p.exists() and not any(_under(p, w) for w in walked):
            config.args.append(str(p))


def _has_scenarios(config: pytest.Config) -> bool:
    """Whether the project has a folder named ``scenarios`` of its own (at its rootdir or
    where pytest was started)."""
    return any((d / "scenarios").is_dir() for d in (config.rootpath, config.invocation_params.dir))


def named(file_path: Path, parent: pytest.Collector) -> bool:
    """Whether the file was asked for by name: given on the command line, under a folder
    given there, or under a ``harness_scenarios`` path."""
    if parent.session.isinitpath(file_path):
        return True
    if any(_under(file_path, d) for d in _named_dirs(parent.config)):
        return True
    state = parent.config.stash.get(state_key(), None)
    extra = state.settings.scenario_paths if state is not None else []
    return any(_under(file_path, p) for p in extra)


def is_scenario_file(file_path: Path, parent: pytest.Collector) -> bool:
    """The collection rule of the module docstring (whether or not the plugin is enabled)."""
    if file_path.suffix not in SUFFIXES:
        return False
    if named(file_path, parent):
        return True
    root = parent.config.rootpath
    rel = file_path.relative_to(root) if _under(file_path, root) else file_path
    return "scenarios" in rel.parent.parts
