"""Options of the pytest plugin: one table, three sources, one resolved settings object.

Every option in :data:`OPTIONS` can be given three ways; the first that is set wins:

1. the command line, e.g. ``--harness-target http://gpu-box:30000``;
2. the environment, ``HARNESS_<NAME>``, e.g. ``HARNESS_TARGET``;
3. the ini file (``pytest.ini``, ``[tool.pytest.ini_options]``, ...), ``harness_<name>``,
   e.g. ``harness_target = http://gpu-box:30000``.

So CI can pin defaults in the ini file, a job can override them through its
environment, and a person at a terminal overrides both on the command line
(the order pytest-django uses for ``--ds``, then ``DJANGO_SETTINGS_MODULE`` in the
environment, then in the ini file).

A value that does not parse (``HARNESS_REPEATS=three``) is a :class:`pytest.UsageError`
naming its source, before any test runs. Which options were given at all (by any of the
three) is kept (:attr:`HarnessSettings.explicit`): with a baseline, the absolute
thresholds (``--min-pass-rate``, ``--min-final-answer-rate``, ``--max-repeated-calls``)
apply only when given (:mod:`harness.pytest_plugin.judge`).

Every flag is under the prefix ``--harness-`` (:data:`PREFIX`), so the plugin, installed
beside another suite, never takes a flag that suite's conftest defines (vLLM's adds
``--model``; argparse refuses a second definition). The options the command line has too
(``--target``, ``--repeats``, ``--concurrency``, ``--request-timeout``, ...) come from
:data:`harness.options.OPTIONS`: the same parser, default and help text as ``harness
run``/``compare``, the flag prefixed (``--harness-target``). Older names still work: the
flags ``--harness-timeout`` and ``--harness-retries`` (not shown in ``pytest --help``), env
``HARNESS_TIMEOUT``/``HARNESS_RETRIES`` and ini ``harness_timeout``/``harness_retries``,
each read after the new name.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pytest

from harness.errors import OptionValueError
from harness.options import OPTIONS as SHARED
from harness.options import Option, boolean, count, positive_int, rate, rounds, text
from harness.stats.sequential import ROUNDS

__all__ = [
    "OPTIONS",
    "PREFIX",
    "HarnessSettings",
    "Option",
    "add_options",
    "resolve_settings",
]

GROUP = "harness"
GROUP_DESCRIPTION = (
    "harness: scenarios as tests against a live OpenAI-compatible server "
    "(each option also reads env HARNESS_<NAME> and ini harness_<name>; CLI > env > ini)"
)

#: the plugin's options: every option of :data:`harness.options.OPTIONS` (the names,
#: parsers, defaults and help texts the command line uses too) and the plugin's own
OPTIONS: tuple[Option, ...] = (
    SHARED["target"],
    SHARED["baseline"],
    SHARED["model"],
    Option("baseline_model", "--baseline-model", text, None,
           "model on the baseline (default --model)", "NAME"),
    SHARED["repeats"],
    SHARED["api_key_env"],
    SHARED["stream"],
    Option("stream_both", "--stream-both", boolean, False,
           "test every scenario streaming and not", switch=True),
    Option("rounds", "--rounds", rounds, ROUNDS,
           f"with --baseline: at most K sequential rounds of --repeats runs per scenario "
           f"and side, stopping as soon as the comparison is clear, as harness compare "
           f"(default {ROUNDS}; 1: one fixed round)", "K"),
    Option("max_repeated_calls", "--max-repeated-calls", count, 0,
           "repeated identical tool calls allowed per run (default 0; with --baseline "
           "only when given)", "N"),
    Option("min_final_answer_rate", "--min-final-answer-rate", rate, 1.0,
           "fraction of runs that must end in an acceptable final answer (default 1.0; "
           "with --baseline only when given)", "RATE"),
    SHARED["min_pass_rate"],
    Option("max_infra_error_rate", "--max-infra-error-rate", rate, 0.2,
           "fraction of runs that may fail for server/network reasons (default 0.2, as "
           "harness compare)", "RATE"),
    Option("batch", "--harness-batch", boolean, True,
           "run all selected scenarios' runs together at the first test (default true)",
           "BOOL"),
    SHARED["concurrency"],
    SHARED["temperature"],
    SHARED["sampling_seed"],
    SHARED["reasoning_history"],
    SHARED["history_fields"],
    SHARED["request_timeout"],
    SHARED["max_retries"],
    SHARED["max_response_bytes"],
    SHARED["results"],
    Option("html", "--harness-html", text, None,
           "HTML report path (default: report.html in the run folder)", "PATH"),
    Option("gsm8k", "--gsm8k", boolean, False,
           "add the GSM8K accuracy test (marker gsm8k)", switch=True),
    Option("gsm8k_questions", "--gsm8k-questions", positive_int, 200,
           "GSM8K questions (default 200)", "N"),
    Option("gsm8k_shots", "--gsm8k-shots", count, 5, "few-shot examples (default 5)", "N"),
    Option("gsm8k_data", "--gsm8k-data", text, None, "GSM8K test.jsonl", "PATH"),
    Option("gsm8k_min_accuracy", "--gsm8k-min-accuracy", rate, None,
           "absolute accuracy floor", "RATE"),
    Option("gsm8k_max_drop", "--gsm8k-max-drop", rate, None,
           "largest accuracy drop allowed against --baseline (default: McNemar verdict only)",
           "RATE"),
    Option("boot", "--boot", boolean, False,
           "add the boot test of the running --target (marker boot)", switch=True),
    Option("boot_log", "--boot-log", text, None, "server log file to scan with --boot", "FILE"),
    Option("boot_cmd", "--boot-cmd", text, None,
           "server launch command: add the boot test (marker boot)", "CMD"),
    SHARED["boot_timeout"],
    Option("logprobs", "--harness-logprobs", boolean, True,
           "with --baseline: also compare both servers' token logprobs on the baseline's "
           "conversations (numerics section; default true)", "BOOL"),
    Option("boot_probe", "--boot-probe", boolean, False,
           "also probe routed-experts capture in the boot test", switch=True),
)  # fmt: skip

#: what the plugin's command line says beyond the shared help text
_NOTES = {
    "stream": "; --stream alone is on, --stream=both as on the command line",
    "repeats": "; with --baseline: runs per round per scenario and side (default 5, as "
    "harness compare)",
    "min_pass_rate": "; with --baseline only when given (a scenario test then fails when "
    "the comparison finds it worse)",
    "baseline": "; a scenario test then fails when the comparison finds it worse",
}

#: the prefix of every flag of the plugin: a plugin installed beside another suite must not
#: take a flag its conftest defines (``--model``, ``--target``: argparse refuses the second)
PREFIX = "--harness-"

_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)(?![\w-])")


def _prefixed(flag: str) -> str:
    """``--target`` -> ``--harness-target``; a flag already under the prefix is kept."""
    return flag if flag.startswith(PREFIX) else PREFIX + flag[2:]


def _plugin_text(text: str, flags: set[str]) -> str:
    """Help text with the plugin's own flags spelt with the prefix (``with --baseline`` ->
    ``with --harness-baseline``)."""
    return _FLAG.sub(lambda m: _prefixed(m.group(0)) if m.group(0) in flags else m.group(0), text)


_BARE = {opt.flag for opt in OPTIONS}
OPTIONS = tuple(
    replace(
        opt,
        flag=_prefixed(opt.flag),
        help=_plugin_text(opt.help, _BARE),
        plugin_aliases=tuple(a for a in opt.plugin_aliases if a != _prefixed(opt.flag)),
    )
    for opt in OPTIONS
)
_NOTES = {k: _plugin_text(v, _BARE) for k, v in _NOTES.items()}
_SPECS = {opt.name: opt for opt in OPTIONS}


@dataclass
class HarnessSettings:
    """The plugin's settings after precedence (CLI > env > ini > default).

    Rates are fractions in [0, 1]; times are seconds. ``None`` means unset:
    ``repeats=None`` uses each scenario's own ``repeats``; ``target=None`` skips
    every harness test.
    """

    target: str | None = None
    baseline: str | None = None
    model: str | None = None
    baseline_model: str | None = None
    repeats: int | None = None
    rounds: int = ROUNDS
    api_key_env: str = "OPENAI_API_KEY"
    stream: str = "off"  # "off" | "on" | "both"
    stream_both: bool = False
    max_repeated_calls: int = 0
    min_final_answer_rate: float = 1.0
    min_pass_rate: float = 1.0
    max_infra_error_rate: float = 0.2
    batch: bool = True
    concurrency: int = 8
    temperature: float = 0.7
    sampling_seed: int = 0
    reasoning_history: str | None = None
    history_fields: str = "as-received"
    request_timeout: float = 120.0
    max_retries: int = 3
    max_response_bytes: int = SHARED["max_response_bytes"].default
    results: str | None = None
    html: str | None = None
    logprobs: bool = True
    gsm8k: bool = False
    gsm8k_questions: int = 200
    gsm8k_shots: int = 5
    gsm8k_data: str | None = None
    gsm8k_min_accuracy: float | None = None
    gsm8k_max_drop: float | None = None
    boot: bool = False
    boot_log: str | None = None
    boot_cmd: str | None = None
    boot_timeout: float = 1800.0
    boot_probe: bool = False
    scenario_paths: list[Path] = field(default_factory=list)  # ini harness_scenarios
    #: the options given on the command line, in the environment or the ini file (the
    #: others are at their defaults)
    explicit: frozenset[str] = frozenset()

    @property
    def stream_modes(self) -> list[bool]:
        """The stream modes to test each scenario in (``[False]``, ``[True]`` or both)."""
        return {"off": [False], "on": [True], "both": [False, True]}[self.stream_mode]

    @property
    def stream_mode(self) -> str:
        """``off``, ``on`` or ``both``, as ``harness compare``/``record`` write it."""
        return "both" if self.stream_both else self.stream

    def applies(self, name: str) -> bool:
        """Whether the absolute threshold ``name`` (``min_pass_rate``,
        ``min_final_answer_rate``, ``max_repeated_calls``) judges the tests: always
        without a baseline; with one, only when it was given."""
        return not self.baseline or name in self.explicit

    def public(self) -> dict[str, Any]:
        """The settings as plain JSON values (for ``manifest.json``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["scenario_paths"] = [str(p) for p in self.scenario_paths]
        out["explicit"] = sorted(self.explicit)
        return out


def add_options(parser: pytest.Parser) -> None:
    """Register the ``harness`` option group and the ini keys (``pytest_addoption``).

    An option's older flags (``--harness-retries``) are accepted but left out of
    ``pytest --help``; its older ini keys are registered as "old name of ...".
    """
    group = parser.getgroup(GROUP, GROUP_DESCRIPTION)
    for opt in OPTIONS:
        help_text = f"{opt.help}{_NOTES.get(opt.name, '')} [env {opt.env}, ini {opt.ini}]"
        kwargs = _shape(opt)
        group.addoption(opt.flag, dest=_dest(opt), default=None, help=help_text, **kwargs)
        for old in opt.plugin_aliases:
            group.addoption(old, dest=_dest(opt), default=None, help=argparse.SUPPRESS, **kwargs)
        parser.addini(opt.ini, opt.help, type="string", default="")
        for old in opt.old_names:
            parser.addini("harness_" + old, f"old name of {opt.ini}", type="string", default="")
    parser.addini(
        "harness_scenarios",
        "extra directories (or files) whose *.yaml/*.yml/*.json are harness scenarios",
        type="paths",
        default=[],
    )


def _shape(opt: Option) -> dict[str, Any]:
    """A switch stores ``opt.switch`` (env/ini take a value); a switch whose value has a
    parser (``--stream``, ``--stream=both``) takes an optional value, as on the command
    line; any other flag takes text."""
    if opt.switch is not None and opt.parse is boolean:
        return {"action": "store_const", "const": opt.switch}
    if opt.switch is not None:
        return {"action": "store", "nargs": "?", "const": opt.switch, "metavar": "MODE"}
    return {"action": "store", "metavar": opt.metavar or opt.name.upper()}


def _dest(opt: Option) -> str:
    return "harness_opt_" + opt.name


def _value(config: pytest.Config, opt: Option) -> Any:
    """The first set value of ``opt`` in CLI, env, ini order (``None`` if unset).

    Env and ini are read under the option's name, then under its ``old_names``.
    """
    cli = config.getoption(_dest(opt), None)
    if cli is not None and opt.switch is not None and not isinstance(cli, str):
        return cli
    if cli is not None and opt.switch is not None and _path_after_switch(config, cli):
        return opt.switch  # `--stream scenarios/`: the path is a place to collect from
    if cli is not None:
        return _parse(opt, str(cli), opt.flag)
    for env in [opt.env, *("HARNESS_" + old.upper() for old in opt.old_names)]:
        value = os.environ.get(env)
        if value is not None and value.strip() != "":
            return _parse(opt, value, f"environment variable {env}")
    for ini in [opt.ini, *("harness_" + old for old in opt.old_names)]:
        value = str(config.getini(ini) or "")
        if value.strip():
            return _parse(opt, value, f"ini option {ini}")
    return None


def _path_after_switch(config: pytest.Config, value: str) -> bool:
    """A bare switch followed by a path (``--stream scenarios/``) took the path as its
    value: give the path back to the paths pytest collects from, as the CLI does."""
    if value.strip().lower() in ("on", "off", "both", "true", "false", "yes", "no", "1", "0"):
        return False
    if not Path(value).exists():
        return False
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(value)
    else:  # no path was left on the command line: pytest fell back to testpaths or "."
        config.args[:] = [value]
    return True


def _parse(opt: Option, text: str, source: str) -> Any:
    try:
        return opt.parse(text)
    except OptionValueError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def resolve_settings(config: pytest.Config) -> HarnessSettings:
    """Apply CLI > env > ini > default to every option.

    Raises:
        pytest.UsageError: a value that does not parse, naming where it came from.
    """
    settings = HarnessSettings()
    given = set()
    for opt in OPTIONS:
        value = _value(config, opt)
        if value is not None:
            setattr(settings, opt.name, value)
            given.add(opt.name)
    settings.explicit = frozenset(given)
    settings.scenario_paths = [Path(p) for p in config.getini("harness_scenarios")]
    return settings


def spec(name: str) -> Option:
    """The :class:`harness.options.Option` called ``name`` (``KeyError`` if none)."""
    return _SPECS[name]
