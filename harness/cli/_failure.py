"""The failure paths of the commands that write a run folder: each writes ``report.md``
(:mod:`harness.present.report.failure`) and says one line on stderr, so a CI job's report
steps have something to post whatever happened.

Exit codes: a launched side that crashes at boot is the build's failure, exit 1 (a CI
that retries exit 3 as a flaky runner would retry a real crash); a side that never
answered (a command that cannot start, a timeout) is exit 3: nothing ran.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness.cli import ExitCode
from harness.present.report.failure import Failure, write_failure_report

__all__ = ["boot_failed", "interrupted", "recording_refused"]


def _say(console: Any, path: Path) -> None:
    console.print(f"report: {path}", soft_wrap=True, markup=False, highlight=False)


def boot_failed(
    command: str, folder: Path, boot_dir: Path, who: str, boot: dict[str, Any], console: Any
) -> int:
    """A launched side (``who``: ``the candidate (pr-12)``) did not boot: ``report.md`` in
    ``folder`` quoting the crash, one ``error:`` line; the exit code (1 a crash, 3 else)."""
    crashed = bool(boot.get("crashed"))
    failed: dict[str, Any] = next(
        (c for c in boot.get("checks", []) if c.get("verdict") == "FAIL"), {}
    )
    nothing = "nothing recorded" if command == "record" else "nothing compared"
    what = (
        f"{who} {'crashed at boot' if crashed else 'did not boot'}: "
        f"{failed.get('detail') or 'no health check passed'}; {nothing}."
    )
    log = boot_dir / "server.log"
    if crashed:
        step = (
            f"fix the crash quoted here (the server's whole log: {log}), then run the same "
            "command again. A crash at boot is the build's failure (exit 1), not the runner's: "
            "do not retry it as a flaky job."
        )
    else:
        step = (
            "check that the command starts a server answering --health-path at --url (give "
            f"--url or --port), within --boot-timeout (raise it for a large model; log: {log}), "
            "then run the same command again."
        )
    failure = Failure(
        command=command, headline="BOOT CRASH" if crashed else "DID NOT BOOT", what=what,
        next_step=step, quote=list(boot.get("crash") or []),
        files=[("boot checks", str(boot_dir / "boot.json")), ("server log", str(log))],
    )  # fmt: skip
    path = write_failure_report(folder, failure)
    _say(console, path)
    how = "crashed at boot" if crashed else "did not boot"
    print(f"error: {who} {how}; {nothing} (report: {path})", file=sys.stderr)
    return ExitCode.REGRESSION if crashed else ExitCode.INFRA_ERROR


def recording_refused(command: str, folder: Path, reason: str, console: Any) -> Path:
    """A recorded baseline cannot serve this run (``reason``: the one line of
    :class:`harness.errors.RecordingError`): ``report.md`` saying so; its path."""
    failure = Failure(
        command=command, headline="RECORDING REFUSED",
        what=f"the recorded baseline cannot serve this comparison: {reason}; nothing compared.",
        next_step=(
            "record the baseline again with the scenarios and settings of this run (harness "
            "record, from the baseline build), or run with the recording's settings."
        ),
    )  # fmt: skip
    path = write_failure_report(folder, failure)
    _say(console, path)
    return path


def interrupted(command: str, folder: Path, runs: int, resume: str, console: Any) -> Path:
    """A run stopped by Ctrl-C or SIGTERM after ``runs`` runs: ``report.md`` saying how to
    finish it (``resume``: the command); its path."""
    failure = Failure(
        command=command, headline="INTERRUPTED",
        what=f"the run was stopped (Ctrl-C or SIGTERM) after {runs} runs; no verdict.",
        next_step=f"finish it (the runs made are kept): {resume}",
        files=[("transcripts so far", str(folder / "transcripts.jsonl"))],
    )  # fmt: skip
    path = write_failure_report(folder, failure)
    _say(console, path)
    return path
