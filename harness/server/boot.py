"""Boot checks: launch a server, wait for health, judge its log, fusion and routed experts.

An optional feature that crashes the server at start is a regression too: with
routed-experts capture on, the fused MoE build died during CUDA graph capture with
``RuntimeError: The expanded size of the tensor (5) must match the existing size (4)``
(a capture buffer of width top_k + fused shared experts against top-k ids of width 4).

:func:`boot` launches a command in its own process group and streams stdout+stderr to
``<run_dir>/server.log`` (:mod:`harness.server.process`: launch, log scanning, URL, stop),
then :func:`wait_healthy` polls ``GET /health`` until 200 (SGLang answers 503 while
starting), fails early when the process exits or prints a Python traceback or a CUDA/HIP
error (quoting the traceback's last lines), gives up at the timeout; the whole process
group is always stopped (SIGTERM, then SIGKILL). :func:`check_running` runs the same
checks on a server that is already up. Both write ``boot.json`` (:class:`BootReport`).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.client.target import server_root
from harness.errors import LaunchError
from harness.redaction import redact_argv, redact_text, redact_url
from harness.runfolder import RunFolder
from harness.server.experts import (
    ExpertsProbeResult,
    model_path_from_command,
    probe_routed_experts,
)
from harness.server.fusion import FusionEngagement, collect_engagement
from harness.server.process import (
    LogCap,
    LogScanner,
    find_failure,
    foreign_owner,
    health_status,
    launch,
    port_holder,
    read_lines,
    resolve_command,
    stop_group,
    traceback_pending,
    url_from_command,
)

__all__ = [
    "BOOT_SCHEMA_VERSION",
    "BootReport",
    "Check",
    "CheckStatus",
    "boot",
    "boot_summary",
    "crashed_at_boot",
    "check_running",
    "fresh_log",
    "refuse_held_port",
    "serving",
    "wait_healthy",
    "write_boot_report",
]

BOOT_SCHEMA_VERSION = 1
#: the outcome of one boot check (not a comparison's verdict: that is
#: harness.kinds.VerdictName). On disk it is the ``verdict`` field of a check in boot.json.
CheckStatus = Literal["PASS", "FAIL", "WARN", "SKIP"]
Probe = Literal["routed-experts"]


class Check(BaseModel):
    """One boot check: ``evidence`` holds the log lines or values it rests on."""

    name: str
    verdict: CheckStatus
    detail: str = ""
    evidence: list[str] = Field(default_factory=list)


class BootReport(BaseModel):
    """``results/<run-id>/boot.json``. ``verdict`` is FAIL if any check failed, else
    WARN if any warned, else PASS. Timings in seconds."""

    schema_version: int = BOOT_SCHEMA_VERSION
    kind: Literal["boot"] = "boot"
    verdict: Literal["PASS", "FAIL", "WARN"] = "PASS"
    checks: list[Check] = Field(default_factory=list)
    command: list[str] | None = None
    url: str | None = None
    log_path: str | None = None
    run_dir: str | None = None  # the folder holding boot.json
    pid: int | None = None  # of the launched process (its process group and session id)
    exit_code: int | None = None  # of the launched process, if it ended
    fusion: FusionEngagement | None = None
    probe: ExpertsProbeResult | None = None
    server_info: dict[str, Any] | None = None
    timings: dict[str, float] = Field(default_factory=dict)  # to_health_s, total_s, stop_s
    started_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    def healthy_url(self) -> str | None:
        """The server's root while :func:`serving` keeps it up, if its ``health`` check
        passed; else None."""
        ok = any(c.name == "health" and c.verdict == "PASS" for c in self.checks)
        return self.url if ok else None

    def finish(self) -> BootReport:
        """The report with its verdict set from the checks (any FAIL, else any WARN, else PASS)."""
        verdicts = {c.verdict for c in self.checks}
        self.verdict = "FAIL" if "FAIL" in verdicts else "WARN" if "WARN" in verdicts else "PASS"
        return self


# ---------------------------------------------------------------- log checks


def _log_checks(
    lines: list[str], expect: list[str], forbid: list[str], ignore: tuple[str, ...] = ()
) -> list[Check]:
    checks = []
    for rx in expect:
        hits = [ln for ln in lines if re.search(rx, ln)]
        checks.append(
            Check(
                name=f"expect-log {rx}",
                verdict="PASS" if hits else "FAIL",
                detail="found" if hits else "no log line matches",
                evidence=hits[:5],
            )
        )
    for rx in forbid:
        hits = [ln for ln in lines if re.search(rx, ln)]
        checks.append(
            Check(
                name=f"forbid-log {rx}",
                verdict="FAIL" if hits else "PASS",
                detail=f"{len(hits)} line(s) match" if hits else "absent",
                evidence=hits[:5],
            )
        )
    bad = find_failure(lines, ignore=ignore)
    checks.append(
        Check(
            name="log-errors",
            verdict="FAIL" if bad else "PASS",
            detail=bad[0] if bad else "no traceback or CUDA/HIP error in the log",
            evidence=bad[1] if bad else [],
        )
    )
    return checks


# ---------------------------------------------------------------- the checks


def _fail_check(lines: list[str], rc: int | None, failure: tuple[str, list[str]] | None) -> Check:
    if failure is not None:
        how = f"exited with code {rc} after printing" if rc is not None else "printed"
        return Check(
            name="health",
            verdict="FAIL",
            detail=f"the server {how} an error before /health answered 200: {failure[0]}",
            evidence=failure[1],
        )
    return Check(
        name="health",
        verdict="FAIL",
        detail=f"the server exited with code {rc} before /health answered 200",
        evidence=lines[-6:],
    )


def _timeout_check(
    url: str | None, last: int | None, health_path: str, timeout_s: float, lines: list[str]
) -> Check:
    if url is None:
        seen = "no URL found (give --port or --url)"
    else:
        seen = f"last answer {last}" if last is not None else "no answer"
    return Check(
        name="health",
        verdict="FAIL",
        detail=f"timeout: no 200 from {health_path} within {timeout_s:g}s ({seen})",
        evidence=lines[-6:],
    )


def _foreign_check(url: str, health_path: str, pid: int, other: str) -> Check:
    return Check(
        name="health",
        verdict="FAIL",
        detail=f"GET {url}{health_path} answered 200, but from {other}, not the launched "
        f"server (pid {pid}): another process holds the port",
    )


def wait_healthy(
    proc: subprocess.Popen[bytes],
    log: Path,
    url: str | None,
    *,
    health_path: str,
    timeout_s: float,
    ignore: tuple[str, ...],
) -> tuple[Check, str | None]:
    """The ``health`` check of a launched server and the URL it answers on (None if never
    found): poll ``GET url+health_path`` every 0.25 s until it answers 200 (PASS), the
    process exits or its ``log`` shows a traceback or CUDA/HIP error not matching an
    ``ignore`` regex (FAIL, quoting it), or ``timeout_s`` seconds pass (FAIL).

    ``url`` None: taken from the log (:func:`harness.server.process.url_from_log`). A
    traceback fails the boot once its exception line is printed (or 2 s later). A 200
    counts only while the process is alive and when the port's listener is the launched
    process (or one of its group; :func:`harness.server.process.foreign_owner`): else FAIL.
    """
    t0 = time.monotonic()
    tb_seen: float | None = None
    last: int | None = None
    scanner = LogScanner(log, ignore)  # what was appended since the last poll, a bounded tail
    while True:
        rc = proc.poll()
        scanner.poll()
        lines = scanner.lines
        url = url or scanner.url
        failure = scanner.failure()
        if failure is not None:
            tb_seen = tb_seen or time.monotonic()
            pending = traceback_pending(lines, ignore) and time.monotonic() - tb_seen < 2.0
            if rc is not None or not pending:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=3.0)  # a crashing server usually exits: record its code
                return _fail_check(lines, proc.poll(), failure), url
        elif rc is not None:
            return _fail_check(lines, rc, None), url
        if url is not None:
            last = health_status(url, health_path)
            if last == 200 and proc.poll() is None:  # else: judged at the next poll
                other = foreign_owner(url, proc.pid)
                if other is not None:
                    return _foreign_check(url, health_path, proc.pid, other), url
                took = time.monotonic() - t0
                detail = f"GET {url}{health_path} answered 200 after {took:.1f}s"
                return Check(name="health", verdict="PASS", detail=detail), url
        if time.monotonic() - t0 > timeout_s:
            return _timeout_check(url, last, health_path, timeout_s, lines), url
        time.sleep(0.25)


def _fusion_check(f: FusionEngagement, expect: str | None) -> Check:
    if expect is not None:
        ok = f.state == expect.upper()
        verdict: CheckStatus = "PASS" if ok else "FAIL"
        detail = f"fusion {f.state} (expected {expect.upper()}): {f.reason}"
    else:
        verdict = "WARN" if f.state == "UNKNOWN" else "PASS"
        detail = f"fusion {f.state}: {f.reason}"
    return Check(name="fusion", verdict=verdict, detail=detail, evidence=f.evidence[:5])


def _probe_check(res: ExpertsProbeResult) -> Check:
    return Check(
        name="routed-experts",
        verdict="PASS" if res.ok else "FAIL",
        detail=res.summary(),
        evidence=[v.line() for v in res.violations[:10]],
    )


def _server_checks(
    report: BootReport,
    url: str,
    log: Path | None,
    *,
    probe: Probe | None,
    expect_fusion: str | None,
    probe_opts: dict[str, Any],
) -> None:
    """Fusion engagement and the optional routed-experts probe, on a healthy server."""
    shape = probe_opts.get("shape")
    report.fusion = collect_engagement(
        url,
        log_path=log,
        model_path=probe_opts.get("model_path"),
        top_k=shape.top_k if shape is not None else None,
    )
    report.server_info = report.fusion.server_args or None
    report.checks.append(_fusion_check(report.fusion, expect_fusion))
    if probe == "routed-experts":
        report.probe = probe_routed_experts(url, **probe_opts)
        report.checks.append(_probe_check(report.probe))


def write_boot_report(report: BootReport, run_dir: str | Path) -> Path:
    """Write the run folder's ``boot.json``; returns its path."""
    return RunFolder(run_dir).write_model(RunFolder.BOOT, report)


def _run_dir(run_dir: str | Path | None, results: str | Path | None, args: dict[str, Any]) -> Path:
    if run_dir is not None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        return Path(run_dir)
    return RunFolder.create("boot", results=results, args=args).path


def _launch(argv: list[str], log: Path) -> subprocess.Popen[bytes] | Check:
    """The started process, or the failed ``launch`` check naming why it did not start."""
    try:
        return launch(argv, log)
    except OSError as exc:
        return Check(name="launch", verdict="FAIL", detail=f"cannot start {argv[0]!r}: {exc}")


def _stop_check(proc: subprocess.Popen[bytes], report: BootReport, grace_s: float) -> Check:
    t_stop = time.monotonic()
    notes = stop_group(proc, grace_s=grace_s)
    report.exit_code = proc.returncode
    report.timings["stop_s"] = round(time.monotonic() - t_stop, 3)
    held = port_holder(report.url) if report.url and report.healthy_url() else None
    if held is not None:  # a server the stop did not reach (detached, not ours to see)
        notes.append(f"left: {report.url} still answers after the stop ({held})")
    left = any(n.startswith("left") for n in notes)
    detail = "; ".join(notes) or "process group stopped"
    return Check(name="stop", verdict="FAIL" if left else "PASS", detail=detail)


def _log_only_fusion(report: BootReport, log: Path) -> None:
    """Fusion as far as the log of a server that never became healthy tells (check SKIP)."""
    report.fusion = collect_engagement(None, log_path=log)
    detail = (
        f"server not healthy; from the log: fusion {report.fusion.state}: {report.fusion.reason}"
    )
    report.checks.append(
        Check(name="fusion", verdict="SKIP", detail=detail, evidence=report.fusion.evidence[:5])
    )


def boot(
    cmd: str | list[str],
    *,
    expect_log: list[str] | tuple[str, ...] = (),
    forbid_log: list[str] | tuple[str, ...] = (),
    timeout_s: float = 1800,
    probe: Probe | None = None,
    run_dir: str | Path | None = None,
    results: str | Path | None = None,
    health_path: str = "/health",
    url: str | None = None,
    expect_fusion: Literal["on", "off"] | None = None,
    probe_opts: dict[str, Any] | None = None,
    ignore_errors: list[str] | tuple[str, ...] = (),
    grace_s: float = 5.0,
) -> BootReport:
    """Launch ``cmd`` (a string is split with :func:`shlex.split`, no shell), check it, stop it.

    Checks: ``launch``, ``health`` (early FAIL on exit/traceback/CUDA error, quoting
    the traceback; FAIL at ``timeout_s`` seconds), ``fusion`` (:mod:`harness.server.fusion`;
    FAIL only if ``expect_fusion`` is given and differs), ``routed-experts`` (with
    ``probe="routed-experts"``; ``probe_opts`` go to
    :func:`harness.server.experts.probe_routed_experts`), ``stop`` (SIGTERM, after ``grace_s``
    SIGKILL; FAIL if a process of the group survives), ``expect-log``/``forbid-log``
    (regexes, :func:`re.search` per line) and ``log-errors``. Tracebacks or error lines
    matching an ``ignore_errors`` regex are not failures. Writes ``server.log`` and
    ``boot.json`` in ``run_dir`` (default: a new ``results/boot-...`` folder). Never
    raises for server misbehaviour.
    """
    with serving(
        cmd, expect_log=expect_log, forbid_log=forbid_log, timeout_s=timeout_s, probe=probe,
        run_dir=run_dir, results=results, health_path=health_path, url=url,
        expect_fusion=expect_fusion, probe_opts=probe_opts, ignore_errors=ignore_errors,
        grace_s=grace_s,
    ) as report:  # fmt: skip
        pass
    return report


@contextlib.contextmanager
def serving(
    cmd: str | list[str],
    *,
    expect_log: list[str] | tuple[str, ...] = (),
    forbid_log: list[str] | tuple[str, ...] = (),
    timeout_s: float = 1800,
    probe: Probe | None = None,
    run_dir: str | Path | None = None,
    results: str | Path | None = None,
    health_path: str = "/health",
    url: str | None = None,
    expect_fusion: Literal["on", "off"] | None = None,
    probe_opts: dict[str, Any] | None = None,
    ignore_errors: list[str] | tuple[str, ...] = (),
    grace_s: float = 5.0,
) -> Iterator[BootReport]:
    """:func:`boot`, with the server kept up for the ``with`` block.

    Yields the report once the start is judged: :meth:`BootReport.healthy_url` is the
    server's root when it became healthy, else None (the ``health`` check quotes why). On leaving the
    block, however it is left (an exception, Ctrl-C, SIGTERM raised as
    ``KeyboardInterrupt``), the process group is stopped, the log checks run and
    ``boot.json`` is written. Same arguments as :func:`boot`.
    """
    argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    with contextlib.suppress(FileNotFoundError):  # else the launch check FAILs, naming it
        argv = resolve_command(argv)
    refuse_held_port(url or url_from_command(argv))
    folder = _run_dir(
        run_dir, results, {"cmd": redact_argv(argv), "timeout_s": timeout_s, "probe": probe}
    )
    log, ignore = fresh_log(RunFolder(folder)), tuple(ignore_errors)
    report, t0 = BootReport(command=argv, log_path=str(log)), time.monotonic()
    proc = _launch(argv, log)
    if isinstance(proc, Check):
        report.checks.append(proc)
        _finish(report, folder, t0)
        yield report
        return
    report.pid = proc.pid
    report.checks.append(Check(name="launch", verdict="PASS", detail=f"pid {proc.pid}"))
    cap = LogCap(log).start()  # the log on disk bounded, however much the server writes
    try:
        health, report.url = wait_healthy(
            proc, log, url or url_from_command(argv),
            health_path=health_path, timeout_s=timeout_s, ignore=ignore,
        )  # fmt: skip
        report.checks.append(health)
        report.timings["to_health_s"] = round(time.monotonic() - t0, 3)
        if health.verdict == "PASS" and report.url:
            opts = dict(probe_opts or {})
            if "shape" not in opts and "model_path" not in opts:  # the launched model's config
                opts["model_path"] = model_path_from_command(argv)
            _server_checks(report, report.url, log, probe=probe, expect_fusion=expect_fusion,
                           probe_opts=opts)  # fmt: skip
        else:
            _log_only_fusion(report, log)
        yield report
    finally:
        report.checks.append(_stop_check(proc, report, grace_s))
        cap.stop()
        lines = read_lines(log)
        report.checks.extend(_log_checks(lines, list(expect_log), list(forbid_log), ignore))
        _quote_once(report.checks)
        _finish(report, folder, t0)


def refuse_held_port(url: str | None) -> None:
    """Refuse to launch a server whose port already answers: the process that holds it
    would answer the health check and be judged in the launched one's place.

    Raises:
        LaunchError: one line naming the port and what holds it (pid, command, model).
    """
    held = port_holder(url) if url else None
    if held is not None:
        raise LaunchError(
            f"{redact_url(str(url))}: the port already answers ({held}); a server launched "
            "there would not be the one judged: stop that process or launch on a free port"
        )


def fresh_log(folder: RunFolder) -> Path:
    """The folder's ``server.log``, empty: a log from an earlier launch (a resumed
    comparison) is kept as ``server.log.1``, so its URL and crash are not read as this
    launch's."""
    log = folder.file(RunFolder.SERVER_LOG)
    if log.exists() and log.stat().st_size > 0:
        log.replace(log.with_name(log.name + ".1"))
    return log


def crashed_at_boot(report: BootReport) -> bool:
    """Whether the server itself failed to start: it exited, or printed a traceback or a
    CUDA/HIP error, before ``/health`` answered 200 (the build's failure). A command that
    cannot be started or a server still silent at the timeout is not a crash."""
    return any(
        c.name == "health" and c.verdict == "FAIL" and not c.detail.startswith("timeout")
        for c in report.checks
    )


def boot_summary(report: BootReport) -> dict[str, Any]:
    """What a comparison shows of a launched side's boot: the verdict, the URL, each
    check (name, verdict, detail), the fusion state, whether it crashed
    (:func:`crashed_at_boot`) and the crash quoted (the first failed check's evidence, at
    most 20 lines), for ``SideInfo.boot``."""
    failed = next((c for c in report.checks if c.verdict == "FAIL" and c.evidence), None)
    return {
        "verdict": report.verdict,
        "url": redact_url(report.url) if report.url else None,
        "command": redact_argv(report.command) if report.command else None,
        "checks": [
            {"name": c.name, "verdict": c.verdict, "detail": redact_text(c.detail)}
            for c in report.checks
        ],
        "fusion": report.fusion.state if report.fusion is not None else None,
        "crashed": crashed_at_boot(report),
        "crash": [redact_text(e) for e in failed.evidence[-20:]] if failed is not None else [],
        "run_dir": report.run_dir,
    }


def _quote_once(checks: list[Check]) -> None:
    """A traceback already quoted by an earlier check (``health``) is not quoted again
    under ``log-errors``: its detail names the check that quotes it."""
    for i, c in enumerate(checks):
        if c.name != "log-errors" or not c.evidence:
            continue
        earlier = next((e for e in checks[:i] if e.evidence == c.evidence), None)
        if earlier is not None:
            c.detail = f"{c.detail} (quoted under the {earlier.name} check)"
            c.evidence = []


def _finish(report: BootReport, folder: Path, t0: float) -> BootReport:
    report.timings["total_s"] = round(time.monotonic() - t0, 3)
    report.run_dir = str(folder)
    # no key written or shown from here on: URL userinfo, --api-key values
    report.url = redact_url(report.url) if report.url else None
    report.command = redact_argv(report.command) if report.command else None
    for c in report.checks:
        c.detail, c.evidence = redact_text(c.detail), [redact_text(e) for e in c.evidence]
    write_boot_report(report.finish(), folder)
    return report


def _health_once(root: str, health_path: str) -> Check:
    status = health_status(root, health_path, timeout_s=10.0)
    answer = "nothing" if status is None else str(status)
    hint = " (503 = still starting)" if status == 503 else ""
    verdict: CheckStatus = "PASS" if status == 200 else "FAIL"
    return Check(
        name="health", verdict=verdict, detail=f"GET {root}{health_path} answered {answer}{hint}"
    )


def check_running(
    url: str,
    *,
    log_path: str | Path | None = None,
    expect_log: list[str] | tuple[str, ...] = (),
    forbid_log: list[str] | tuple[str, ...] = (),
    probe: Probe | None = None,
    run_dir: str | Path | None = None,
    results: str | Path | None = None,
    health_path: str = "/health",
    expect_fusion: Literal["on", "off"] | None = None,
    probe_opts: dict[str, Any] | None = None,
    ignore_errors: list[str] | tuple[str, ...] = (),
) -> BootReport:
    """The same checks on a server already running at ``url`` (log scanned if given).

    ``health`` is one GET (503 = still starting = FAIL). Writes ``boot.json`` in
    ``run_dir`` (default: a new ``results/boot-...`` folder).
    """
    root = server_root(url)
    folder = _run_dir(run_dir, results, {"target": root, "log": str(log_path), "probe": probe})
    log = Path(log_path) if log_path is not None else None
    report = BootReport(url=root, log_path=str(log) if log else None)
    t0 = time.monotonic()
    health = _health_once(root, health_path)
    report.checks.append(health)
    if health.verdict == "PASS":
        opts = probe_opts or {}
        _server_checks(report, root, log, probe=probe, expect_fusion=expect_fusion,
                       probe_opts=opts)  # fmt: skip
    elif log is not None:
        _log_only_fusion(report, log)
    if log is not None:
        if not log.exists():
            report.checks.append(Check(name="log", verdict="FAIL", detail=f"{log}: no such file"))
        lines = read_lines(log)
        report.checks.extend(
            _log_checks(lines, list(expect_log), list(forbid_log), tuple(ignore_errors))
        )
    return _finish(report, folder, t0)
