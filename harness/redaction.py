"""Secrets out of what the harness writes or shows: URLs with a key in them, key flags.

A server URL may carry a credential: userinfo (``http://user:key@host``) or a query
parameter (``?api_key=...``, ``?token=...``). :func:`redact_url` replaces both with
``***``; :func:`redact_text` does it to every URL in a text (a command line, an error
message), and to the value of a known key flag (:data:`KEY_FLAGS`: ``--api-key KEY``,
``--api-key=KEY``; SGLang's, vLLM's and llama-server's flag; ``--api-key-file`` names a
file and is kept) and of an environment-style assignment with a secret-looking name
(``OPENAI_API_KEY=...``, ``HF_TOKEN=...``). :func:`redact_argv` does the same to a
command as a list of arguments (the value of ``--api-key`` is the next item).
The run folder's manifest (its arguments and command), the transcripts' target, the
summary, the reports, ``boot.json``, ``matrix.json``, error messages and the console's
resume hint all go through them; requests and launched commands use what was given.

Secret-looking names: :data:`SECRET_NAME` (``key``, ``api_key``, ``apikey``, ``token``,
``access_token``, ``secret``, ``password``, ``passwd``, ``auth``, ``authorization``,
``signature``, ``sig``, ``credential``, ... with any prefix ending in ``_``/``-``).

A server's own answers carry keys too: SGLang's ``/server_info`` is its whole server
arguments object (``api_key``, ``admin_api_key``, ``launch_command`` with ``--api-key``).
:func:`redact_data` replaces the value of every field with a secret-looking name
(:data:`SECRET_FIELD`: ``api_key``, ``admin_api_key``, ``hf_token``, ``*_secret``,
``*password*``, ...) and every string that looks like a key itself (:data:`SECRET_VALUE`:
``sk-...``, ``hf_...``, ``Bearer ...``); ``/server_info``, ``/model_info`` and
``/v1/models`` go through it where they are fetched, before anything is written or shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = [
    "KEY_FLAGS",
    "REDACTED",
    "SECRET_FIELD",
    "SECRET_NAME",
    "SECRET_VALUE",
    "redact_argv",
    "redact_data",
    "redact_text",
    "redact_url",
]

#: what a secret is replaced with
REDACTED = "***"
#: a query parameter (or argument) name that holds a secret
SECRET_NAME = re.compile(
    r"(^|[_\-.])(api[_\-]?key|key|token|secret|password|passwd|pwd|auth|authorization"
    r"|signature|sig|credentials?|access[_\-]?token|session)$",
    re.IGNORECASE,
)
#: a field of a server's answer whose value is a secret: a name ending in key/token/secret/
#: password/... (``admin_api_key``, ``hf_token``, ``ssl_keyfile_password``), or with
#: ``secret``/``password``/``passwd``/``token``/``credential`` as one of its parts
#: (``api_key_env``, ``tokenizer_path``, ``max_tokens`` are not)
SECRET_FIELD = re.compile(
    r"(^|[_\-.])(api[_\-]?key|key|token|secret|password|passwd|pwd|auth|authorization"
    r"|signature|credentials?|access[_\-]?token|private[_\-]?key)$"
    r"|(^|[_\-.])(secret|password|passwd|token|credentials?)([_\-.]|$)",
    re.IGNORECASE,
)
#: a string that is a key by its look (OpenAI-style ``sk-``, Hugging Face ``hf_``, GitHub
#: ``ghp_``, Slack ``xox.-``, AWS ``AKIA``, an ``Authorization`` header's value)
SECRET_VALUE = re.compile(
    r"^\s*(?:(?:sk|rk|pk)-[\w\-]{8,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{16,}"
    r"|github_pat_\w{16,}|xox[abprs]-[\w\-]{8,}|AKIA[0-9A-Z]{16}|(?:Bearer|Basic)\s+\S+)\s*$"
)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
#: launch-command flags whose value is a key (SGLang, vLLM, llama-server; Hugging Face)
KEY_FLAGS = ("--api-key", "--admin-api-key", "--hf-token", "--token")
_FLAGS = "|".join(re.escape(f) for f in KEY_FLAGS)
#: ``--api-key KEY``, ``--api-key=KEY`` (the value up to a space, or a quoted value)
_FLAG_VALUE = re.compile(
    rf"(?<![\w-])({_FLAGS}|--[\w-]+-(?:api-key|token|secret|password))(=|\s+)(?!-)"
    r"(?:\"[^\"]*\"|'[^']*'|[^\s'\"]+)"
)
#: ``NAME=value`` (an environment assignment, a ``--name=value`` flag)
_ASSIGN = re.compile(r"(?<![^\s'\"])(-{0,2}[A-Za-z_][\w.\-]*)=([^\s'\"]+)")


def redact_url(url: str) -> str:
    """``url`` with its userinfo and secret-looking query values as ``***``
    (``http://u:k@h:1/v1?api_key=s&x=1`` -> ``http://***@h:1/v1?api_key=***&x=1``);
    anything that does not parse as a URL is returned unchanged."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(SECRET_NAME.search(k) for k, _ in pairs):
                safe = [(k, REDACTED if SECRET_NAME.search(k) else v) for k, v in pairs]
                query = urlencode(safe, safe="*")
        if (netloc, query) == (parts.netloc, parts.query):
            return url
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return url


def _assignment(m: re.Match[str]) -> str:
    name = m.group(1)
    if SECRET_NAME.search(name.lstrip("-")) or name in KEY_FLAGS:
        return f"{name}={REDACTED}"
    return m.group(0)


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`, and the values of
    key flags and secret-looking assignments as ``***``
    (``serve --api-key sk-1 OPENAI_API_KEY=sk-2`` -> ``serve --api-key *** OPENAI_API_KEY=***``)."""
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    if "=" in text:
        text = _ASSIGN.sub(_assignment, text)
    if "--" in text:
        text = _FLAG_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command's arguments with :func:`redact_text` applied to each, and the item after
    a key flag (:data:`KEY_FLAGS`, any ``--...-api-key``/``-token``/``-secret``/
    ``-password``) and any item that looks like a key (:data:`SECRET_VALUE`) as ``***``."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        after_flag = i > 0 and _key_flag(argv[i - 1]) and not arg.startswith("-")
        out.append(REDACTED if after_flag or SECRET_VALUE.match(arg) else redact_text(arg))
    return out


def _key_flag(arg: str) -> bool:
    """A flag whose value is a key: :data:`KEY_FLAGS`, or any ``--...-api-key`` /
    ``--...-token`` / ``--...-secret`` / ``--...-password``."""
    return arg in KEY_FLAGS or (
        arg.startswith("--") and re.search(r"-(api-key|token|secret|password)$", arg) is not None
    )


def _secret_value(value: Any) -> bool:
    """A value kept under a secret-looking field: a non-empty string (or list of them);
    numbers, booleans and None say nothing secret (``max_tokens``-like counts, flags)."""
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, list) and any(isinstance(v, str) and v.strip() for v in value)


def redact_data(value: Any) -> Any:
    """Parsed data (a file's mapping, a server's ``/server_info``) with :func:`redact_text`
    applied to every string and :func:`redact_argv` to every list of strings (a command as
    arguments); a field with a secret-looking name (:data:`SECRET_FIELD`) holding a string,
    and any string that looks like a key (:data:`SECRET_VALUE`), as ``***``."""
    if isinstance(value, str):
        return REDACTED if SECRET_VALUE.match(value) else redact_text(value)
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and SECRET_FIELD.search(k) and _secret_value(v)
            else redact_data(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            return [REDACTED if SECRET_VALUE.match(v) else v for v in redact_argv(value)]
        return [redact_data(v) for v in value]
    return value
