"""Every exception the harness raises on purpose, under one root.

::

    HarnessError                    root: catch this to catch any of them
    ├── ScenarioError (ValueError)  a scenario file that cannot be used (file, field, fix)
    │   └── MatrixError             a matrix file that cannot be used
    ├── RunFolderError (ValueError) a results folder that cannot be read, resumed or written
    │   ├── ReportInputError        ... for the report (a file in it is missing or unreadable)
    │   └── RecordingError          a recorded baseline that cannot serve a comparison
    │                               (scenario changed, model, sampling, too few runs, ...)
    ├── GSM8KDataError              GSM8K data missing, malformed or not downloadable
    ├── LaunchError                 a server the harness is to launch cannot be: its port
    │                               already answers (another process would be judged)
    ├── OptionValueError            an option value that does not parse (flag, env or ini)
    │   (ValueError, argparse.ArgumentTypeError)
    ├── UnknownProfileError         a reference-server profile name that does not exist
    │   (KeyError, ValueError)
    ├── SimBootCrash (RuntimeError) the reference server's profile crashes at boot
    ├── ToolInputError (ValueError) arguments a simulated tool refuses (answered as a tool error)
    ├── RequestFailed               one failed request to a server under test (an
    │                               infrastructure error once retries are spent)
    ├── LogprobsError               token log-probabilities a server cannot give or gave
    │   │                           malformed (no support, context overflow, truncated list)
    │   └── TokenizationMismatch    the two servers tokenised one sequence differently
    ├── sim.app.BadRequest          the reference server answers a request with HTTP 400
    ├── sim.infra.ConnectionDropped the reference server drops a connection on purpose
    │                               (profile ``connection-drop``)
    ├── pytest_plugin.items.ScenarioFailure (AssertionError)   a scenario test failed
    └── pytest_plugin.checks.CheckFailure (AssertionError)     a GSM8K or boot test failed

(The e2e driver outside the package, ``e2e/driver.py``, roots its ``E2EError`` here too.)
The last four live beside the code that raises them: they are that code's protocol
(an HTTP answer, a dropped connection, pytest's failure report), not errors a caller
handles.

``str(err)`` of every one is a single line meant for the user: it names the file or
server, the field and the fix. The command line prints it as ``error: <line>`` and exits
2 (usage or configuration) or 3 (infrastructure); see :class:`harness.cli.ExitCode`.
Failures of the model are never exceptions: they are data (``RunScore.failures``), and
failures of a server become :class:`harness.transcript.InfraError` records.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = [
    "TRANSIENT_STATUS",
    "GSM8KDataError",
    "HarnessError",
    "LaunchError",
    "LogprobsError",
    "MatrixError",
    "OptionValueError",
    "RecordingError",
    "ReportInputError",
    "RequestFailed",
    "RunFolderError",
    "ScenarioError",
    "SimBootCrash",
    "TokenizationMismatch",
    "ToolInputError",
    "UnknownProfileError",
]

#: HTTP statuses worth retrying: request timeout, rate limit, server errors.
TRANSIENT_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


class HarnessError(Exception):
    """Root of every exception the harness raises on purpose."""


class ScenarioError(HarnessError, ValueError):
    """A scenario file that cannot be used; ``str(err)`` is the one-line message.

    Attributes:
        path: the file (``"<scenario>"`` for an in-memory scenario).
        field: dotted field path inside the file, e.g. ``tools[1].parameters.type``.
        reason: what is wrong and, where possible, the fix.
    """

    def __init__(self, path: str | Path | None, field: str, reason: str) -> None:
        self.path = str(path) if path is not None else "<scenario>"
        self.field = field
        self.reason = reason
        where = f"{self.path}: {field}: " if field else f"{self.path}: "
        super().__init__(where + reason)


class MatrixError(ScenarioError):
    """A matrix file that cannot be used; ``str(err)`` is the one-line message."""


class RunFolderError(HarnessError, ValueError):
    """A results folder (``results/<run-id>/``) that cannot be read, resumed or written;
    ``str`` is one line naming the folder or file and the fix."""


class ReportInputError(RunFolderError):
    """A run folder the report cannot read; ``str`` is one line naming file and fix."""


class RecordingError(RunFolderError):
    """A recorded baseline (``harness record``) that cannot serve a comparison: one line
    naming the folder, what differs and the fix (exit 2)."""


class GSM8KDataError(HarnessError):
    """The GSM8K data is missing or malformed (one-line message naming file and fix)."""


class LaunchError(HarnessError):
    """A launch command the harness refuses to start: its port already answers (the
    process holding it would be judged instead), named with what holds it."""


class OptionValueError(HarnessError, argparse.ArgumentTypeError, ValueError):
    """An option value that does not parse; ``str`` is one line: the value and what it must be.

    Raised by the argument types of :mod:`harness.options`. argparse prints it after the
    flag (``argument --repeats: '0' is not a whole number >= 1``, exit 2); the pytest
    plugin raises it again as ``pytest.UsageError`` naming its source (flag, env, ini).
    """


class UnknownProfileError(HarnessError, KeyError, ValueError):
    """A reference-server profile name that does not exist; ``str`` lists the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


class SimBootCrash(HarnessError, RuntimeError):
    """The profile crashes at boot (e.g. capture with fusion); ``str`` is the traceback."""


class ToolInputError(HarnessError, ValueError):
    """Raised by a built-in tool simulator for arguments it cannot use; the run answers
    the model with ``Error: <message>`` as a real tool would."""


class RequestFailed(HarnessError):
    """One failed request attempt to a server under test.

    Attributes:
        kind: the :class:`harness.transcript.InfraError` kind (``http_status``,
            ``timeout``, ``connection``, ``invalid_body``, ``other``).
        message: what happened, at most 1,000 characters.
        status: the HTTP status for ``http_status``, else ``None``.
        transient: whether a retry may help: every kind but an HTTP status outside
            408/429/5xx, unless the raiser says otherwise (a body over the size cap).
        retry_after_s: the answer's ``Retry-After`` in seconds, else ``None``.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        transient: bool | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message[:1000]
        self.status = status
        self.retry_after_s = retry_after_s
        if transient is None:
            transient = kind != "http_status" or status in TRANSIENT_STATUS
        self.transient = transient


class LogprobsError(HarnessError):
    """A server cannot give the token log-probabilities ``harness logprobs`` needs, or gave
    them malformed (no logprob support, a context overflow, a truncated logprob list, an
    HTTP error); ``str`` is one line naming the server, the request and the fix (keys in
    URLs redacted, :func:`harness.redaction.redact_text`). Nothing computed from such an
    answer is reported as a result."""

    def __init__(self, message: str) -> None:
        from harness.redaction import redact_text

        super().__init__(redact_text(message))


class TokenizationMismatch(LogprobsError):
    """The baseline and the candidate tokenised the same sequence differently: comparing
    misaligned tokens is refused. ``str`` names the sequence and the first differing
    position with both sides' tokens there."""
