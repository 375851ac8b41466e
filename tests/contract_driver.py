"""The protocol contract tests' driver: one scenario run by the harness against the reference server over a
real socket (``sim_url``), streamed or not, and its score; and a record of one response
scored alone. Each test builds its own scenario with :func:`tool` and :func:`scenario`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.client.target import TargetConfig
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios
from harness.scoring.models import RunScore
from harness.scoring.score import score_run
from harness.transcript import ResponseRecord, RunRecord, TargetInfo, TurnRecord


def tool(name: str, **props: str) -> dict[str, Any]:
    """A tool whose every parameter (``key=json type``) is required, with a fixed result."""
    return {
        "name": name,
        "description": f"The {name.replace('_', ' ')} tool.",
        "parameters": {
            "type": "object",
            "properties": {k: {"type": t} for k, t in props.items()},
            "required": list(props),
            "additionalProperties": False,
        },
        "simulator": {"result": {"ok": True, "tool": name}},
    }


def scenario(sid: str, user: str, tools: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A scenario file's dict: ``fields`` (``expect``, ``tool_choice``, ...) over defaults."""
    return {
        "id": sid,
        "description": f"protocol contract test scenario {sid}",
        "messages": [{"role": "user", "content": user}],
        "tools": tools,
        "repeats": 1,
        **fields,
    }


def run(
    sim_url: Callable[..., str],
    write_scenarios: Callable[..., Path],
    out: Path,
    profile: str,
    sc: dict[str, Any],
    *,
    stream: bool,
) -> tuple[RunRecord, RunScore]:
    """One run of ``sc`` by the harness against a reference server playing ``profile``."""
    folder = write_scenarios(sc)
    url = sim_url(profile, scenarios_dir=folder)
    (rec,) = run_many_sync(
        load_scenarios([folder]), [TargetConfig(url, label=profile)],
        repeats=1, stream=stream, out_dir=out / f"{profile}-{stream}", progress=False,
    )  # fmt: skip
    assert rec.error is None, rec.error
    return rec, score_run(rec)


def score_one(
    sc: dict[str, Any], resp: ResponseRecord, params: dict[str, Any] | None = None
) -> RunScore:
    """The score of a run made of one response to a request with ``params``."""
    rec = RunRecord(
        run_key=f"x/{sc['id']}/0/x", scenario_id=sc["id"], scenario_hash=f"h-{sc['id']}",
        scenario=sc, repeat=0, stream=resp.stream,
        target=TargetInfo(label="x", base_url="http://127.0.0.1:1"),
        turns=[TurnRecord(index=0, response=resp, request_params=params or {})],
        stop_reason="final_answer",
    )  # fmt: skip
    return score_run(rec)
