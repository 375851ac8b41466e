"""Argument helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from harness.cli import ExitCode
from harness.client.target import server_root
from harness.errors import OptionValueError, RunFolderError
from harness.gsm8k.models import GSM8KSummary
from harness.options import OPTIONS, add_argument, http_url
from harness.present.report import write_report_or_warning
from harness.redaction import redact_text, redact_url
from harness.runfolder import DEFAULT_RESULTS, RunFolder, check_run_id
from harness.runner import StreamMode
from harness.scenario.model import Scenario
from harness.summary import Summary

_MODES: dict[str, StreamMode] = {
    "both": "both",
    "on": True,
    "true": True,
    "off": False,
    "false": False,
}


def add_stream_argument(p: argparse.ArgumentParser) -> None:
    """``--stream`` (on), ``--stream both`` (each scenario both ways), ``--stream off``.

    No argument type: a value that is not a mode is a scenario path (see :func:`stream_mode`).
    """
    add_argument(p, "stream", type=None, metavar="MODE")


def add_skip_contract(p: argparse.ArgumentParser) -> None:
    """``--skip-contract``: no contract pre-flight before the scenarios
    (:mod:`harness.preflight`)."""
    p.add_argument(
        "--skip-contract",
        action="store_true",
        help="skip the contract pre-flight (a few small requests per side before any "
        "scenario: temperature and seed, max_tokens, n, stop, usage, streaming, "
        "tool_choice and parallel_tool_calls honoured)",
    )


def stream_mode(args: argparse.Namespace) -> StreamMode:
    """The ``--stream`` value as a runner mode.

    A value that is not a mode is a scenario path that followed a bare ``--stream``
    (``harness run --stream scenarios/``): it is moved back to ``args.scenarios``.

    Raises:
        OptionValueError: the value is neither a mode nor something like a path (a
            missing ``a/b.yaml`` is left to the scenario loader's error).
    """
    value = str(args.stream)
    if value.lower() in _MODES:
        return _MODES[value.lower()]
    if not Path(value).exists() and "/" not in value and not Path(value).suffix:
        raise OptionValueError(
            f"--stream {value}: not a mode (on, off or both) nor a scenario path"
        )
    args.scenarios = [value, *(args.scenarios or [])]
    return True


def preflight(label: str, url: str, api_key_env: str = "OPENAI_API_KEY") -> str | None:
    """``GET /v1/models`` once before a long run: a line ``<label> <url>: <problem>``, or None.

    Only an unreachable server (connection refused, timeout, DNS), a 5xx or an auth
    refusal (401/403) is a problem; a server without ``/v1/models`` (404) is let through.
    """
    root, url = server_root(url), redact_url(url)
    key = os.environ.get(api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(root + "/v1/models", headers=headers, timeout=10.0)
    except httpx.ConnectError as exc:
        why = "connection refused" if "refused" in str(exc).lower() else f"cannot connect ({exc})"
        why = redact_text(why)
        return f"{label} {url}: {why}"
    except httpx.TimeoutException:
        return f"{label} {url}: no answer to GET /v1/models within 10 s"
    except httpx.HTTPError as exc:
        return f"{label} {url}: {type(exc).__name__}: {redact_text(str(exc))}"
    if r.status_code in (401, 403):
        return f"{label} {url}: GET /v1/models answered {r.status_code} (set ${api_key_env})"
    if r.status_code >= 500:
        return f"{label} {url}: GET /v1/models answered {r.status_code}"
    return None


def resume_command(args: argparse.Namespace, run_id: str) -> str:
    """The command that finishes an interrupted run: the same arguments, with
    ``--resume RUN_ID`` in place of any ``--run-id``/``--resume``."""
    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    kept: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--run-id", "--resume"):
            skip = True
        elif not a.startswith(("--run-id=", "--resume=")):
            kept.append(a)
    return redact_text(shlex.join([*_program(), *kept, "--resume", run_id]))


def _program() -> list[str]:
    """How to call harness again: ``harness`` when it is on ``PATH``, else the script that
    runs now (``.venv/bin/harness``), else ``python -m harness``."""
    if shutil.which("harness"):
        return ["harness"]
    script = Path(sys.argv[0])
    if script.name == "harness" and script.exists():
        return [str(script)]
    return [sys.executable, "-m", "harness"]


def check_resume(
    args: argparse.Namespace, scenarios: list[Scenario], keys: tuple[str, ...]
) -> str | None:
    """Why ``--resume``/``--run-id`` would mix two runs in one folder, or None.

    A problem when both are given, when a run id is not a plain folder name, when
    ``--resume`` names no folder, or when the existing folder was recorded with other
    values of ``keys`` or other scenario files (:func:`resume_mismatch`).
    """
    resume, run_id = getattr(args, "resume", None), args.run_id
    if resume and run_id:
        return "give --resume RUN_ID or --run-id NAME, not both"
    name = resume or run_id
    if not name:
        return None
    try:
        check_run_id(name)
    except RunFolderError as exc:
        return str(exc)
    root = Path(args.results or DEFAULT_RESULTS)
    if resume and not (root / resume).is_dir():
        return f"--resume: no run folder {root / resume}"
    hashes = {s.id: s.content_hash() for s in scenarios}
    why = resume_mismatch(RunFolder(root / name), vars(args), keys, hashes)
    return f"cannot resume: {why}; use a new --run-id or the same arguments" if why else None


def resume_mismatch(
    folder: RunFolder,
    args: Mapping[str, Any],
    keys: Sequence[str],
    scenario_hashes: Mapping[str, str],
) -> str | None:
    """Why resuming ``folder`` with ``args`` would mix two different runs, or None.

    Compares ``args[key]`` for each of ``keys`` (target URLs, model, repeats,
    stream...) with the ``args`` recorded in the manifest (keys it lacks are skipped;
    a manifest without ``keys[0]``, e.g. ``target``, was written by another command),
    and ``scenario_hashes`` (scenario id -> :meth:`Scenario.content_hash`) with the
    scenario set recorded at creation (:meth:`RunFolder.scenario_changes`). Returns one
    line listing what differs, each argument as its flag (``--model 'a' (now 'b')``);
    None for a folder without a manifest (new).
    """
    try:
        manifest = folder.manifest()
        if manifest is None:
            return None
        old = manifest.args
        if old and keys and keys[0] not in old:  # keys[0] names the command's target(s)
            return f"{folder.path} was recorded by another command ({manifest.command!r})"
        diffs = [
            f"--{k.replace('_', '-')} {old[k]!r} (now {args.get(k)!r})"
            for k in keys
            if k in old and _resume_value(k, old[k]) != _resume_value(k, args.get(k))
        ]
        changed, missing, added = folder.scenario_changes(scenario_hashes)
    except RunFolderError as exc:
        return str(exc)
    if changed:
        diffs.append("scenario file(s) changed since: " + ", ".join(changed))
    if missing:
        diffs.append("scenarios not given now: " + ", ".join(missing))
    if added:
        diffs.append("scenarios not in the recorded run: " + ", ".join(added))
    return f"{folder.path} was recorded with " + "; ".join(diffs) if diffs else None


def _resume_value(key: str, value: Any) -> Any:
    """Values as compared on resume: URLs without ``/`` or ``/v1`` at the end and without
    their keys (the manifest keeps none), stream modes."""
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return redact_url(value.rstrip("/").removesuffix("/v1").rstrip("/"))
    if key == "stream":
        text = str(value).lower()
        return {"on": "true", "false": "off", "none": "off"}.get(text, text)
    return value


def recorded_args(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments a manifest records (not the raw command line, which it has apart)."""
    return {k: v for k, v in vars(args).items() if k not in ("argv", "func")}


def open_run_folder(
    command: str,
    args: argparse.Namespace,
    console: Console,
    scenarios: list[Scenario] | None = None,
    **kw: Any,
) -> RunFolder:
    """Create (or reopen, resuming) the run folder and say at once where it is and how to
    resume it, so a killed run can be found and finished.

    Raises:
        RunFolderError: the folder cannot be created (``--results`` is a file, read-only),
            or another process writes it (:meth:`RunFolder.lock`, held until the command
            ends: :func:`harness.cli.main` releases it).
    """
    run_id = getattr(args, "resume", None) or args.run_id
    folder = RunFolder.create(
        command, results=args.results, run_id=run_id, args=recorded_args(args), **kw
    )
    folder.lock()  # one writer: a second --resume of it at once gets one line, exit 2
    if scenarios is not None:  # what --resume must give again (check_resume)
        folder.record_scenarios({s.id: s.content_hash() for s in scenarios})
    console.print(f"run folder: {folder.path}", markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"  if interrupted, resume with: {resume_command(args, folder.path.name)}",
        markup=False, highlight=False, soft_wrap=True, style="dim",
    )  # fmt: skip
    return folder


def exit_code(summary: Summary, *, strict: bool = False) -> ExitCode:
    """The exit code of a scored folder: 3 a side over the infrastructure-error limit;
    1 a REGRESSION (also INCONCLUSIVE under ``strict``) or a failed one-sided run; else 0."""
    v, o = summary.verdict, summary.outcome
    if v is not None:
        if v.infra_limited:
            return ExitCode.INFRA_ERROR
        regressed = v.verdict == "REGRESSION" or (strict and v.verdict == "INCONCLUSIVE")
        return ExitCode.REGRESSION if regressed else ExitCode.OK
    if o is not None:
        if o.infra_limited:
            return ExitCode.INFRA_ERROR
        return ExitCode.OK if o.passed else ExitCode.REGRESSION
    return ExitCode.OK


def gsm8k_exit_code(summary: GSM8KSummary, *, strict: bool = False) -> ExitCode:
    """The exit code of a GSM8K run: 1 REGRESSION (also an underpowered INCONCLUSIVE
    under ``strict``); 3 too many infrastructure errors, or a paired comparison with no
    question answered by both sides; else 0."""
    if summary.verdict == "REGRESSION":
        return ExitCode.REGRESSION
    paired = summary.paired
    unjudged = paired is None or paired.n_pairs == 0
    if summary.infra_error or (summary.verdict == "INCONCLUSIVE" and unjudged):
        return ExitCode.INFRA_ERROR
    if summary.verdict == "INCONCLUSIVE" and strict:
        return ExitCode.REGRESSION
    return ExitCode.OK


def write_report_or_warn(folder: RunFolder, console: Console, *, say: bool = True) -> Path | None:
    """Write the folder's ``report.html`` and ``report.md`` and print where (unless not
    ``say``); if the report cannot be drawn, one ``warning:`` line on stderr naming the
    exception (:func:`harness.present.report.write_report_or_warning`): the results stand."""
    path, warning = write_report_or_warning(folder.path)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)
    elif say:
        console.print(f"report: {path}", soft_wrap=True, markup=False, highlight=False)
    return path


# ------------------------------------------------------------------ launched servers


def add_launch_arguments(p: argparse.ArgumentParser) -> None:
    """The boot options of a server the command launches (``--cmd``, ``--baseline-cmd``,
    ``--candidate-cmd``): where it answers, how long to wait, what its fusion must be."""
    g = p.add_argument_group("launched servers (--cmd)")
    g.add_argument("--url", type=http_url, help="where a launched server answers (else its --port)")
    opt = OPTIONS["boot_timeout"]
    g.add_argument(
        opt.flag, type=opt.parse, default=opt.default, metavar=opt.metavar, help=opt.help
    )
    g.add_argument("--health-path", default="/health", help="health endpoint (default /health)")
    g.add_argument("--expect-fusion", choices=["on", "off"],
                   help="a launched server's boot check FAILs unless fusion is in this state")  # fmt: skip


def launch_problem(flag: str, cmd: str | None) -> str | None:
    """Why a launch command (``--cmd``, ``--baseline-cmd``, ``--candidate-cmd``) cannot be
    split into arguments (an unclosed quote) or is blank; None when it can be (or none is
    given). The command itself is not repeated: it may carry a key."""
    if cmd is None:
        return None
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        return f"{flag}: cannot split the command ({exc}); check its quotes"
    if not argv:
        return f"{flag} is empty: give the server launch command"
    return None


def refuse_held_ports(args: argparse.Namespace, *cmds: str | None) -> None:
    """Before anything runs: refuse each launch command whose port already answers
    (:func:`harness.server.boot.refuse_held_port`; ``--url`` or the command's ``--port``).

    Raises:
        LaunchError: one line naming the port and what holds it.
    """
    from harness.server.boot import refuse_held_port
    from harness.server.process import url_from_command

    for cmd in cmds:
        if cmd:
            refuse_held_port(getattr(args, "url", None) or url_from_command(shlex.split(cmd)))


@contextlib.contextmanager
def launched_side(
    cmd: str, run_dir: Path, args: argparse.Namespace, *, url: str | None = None
) -> Iterator[tuple[str | None, Any]]:
    """Launch ``cmd`` with the boot checks (:func:`harness.server.boot.serving`; log and
    ``boot.json`` in ``run_dir``); yield ``(url, report)``: the healthy server's root, or
    None when it did not boot (the report quotes why). The server is stopped, and the
    report finished, when the block is left (SIGTERM and Ctrl-C included)."""
    from harness.server.boot import serving

    with serving(
        cmd, run_dir=run_dir, timeout_s=args.boot_timeout, health_path=args.health_path,
        url=url or getattr(args, "url", None), expect_fusion=args.expect_fusion,
    ) as report:  # fmt: skip
        yield report.healthy_url(), report


def print_side_boot(
    console: Console, role: str, boot: dict[str, Any] | None, label: str | None = None
) -> None:
    """One line per launched side: ``<role> (<label>) boot: PASS at URL; fusion ON``, and
    a crash quoted under it (at most 8 lines)."""
    if not boot:
        return
    label = role if not label or label == role else f"{role} ({label})"
    failed = [
        f"{c['name']} {c['verdict']}" for c in boot.get("checks", []) if c["verdict"] == "FAIL"
    ]
    line = (
        f"{label} boot: {boot.get('verdict')} at {boot.get('url') or '?'}; fusion "
        f"{boot.get('fusion') or 'UNKNOWN'}" + (f" (failed: {', '.join(failed)})" if failed else "")
    )
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    for q in (boot.get("crash") or [])[-8:]:
        console.print(f"    | {redact_text(q)}", markup=False, highlight=False, soft_wrap=True)
