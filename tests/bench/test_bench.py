"""Smoke tests of the benchmark code (bench/) at tiny sizes: the plumbing, not the figures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench import client_overhead, run, scale
from bench.common import SCENARIO, SCENARIOS, Row
from harness.client import completions
from harness.client.target import TargetConfig, make_client
from harness.pipeline import score_folder
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import load_scenario


def test_plain_and_sdk_loops_send_the_runners_requests(
    sim_url: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # benchmark 1 compares the clients on the same work: same turns, same JSON bodies
    url = sim_url("repeat-loop", scenarios_dir=SCENARIOS)
    sc = load_scenario(SCENARIO)
    harness: list[Any] = []
    post = completions._post

    async def spy(client: Any, params: dict[str, Any], content: bytes | None) -> Any:
        harness.append(json.loads(content) if content else completions.request_body(params))
        return await post(client, params, content)

    monkeypatch.setattr(completions, "_post", spy)
    rec = run_many_sync([sc], [TargetConfig(url)], repeats=1, out_dir=tmp_path, progress=False)[0]
    inputs = client_overhead._plain_inputs(rec)

    def recording(post: client_overhead.Post, bodies: list[Any]) -> client_overhead.Post:
        async def record(body: dict[str, Any]) -> Any:
            bodies.append(json.loads(json.dumps(body)))
            return await post(body)

        return record

    async def loops() -> tuple[list[Any], list[Any]]:
        plain: list[Any] = []
        sdk: list[Any] = []
        async with httpx.AsyncClient() as client:
            p = client_overhead.plain_post(client, url + "/v1/chat/completions")
            assert await client_overhead._conversation(recording(p, plain), inputs, 12) == 12
        client = make_client(TargetConfig(url))
        try:
            s = client_overhead.sdk_post(client)
            assert await client_overhead._conversation(recording(s, sdk), inputs, 12) == 12
        finally:
            await client.close()
        return plain, sdk

    assert rec.stop_reason == "turn_cap" and len(rec.turns) == sc.max_turns == 12
    plain, sdk = asyncio.run(loops())
    assert len(harness) == 12 and plain == harness and sdk == harness


def test_scale_folder_copies_records_with_unique_ids(sim_url: Any, tmp_path: Path) -> None:
    url = sim_url("healthy", scenarios_dir=SCENARIOS)
    target = TargetConfig(url, label="a", side="baseline")
    recs = run_many_sync(
        [load_scenario(SCENARIO)], [target], repeats=2, out_dir=tmp_path / "t", progress=False
    )
    templates = [json.loads(r.model_dump_json()) for r in recs]
    folder = scale.write_folder(templates, 7, tmp_path)
    copies = list(RunFolder(folder).records())
    assert len({r.run_key for r in copies}) == 7
    assert {r.scenario_id for r in copies} == {f"{SCENARIO.stem}-c{k}" for k in range(4)}
    summary = score_folder(RunFolder(folder))
    pooled = summary.aggregate("baseline", "*")
    assert pooled is not None and pooled.runs == 7 and pooled.rate("passed").k == 7


def test_run_prints_table_and_writes_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        Row("x. fake", 2.0, 1.0, "s", 2.0, False, note="slow"),
        Row("y", 1, None, "s", None, None),
    ]

    def boom() -> list[Row]:
        raise RuntimeError("server did not start")

    monkeypatch.setattr(run, "BENCHMARKS", {"1": (lambda: rows, boom), "2": (boom, boom)})
    assert run.main(["--only", "1,2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "x. fake" in out and "FAIL" in out and "server did not start" in out
    (path,) = tmp_path.glob("bench-*.json")
    doc = json.loads(path.read_text())
    assert [r["benchmark"] for r in doc["rows"]] == ["x. fake", "y"]
    assert doc["benchmarks"][1]["error"] == "RuntimeError: server did not start"
    with pytest.raises(SystemExit):
        run.main(["--only", "9"])
