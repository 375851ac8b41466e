"""Assistant messages go back as they came: every field of the message and of each tool
call (as the OpenAI SDK's ``messages.append(message)``), or only the known ones under
``--history-fields known``. Against a reference server that attaches an opaque signature to
each call and refuses the next request without it (Gemini's ``thought_signature``), whose
refusal body is a JSON list."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.client.completions import StreamAssembler, parse_completion, server_message
from harness.client.target import TargetConfig
from harness.errors import OptionValueError
from harness.options import history_fields
from harness.runner import SamplingPolicy, run_many_sync
from harness.scenario.model import load_scenarios
from harness.scoring.score import score_run
from harness.sim.history import signature
from harness.transcript import RunRecord
from tests.conftest import HarnessCli
from tests.contract_driver import scenario, tool

SC = scenario(
    "weather_pair", "What's the weather in Oslo, and then in Bergen?",
    [tool("get_weather", city="string")],
    expect={
        "calls": [{"tool": "get_weather", "arguments": {"city": "Oslo"}},
                  {"tool": "get_weather", "arguments": {"city": "Bergen"}}],
        "final_answer": {"contains": ["Oslo"], "example": "Oslo and Bergen are sunny."},
    },
)  # fmt: skip


def _run(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], out: Path,
    fields: str | None, *, stream: bool,
) -> RunRecord:  # fmt: skip
    folder = write_scenarios(SC)
    url = sim_url("call-signatures", scenarios_dir=folder)
    tgt = TargetConfig(url, label="sig", max_retries=0, backoff_s=0.01)
    policy = SamplingPolicy(0.0, None, None, fields)  # type: ignore[arg-type]
    (rec,) = run_many_sync(
        load_scenarios([folder]), [tgt], repeats=1, stream=stream, out_dir=out, progress=False,
        sampling=policy,
    )  # fmt: skip
    return rec


def _sent_calls(rec: RunRecord, turn: int) -> list[dict[str, Any]]:
    return [c for m in rec.request_messages(turn) if m["role"] == "assistant"
            for c in m.get("tool_calls") or []]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_opaque_field_on_each_call_goes_back_as_it_came(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path,
    stream: bool,
) -> None:  # fmt: skip
    rec = _run(sim_url, write_scenarios, tmp_path, None, stream=stream)
    assert rec.stop_reason == "final_answer", rec.error
    assert rec.history_fields == "as-received"
    first = rec.turns[0].response
    assert first is not None and first.tool_calls[0].extra is not None
    sent = _sent_calls(rec, 1)
    assert len(sent) == 1
    want = signature(sent[0]["id"], "get_weather")
    assert sent[0]["extra_content"] == {"google": {"thought_signature": want}}
    assert set(sent[0]) == {"id", "type", "function", "extra_content"}  # no index sent back
    assert score_run(rec).passed


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_known_fields_only_is_refused_and_the_list_body_gives_the_message(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path,
    stream: bool,
) -> None:  # fmt: skip
    rec = _run(sim_url, write_scenarios, tmp_path, "known", stream=stream)
    assert rec.history_fields == "known"
    assert rec.stop_reason == "error" and rec.error is not None
    assert rec.error.status == 400 and rec.error.turn == 1
    assert "missing a thought_signature" in rec.error.message, rec.error.message
    assert "\n" not in rec.error.message
    assert set(_sent_calls(rec, 1)[0]) == {"id", "type", "function"}
    assert score_run(rec).infra_error is not None  # nothing the model wrote explains it


def test_message_and_call_fields_are_kept_as_received() -> None:
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "refusal": None, "annotations": [],
        "provider_fields": {"sig": "m1"},
        "tool_calls": [{"id": "c1", "type": "function", "signature": "s1",
                        "function": {"name": "f", "arguments": "{}", "strict": True}}]}}]}  # fmt: skip
    rec = parse_completion(json.dumps(body).encode())
    assert rec.extra == {"refusal": None, "annotations": [], "provider_fields": {"sig": "m1"}}
    (call,) = rec.tool_calls
    assert call.extra == {"signature": "s1"} and call.function_extra == {"strict": True}
    plain = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    assert parse_completion(json.dumps(plain).encode()).extra is None


def test_streamed_fields_accumulate_as_the_sdk_accumulates_them() -> None:
    state = StreamAssembler()
    deltas = [
        {"role": "assistant", "content": "", "provider_fields": {"sig": "ab"}},
        {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "signature": "s",
                         "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "signature": "1", "function": {"name": None,
                                                                     "arguments": "{}"}}]},
        {"provider_fields": {"sig": "cd"}},
    ]  # fmt: skip
    for d in deltas:
        state.add({"choices": [{"index": 0, "delta": d, "finish_reason": None}]})
    rec = state.record()
    assert rec.extra == {"provider_fields": {"sig": "abcd"}}
    assert rec.tool_calls[0].extra == {"signature": "s1"}
    assert rec.tool_calls[0].function_extra is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([{"error": {"code": 400, "message": "missing signature"}}], "missing signature"),
        ({"error": {"message": "bad", "type": "x"}}, "bad"),
        ({"object": "error", "message": "flat", "code": 400}, "flat"),
        ({"detail": "FastAPI says no"}, "FastAPI says no"),
        ({"error": "plain string"}, "plain string"),
        ([[{"errors": [{"msg": "deep"}]}]], "deep"),
        ([1, 2], None),
        ("text", None),
    ],
)
def test_the_servers_message_in_any_json_shape(body: Any, message: str | None) -> None:
    assert server_message(body) == message


def test_the_option_and_the_manifest(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], harness_cli: HarnessCli
) -> None:
    assert history_fields(" Known ") == "known"
    with pytest.raises(OptionValueError, match="as-received or known"):
        history_fields("some")
    folder = write_scenarios(SC)
    url = sim_url("call-signatures", scenarios_dir=folder)
    argv = [folder, "--target", url, "--repeats", "1", "--skip-contract", "--max-retries", "0"]
    assert harness_cli("run", *argv, "--history-fields", "known", run_id="known") != 0
    manifest = harness_cli.folder("known").manifest()
    assert manifest is not None and manifest.args["history_fields"] == "known"
    assert harness_cli("run", *argv, run_id="asis") == 0
    assert harness_cli.folder("asis").manifest().args["history_fields"] == "as-received"  # type: ignore[union-attr]
