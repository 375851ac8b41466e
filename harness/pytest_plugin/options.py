"""Options of the pytest plugin: one table, three sources, one resolved settings object.

Every option in :data:`OPTIONS` can be given three ways; the first that is set wins:

1. the command line, e.g. ``--target http://gpu-box:30000``;
2. the environment, ``HARNESS_<NAME>``, e.g. ``HARNESS_TARGET``;
3. the ini file (``pytest.ini``, ``[tool.pytest.ini_options]``, ...), ``harness_<name>``,
   e.g. ``harness_target = http://gpu-box:30000``.

So CI can pin defaults in the ini file, a job can override them through its
environment, and a person at a terminal overrides both on the command line
(the order pytest-django uses for ``--ds``, then ``DJANGO_SETTINGS_MODULE`` in the
environment, then in the ini file).

A value that does not parse (``HARNESS_REPEATS=three``) is a :class:`pytest.UsageError`
naming its source, before any test runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "OPTIONS",
    "HarnessSettings",
    "OptionSpec",
    "add_options",
    "resolve_settings",
]

GROUP = "harness"
GROUP_DESCRIPTION = (
    "harness: scenarios as tests against a live OpenAI-compatible server "
    "(each option also reads env HARNESS_<NAME> and ini harness_<name>; CLI > env > ini)"
)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (use true/false)")


def _stream(text: str) -> str:
    low = text.strip().lower()
    if low in ("both",):
        return "both"
    return "on" if _bool(low) else "off"


def _number(text: str, kind: type[float] | type[int], low: float, what: str) -> Any:
    try:
        value = kind(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not {what}") from None
    if value < low:
        raise ValueError(f"{text!r} is not {what}")
    return value


def _rate(text: str) -> float:
    value: float = _number(text, float, 0.0, "a rate between 0 and 1")
    if value > 1.0:
        raise ValueError(f"{text!r} is not a rate between 0 and 1")
    return value


def _count(text: str) -> int:
    value: int = _number(text, int, 0, "a whole number >= 0")
    return value


def _positive(text: str) -> int:
    value: int = _number(text, int, 1, "a whole number >= 1")
    return value


def _seconds(text: str) -> float:
    value: float = _number(text, float, 0.0, "a number of seconds >= 0")
    return value


def _str(text: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class OptionSpec:
    """One option: ``--flag``, env ``HARNESS_<NAME>``, ini ``harness_<name>``.

    ``name`` is the attribute of :class:`HarnessSettings`; ``parse`` turns the text of
    any source into the value (raising ``ValueError`` on bad text).
    """

    name: str
    flag: str
    parse: Callable[[str], Any]
    help: str
    metavar: str | None = None
    is_flag: bool = False  # a command-line switch (store_true); env/ini take true/false

    @property
    def env(self) -> str:
        return "HARNESS_" + self.name.upper()

    @property
    def ini(self) -> str:
        return "harness_" + self.name

    @property
    def dest(self) -> str:
        return "harness_opt_" + self.name


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("target", "--target", _str, "URL of the server under test", "URL"),
    OptionSpec(
        "baseline", "--baseline", _str, "URL of a baseline server: also assert no regression", "URL"
    ),
    OptionSpec(
        "model", "--model", _str, "model request field (default: first of /v1/models)", "NAME"
    ),
    OptionSpec(
        "baseline_model",
        "--baseline-model",
        _str,
        "model on the baseline (default --model)",
        "NAME",
    ),
    OptionSpec(
        "repeats", "--repeats", _positive, "runs per scenario (default: the scenario's)", "N"
    ),
    OptionSpec("api_key_env", "--api-key-env", _str, "env variable holding the API key", "NAME"),
    OptionSpec(
        "stream", "--stream", _stream, "stream responses (env/ini: on, off or both)", is_flag=True
    ),
    OptionSpec(
        "stream_both", "--stream-both", _bool, "test every scenario streaming and not", is_flag=True
    ),
    OptionSpec(
        "max_repeated_calls",
        "--max-repeated-calls",
        _count,
        "repeated identical tool calls allowed per run (default 0)",
        "N",
    ),
    OptionSpec(
        "min_final_answer_rate",
        "--min-final-answer-rate",
        _rate,
        "fraction of runs that must end in an acceptable final answer (default 1.0)",
        "RATE",
    ),
    OptionSpec(
        "min_pass_rate",
        "--min-pass-rate",
        _rate,
        "fraction of runs that must pass every check of the scenario (default 1.0)",
        "RATE",
    ),
    OptionSpec(
        "max_infra_error_rate",
        "--max-infra-error-rate",
        _rate,
        "fraction of runs that may fail for server/network reasons (default 0.2, as harness compare)",
        "RATE",
    ),
    OptionSpec(
        "batch",
        "--harness-batch",
        _bool,
        "run all selected scenarios' runs together at the first test (default true)",
        "BOOL",
    ),
    OptionSpec(
        "concurrency", "--harness-concurrency", _positive, "runs in flight (default 8)", "N"
    ),
    OptionSpec(
        "timeout", "--harness-timeout", _seconds, "per-request timeout, s (default 120)", "S"
    ),
    OptionSpec(
        "retries",
        "--harness-retries",
        _count,
        "retries of a transient server error (default 3)",
        "N",
    ),
    OptionSpec("results", "--harness-results", _str, "results root (default results/)", "DIR"),
    OptionSpec(
        "html",
        "--harness-html",
        _str,
        "HTML report path (default: report.html in the run folder)",
        "PATH",
    ),
    OptionSpec(
        "gsm8k", "--gsm8k", _bool, "add the GSM8K accuracy test (marker gsm8k)", is_flag=True
    ),
    OptionSpec(
        "gsm8k_questions", "--gsm8k-questions", _positive, "GSM8K questions (default 200)", "N"
    ),
    OptionSpec("gsm8k_shots", "--gsm8k-shots", _count, "few-shot examples (default 5)", "N"),
    OptionSpec("gsm8k_data", "--gsm8k-data", _str, "GSM8K test.jsonl", "PATH"),
    OptionSpec(
        "gsm8k_min_accuracy", "--gsm8k-min-accuracy", _rate, "absolute accuracy floor", "RATE"
    ),
    OptionSpec(
        "gsm8k_max_drop",
        "--gsm8k-max-drop",
        _rate,
        "largest accuracy drop allowed against --baseline (default: McNemar verdict only)",
        "RATE",
    ),
    OptionSpec(
        "boot",
        "--boot",
        _bool,
        "add the boot test of the running --target (marker boot)",
        is_flag=True,
    ),
    OptionSpec("boot_log", "--boot-log", _str, "server log file to scan with --boot", "FILE"),
    OptionSpec(
        "boot_cmd",
        "--boot-cmd",
        _str,
        "server launch command: add the boot test (marker boot)",
        "CMD",
    ),
    OptionSpec(
        "boot_timeout", "--boot-timeout", _seconds, "boot wait limit, s (default 1800)", "S"
    ),
    OptionSpec(
        "boot_probe",
        "--boot-probe",
        _bool,
        "also probe routed-experts capture in the boot test",
        is_flag=True,
    ),
)

_SPECS = {spec.name: spec for spec in OPTIONS}


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
    api_key_env: str = "OPENAI_API_KEY"
    stream: str = "off"  # "off" | "on" | "both"
    stream_both: bool = False
    max_repeated_calls: int = 0
    min_final_answer_rate: float = 1.0
    min_pass_rate: float = 1.0
    max_infra_error_rate: float = 0.2
    batch: bool = True
    concurrency: int = 8
    timeout: float = 120.0
    retries: int = 3
    results: str | None = None
    html: str | None = None
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

    @property
    def stream_modes(self) -> list[bool]:
        """The stream modes to test each scenario in (``[False]``, ``[True]`` or both)."""
        mode = "both" if self.stream_both else self.stream
        return {"off": [False], "on": [True], "both": [False, True]}[mode]

    def public(self) -> dict[str, Any]:
        """The settings as plain JSON values (for ``manifest.json``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["scenario_paths"] = [str(p) for p in self.scenario_paths]
        return out


def add_options(parser: pytest.Parser) -> None:
    """Register the ``harness`` option group and the ini keys (``pytest_addoption``)."""
    group = parser.getgroup(GROUP, GROUP_DESCRIPTION)
    for spec in OPTIONS:
        suffix = f" [env {spec.env}, ini {spec.ini}]"
        if spec.is_flag:
            const = "on" if spec.name == "stream" else True
            group.addoption(
                spec.flag,
                action="store_const",
                const=const,
                dest=spec.dest,
                default=None,
                help=spec.help + suffix,
            )
        else:
            group.addoption(
                spec.flag,
                action="store",
                dest=spec.dest,
                default=None,
                metavar=spec.metavar or spec.name.upper(),
                help=spec.help + suffix,
            )
        parser.addini(spec.ini, spec.help, type="string", default="")
    parser.addini(
        "harness_scenarios",
        "extra directories (or files) whose *.yaml/*.yml/*.json are harness scenarios",
        type="paths",
        default=[],
    )


def _value(config: pytest.Config, spec: OptionSpec) -> Any:
    """The first set value of ``spec`` in CLI, env, ini order (``None`` if unset)."""
    cli = config.getoption(spec.dest, None)
    if cli is not None:
        return cli if spec.is_flag else _parse(spec, str(cli), spec.flag)
    env = os.environ.get(spec.env)
    if env is not None and env.strip() != "":
        return _parse(spec, env, f"environment variable {spec.env}")
    ini = str(config.getini(spec.ini) or "")
    if ini.strip():
        return _parse(spec, ini, f"ini option {spec.ini}")
    return None


def _parse(spec: OptionSpec, text: str, source: str) -> Any:
    try:
        return spec.parse(text)
    except ValueError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


def resolve_settings(config: pytest.Config) -> HarnessSettings:
    """Apply CLI > env > ini > default to every option.

    Raises:
        pytest.UsageError: a value that does not parse, naming where it came from.
    """
    settings = HarnessSettings()
    for spec in OPTIONS:
        value = _value(config, spec)
        if value is not None:
            setattr(settings, spec.name, value)
    settings.scenario_paths = [Path(p) for p in config.getini("harness_scenarios")]
    return settings


def spec(name: str) -> OptionSpec:
    """The :class:`OptionSpec` called ``name`` (``KeyError`` if none)."""
    return _SPECS[name]
