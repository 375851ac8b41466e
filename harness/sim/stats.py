"""What the reference server has seen since it started: ``GET /sim/stats``.

The endpoint is the reference server's own (no inference server has it): tests, and
anyone checking a client against the server, read from it how many POST requests
arrived (and on which path), how many were answered at once, how many the profile's
infrastructure fault answered, how often each GSM8K question was asked (retries show
as counts above 1), and the bodies of the last :data:`RECENT_REQUESTS` requests. Shape::

    {"requests": 5, "in_flight": 0, "max_in_flight": 2, "faults_served": 1,
     "paths": {"/v1/completions": 5}, "gsm8k_questions": {"0": 1, "7": 4},
     "recent": [{"path": "/v1/completions", "body": {...}}, ...]}

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
        faults_served: requests an infrastructure fault (the profile's, or a question's
            ``gsm8k_faults`` one) answered instead of the model (an HTTP error, a bad
            body, a dropped connection; ``slow`` only delays).
        paths: POST requests per path (``/v1/completions``: 5); they sum to ``requests``.
        gsm8k_questions: POST requests per GSM8K question asked, by its index in the
            server's GSM8K file (0-based); prompts that are not one of its questions
            are not counted. A question retried twice counts 3.
        recent: the last :data:`RECENT_REQUESTS` requests with a JSON object body,
            oldest first.
    """

    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    faults_served: int = 0
    paths: dict[str, int] = Field(default_factory=dict)
    gsm8k_questions: dict[int, int] = Field(default_factory=dict)
    recent: list[ReceivedRequest] = Field(default_factory=list)

    def started(self, path: str) -> None:
        """A POST request to ``path`` arrived."""
        self.requests += 1
        self.paths[path] = self.paths.get(path, 0) + 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finished(self) -> None:
        """A POST request was answered (or its connection dropped)."""
        self.in_flight -= 1

    def record(self, path: str, body: dict[str, Any], question: int | None = None) -> None:
        """Keep ``body`` among the recent requests; count ``question`` (a GSM8K index)."""
        self.recent.append(ReceivedRequest(path=path, body=body))
        del self.recent[:-RECENT_REQUESTS]
        if question is not None:
            self.gsm8k_questions[question] = self.gsm8k_questions.get(question, 0) + 1


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
