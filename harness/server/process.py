"""A server process: launch it in its own process group, scan its log, find its URL, stop it.

What :mod:`harness.server.boot` (``harness boot``) and the matrix's ``launch`` deployments
(:mod:`harness.matrix.run`) share, and the end-to-end driver (``e2e/driver.py``) uses:

- :func:`launch` starts a command in its own session and process group
  (``start_new_session``), stdout and stderr appended to a log file;
  :func:`stop_group` stops the whole group (SIGTERM, then SIGKILL) and reaps it, also
  finding members that left the group but not the session (:func:`group_members`, a
  ``/proc`` scan), and the processes that left the session too (``setsid``: found by the
  launch's own environment tag, :func:`launched_members`), reporting any that survive;
- :func:`port_holder` says what already answers on a launch's port (its pid and command
  from ``/proc/net/tcp``, the model of its ``GET /v1/models``) and :func:`foreign_owner`
  whether a healthy port is held by another process than the launched one, so the server
  judged is the one launched;
- :class:`LogCap` keeps a launched server's log file under :data:`MAX_LOG_FILE` bytes on
  disk (its middle cut, its start and end kept);
- :func:`find_failure` finds the last Python traceback or the first CUDA/HIP error line
  of a log (a traceback's exception line, e.g. ``RuntimeError: The expanded size of the
  tensor (5) must match the existing size (4)``, quoted with its last lines);
- :func:`url_from_command` / :func:`url_from_log` find where the server answers
  (``--url``, ``--host``/``--port N`` in the command, or a ``Uvicorn running on
  http://...`` / ``Serving on http://...`` log line); :func:`health_status` asks it once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path

import httpx

from harness.redaction import redact_text

__all__ = [
    "LAUNCH_TAG",
    "MAX_LOG_FILE",
    "MAX_LOG_LINE",
    "MAX_LOG_READ",
    "LogCap",
    "LogScanner",
    "find_failure",
    "foreign_owner",
    "group_members",
    "health_status",
    "launch",
    "launched_members",
    "port_holder",
    "port_owners",
    "read_lines",
    "resolve_command",
    "stop_group",
    "traceback_pending",
    "url_from_command",
    "url_from_log",
]

_TB_START = "Traceback (most recent call last):"
#: the exception line that ends a traceback, e.g. ``RuntimeError: ...`` or ``torch.OutOfMemoryError``
_EXC_LINE = re.compile(
    r"^(?:\[[^\]]*\]\s*)?[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b"
)
_DEVICE_ERROR = re.compile(
    r"\b(?:CUDA|HIP|NCCL|RCCL|cuBLAS|hipBLAS(?:Lt)?|rocBLAS) error\b|\bhipError\w+|\bcudaError\w+"
    r"|CUDA out of memory|device-side assert triggered|HSA_STATUS_ERROR\w*",
    re.I,
)
_URL_LINE = re.compile(
    r"(?:Uvicorn running on|Serving on|Listening on|running on)\s+(https?://[^\s)]+)"
)


# ---------------------------------------------------------------- log scanning


#: the most of a log read at once (bytes): :func:`read_lines` reads a longer log's end
MAX_LOG_READ = 32 * 1024 * 1024
#: a log line longer than this (bytes) is cut there (a log without newlines is one line)
MAX_LOG_LINE = 8 * 1024
#: the lines of a growing log a :class:`LogScanner` keeps (its tail, for the report)
TAIL_LINES = 2000


def _cut(raw: bytes) -> str:
    text = raw[:MAX_LOG_LINE].decode("utf-8", errors="replace").rstrip("\r")
    return text + f" [cut at {MAX_LOG_LINE:,} bytes]" if len(raw) > MAX_LOG_LINE else text


def read_lines(path: Path | None, max_bytes: int = MAX_LOG_READ) -> list[str]:
    """The lines of a log file (undecodable bytes replaced, each cut at
    :data:`MAX_LOG_LINE` bytes); none if it does not exist. Of a log longer than
    ``max_bytes`` only its first and last ``max_bytes / 2`` are read (what a server says
    as it starts, and how it ended), with a line saying how much was skipped between."""
    if path is None or not path.exists():
        return []
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(0)
        if size <= max_bytes:
            return _lines(fh.read(max_bytes))
        half = max_bytes // 2
        head = _lines(fh.read(half))[:-1]  # its last line is cut by the window
        fh.seek(size - half)
        tail = _lines(fh.read(half))[1:]
    return [*head, f"[{size - 2 * half:,} bytes of the log not read]", *tail]


def _lines(data: bytes) -> list[str]:
    pieces = data.split(b"\n")
    if pieces and not pieces[-1]:
        pieces.pop()
    return [_cut(p) for p in pieces]


class LogScanner:
    """A growing log read incrementally: each :meth:`poll` reads only what was appended
    since the last one (at most :data:`MAX_LOG_READ` bytes), so a poll every 0.25 s costs
    what the server wrote, not the whole log; lines are cut at :data:`MAX_LOG_LINE` bytes
    (the rest of a longer one is skipped up to its newline).

    Keeps the last :data:`TAIL_LINES` lines (:attr:`lines`, for the report and
    :func:`find_failure`), the URL of the last ``Uvicorn running on ...`` line and the first
    CUDA/HIP error line not matching ``ignore`` (so one that scrolled out still counts).
    """

    def __init__(self, path: Path | None, ignore: tuple[str, ...] = ()) -> None:
        self.path, self.ignore = path, ignore
        self.offset = 0
        self.url: str | None = None
        self.device_error: str | None = None
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._partial = b""  # the line being written, at most MAX_LOG_LINE + 1 bytes

    @property
    def lines(self) -> list[str]:
        """The last lines read (and the line being written, as far as it is)."""
        return [*self._tail, *([_cut(self._partial)] if self._partial else [])]

    def poll(self) -> list[str]:
        """Read what was appended since the last poll; the complete lines it held."""
        if self.path is None or not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            if fh.seek(0, os.SEEK_END) < self.offset:  # cut by LogCap: read it again
                self.offset, self._partial = 0, b""
            fh.seek(self.offset)
            data = fh.read(MAX_LOG_READ)
        self.offset += len(data)
        *whole, rest = (self._partial + data).split(b"\n")
        self._partial = rest[: MAX_LOG_LINE + 1]  # a line past the cap: its end skipped
        new = [_cut(raw) for raw in whole]
        self._tail.extend(new)
        for ln in new:
            m = _URL_LINE.search(ln)
            self.url = url_from_log([ln]) if m else self.url
            if (
                self.device_error is None
                and _DEVICE_ERROR.search(ln)
                and not any(re.search(rx, ln) for rx in self.ignore)
            ):
                self.device_error = ln
        return new

    def failure(self) -> tuple[str, list[str]] | None:
        """:func:`find_failure` of the kept lines, else the first CUDA/HIP error seen."""
        found = find_failure(self.lines, ignore=self.ignore)
        if found is None and self.device_error is not None:
            return self.device_error.strip(), [self.device_error]
        return found


def _tracebacks(lines: list[str]) -> list[list[str]]:
    """Each Python traceback in ``lines``: from ``Traceback (most recent...`` to its exception line."""
    out: list[list[str]] = []
    cur: list[str] | None = None
    for ln in lines:
        if _TB_START in ln:
            cur = [ln]
            out.append(cur)
        elif cur is not None:
            cur.append(ln)
            if _EXC_LINE.match(ln) and not ln.startswith((" ", "\t")):
                cur = None
    return out


def _ended(tb: list[str]) -> bool:
    last = tb[-1]
    return len(tb) > 1 and bool(_EXC_LINE.match(last)) and not last.startswith((" ", "\t"))


def _kept(tbs: list[list[str]], ignore: tuple[str, ...]) -> list[list[str]]:
    return [tb for tb in tbs if not any(re.search(rx, ln) for rx in ignore for ln in tb)]


def find_failure(
    lines: list[str], *, quote: int = 6, ignore: tuple[str, ...] = ()
) -> tuple[str, list[str]] | None:
    """``(summary, quoted lines)`` for the last traceback or the first CUDA/HIP error, else None.

    The summary is the exception line (e.g. ``RuntimeError: The expanded size ...``);
    the quote is the traceback's last ``quote`` lines. A traceback with a line matching
    one of the ``ignore`` regexes (or such a CUDA/HIP error line) is not a failure.
    """
    tbs = _kept(_tracebacks(lines), ignore)
    if tbs:
        tb = tbs[-1]
        exc = next((ln for ln in reversed(tb) if _EXC_LINE.match(ln)), tb[-1])
        return exc.strip(), tb[-quote:]
    for ln in lines:
        if _DEVICE_ERROR.search(ln) and not any(re.search(rx, ln) for rx in ignore):
            return ln.strip(), [ln]
    return None


def traceback_pending(lines: list[str], ignore: tuple[str, ...]) -> bool:
    """The last (not ignored) traceback has not printed its exception line yet."""
    tbs = _kept(_tracebacks(lines), ignore)
    return bool(tbs) and not _ended(tbs[-1])


# ---------------------------------------------------------------- the log on disk

#: a launched server's log file on disk at most (bytes, about: what it writes between two
#: checks comes on top): past it, :class:`LogCap` cuts the middle
MAX_LOG_FILE = 256 * 1024 * 1024


class LogCap:
    """Keeps a growing log file under ``max_bytes`` while a server writes it: every
    ``interval_s`` (and once more at :meth:`stop`), a log past ``max_bytes`` is cut to its
    first quarter (what the server said as it started), a line saying how much was cut,
    and its last quarter (how it is ending). The server appends (``O_APPEND``:
    :func:`launch`), so its next write lands after the cut; what it writes while the
    tail is copied is lost. A flood of 5 GB in 8 s stays a file of about ``max_bytes``.
    """

    def __init__(self, path: Path, max_bytes: int | None = None, interval_s: float = 0.2) -> None:
        self.path, self.interval_s = path, interval_s
        self.max_bytes = max_bytes or MAX_LOG_FILE
        self.cut = 0  # bytes cut so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-cap", daemon=True)

    def start(self) -> LogCap:
        """Start checking (a daemon thread); returns ``self``."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop checking, after a last cut (bounded: the thread is joined within 5 s)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.check()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()

    def check(self) -> None:
        """Cut the log now if it is past the cap (never raises: a log is not a reason to
        fail a boot)."""
        with contextlib.suppress(OSError):
            size = os.stat(self.path).st_size
            if size <= self.max_bytes:
                return
            keep = self.max_bytes // 4
            with open(self.path, "r+b") as fh:
                fh.seek(size - keep)
                tail = fh.read(keep)
                self.cut += size - 2 * keep
                note = (
                    f"\n[harness: {self.cut:,} bytes of this log cut here, to keep it under "
                    f"{self.max_bytes:,} bytes]\n"
                ).encode()
                fh.seek(keep)
                fh.write(note + tail)
                fh.truncate()


# ---------------------------------------------------------------- processes


def resolve_command(argv: list[str]) -> list[str]:
    """``argv`` with its executable found: on ``PATH``, else beside ``sys.executable``
    (the virtual environment's ``bin/``, so ``harness sim ...`` works without activating it).

    Raises:
        FileNotFoundError: one line naming the executable and where it was looked for.
    """
    exe = argv[0]
    if os.sep in exe or (os.altsep and os.altsep in exe):
        if os.access(exe, os.X_OK) and Path(exe).is_file():
            return argv
        raise FileNotFoundError(f"{exe!r}: no such executable file")
    if shutil.which(exe):
        return argv
    beside = shutil.which(exe, path=str(Path(sys.executable).parent))
    if beside:
        return [beside, *argv[1:]]
    raise FileNotFoundError(
        f"{exe!r}: not found on PATH nor in {Path(sys.executable).parent}; give its full path"
    )


#: the environment variable every launched process carries (a value per launch): what
#: finds the processes that left its session and process group (``setsid``, a daemon)
LAUNCH_TAG = "HARNESS_LAUNCH_ID"
#: the tag of each launch, by the pid of its leader
_TAGS: dict[int, str] = {}


def launch(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` (no shell) in a new session and process group, stdout and stderr
    appended to ``log``, Python output unbuffered (``PYTHONUNBUFFERED=1``), tagged with
    :data:`LAUNCH_TAG` (its children inherit it: :func:`launched_members`).

    Raises:
        OSError: the command cannot be started (not found, not executable).
    """
    tag = uuid.uuid4().hex
    env = {**os.environ, "PYTHONUNBUFFERED": "1", LAUNCH_TAG: tag}
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    _TAGS[proc.pid] = tag
    return proc


def launched_members(leader: int) -> list[int]:
    """Live pids carrying the launch tag of ``leader`` (:func:`launch`) in their
    environment, wherever they went (another session, another parent); [] for a process
    not launched here. Read from ``/proc/<pid>/environ`` (this user's processes)."""
    tag = _TAGS.get(leader)
    if tag is None:
        return []
    needle = f"{LAUNCH_TAG}={tag}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        st = _proc_stat(int(entry))
        if needle in env.split(b"\0") and st and st[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, pgid, sid)`` of a live process from ``/proc/<pid>/stat``, else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[2]), int(fields[3])


def group_members(leader: int) -> list[int]:
    """Live (non-zombie) pids in process group or session ``leader``, by a /proc scan."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(int(entry))
            if st and st[0] not in ("Z", "X") and leader in (st[1], st[2]):
                out.append(int(entry))
    return out


def _members(leader: int) -> list[int]:
    """The launch's live processes: its group and session, and those carrying its tag."""
    return sorted({*group_members(leader), *launched_members(leader)})


def _signal_all(leader: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)
    for pid in _members(leader):  # members that left the group (or the session)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_group(proc: subprocess.Popen[bytes], *, grace_s: float = 5.0) -> list[str]:
    """SIGTERM the launch's processes, SIGKILL what is left after ``grace_s``; reap the
    leader. The processes are its process group and session and, by the launch's tag
    (:func:`launched_members`), those that detached from them (``setsid``).

    Returns notes (e.g. ``"SIGKILL needed for 2 process(es)"``; ``"pid(s) [..] had left
    the session (setsid)"``; ``"left: [pids]"`` if anything survived).
    """
    notes: list[str] = []
    leader = proc.pid
    detached = [p for p in launched_members(leader) if p not in group_members(leader)]
    if detached:
        notes.append(f"pid(s) {detached} had left the session (setsid): stopped with it")
    _signal_all(leader, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if not _members(leader):
            break
        time.sleep(0.05)
    left = _members(leader)
    if left:
        notes.append(f"SIGKILL needed for {len(left)} process(es)")
        _signal_all(leader, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        notes.append("leader not reaped")
    for _ in range(40):
        if not _members(leader):
            break
        time.sleep(0.05)
    if _members(leader):
        notes.append(f"left: {_members(leader)}")
    _TAGS.pop(leader, None)
    return notes


# ---------------------------------------------------------------- URLs and health


def url_from_command(argv: list[str]) -> str | None:
    """``--url U`` or ``--host H --port N`` (N != 0) in a launch command, else None."""
    opts: dict[str, str] = {}
    for i, a in enumerate(argv):
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            opts[k] = v
        elif a in ("--url", "--port", "--host") and i + 1 < len(argv):
            opts[a] = argv[i + 1]
    if "--url" in opts:
        return opts["--url"].rstrip("/")
    port = opts.get("--port", "")
    if port.isdigit() and int(port) != 0:
        host = opts.get("--host", "127.0.0.1")
        return f"http://{_local(host)}:{port}"
    return None


def _local(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "[::]", "") else host


def url_from_log(lines: list[str]) -> str | None:
    """The URL in the last ``Uvicorn running on ...``/``Serving on ...`` line, else None."""
    for ln in reversed(lines):
        m = _URL_LINE.search(ln)
        if m:
            u = httpx.URL(m.group(1).rstrip(".,;"))
            return f"{u.scheme}://{_local(u.host)}:{u.port or 80}"
    return None


def health_status(url: str, path: str = "/health", timeout_s: float = 2.0) -> int | None:
    """HTTP status of ``GET url+path``; None when nothing answers."""
    try:
        return httpx.get(url.rstrip("/") + path, timeout=timeout_s).status_code
    except httpx.HTTPError:
        return None


# ---------------------------------------------------------------- who holds a port

#: hosts a launched server's port is looked up on (this machine's)
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::", "")


def _local_port(url: str) -> int | None:
    """The port of ``url`` when its host is this machine, else None."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return None
    if u.host not in _LOCAL_HOSTS and not u.host.startswith("127."):
        return None
    return u.port or (443 if u.scheme == "https" else 80)


def _connects(url: str, timeout_s: float = 1.0) -> bool:
    u = httpx.URL(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((_local(u.host), port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (``/proc/net/tcp``, ``tcp6``: state 0A)."""
    out: set[str] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                out.add(f[9])
    return out


def port_owners(port: int) -> list[int]:
    """Pids (of this user's processes) holding a socket that listens on TCP ``port``."""
    links = {f"socket:[{i}]" for i in _listening_inodes(port)}
    out = []
    for entry in os.listdir("/proc") if links else []:
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(_readlink(f"/proc/{entry}/fd/{fd}") in links for fd in fds):
                out.append(int(entry))
    return sorted(out)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _cmdline(pid: int, most: int = 100) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = redact_text(" ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a))
    return text if len(text) <= most else text[: most - 3] + "..."


def _model(url: str) -> str | None:
    try:
        data = httpx.get(url.rstrip("/") + "/v1/models", timeout=2.0).json()
        model = data["data"][0]["id"]
    except Exception:
        return None
    return str(model)[:100] if model else None


def port_holder(url: str) -> str | None:
    """What already answers at ``url`` (a server's root on this machine): ``"pid 123
    (python -m ...), serving model 'm'"``; None when nothing accepts a connection there
    (or the host is not this machine's)."""
    port = _local_port(url)
    if port is None or not _connects(url):
        return None
    parts = [f"pid {p} ({_cmdline(p)})" for p in port_owners(port)[:3]]
    model = _model(url)
    if model is not None:
        parts.append(f"serving model {model!r}")
    return ", ".join(parts) or "a process of another user"


def foreign_owner(url: str, leader: int) -> str | None:
    """A line naming the process that listens on ``url``'s port when it is none of the
    launch ``leader``'s (its group, session or tagged processes); None when it is one of
    them, or the owner cannot be seen (another user's process, a host elsewhere)."""
    port = _local_port(url)
    owners = port_owners(port) if port is not None else []
    if not owners or set(owners) & {leader, *_members(leader)}:
        return None
    return f"pid {owners[0]} ({_cmdline(owners[0])})"
