"""Run folders: ``results/<run-id>/``, the only code that knows their files.

Every command writes one folder; every later step (scoring, reports, resume) reads it
back through :class:`RunFolder`. Layout::

    manifest.json      RunManifest: harness version, git revision, command, targets, args
    transcripts.jsonl  one RunRecord per finished run, appended and fsynced as it ends
    scores.jsonl       one RunScore per run, in transcript order (rewritten by scoring)
    summary.json       Summary: aggregates, tests, verdict (small; see harness.summary)
    report.html        the self-contained report; report.md the pull-request comment
    gsm8k.jsonl        harness gsm8k: one GSM8KRecord per question and side
    gsm8k.json         harness gsm8k: GSM8KSummary
    boot.json          harness boot: BootReport; server.log the server's output
    matrix.json        harness matrix: MatrixResult
    gsm8k/<label>/     harness matrix: each deployment's GSM8K run, a run folder of its own
                       (gsm8k.jsonl, gsm8k.json; RunFolder.sub(RunFolder.GSM8K_DIR, label))

Records and scores are read streaming (one line in memory at a time); a truncated last
line (a run killed while writing) is skipped, and cut off before anything is appended
(:meth:`RunFolder.finished_keys`). The results root is ``results/`` or
``$HARNESS_RESULTS``; run ids are ``<command>-YYYYmmdd-HHMMSS-<pid>``.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shlex
import stat
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol

from pydantic import BaseModel, ValidationError

from harness._version import __version__
from harness.errors import RunFolderError
from harness.redaction import redact_text
from harness.scoring.models import RunScore
from harness.summary import Summary
from harness.transcript import RunManifest, RunRecord, TargetInfo

__all__ = [
    "DEFAULT_RESULTS",
    "RunFolder",
    "git_revision",
    "check_run_id",
    "new_run_id",
    "redact",
    "release_locks",
    "temp_path",
]

#: results root; override with $HARNESS_RESULTS
DEFAULT_RESULTS = Path(os.environ.get("HARNESS_RESULTS", "results"))

_SECRET = re.compile(r"(^|_)(api_?key|key|token|secret|password|authorization)$", re.I)


_ISSUED: set[str] = set()


def new_run_id(command: str) -> str:
    """``<command>-YYYYmmdd-HHMMSS-<pid>``: sortable and unique (a second id of one
    command in the same second of one process gets ``-2``, ``-3``, ...)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = run_id = f"{command}-{stamp}-{os.getpid()}"
    n = 2
    while run_id in _ISSUED:
        run_id, n = f"{base}-{n}", n + 1
    _ISSUED.add(run_id)
    return run_id


def git_revision() -> str | None:
    """The git revision of the working directory's checkout (``+dirty`` if modified)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


#: the longest run id (characters): a folder name, with room for the temporary files'
#: suffixes within a file name's 255 bytes
MAX_RUN_ID = 128


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a plain folder name (what ``--run-id``/``--resume`` take).

    Raises:
        RunFolderError: a path (``a/b``, ``../x``, ``/tmp/x``), ``.``/``..``, empty, or
            longer than :data:`MAX_RUN_ID` characters (a file name's limit is 255 bytes).
    """
    if not run_id or run_id in (".", "..") or Path(run_id).name != run_id or "/" in run_id:
        raise RunFolderError(
            f"run id {run_id!r} is not a folder name; give the name alone "
            "(e.g. compare-20261130-120000-1) and the root with --results"
        )
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in run_id):
        raise RunFolderError(
            f"run id {run_id.encode('unicode_escape').decode()[:60]!r} holds control "
            "characters (a terminal would run them); give letters, digits, '-', '_' or '.'"
        )
    if len(run_id.encode("utf-8", "surrogatepass")) > MAX_RUN_ID:
        raise RunFolderError(
            f"run id {run_id[:40]!r}... ({len(run_id)} characters) is too long; give "
            f"at most {MAX_RUN_ID} characters (bytes in UTF-8; e.g. compare-20261130-120000-1)"
        )
    return run_id


def redact(args: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of ``args`` as JSON values, with values of secret-looking keys as ``"***"``
    and URLs without their keys (:func:`harness.redaction.redact_text`)."""
    out: dict[str, Any] = {}
    for k, v in args.items():
        if _SECRET.search(k) and not k.endswith("_env"):
            out[k] = "***" if v else v
        elif isinstance(v, str):
            out[k] = redact_text(v)
        elif isinstance(v, (int, float, bool, type(None))):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [redact_text(str(x)) for x in v]
        else:
            out[k] = redact_text(str(v))
    return out


def temp_path(path: Path) -> Path:
    """A name beside ``path`` for writing it whole before ``replace``: unique per writer
    (``scores.jsonl.<pid>-<n>.tmp``), so two processes (or threads) writing the same file
    never share, truncate or move each other's temporary file."""
    return path.with_name(f"{path.name}.{os.getpid()}-{next(_TEMP_COUNT)}.tmp")


_TEMP_COUNT = itertools.count()

#: the lock files this process holds (:meth:`RunFolder.lock`), open until released
_HELD: list[IO[str]] = []


def release_locks() -> None:
    """Release every run-folder lock this process holds (the end of a command)."""
    while _HELD:
        fh = _HELD.pop()
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


class _Line(Protocol):
    def model_dump_json(self) -> str: ...


def _append_line(path: Path, item: _Line) -> None:
    line = item.model_dump_json() + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


#: the largest file of a run folder read whole (``manifest.json``, ``summary.json``,
#: ``numerics.json``, ...), bytes: a folder's file can be anything (a symlink to a huge file)
MAX_FILE_BYTES = 1024 * 1024 * 1024
#: the longest line of a JSON Lines file (one run of ``transcripts.jsonl``), bytes
MAX_LINE_BYTES = 256 * 1024 * 1024


def _regular(path: Path) -> Path:
    """``path``, if it is a regular file (or a symlink to one).

    Raises:
        RunFolderError: a device (a symlink to ``/dev/zero``), a pipe, a folder: it is
            never read (an endless read, or a block).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise RunFolderError(
            f"{path}: not a regular file (a device, a pipe or a symlink to one); "
            "re-create the folder's files"
        )
    return path


def _lines(fh: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, line)`` of every non-blank line of ``fh``.

    Raises:
        RunFolderError: a line longer than :data:`MAX_LINE_BYTES`.
    """
    offset = 0
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            raise RunFolderError(
                f"{getattr(fh, 'name', 'a file')}: the line at byte {offset} is longer than "
                f"{MAX_LINE_BYTES:,} bytes; re-create the folder's files"
            )
        if line.strip():
            yield offset, line
        offset += len(line)


class RunFolder:
    """One ``results/<run-id>/`` folder (see the module docstring for its files).

    Create one with :meth:`create` (new or resumed: the manifest is kept if it exists),
    or point at an existing one with :meth:`open`. Paths of the files are attributes
    (``folder.transcripts``, ``folder.summary_path``, ...); reading and writing the
    records, scores and summary goes through the methods, so no other module knows
    their names or formats.
    """

    MANIFEST = "manifest.json"
    TRANSCRIPTS = "transcripts.jsonl"
    SCORES = "scores.jsonl"
    SUMMARY = "summary.json"
    REPORT_HTML = "report.html"
    REPORT_MD = "report.md"
    GSM8K_RECORDS = "gsm8k.jsonl"
    GSM8K_SUMMARY = "gsm8k.json"
    BOOT = "boot.json"
    SERVER_LOG = "server.log"
    MATRIX = "matrix.json"
    #: harness compare --single-turn: a vendor verifier's figures (harness.scoring.trigger)
    VERIFIER = "verifier.json"
    LOGPROBS = "logprobs.json"
    #: the contract pre-flight of each side (harness.preflight.ContractReport)
    CONTRACT = "contract.json"
    #: harness matrix: the folder holding each deployment's GSM8K run folder
    GSM8K_DIR = "gsm8k"
    #: the manifest's ``extra`` key of the scenario set (id -> content hash)
    SCENARIO_HASHES = "scenario_hashes"
    #: the lock file of :meth:`lock` (holds the pid of the process that writes the folder)
    LOCK = ".lock"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        #: file name -> byte offsets of lines skipped while reading (not complete JSON)
        self.skipped: dict[str, set[int]] = {}

    # ------------------------------------------------------------------ one writer

    def lock(self, fix: str = "wait for it to end, or give another --run-id") -> None:
        """Make this process the folder's one writer until :func:`release_locks` (or exit):
        an exclusive ``fcntl.flock`` on :attr:`LOCK`, which then holds our pid.

        Raises:
            RunFolderError: another process holds it (the line names its pid, then ``fix``),
                or the folder cannot be written.
        """
        try:
            fh = open(self.path / self.LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held open
        except OSError as exc:  # a read-only folder: `harness score` of someone else's
            raise RunFolderError(
                f"{self.path}: cannot write here ({exc.strerror or exc}); copy the folder "
                "somewhere writable"
            ) from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise RunFolderError(
                f"{self.path} is being written by another harness process (pid {holder}); {fix}"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        _HELD.append(fh)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(
        cls,
        command: str,
        *,
        results: str | Path | None = None,
        run_id: str | None = None,
        args: Mapping[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        targets: list[TargetInfo] | None = None,
    ) -> RunFolder:
        """Create ``<results>/<run-id>/`` with its ``manifest.json`` (kept if it exists:
        resuming). ``args`` are recorded with secrets redacted.

        Raises:
            RunFolderError: ``run_id`` is not a plain folder name, or the folder cannot be
                created (the results root is a file, or not writable).
        """
        root = Path(results) if results is not None else DEFAULT_RESULTS
        folder = cls(root / check_run_id(run_id or new_run_id(command)))
        try:
            folder.path.mkdir(parents=True, exist_ok=True)
            if not folder.manifest_path.exists():
                folder._write_manifest(
                    RunManifest(
                        run_id=folder.path.name,
                        command=shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                        kind=command,
                        harness_version=__version__,
                        git_revision=git_revision(),
                        targets=targets or [],
                        args=redact(args or {}),
                        extra=extra or {},
                    )
                )
        except OSError as exc:
            where = (
                "--results"
                if results is not None or "HARNESS_RESULTS" not in os.environ
                else "$HARNESS_RESULTS (or --results)"
            )
            raise RunFolderError(
                f"{folder.path}: cannot create the run folder ({exc.strerror or exc}); "
                f"give a writable directory with {where}"
            ) from None
        return folder

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        """An existing run folder.

        Raises:
            RunFolderError: ``path`` is not a directory.
        """
        folder = cls(path)
        if not folder.path.is_dir():
            raise RunFolderError(f"{folder.path}: no such run folder; pass results/<run-id>")
        return folder

    # ------------------------------------------------------------------ paths

    def file(self, name: str) -> Path:
        """The path of ``name`` in this folder (one of the class's file names)."""
        return self.path / name

    @property
    def manifest_path(self) -> Path:
        """``manifest.json`` of the folder."""
        return self.path / self.MANIFEST

    @property
    def transcripts(self) -> Path:
        """``transcripts.jsonl`` of the folder."""
        return self.path / self.TRANSCRIPTS

    @property
    def scores_path(self) -> Path:
        """``scores.jsonl`` of the folder."""
        return self.path / self.SCORES

    @property
    def summary_path(self) -> Path:
        """``summary.json`` of the folder."""
        return self.path / self.SUMMARY

    @property
    def run_id(self) -> str:
        """The manifest's run id, else the folder's name."""
        try:
            manifest = self.manifest()
        except RunFolderError:
            manifest = None
        return manifest.run_id if manifest is not None else self.path.name

    def sub(self, *parts: str) -> RunFolder:
        """The run folder ``<this folder>/<parts...>`` (e.g. ``sub(GSM8K_DIR, label)``: a
        matrix deployment's GSM8K run); not created here (its command creates it)."""
        return RunFolder(self.path.joinpath(*parts))

    def has(self, name: str) -> bool:
        """Whether the folder holds file ``name``."""
        return (self.path / name).is_file()

    # ------------------------------------------------------------------ manifest

    def manifest(self) -> RunManifest | None:
        """``manifest.json``, or None if there is none.

        Raises:
            RunFolderError: the file is there but unreadable.
        """
        if not self.manifest_path.exists():
            return None
        manifest: RunManifest = self._read_model(
            self.manifest_path, RunManifest, "start a new run instead"
        )
        return manifest

    def _write_manifest(self, manifest: RunManifest) -> None:
        self.write_model(self.MANIFEST, manifest)

    def set_extra(self, key: str, value: Any, *, replace: bool = False) -> None:
        """Record ``value`` under ``key`` in the manifest's ``extra``: only if it is not
        there yet (a command writing into a folder another one created, e.g. GSM8K under
        pytest), or in place of the old value with ``replace``."""
        manifest = self.manifest()
        if manifest is not None and (replace or key not in manifest.extra):
            manifest.extra[key] = value
            self._write_manifest(manifest)

    def record_scenarios(self, scenario_hashes: Mapping[str, str]) -> None:
        """Record the scenario set (id -> content hash) of a new run, what a resume must
        give again (kept as first recorded)."""
        self.set_extra(self.SCENARIO_HASHES, dict(scenario_hashes))

    def kind(self) -> str | None:
        """The command that made the folder (the manifest's ``kind``), or None."""
        try:
            manifest = self.manifest()
        except RunFolderError:
            return None
        return manifest.kind if manifest is not None else None

    def set_target_models(self, models: Mapping[tuple[str, str | None], str]) -> None:
        """Fill in the manifest's targets' ``model`` ((label, side) -> the model id a
        server named once asked; the manifest is written before they are asked)."""
        manifest = self.manifest()
        if manifest is None:
            return
        changed = False
        for info in manifest.targets:
            model = models.get((info.label, info.side))
            if model and not info.model:
                info.model, changed = model, True
        if changed:
            self._write_manifest(manifest)

    def add_targets(self, infos: Sequence[TargetInfo]) -> None:
        """Add the targets' self-description to the manifest (once per side and label)."""
        manifest = self.manifest()
        if manifest is None:
            return
        known = {(t.side, t.label) for t in manifest.targets}
        new = [i for i in infos if (i.side, i.label) not in known]
        if new:
            manifest.targets.extend(new)
            self._write_manifest(manifest)

    # ------------------------------------------------------------------ transcripts

    def append_record(self, record: RunRecord) -> None:
        """Append one record to ``transcripts.jsonl``, flushed and fsynced (a kill after
        this returns loses nothing)."""
        _append_line(self.transcripts, record)

    def finished_keys(self) -> set[str]:
        """``run_key`` of every run recorded with an outcome, what a resumed run skips.

        A run whose latest record is an infrastructure error (the server was down, timed
        out, answered garbage) is not finished: resuming runs it again, and the new
        record replaces the old one when scored. A truncated last line is cut off first
        so that new records start on a line of their own.
        """
        if not self.transcripts.exists():
            return set()
        with open(self.transcripts, "rb+") as fh:
            data = fh.read()
            if data and not data.endswith(b"\n"):
                fh.truncate(data.rfind(b"\n") + 1)
        infra = {r.run_key: r.is_infra_error for r in self.records()}
        return {key for key, failed in infra.items() if not failed}

    def records(self) -> Iterator[RunRecord]:
        """Every record in file order, streaming (a truncated last line skipped)."""
        for _, record in self.records_with_offsets():
            yield record

    def records_with_offsets(self) -> Iterator[tuple[int, RunRecord]]:
        """``(byte offset of its line, record)`` of every record, streaming."""
        yield from self._jsonl(self.transcripts, RunRecord, None)

    def records_at(self, offsets: Iterable[int]) -> Iterator[tuple[int, RunRecord]]:
        """The records whose lines start at ``offsets`` (from :meth:`records_with_offsets`),
        in file order."""
        yield from self._jsonl(self.transcripts, RunRecord, sorted(offsets))

    def record_at(self, offset: int) -> RunRecord:
        """The record whose line starts at ``offset``."""
        for _, record in self.records_at([offset]):
            return record
        raise RunFolderError(f"{self.transcripts}: no record at byte {offset}")

    def run_keys_with_offsets(self) -> Iterator[tuple[int, str]]:
        """``(offset, run_key)`` of every line, without validating whole records."""
        if not self.transcripts.exists():
            return
        with open(_regular(self.transcripts), "rb") as fh:
            for offset, line in _lines(fh):
                key = _run_key(line)
                if key is not None:
                    yield offset, key

    # ------------------------------------------------------------------ scores

    @contextmanager
    def score_writer(self) -> Iterator[Any]:
        """A function ``write(score)`` appending to a new ``scores.jsonl``; the file
        replaces the old one only when the block ends without an exception."""
        tmp = temp_path(self.scores_path)
        try:
            with open(tmp, "x", encoding="utf-8") as fh:

                def write(score: RunScore) -> None:
                    fh.write(score.model_dump_json() + "\n")

                yield write
            tmp.replace(self.scores_path)
        finally:
            tmp.unlink(missing_ok=True)  # left only by an exception

    def scores_with_offsets(self) -> Iterator[tuple[int, RunScore]]:
        """``(byte offset, score)`` of every line of ``scores.jsonl``, streaming (none
        when the folder was never scored)."""
        yield from self._jsonl(self.scores_path, RunScore, None)

    def scores_at(self, offsets: Iterable[int]) -> Iterator[tuple[int, RunScore]]:
        """The scores whose lines start at ``offsets``, in file order."""
        yield from self._jsonl(self.scores_path, RunScore, sorted(offsets))

    # ------------------------------------------------------------------ summary

    def read_summary(self) -> Summary | None:
        """``summary.json``, or None if there is none.

        Raises:
            RunFolderError: the file is there but unreadable or from another version.
        """
        if not self.summary_path.exists():
            return None
        summary: Summary = self._read_model(
            self.summary_path, Summary, "re-create it with `harness score`"
        )
        return summary

    def write_summary(self, summary: Summary) -> Path:
        """Write ``summary.json`` (indented, atomically); returns its path."""
        return self.write_model(self.SUMMARY, summary)

    # ------------------------------------------------------------------ other files

    def write_model(self, name: str, model: BaseModel) -> Path:
        """Write ``model`` as indented JSON to file ``name`` (atomically); returns its path."""
        path = self.path / name
        tmp = temp_path(path)
        tmp.write_text(model.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(path)
        return path

    def read_model(self, name: str, cls: type[BaseModel]) -> Any:
        """The ``cls`` in file ``name``, or None if there is no such file.

        Raises:
            RunFolderError: the file is there but unreadable or from another version.
        """
        path = self.path / name
        if not path.is_file():
            return None
        return self._read_model(path, cls, "re-create it with the command that wrote it")

    def lines(self, name: str, cls: type[BaseModel]) -> Iterator[Any]:
        """Every ``cls`` of the JSON-lines file ``name``, streaming (none if it is absent)."""
        for _, item in self._jsonl(self.path / name, cls, None):
            yield item

    # ------------------------------------------------------------------ resume

    def scenario_changes(
        self, scenario_hashes: Mapping[str, str]
    ) -> tuple[list[str], list[str], list[str]]:
        """How ``scenario_hashes`` (scenario id -> :meth:`Scenario.content_hash`) differ from
        the scenario set recorded at creation (:meth:`record_scenarios`; older folders:
        the ``scenario_hash`` of the recorded runs).

        Returns:
            ``(changed, missing, added)`` scenario ids, each in recorded (``added``: given)
            order: recorded with other contents, recorded but not given now, given now but
            not recorded (always empty for an older folder).

        Raises:
            RunFolderError: the manifest is there but unreadable.
        """
        manifest = self.manifest()
        recorded = manifest.extra.get(self.SCENARIO_HASHES) if manifest is not None else None
        if isinstance(recorded, dict):  # the scenario set the folder was created with
            changed = [
                k for k in recorded if k in scenario_hashes and scenario_hashes[k] != recorded[k]
            ]
            missing = [k for k in recorded if k not in scenario_hashes]
            added = [k for k in scenario_hashes if k not in recorded]
            return changed, missing, added
        changed, missing = self._changed_scenarios(scenario_hashes)  # what its runs say
        return changed, missing, []

    def _changed_scenarios(self, hashes: Mapping[str, str]) -> tuple[list[str], list[str]]:
        """(scenarios whose file changed since they were recorded, scenarios recorded but
        not among ``hashes``)."""
        changed: dict[str, None] = {}
        missing: dict[str, None] = {}
        if not self.transcripts.exists():
            return [], []
        with open(_regular(self.transcripts), "rb") as fh:
            for _, line in _lines(fh):
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, RecursionError):  # a line nested too deep
                    continue
                sid = rec.get("scenario_id") if isinstance(rec, dict) else None
                if not isinstance(sid, str):
                    continue
                now = hashes.get(sid)
                if now is None:
                    missing[sid] = None
                elif now != rec.get("scenario_hash"):
                    changed[sid] = None
        return list(changed), list(missing)

    # ------------------------------------------------------------------ helpers

    def _read_model(self, path: Path, cls: type[Any], fix: str) -> Any:
        try:
            with open(_regular(path), "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise RunFolderError(
                    f"{path}: larger than {MAX_FILE_BYTES:,} bytes, not a file the harness "
                    f"wrote; {fix}"
                )
            return cls.model_validate_json(data)
        except OSError as exc:
            raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            if err["type"] == "json_invalid":
                raise RunFolderError(f"{path}: not valid JSON ({err['msg']}); {fix}") from None
            loc = ".".join(str(p) for p in err["loc"])
            raise RunFolderError(
                f"{path}: {loc}: {err['msg']} (written by another harness version?); {fix}"
            ) from None

    def _jsonl(
        self, path: Path, cls: type[BaseModel], offsets: list[int] | None
    ) -> Iterator[tuple[int, Any]]:
        if not path.exists():
            return
        with open(_regular(path), "rb") as fh:
            for offset, line in _lines(fh) if offsets is None else _seek(fh, offsets):
                try:
                    yield offset, cls.model_validate_json(line)
                except ValidationError as exc:
                    if exc.errors()[0]["type"] == "json_invalid":
                        self.skipped.setdefault(path.name, set()).add(offset)
                        continue  # a truncated last line: a run killed while writing
                    raise RunFolderError(
                        f"{path}: the line at byte {offset} is not a {cls.__name__} "
                        f"({exc.errors()[0]['msg']}); re-create the folder's files"
                    ) from None


def _seek(fh: BinaryIO, offsets: list[int]) -> Iterator[tuple[int, bytes]]:
    for offset in offsets:
        fh.seek(offset)
        yield offset, fh.readline()


_KEY = re.compile(rb'"run_key"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _run_key(line: bytes) -> str | None:
    """The ``run_key`` of a transcript line (found by pattern near the start, else parsed)."""
    m = _KEY.search(line, 0, 2000)
    if m is not None:
        return str(json.loads(b'"' + m.group(1) + b'"'))
    try:
        data = json.loads(line)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep
        return None
    key = data.get("run_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None
