"""Running the reference server: in a background thread (tests) or in the foreground (CLI).

``serve_in_thread`` starts a ``uvicorn.Server`` on a daemon thread with its own
event loop, waits until it is listening, reads the port it bound from its
sockets (``port=0`` = a free port) and yields the base URL
``http://127.0.0.1:PORT`` (the OpenAI ``base_url`` is that plus ``/v1``). On exit
it asks uvicorn to stop and joins the thread. What the server has seen is at
``GET /sim/stats`` (:func:`harness.sim.stats.fetch_stats`).

The ``connection-drop`` profile closes connections by raising
:class:`~harness.sim.infra.ConnectionDropped` inside a started response; uvicorn's error
log of it is filtered out (it is the profile working, not a server bug).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from typing_extensions import Unpack

from harness.errors import SimBootCrash
from harness.sim import moe
from harness.sim.app import SimOptions, create_app
from harness.sim.infra import ConnectionDropped
from harness.sim.profiles import SimProfile, get_profile

__all__ = ["SimBootCrash", "bound_port", "make_server", "serve_in_thread"]

STARTUP_TIMEOUT_S = 20.0


class _QuietDrops(logging.Filter):
    """Drops uvicorn's "Exception in ASGI application" record of a deliberate drop."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, ConnectionDropped)


def _quiet_drops() -> None:
    """Install :class:`_QuietDrops` on uvicorn's error logger (once)."""
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietDrops) for f in log.filters):
        log.addFilter(_QuietDrops())


class _Server(uvicorn.Server):
    """uvicorn's server, calling ``on_started(port)`` once it listens."""

    on_started: Callable[[int], None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.on_started is not None and self.servers and not self.should_exit:
            self.on_started(bound_port(self))


def make_server(
    profile: str | SimProfile = "healthy",
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_started: Callable[[int], None] | None = None,
    **options: Unpack[SimOptions],
) -> uvicorn.Server:
    """A configured (not started) ``uvicorn.Server`` for the reference app.

    ``on_started(port)`` is called once the server listens (the CLI prints the URL);
    ``options``: :class:`~harness.sim.app.SimOptions`.

    Raises:
        KeyError: unknown profile name. SimBootCrash: the profile crashes at boot.
        OptionValueError: an unknown fault in ``gsm8k_faults``.
    """
    prof = get_profile(profile)
    crash = moe.crash_traceback(prof, capture=options.get("capture", False))
    if crash:
        raise SimBootCrash(crash)
    app = create_app(prof, **options)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, lifespan="off"
    )
    _quiet_drops()  # after uvicorn.Config, which configures uvicorn's loggers
    server = _Server(config)
    server.on_started = on_started
    return server


def bound_port(server: uvicorn.Server) -> int:
    """The TCP port a started server listens on."""
    for srv in server.servers:
        for sock in srv.sockets:
            return int(sock.getsockname()[1])
    raise RuntimeError("uvicorn server has no listening socket")


@contextmanager
def serve_in_thread(
    profile: str | SimProfile = "healthy",
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    **options: Unpack[SimOptions],
) -> Iterator[str]:
    """Serve the reference server on a daemon thread; yields ``http://HOST:PORT``.

    ``options``: :class:`~harness.sim.app.SimOptions` (e.g. ``scenarios_dir``,
    ``gsm8k_faults={7: "http-500"}``).

    Raises:
        KeyError: unknown profile. SimBootCrash: the profile crashes at boot.
        OptionValueError: an unknown fault in ``gsm8k_faults``.
        RuntimeError: the server did not start within 20 s (e.g. port in use).
    """
    server = make_server(profile, host=host, port=port, **options)
    thread = threading.Thread(target=server.run, name="harness-sim", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"reference server did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port(server)}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
