"""One option table for the command line and the pytest plugin (``harness.options``).

The flags, defaults and help texts are read back from the parsers themselves: every
``harness`` sub-command's argparse parser, and the pytest plugin through
``pytester.parseconfig`` and ``pytest --help``. Old names (``--timeout``,
``--harness-retries``, env ``HARNESS_RETRIES``, ...) stay accepted; bad values are one
line and exit 2 (CLI) or a ``pytest.UsageError`` (plugin).
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from typing import Any

import pytest

from harness.cli import COMMANDS, _parser, main
from harness.errors import OptionValueError
from harness.options import (
    OPTIONS,
    count,
    http_url,
    positive_int,
    rate,
    repeats,
    seconds,
    stream_mode,
    temperature,
)
from harness.pytest_plugin import options as plugin_options
from harness.pytest_plugin.options import HarnessSettings, resolve_settings

pytest_plugins = ["pytester"]

for _module in COMMANDS.values():  # imported before pytester snapshots sys.modules (numpy)
    importlib.import_module(_module)

#: (command, option) where the command means something else, and why
CLI_OVERRIDES = {
    ("compare", "repeats"): "an A/B test needs several runs per side: default 5",
    ("compare", "baseline"): "help names the unfused build beside --candidate",
    ("gsm8k", "baseline"): "help says it turns on the paired comparison",
    ("gsm8k", "request_timeout"): "a 512-token answer: default 300 s",
    ("matrix", "repeats"): "help names the matrix file's repeats",
    ("boot", "target"): "help says the server is already running",
    ("run", "results"): "the same root, given as a path",
    ("run", "stream"): "no type: a value after a bare --stream may be a scenario path",
    ("compare", "stream"): "as run",
    ("record", "target"): "help says the server is recorded, already running",
    ("record", "repeats"): "per round, compare's default 5",
    ("logprobs", "baseline"): "as compare",
}

#: a valid text for every shared option, and the value it parses to
SAMPLES: dict[str, tuple[str, Any]] = {
    "target": ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
    "baseline": ("https://gpu-box:30000", "https://gpu-box:30000"),
    "model": ("m1", "m1"),
    "reasoning_history": ("Keep", "keep"),
    "history_fields": ("Known", "known"),
    "repeats": ("4", 4),
    "api_key_env": ("MY_KEY", "MY_KEY"),
    "concurrency": ("3", 3),
    "request_timeout": ("7.5", 7.5),
    "max_retries": ("0", 0),
    "max_response_bytes": ("1000", 1000),
    "results": ("out", "out"),
    "min_pass_rate": ("0.25", 0.25),
    "boot_timeout": ("60", 60.0),
    "temperature": ("0.3", 0.3),
    "sampling_seed": ("11", 11),
}


def _cli_actions() -> list[tuple[str, argparse.Action]]:
    """(command, action) for every option of every ``harness`` sub-command."""
    parser, _ = _parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [
        (name, action)
        for name, command in sub.choices.items()
        for action in command._actions
        if action.option_strings
    ]


def _cli_value(command: str, *argv: str) -> argparse.Namespace:
    required = {"run": ["--target", "http://x:1"], "gsm8k": ["--target", "http://x:1"]}
    required["boot"] = ["--cmd", "server"]
    required["matrix"] = ["m.yaml"]
    parser, _ = _parser(command)
    return parser.parse_args([command, *required.get(command, []), *argv])


# ---------------------------------------------------------------- one table, both sides


def test_every_shared_option_has_the_same_flag_in_the_cli_and_the_plugin(
    pytester: pytest.Pytester,
) -> None:
    in_cli: set[str] = set()
    flags = {opt.flag: opt for opt in OPTIONS.values()}
    for command, action in _cli_actions():
        for flag in set(action.option_strings) & set(flags):  # always the shared setting
            assert action.dest == flags[flag].name, (command, flag)
        opt = OPTIONS.get(action.dest)
        if opt is None:
            continue
        in_cli.add(opt.name)
        if action.help == argparse.SUPPRESS:
            assert set(action.option_strings) <= set(opt.cli_aliases), (command, action)
        else:
            assert action.option_strings == [opt.flag], (command, action.option_strings)
    assert in_cli == set(OPTIONS), "every shared option is used by some command"
    plugin = {opt.name: opt for opt in plugin_options.OPTIONS}
    help_text = pytester.runpytest("--help").stdout.str()
    for opt in OPTIONS.values():
        ours = plugin[opt.name]  # the same setting, its flag under the plugin's prefix
        assert ours.flag == "--harness-" + opt.flag.removeprefix("--harness-").lstrip("-")
        assert (ours.parse, ours.default, ours.switch) == (opt.parse, opt.default, opt.switch)
        shown = f"  {ours.flag}" if opt.switch is not None else f"  {ours.flag}={opt.metavar}"
        assert shown in help_text, shown
        text, value = SAMPLES.get(opt.name, ("", opt.switch))
        config = pytester.parseconfig(ours.flag, *([text] if text else []))
        assert getattr(resolve_settings(config), opt.name) == value, ours.flag


def test_defaults_and_help_texts_agree(pytester: pytest.Pytester) -> None:
    for command, action in _cli_actions():
        opt = OPTIONS.get(action.dest)
        if opt is None or action.help == argparse.SUPPRESS:
            continue
        if (command, opt.name) not in CLI_OVERRIDES:
            assert (action.default, action.help) == (opt.default, opt.help), (command, opt.name)
    settings = HarnessSettings()
    for opt in plugin_options.OPTIONS:
        assert getattr(settings, opt.name) == opt.default, opt.name
    help_text = " ".join(pytester.runpytest("--help").stdout.str().split())
    for opt in plugin_options.OPTIONS:
        assert opt.help in help_text, opt.name
    assert (OPTIONS["concurrency"].default, OPTIONS["request_timeout"].default) == (8, 120.0)
    assert (OPTIONS["max_retries"].default, OPTIONS["min_pass_rate"].default) == (3, 1.0)


def test_no_plugin_flag_collides_with_pytest_or_its_plugins(pytester: pytest.Pytester) -> None:
    """pytest-timeout owns ``--timeout``: the plugin says ``--request-timeout``."""
    others = pytester.runpytest("-p", "no:harness", "--help").stdout.str()
    theirs = set(re.findall(r"(?m)^\s+(?:-\w, )?(--[\w-]+)", others))
    assert "--timeout" in theirs  # pytest-timeout is installed (a dev dependency)
    ours = {f for opt in plugin_options.OPTIONS for f in (opt.flag, *opt.plugin_aliases)}
    assert not ours & theirs
    assert "--timeout" not in ours


# ---------------------------------------------------------------- old names


@pytest.mark.parametrize("command", ["run", "compare", "gsm8k"])
def test_cli_timeout_is_an_alias_of_request_timeout(command: str) -> None:
    assert _cli_value(command, "--timeout", "7").request_timeout == 7.0
    assert _cli_value(command, "--request-timeout", "9").request_timeout == 9.0
    parser, _ = _parser(command)
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    help_text = sub.choices[command].format_help()
    assert "--request-timeout" in help_text and "--timeout" not in help_text


def test_boot_timeout_keeps_timeout_as_an_alias() -> None:
    assert _cli_value("boot", "--timeout", "5").boot_timeout == 5.0
    assert _cli_value("boot", "--boot-timeout", "6").boot_timeout == 6.0
    assert _cli_value("boot").boot_timeout == 1800.0
    assert not hasattr(_cli_value("boot"), "request_timeout")


@pytest.mark.parametrize(
    ("old", "name", "text", "value"),
    [
        ("--harness-retries", "max_retries", "0", 0),
        ("--harness-timeout", "request_timeout", "7", 7.0),
    ],
)
def test_old_plugin_flags_still_work_and_are_not_in_the_help(
    pytester: pytest.Pytester, old: str, name: str, text: str, value: Any
) -> None:
    assert getattr(resolve_settings(pytester.parseconfig(old, text)), name) == value
    assert old not in pytester.runpytest("--help").stdout.str()


def test_old_env_and_ini_names_are_read_after_the_new_ones(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nharness_timeout = 30\nharness_retries = 5\n")
    s = resolve_settings(pytester.parseconfig())
    assert (s.request_timeout, s.max_retries) == (30.0, 5)
    monkeypatch.setenv("HARNESS_RETRIES", "1")
    assert resolve_settings(pytester.parseconfig()).max_retries == 1  # env before ini
    pytester.makeini("[pytest]\nharness_timeout = 30\nharness_request_timeout = 45\n")
    monkeypatch.setenv("HARNESS_MAX_RETRIES", "2")
    s = resolve_settings(pytester.parseconfig())
    assert (s.request_timeout, s.max_retries) == (45.0, 2)  # the new name wins


# ---------------------------------------------------------------- the new env and ini names


SHOW = (
    "def test_show(harness_settings):\n"
    "    s = harness_settings\n"
    "    print('SETTINGS', s.max_retries, s.request_timeout, s.concurrency, s.results)\n"
)


def test_plugin_reads_the_new_env_names(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_show=SHOW)
    monkeypatch.setenv("HARNESS_MAX_RETRIES", "0")
    monkeypatch.setenv("HARNESS_REQUEST_TIMEOUT", "12.5")
    monkeypatch.setenv("HARNESS_CONCURRENCY", "2")
    monkeypatch.setenv("HARNESS_RESULTS", "env-out")
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*SETTINGS 0 12.5 2 env-out*"])
    result.assert_outcomes(passed=1)


def test_plugin_reads_the_new_ini_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_show=SHOW)
    pytester.makeini(
        "[pytest]\nharness_max_retries = 1\nharness_request_timeout = 30\n"
        "harness_concurrency = 4\nharness_results = ini-out\n"
    )
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*SETTINGS 1 30.0 4 ini-out*"])
    result = pytester.runpytest(
        "-s", "--harness-max-retries", "2", "--harness-request-timeout", "5"
    )
    result.stdout.fnmatch_lines(["*SETTINGS 2 5.0 4 ini-out*"])  # the flag wins


# ---------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["run", "--target", "http://x:1", "--request-timeout", "0"],
         "harness run: error: argument --request-timeout: '0' is not a number of seconds > 0"),
        (["run", "--target", "http://x:1", "--timeout", "inf"],
         "harness run: error: argument --timeout: 'inf' is not a number of seconds > 0"),
        (["compare", "--max-retries", "-1"],
         "harness compare: error: argument --max-retries: '-1' is not a whole number >= 0"),
        (["compare", "--concurrency", "0"],
         "harness compare: error: argument --concurrency: '0' is not a whole number >= 1"),
        (["run", "--target", "http://x:1", "--min-pass-rate", "nan"],
         "harness run: error: argument --min-pass-rate: 'nan' is not a rate between 0 and 1"),
        (["gsm8k", "--target", "http://x:1", "--request-timeout", "-5"],
         "harness gsm8k: error: argument --request-timeout: '-5' is not a number of seconds > 0"),
        (["boot", "--cmd", "x", "--boot-timeout", "0"],
         "harness boot: error: argument --boot-timeout: '0' is not a number of seconds > 0"),
        (["matrix", "m.yaml", "--repeats", "two"],
         "harness matrix: error: argument --repeats: 'two' is not a whole number >= 1"),
        (["run", "--target", "http://x:1", "--repeats", "1000000000"],
         "harness run: error: argument --repeats: '1000000000' is more than 1000 repeats "
         "(the cap of a scenario's repeats); give 1 to 1000"),
        (["compare", "--repeats", "1001"],
         "harness compare: error: argument --repeats: '1001' is more than 1000 repeats "
         "(the cap of a scenario's repeats); give 1 to 1000"),
    ],
)  # fmt: skip
def test_a_bad_cli_value_is_one_line_and_exit_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == line
    assert [x for x in err.splitlines() if ": error: " in x] == [line]  # the rest is usage


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--harness-request-timeout", "0"],
            "--harness-request-timeout: '0' is not a number of seconds > 0",
        ),
        (
            ["--harness-retries", "-1"],
            "--harness-max-retries: '-1' is not a whole number >= 0",
        ),
        (["--harness-concurrency", "x"], "--harness-concurrency: 'x' is not a whole number >= 1"),
        (
            ["--harness-target", "gpu-box:30000"],
            "--harness-target: 'gpu-box:30000' is not an http(s) URL*",
        ),
        (
            ["--harness-boot-timeout", "-1"],
            "--harness-boot-timeout: '-1' is not a number of seconds > 0",
        ),
        (
            ["--harness-repeats", "1000000000"],
            "--harness-repeats: '1000000000' is more than 1000 repeats*",
        ),
    ],
)
def test_a_bad_plugin_value_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], line: str
) -> None:
    with pytest.raises(pytest.UsageError, match=re.escape(line.rstrip("*"))):
        resolve_settings(pytester.parseconfig(*args))
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {line}"])
    assert "Traceback" not in result.stderr.str()


def test_argument_types_accept_the_edges_and_refuse_past_them() -> None:
    assert (rate("0"), rate("1"), count("0"), positive_int(" 1 ")) == (0.0, 1.0, 0, 1)
    assert (repeats("1"), repeats("1000")) == (1, 1000)
    assert seconds("0.001") == 0.001
    assert (temperature("0"), temperature("2")) == (0.0, 2.0)
    assert http_url(" https://h/v1 ") == "https://h/v1"
    assert [stream_mode(x) for x in ("on", "TRUE", "off", "0", "both")] == [
        "on", "on", "off", "off", "both",
    ]  # fmt: skip
    refused = [
        (rate, "1.01"), (rate, "-0.1"), (count, "-1"), (count, "1.5"), (positive_int, "0"),
        (seconds, "0"), (seconds, "nan"), (http_url, "ftp://h"), (http_url, "http://"),
        (http_url, "http://h/v1?api-version=1"), (http_url, "http://h/v1#x"),
        (stream_mode, "sometimes"), (temperature, "-0.1"), (temperature, "2.5"),
        (temperature, "nan"), (repeats, "0"), (repeats, "1001"), (repeats, "1000000000"),
    ]  # fmt: skip
    for parse, text in refused:
        with pytest.raises(OptionValueError) as info:
            parse(text)
        assert repr(text) in str(info.value) and "\n" not in str(info.value)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, argparse.ArgumentTypeError)


def test_the_cli_and_the_plugin_import_the_table_not_each_other() -> None:
    """Each side loads with the other absent from ``sys.modules`` (a fresh interpreter)."""
    probe = (
        "import sys; import {load}; "
        "print(sorted({{m.split('.')[1] for m in sys.modules if m.startswith('harness.')}}))"
    )
    cli = "harness.cli.run, harness.cli.compare, harness.cli.gsm8k, harness.cli.boot"
    plugin = "harness.pytest_plugin.plugin, harness.pytest_plugin.options"
    loaded = {
        side: subprocess.run(
            [sys.executable, "-c", probe.format(load=load)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout  # fmt: skip
        for side, load in (("cli", cli), ("plugin", plugin))
    }
    assert "'options'" in loaded["cli"] and "'pytest_plugin'" not in loaded["cli"]
    assert "'options'" in loaded["plugin"] and "'cli'" not in loaded["plugin"]
