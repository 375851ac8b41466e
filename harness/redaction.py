"""Secrets out of what the harness writes or shows: URLs with a key in them.

A server URL may carry a credential: userinfo (``http://user:key@host``) or a query
parameter (``?api_key=...``, ``?token=...``). :func:`redact_url` replaces both with
``***``; :func:`redact_text` does it to every URL in a text (a command line, an error
message). The run folder's manifest (its arguments and command), the transcripts'
target, the summary, the reports, error messages and the console's resume hint all go
through them; requests themselves use the URL as given.

Secret-looking names: :data:`SECRET_NAME` (``key``, ``api_key``, ``apikey``, ``token``,
``access_token``, ``secret``, ``password``, ``passwd``, ``auth``, ``authorization``,
``signature``, ``sig``, ``credential``, ... with any prefix ending in ``_``/``-``).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "SECRET_NAME", "redact_text", "redact_url"]

#: what a secret is replaced with
REDACTED = "***"
#: a query parameter (or argument) name that holds a secret
SECRET_NAME = re.compile(
    r"(^|[_\-.])(api[_\-]?key|key|token|secret|password|passwd|pwd|auth|authorization"
    r"|signature|sig|credentials?|access[_\-]?token|session)$",
    re.IGNORECASE,
)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


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


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)
