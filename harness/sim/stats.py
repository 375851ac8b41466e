"""What the reference server has seen since it started: ``GET /sim/stats``.

The endpoint is the reference server's own (no inference server has it): tests, and
anyone checking a client against the server, read from it how many POST requests
arrived, how many were answered at once, how many the profile's infrastructure fault
answered, and the bodies of the last :data:`RECENT_REQUESTS` requests. Shape::

    {"requests": 5, "in_flight": 0, "max_in_flight": 2, "faults_served": 1,
     "recent": [{"path": "/v1/chat/completions", "body": {...}}, ...]}

:class:`SimStats` is both the live counters (held by the app, updated on its event loop)
and the parsed answer (:func:`fetch_stats`).
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, Field

__all__ = ["RECENT_REQUESTS", "STATS_PATH", "ReceivedRequest", "SimStats", "fetch_stats"]

#: how many request bodies ``recent`` keeps (oldest dropped first)
RECENT_REQUESTS = 64
#: the path of the endpoint, under the server root
STATS_PATH = "/sim/stats"


class ReceivedRequest(BaseModel):
    """One POST request as received: its path and its JSON body."""

    path: str
    body: dict[str, Any]


class SimStats(BaseModel):
    """Counters of the POST endpoints (``/v1/chat/completions``, ``/v1/completions``,
    ``/generate``) since the server started.

    Attributes:
        requests: POST requests received (valid or not).
        in_flight: POST requests being answered now (until the last body byte is sent).
        max_in_flight: the most POST requests answered at once.
        faults_served: requests the profile's infrastructure fault answered instead of
            the model (HTTP 500, a bad body, a dropped connection; ``slow`` only delays).
        recent: the last :data:`RECENT_REQUESTS` requests with a JSON object body,
            oldest first.
    """

    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    faults_served: int = 0
    recent: list[ReceivedRequest] = Field(default_factory=list)

    def started(self) -> None:
        """A POST request arrived."""
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finished(self) -> None:
        """A POST request was answered (or its connection dropped)."""
        self.in_flight -= 1

    def record(self, path: str, body: dict[str, Any]) -> None:
        """Keep ``body`` among the recent requests."""
        self.recent.append(ReceivedRequest(path=path, body=body))
        del self.recent[:-RECENT_REQUESTS]


def fetch_stats(base_url: str, *, timeout_s: float = 5.0) -> SimStats:
    """``GET <root>/sim/stats`` of a running reference server, parsed.

    ``base_url`` is the server root or the OpenAI base URL (``.../v1``).

    Raises:
        httpx.HTTPError: the server did not answer 200.
        pydantic.ValidationError: the answer is not a :class:`SimStats`.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    resp = httpx.get(root + STATS_PATH, timeout=timeout_s)
    resp.raise_for_status()
    return SimStats.model_validate(resp.json())
