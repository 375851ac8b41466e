"""The options the command line and the pytest plugin share: one name, one parser, one default.

:data:`OPTIONS` is the table; both sides import it and neither imports the other
(``harness.cli`` never imports ``harness.pytest_plugin``, nor the reverse):

- a ``harness`` sub-command adds the options it needs with :func:`add_argument`
  (``add_argument(p, "concurrency")``), overriding a default or help text only where the
  command means something else (``harness compare`` defaults ``--repeats`` to 5);
- the pytest plugin (:mod:`harness.pytest_plugin.options`) registers every option of the
  table in its ``harness`` group, with the same flag, parser, default and help, and also
  reads env ``HARNESS_<NAME>`` and ini ``harness_<name>`` (CLI > env > ini).

The argument types below turn text into a value or raise
:class:`harness.errors.OptionValueError` with one line (the value and what it must be):
argparse prints it after the flag and exits 2; the plugin raises ``pytest.UsageError``
naming the source. Old names stay accepted: ``cli_aliases`` on the command line
(``--timeout`` for ``--request-timeout``), ``plugin_aliases`` and ``old_names`` in the
plugin (``--harness-retries``, env ``HARNESS_RETRIES``, ini ``harness_retries``).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from harness.errors import OptionValueError
from harness.scenario.model import MAX_REPEATS

__all__ = [
    "OPTIONS",
    "Option",
    "add_argument",
    "boolean",
    "folder",
    "count",
    "http_url",
    "positive_int",
    "rate",
    "history_fields",
    "reasoning_history",
    "repeats",
    "seconds",
    "stream_mode",
    "temperature",
    "text",
    "url_or_recording",
]


# ---------------------------------------------------------------- argument types


def http_url(value: str) -> str:
    """A server URL ``http(s)://HOST[:PORT][/v1]``; else :class:`OptionValueError`."""
    value = value.strip()
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise OptionValueError(
            f"{value!r} is not an http(s) URL (e.g. http://127.0.0.1:30000, with or without /v1)"
        )
    if parsed.query or parsed.fragment:  # the request paths are appended to the URL's path
        raise OptionValueError(
            f"{value!r}: a query string or fragment is not supported (give the base URL, "
            "e.g. http://127.0.0.1:30000/v1; the API key goes in --api-key-env's variable)"
        )
    return value


def url_or_recording(value: str) -> str:
    """A server URL (:func:`http_url`), or a recording's folder (``harness record``):
    anything not starting with ``http://``/``https://`` is a path, checked when opened
    (:meth:`harness.recording.Recording.open`: one line naming the folder and the fix)."""
    value = value.strip()
    if value.lower().startswith(("http://", "https://")) or "://" in value:
        return http_url(value)
    if re.fullmatch(r"[\w.-]+:\d+(/.*)?", value):  # host:port, the scheme forgotten
        raise OptionValueError(
            f"{value!r} is not an http(s) URL (did you mean http://{value}?); a recording "
            "is given by its folder"
        )
    if not value:
        raise OptionValueError("empty value: give a server URL or a recording folder")
    return value


def folder(value: str) -> str:
    """A folder path, created when missing (``--results``); an existing file is an
    :class:`OptionValueError`."""
    if Path(value).exists() and not Path(value).is_dir():
        raise OptionValueError(f"{value!r} is a file, not a folder (give a folder; it is created)")
    return value


def _number(value: str, kind: type[float] | type[int], what: str) -> Any:
    try:
        return kind(value.strip())
    except ValueError:
        raise OptionValueError(f"{value!r} is not {what}") from None


def positive_int(value: str) -> int:
    """A count of at least 1 (``--repeats``, ``--concurrency``)."""
    n: int = _number(value, int, "a whole number >= 1")
    if n < 1:
        raise OptionValueError(f"{value!r} is not a whole number >= 1")
    return n


def repeats(value: str) -> int:
    """Runs per scenario (``--repeats``): 1 to :data:`~harness.scenario.model.MAX_REPEATS`
    (1000), the cap of a scenario file's ``repeats``."""
    n = positive_int(value)
    if n > MAX_REPEATS:
        raise OptionValueError(
            f"{value!r} is more than {MAX_REPEATS} repeats (the cap of a scenario's repeats); "
            f"give 1 to {MAX_REPEATS}"
        )
    return n


def count(value: str) -> int:
    """A count of at least 0 (``--max-retries``)."""
    n: int = _number(value, int, "a whole number >= 0")
    if n < 0:
        raise OptionValueError(f"{value!r} is not a whole number >= 0")
    return n


def rate(value: str) -> float:
    """A fraction in [0, 1] (``--min-pass-rate``)."""
    x: float = _number(value, float, "a rate between 0 and 1")
    if not 0.0 <= x <= 1.0:  # also refuses nan
        raise OptionValueError(f"{value!r} is not a rate between 0 and 1")
    return x


def temperature(value: str) -> float:
    """A sampling temperature, finite and in [0, 2] (``--temperature``; 0 is greedy)."""
    x: float = _number(value, float, "a temperature between 0 and 2")
    if not 0.0 <= x <= 2.0:  # also refuses nan
        raise OptionValueError(f"{value!r} is not a temperature between 0 and 2 (0: greedy)")
    return x


def seconds(value: str) -> float:
    """A duration in seconds, finite and > 0 (``--request-timeout``, ``--boot-timeout``)."""
    x: float = _number(value, float, "a number of seconds > 0")
    if not (x > 0 and math.isfinite(x)):
        raise OptionValueError(f"{value!r} is not a number of seconds > 0")
    return x


def text(value: str) -> str:
    """Any text, stripped (names, paths)."""
    return value.strip()


def boolean(value: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case; empty is false)."""
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise OptionValueError(f"{value!r} is not a boolean (use true/false)")


#: the values of ``--reasoning-history`` (:data:`harness.runner.REASONING_HISTORY`)
REASONING_HISTORY_MODES = ("keep", "drop", "auto")


#: the values of ``--history-fields`` (:data:`harness.runner.HISTORY_FIELDS`)
HISTORY_FIELDS_MODES = ("as-received", "known")


def history_fields(value: str) -> str:
    """``as-received`` or ``known`` (any case): which fields of earlier assistant messages
    later requests carry (``--history-fields``)."""
    low = value.strip().lower()
    if low not in HISTORY_FIELDS_MODES:
        raise OptionValueError(f"{value!r} is not a history fields mode (as-received or known)")
    return low


def reasoning_history(value: str) -> str:
    """``keep``, ``drop`` or ``auto`` (any case): what later requests carry of the
    reasoning the assistant turns produced (``--reasoning-history``)."""
    low = value.strip().lower()
    if low not in REASONING_HISTORY_MODES:
        raise OptionValueError(f"{value!r} is not a reasoning history mode (keep, drop or auto)")
    return low


def stream_mode(value: str) -> str:
    """``"on"``, ``"off"`` or ``"both"``; a boolean word counts as on/off."""
    if value.strip().lower() == "both":
        return "both"
    try:
        return "on" if boolean(value) else "off"
    except OptionValueError:
        raise OptionValueError(f"{value!r} is not a stream mode (on, off or both)") from None


# ---------------------------------------------------------------- the table

#: ``--max-response-bytes`` default: ``harness.client.completions.DEFAULT_MAX_RESPONSE_BYTES``
#: (not imported: this module stays free of the client's imports)
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Option:
    """One setting: its name everywhere, its flag, how its text parses, its default.

    ``name`` is the argparse ``dest`` of the command line and the attribute of the
    plugin's ``HarnessSettings``; the plugin also reads env :attr:`env` and ini
    :attr:`ini`. ``switch`` is the value of the bare flag (``--stream`` alone means
    ``"on"``); ``None`` means the flag takes a value.
    """

    name: str
    flag: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    metavar: str | None = None
    switch: Any = None
    cli_aliases: tuple[str, ...] = ()  # older flags of the command line, hidden from its help
    plugin_aliases: tuple[str, ...] = ()  # older flags of the plugin, hidden from its help
    old_names: tuple[str, ...] = ()  # older names the plugin still reads from env and ini

    @property
    def env(self) -> str:
        """The environment variable that sets the option (``HARNESS_<NAME>``)."""
        return "HARNESS_" + self.name.upper()

    @property
    def ini(self) -> str:
        """The pytest ini key that sets the option (``harness_<name>``)."""
        return "harness_" + self.name


_TABLE = (
    Option("target", "--target", http_url, None,
           "URL of the server under test, e.g. http://127.0.0.1:30000 (with or without /v1)",
           "URL"),
    Option("baseline", "--baseline", url_or_recording, None,
           "the baseline to compare against: a server URL, or the folder of a recording "
           "(harness record; the server need not run)", "URL|DIR"),
    Option("model", "--model", text, None,
           "model name sent in requests (default: the first of GET /v1/models)", "NAME"),
    Option("repeats", "--repeats", repeats, None,
           "runs per scenario (default: the scenario's repeats)", "N"),
    Option("temperature", "--temperature", temperature, 0.7,
           "sampling temperature of every request unless the scenario sets its own "
           "(default 0.7: repeats are independent trials; 0 is greedy and each scenario "
           "then counts once per side)", "T"),
    Option("sampling_seed", "--sampling-seed", count, 0,
           "base of the per-run request seed (each run's seed is derived from it, the "
           "side, the scenario and the repeat, and recorded in its transcript) and of the "
           "verdict's permutations (default 0)", "N"),
    Option("reasoning_history", "--reasoning-history", reasoning_history, None,
           "the reasoning of earlier assistant turns in later requests: keep (sent back as "
           "reasoning_content), drop (left out), auto (as the server documents it: kept on "
           "turns that called tools, dropped once a turn answered); default: the scenario's "
           "reasoning_history, else auto", "keep|drop|auto"),
    Option("history_fields", "--history-fields", history_fields, "as-received",
           "the fields of earlier assistant messages in later requests: as-received (every "
           "field of the message and of each tool call, as the OpenAI SDK's "
           "messages.append(message) sends them: a server's opaque signature comes back) or "
           "known (role, content, tool_calls' id, type, name and arguments, and the reasoning "
           "as --reasoning-history says: for servers that refuse unknown fields); default "
           "as-received", "as-received|known"),
    Option("api_key_env", "--api-key-env", text, "OPENAI_API_KEY",
           "environment variable holding the API key (default OPENAI_API_KEY)", "NAME"),
    Option("stream", "--stream", stream_mode, "off",
           "stream responses (SSE): on, off (default) or both (each scenario both ways)",
           switch="on"),
    Option("concurrency", "--concurrency", positive_int, 8,
           "runs in flight at once (default 8)", "N",
           plugin_aliases=("--harness-concurrency",)),
    Option("request_timeout", "--request-timeout", seconds, 120.0,
           "per-request timeout in seconds: the total deadline of one attempt, sending to "
           "the last byte (default 120)", "SECONDS",
           cli_aliases=("--timeout",), plugin_aliases=("--harness-timeout",),
           old_names=("timeout",)),
    Option("max_retries", "--max-retries", count, 3,
           "retries of a failed request: HTTP 408/429/5xx (after its Retry-After, at most "
           "60 s), timeout, connection, a garbled or cut answer (default 3)", "N",
           plugin_aliases=("--harness-retries",), old_names=("retries",)),
    Option("max_response_bytes", "--max-response-bytes", positive_int, MAX_RESPONSE_BYTES,
           "the most bytes read of one answer; a larger one is an infrastructure error "
           "(default 8388608, 8 MiB)", "BYTES"),
    Option("results", "--results", folder, None,
           "results root folder (default results/, or $HARNESS_RESULTS)", "DIR",
           plugin_aliases=("--harness-results",)),
    Option("min_pass_rate", "--min-pass-rate", rate, 1.0,
           "a scenario fails when its pass rate (passed / scored runs) is below RATE "
           "(default 1.0: any failed run; 0: never on model behaviour)", "RATE"),
    Option("boot_timeout", "--boot-timeout", seconds, 1800.0,
           "give up waiting for the server's health endpoint after SECONDS (default 1800)",
           "SECONDS", cli_aliases=("--timeout",)),
)  # fmt: skip

#: name -> :class:`Option`, every setting the command line and the pytest plugin share
OPTIONS: dict[str, Option] = {opt.name: opt for opt in _TABLE}


class _Container(Protocol):
    def add_argument(self, *flags: str, **kwargs: Any) -> argparse.Action: ...


def add_argument(parser: _Container, name: str, **overrides: Any) -> argparse.Action:
    """Add the option ``name`` of :data:`OPTIONS` (flag, type, default, help); returns it.

    ``parser`` is an ``argparse`` parser or group; ``overrides`` are ``add_argument``
    keywords that differ for this command (``default=5``, ``required=True``). A switch
    (``--stream``) takes an optional value: the bare flag gives ``Option.switch``. The
    option's ``cli_aliases`` are accepted for the same ``dest`` but left out of ``--help``.
    Raises ``KeyError`` for an unknown ``name``.
    """
    opt = OPTIONS[name]
    kwargs: dict[str, Any] = {
        "dest": opt.name,
        "type": opt.parse,
        "default": opt.default,
        "help": opt.help,
        "metavar": opt.metavar,
    }
    if opt.switch is not None:
        kwargs.update(nargs="?", const=opt.switch)
    kwargs.update(overrides)
    action = parser.add_argument(opt.flag, **kwargs)
    hidden = {**kwargs, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
    for alias in opt.cli_aliases:  # accepted, not shown in --help: one name per setting
        parser.add_argument(alias, **hidden)
    return action
