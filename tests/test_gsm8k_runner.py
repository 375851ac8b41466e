"""``harness gsm8k`` runner against small servers on 127.0.0.1 (real sockets).

These servers answer with harness.sim.gsm8k_model (the reference server's GSM8K model)
and add the failure modes the runner must survive: a question that always fails
(left out, not wrong), transient 503s (retried), a garbage body (infra error).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from harness.cli import main
from harness.cli._common import gsm8k_exit_code
from harness.client.target import TargetConfig
from harness.gsm8k.data import load_dataset
from harness.gsm8k.models import GSM8KSummary
from harness.gsm8k.run import compare_gsm8k, read_gsm8k_records, rescore, run_gsm8k
from harness.sim.gsm8k_model import answer, find_question, load_questions, prompt_from_messages
from harness.sim.profiles import SimProfile

SHARED = Path(__file__).parents[2] / "shared/data/gsm8k/test.jsonl"
pytestmark = pytest.mark.skipif(
    not SHARED.exists(),
    reason=f"GSM8K test split not found at {SHARED} (../shared beside the clone)",
)


def _app(accuracy: float, *, fail: set[int] = frozenset(), flaky: bool = False,  # type: ignore[assignment]
         garbage: set[int] = frozenset(), refuse: set[int] = frozenset()) -> Starlette:  # type: ignore[assignment]  # fmt: skip
    profile = SimProfile(gsm8k_accuracy=accuracy)
    seen: Counter[str] = Counter()
    by_text = load_questions(SHARED)

    async def generate(request: Request) -> Response:
        body = await request.json()
        prompt = body.get("prompt") or prompt_from_messages(body.get("messages", []))
        q = by_text[find_question(prompt) or ""]
        seen[q.question] += 1
        if q.index in fail or (flaky and seen[q.question] == 1):
            return PlainTextResponse("internal error", status_code=503 if flaky else 500)
        if q.index in refuse:
            return PlainTextResponse("bad request", status_code=400)
        if q.index in garbage:
            return PlainTextResponse("<html>oops</html>")
        text = answer(profile, prompt, seed=0, gsm8k_path=str(SHARED)) or ""
        usage = {"completion_tokens": len(text.split())}
        if "messages" in body:
            choice: dict[str, Any] = {"message": {"role": "assistant", "content": text.strip()}}
        else:
            choice = {"text": text}
        return JSONResponse(
            {"choices": [{**choice, "index": 0, "finish_reason": "stop"}], "usage": usage}
        )

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "tiny-sim", "object": "model"}]})

    async def data_file(request: Request) -> Response:
        return Response(SHARED.read_bytes(), media_type="application/jsonl")

    return Starlette(routes=[
        Route("/v1/completions", generate, methods=["POST"]),
        Route("/v1/chat/completions", generate, methods=["POST"]),
        Route("/v1/models", models),
        Route("/test.jsonl", data_file),
    ])  # fmt: skip


@contextmanager
def serve(app: Starlette) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


def _opts(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {"data": SHARED, "results": tmp_path, **kw}


def test_single_target_scores_and_writes_records(tmp_path: Path) -> None:
    with serve(_app(0.88)) as url:
        summary = run_gsm8k(url, **_opts(tmp_path, num_questions=60, run_id="one"))
    side = summary.sides[0]
    assert side.n == 60 and side.n_errors == 0 and side.model == "tiny-sim"
    assert side.accuracy_interval.low < side.accuracy < side.accuracy_interval.high
    assert 0.7 < side.accuracy <= 1.0
    records = sorted(read_gsm8k_records(tmp_path / "one"), key=lambda r: r.index)
    assert len(records) == 60 and {r.index for r in records} == set(range(60))
    assert sum(bool(r.correct) for r in records) == side.correct
    assert all(r.prompt_sha256 and r.output for r in records)
    assert [r.is_shot for r in records[:6]] == [True] * 5 + [False]
    on_disk = GSM8KSummary.model_validate_json((tmp_path / "one/gsm8k.json").read_text())
    assert on_disk == summary and on_disk.schema_version == 1
    again = rescore(tmp_path / "one", write=False)  # a pure function of the files
    assert again.model_dump(exclude={"created_at"}) == summary.model_dump(exclude={"created_at"})
    with pytest.raises(TypeError):
        run_gsm8k(url, **_opts(tmp_path, num_question=3))


def test_regression_is_detected_on_200(tmp_path: Path) -> None:
    with serve(_app(0.88)) as good, serve(_app(0.81)) as bad:
        summary = compare_gsm8k(good, bad, **_opts(tmp_path, num_questions=200))
    p = summary.paired
    assert p is not None and p.n_pairs == 200
    assert p.verdict == "REGRESSION" and gsm8k_exit_code(summary) == 1
    assert p.c == 0 and p.b > 10 and p.mcnemar_p < 1e-3
    assert p.diff_interval.low < p.accuracy_diff < p.diff_interval.high < 0
    assert p.discordant and all(d.baseline_correct for d in p.discordant)


def test_two_healthy_servers_show_no_change(tmp_path: Path) -> None:
    with serve(_app(0.88)) as a, serve(_app(0.88)) as b:
        summary = compare_gsm8k(a, b, **_opts(tmp_path, num_questions=100))
    assert summary.paired is not None and summary.paired.b == summary.paired.c == 0
    assert summary.verdict == "NO CHANGE" and gsm8k_exit_code(summary) == 0


def test_failed_questions_are_left_out_not_wrong(tmp_path: Path) -> None:
    with serve(_app(0.88)) as good, serve(_app(0.88, fail={7, 9}, garbage={11})) as broken:
        summary = compare_gsm8k(good, broken, **_opts(tmp_path, num_questions=40))
    cand = summary.sides[1]
    assert cand.n_errors == 3 and cand.error_indices == [7, 9, 11] and cand.n == 37
    assert summary.paired is not None and summary.paired.n_pairs == 37
    assert summary.verdict == "NO CHANGE"
    recs = {
        r.index: r for r in read_gsm8k_records(tmp_path / summary.run_id) if r.side == "candidate"
    }
    assert recs[7].correct is None and recs[7].attempts == 4  # transient: retried 3 times
    assert (recs[7].error or "").startswith("http_status: HTTP 500: internal error")
    assert recs[11].correct is None and recs[11].attempts == 1  # not transient: not retried
    assert recs[11].error == "invalid_body: the response is not JSON"


def test_target_config_retries_apply_and_the_target_is_not_modified(tmp_path: Path) -> None:
    """GSM8K takes the harness's one TargetConfig: its retries and backoff apply, an HTTP
    400 is not retried (RequestFailed.transient), and the caller's object is untouched."""
    with serve(_app(0.88, fail={3})) as url, serve(_app(0.88, refuse={4})) as refusing:
        target = TargetConfig(url, label="t", max_retries=1, backoff_s=0.01)
        run_gsm8k(target, **_opts(tmp_path, num_questions=6, run_id="r"))
        run_gsm8k(refusing, **_opts(tmp_path, num_questions=6, run_id="400"))
    assert target.model is None and target.side is None  # the run worked on a copy
    recs = {r.index: r for r in read_gsm8k_records(tmp_path / "r")}
    assert recs[3].attempts == 2 and recs[3].model == "tiny-sim"  # 1 retry, as configured
    refused = {r.index: r for r in read_gsm8k_records(tmp_path / "400")}[4]
    assert refused.attempts == 1 and (refused.error or "").startswith("http_status: HTTP 400")


def test_transient_errors_are_retried(tmp_path: Path) -> None:
    with serve(_app(0.88, flaky=True)) as url:
        summary = run_gsm8k(url, **_opts(tmp_path, num_questions=20, run_id="flaky"))
    assert summary.sides[0].n == 20 and summary.sides[0].n_errors == 0
    assert {r.attempts for r in read_gsm8k_records(tmp_path / "flaky")} == {2}


def test_too_many_errors_is_inconclusive(tmp_path: Path) -> None:
    with serve(_app(0.88)) as good, serve(_app(0.88, fail=set(range(10)))) as broken:
        summary = compare_gsm8k(good, broken, **_opts(tmp_path, num_questions=30))
    assert summary.verdict == "INCONCLUSIVE" and gsm8k_exit_code(summary) == 3


def test_chat_api_and_exclude_shots(tmp_path: Path) -> None:
    with serve(_app(0.88)) as url:
        summary = run_gsm8k(
            url, **_opts(tmp_path, num_questions=30, api="chat", exclude_shots=True, run_id="c")
        )
    records = read_gsm8k_records(tmp_path / "c")
    assert {r.index for r in records} == set(range(5, 30)) and not any(r.is_shot for r in records)
    assert summary.sides[0].n == 25 and summary.sides[0].accuracy > 0.6


def test_download_into_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    with serve(_app(0.88)) as url:
        ds = load_dataset(url=f"{url}/test.jsonl")
    assert ds.official and (tmp_path / "gsm8k/test.jsonl").read_bytes() == SHARED.read_bytes()


def test_cli_exit_codes_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gsm8k", "--target", "localhost:1"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    missing = tmp_path / "nope.jsonl"
    assert main(["gsm8k", "--target", "http://127.0.0.1:9", "--data", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert (
        main(["gsm8k", "--target", "http://127.0.0.1:9", "--exclude-shots", "--num-questions", "5"])
        == 2
    )
    assert "--exclude-shots leaves no question" in capsys.readouterr().err
    with serve(_app(0.88)) as good, serve(_app(0.81)) as bad:
        code = main([
            "gsm8k", "--baseline", good, "--target", bad, "--data", str(SHARED), "--num-questions",
            "150", "--results", str(tmp_path), "--run-id", "cli", "--no-progress",
        ])  # fmt: skip
    assert code == 1
    assert "REGRESSION" in capsys.readouterr().out
    summary = json.loads((tmp_path / "cli/gsm8k.json").read_text())
    assert summary["verdict"] == "REGRESSION" and summary["sides"][1]["label"] == "candidate"
