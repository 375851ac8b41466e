"""``harness gsm8k``'s thread pool (SGLang's benchmark client) against a slow server on
127.0.0.1: ``parallel`` requests really are in flight at once, no more; records reach
``gsm8k.jsonl`` as they finish; an unexpected exception propagates instead of hanging.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import harness.gsm8k.run as gsm8k
from harness.gsm8k.data import load_jsonl
from harness.gsm8k.run import read_gsm8k_records, run_gsm8k
from tests.test_gsm8k_runner import SHARED, serve

pytestmark = pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} not found")


def _slow_app(delay_s: float, state: dict[str, int], q0_s: float | None = None) -> Starlette:
    """Answers ``#### 0`` after ``delay_s`` (question 0 after ``q0_s``); ``state``
    counts requests in flight (``now``, ``max``) and answered (``total``)."""
    q0 = load_jsonl(SHARED)[0].question + "\nAnswer:"

    async def generate(request: Request) -> Response:
        prompt = (await request.json())["prompt"]
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        slow = q0_s is not None and prompt.rstrip().endswith(q0)
        await asyncio.sleep(q0_s if slow and q0_s is not None else delay_s)
        state["now"] -= 1
        state["total"] += 1
        return JSONResponse({"choices": [{"text": "#### 0", "finish_reason": "stop"}]})

    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "slow"}]})

    return Starlette(routes=[
        Route("/v1/completions", generate, methods=["POST"]),
        Route("/v1/models", models),
    ])  # fmt: skip


def _opts(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {"data": SHARED, "results": tmp_path, **kw}


def test_parallel_requests_in_flight_and_records_as_they_finish(tmp_path: Path) -> None:
    state = {"now": 0, "max": 0, "total": 0}
    with serve(_slow_app(0.15, state, q0_s=0.5)) as url:
        t0 = time.perf_counter()
        summary = run_gsm8k(url, **_opts(tmp_path, num_questions=24, parallel=8, run_id="p"))
        wall = time.perf_counter() - t0
    assert 2 <= state["max"] <= 8 and state["total"] == 24  # parallel, never more than 8
    assert wall < 23 * 0.15 + 0.5  # not one request after another
    assert summary.sides[0].n == 24 and summary.sides[0].model == "slow"
    records = read_gsm8k_records(tmp_path / "p")
    assert sorted(r.index for r in records) == list(range(24))
    # one line per answer as it finished: question 0 (answered slowest) is not first
    assert [r.index for r in records].index(0) > 0


def test_progress_bar_from_worker_threads(tmp_path: Path) -> None:
    state = {"now": 0, "max": 0, "total": 0}
    with serve(_slow_app(0.0, state)) as url:
        summary = run_gsm8k(url, **_opts(tmp_path, num_questions=12, parallel=4, progress=True))
    assert summary.sides[0].n == 12 and state["total"] == 12


def test_unexpected_exception_propagates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(q: Any, output: str) -> dict[str, Any]:
        raise RuntimeError("scoring bug")

    monkeypatch.setattr(gsm8k, "_score", broken)
    state = {"now": 0, "max": 0, "total": 0}
    with serve(_slow_app(0.05, state)) as url, pytest.raises(RuntimeError, match="scoring bug"):
        run_gsm8k(url, **_opts(tmp_path, num_questions=40, parallel=4, run_id="bug"))
    assert state["total"] < 40  # the questions not yet started were cancelled
