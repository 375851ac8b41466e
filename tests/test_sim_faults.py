"""Each fault of the reference server appears as specified, streaming and non-streaming."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import openai
import pytest

from harness.sim.faults import Fault
from harness.sim.profiles import get_profile
from tests.sim_driver import (
    ENTROPY_ARGS,
    Turn,
    ask,
    chain_scenario,
    client_for,
    entropy_scenario,
    openai_tools,
    opening,
    play,
    triple_scenario,
)

COMPACT = '{"values":[0.5,0.25,0.25],"base":2}'


def _markup_ok(t: Turn) -> bool:
    inner = t.content.split("<tool_call>")[1].split("</tool_call>")[0]
    return json.loads(inner) == {"name": "entropy", "arguments": ENTROPY_ARGS}


def _malformed_ok(t: Turn) -> bool:
    try:
        json.loads(t.calls[0][2])
    except json.JSONDecodeError:
        return t.calls[0][2] + "}" == COMPACT
    return False


FIRST_TURN: dict[str, Callable[[Turn], bool]] = {
    "container-as-string": lambda t: t.args() == {"values": "[0.5, 0.25, 0.25]", "base": 2},
    "dropped-keys": lambda t: t.args() == {"base": 2},
    "unexpected-keys": lambda t: t.args() == {**ENTROPY_ARGS, "unexpected_option": True},
    "malformed-json": _malformed_ok,
    "markup-in-content": lambda t: t.calls == [] and t.finish_reason == "stop" and _markup_ok(t),
    "finish-reason-mismatch": lambda t: t.finish_reason == "stop" and t.args() == ENTROPY_ARGS,
    "reasoning-leak": lambda t: (
        t.reasoning is None and t.content.startswith("<think>") and t.args() == ENTROPY_ARGS
    ),
    "healthy": lambda t: t.finish_reason == "tool_calls" and t.calls[0][2] == COMPACT,
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("profile", sorted(FIRST_TURN))
def test_first_turn_fault(sim_url, write_scenarios, profile, stream):
    sc = entropy_scenario()
    url = sim_url(profile, scenarios_dir=write_scenarios(sc))
    turn = ask(client_for(url), opening(sc), stream=stream, tools=openai_tools(sc))
    assert FIRST_TURN[profile](turn), turn


def test_scalars_as_strings(sim_url, write_scenarios):
    tool = {"name": "configure", "parameters": {"type": "object", "properties": {}}}
    args = {"n": 42, "flag": True, "x": None, "name": "abc", "xs": [1]}
    sc = entropy_scenario(
        tools=[tool], expect={"calls": [{"tool": "configure", "arguments": args}]}
    )
    url = sim_url("scalar-as-string", scenarios_dir=write_scenarios(sc))
    for stream in (False, True):
        turn = ask(client_for(url), opening(sc), stream=stream, tools=openai_tools(sc))
        assert turn.args() == {"n": "42", "flag": "true", "x": "null", "name": "abc", "xs": [1]}


def test_stream_truncated_args_lose_last_piece(sim_url, write_scenarios):
    sc = entropy_scenario()
    url = sim_url("stream-truncated-args", scenarios_dir=write_scenarios(sc))
    plain = ask(client_for(url), opening(sc), tools=openai_tools(sc))
    assert plain.calls[0][2] == COMPACT
    streamed = ask(client_for(url), opening(sc), stream=True, tools=openai_tools(sc))
    args = streamed.calls[0][2]
    assert args and COMPACT.startswith(args) and len(args) < len(COMPACT)
    with pytest.raises(json.JSONDecodeError):
        json.loads(args)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_repeat_loop_36_calls_no_answer(sim_url, write_scenarios, stream):
    sc = triple_scenario()
    url = sim_url("repeat-loop", scenarios_dir=write_scenarios(sc))
    turns = play(url, sc, stream=stream, max_turns=12)
    assert len(turns) == 12 and all(t.finish_reason == "tool_calls" for t in turns)
    assert sum(len(t.calls) for t in turns) == 36
    assert all(t.content is None for t in turns)


def test_collapse_progresses_over_turns(sim_url, write_scenarios):
    sc = chain_scenario()
    turns = play(sim_url("collapse", scenarios_dir=write_scenarios(sc)), sc)
    assert [t.args() for t in turns[:3]] == [
        ENTROPY_ARGS,
        {"values": [0, 0, 0], "base": 0},
        {"values": ["", "", ""], "base": ""},
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_fused_regression_reproduces_motivating_case(sim_url, write_scenarios, stream):
    sc = triple_scenario()
    turns = play(sim_url("fused-regression", scenarios_dir=write_scenarios(sc)), sc, stream=stream)
    assert sum(len(t.calls) for t in turns) == 36 and turns[-1].calls
    values = [json.loads(t.calls[0][2])["values"] for t in turns[:4]]
    assert values == ["[0.5, 0.25, 0.25]", [0, 0, 0], ["", "", ""], ["", "", ""]]
    assert json.loads(turns[2].calls[0][2])["base"] == ""


def test_repeated_ids_across_turns(sim_url, write_scenarios):
    sc = chain_scenario()
    turns = play(sim_url("repeated-ids", scenarios_dir=write_scenarios(sc)), sc)
    assert len(turns) == 4, "the conversation still completes"
    assert len({t.calls[0][0] for t in turns[:3]}) == 1


def test_reasoning_leak_into_arguments(sim_url, write_scenarios):
    prof = dataclasses.replace(
        get_profile("healthy"), reasoning=True, faults=(Fault("reasoning_leak_args"),)
    )
    sc = entropy_scenario()
    turn = ask(
        client_for(sim_url(prof, scenarios_dir=write_scenarios(sc))),
        opening(sc),
        tools=openai_tools(sc),
    )
    assert turn.calls[0][2].startswith("<think>") and turn.calls[0][2].endswith(COMPACT)


def test_fault_rate_and_start_turn(sim_url, write_scenarios):
    sc = chain_scenario()
    prof = dataclasses.replace(
        get_profile("healthy"), faults=(Fault("container_as_string", rate=0.5, start_turn=1),)
    )
    url = sim_url(prof, scenarios_dir=write_scenarios(sc))
    runs = [play(url, sc, temperature=0.5, seed=s, max_turns=2) for s in range(12)]
    assert all(r[0].args() == ENTROPY_ARGS for r in runs), "nothing before start_turn"
    hit = [isinstance(r[1].args()["values"], str) for r in runs]
    assert 0 < sum(hit) < len(hit)
    again = [
        isinstance(play(url, sc, temperature=0.5, seed=s, max_turns=2)[1].args()["values"], str)
        for s in range(12)
    ]
    assert again == hit, "fault draws are deterministic under the seed"


def test_fault_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("nope")  # type: ignore[arg-type]


# ------------------------------------------------------------------ infrastructure


def test_http_500(sim_url):
    url = sim_url("http-500")
    with pytest.raises(openai.InternalServerError):
        ask(client_for(url), [{"role": "user", "content": "hi"}])


def test_flaky_500_fails_first_try_only(sim_url):
    url = sim_url("flaky-500")
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError):
        ask(client_for(url), msgs)
    assert ask(client_for(url), msgs).content
    other = [{"role": "user", "content": "hello"}]
    assert ask(client_for(url, max_retries=2), other).content, "the SDK's retry gets through"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_invalid_json_body(sim_url, stream):
    url = sim_url("invalid-json")
    with pytest.raises((openai.APIError, json.JSONDecodeError)):
        ask(client_for(url), [{"role": "user", "content": "hi"}], stream=stream)


def test_no_choices(sim_url):
    r = client_for(sim_url("no-choices")).chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "hi"}]
    )
    assert r.choices == []


def test_slow_times_out(sim_url):
    url = sim_url(dataclasses.replace(get_profile("slow"), delay_s=0.6))
    with pytest.raises(openai.APITimeoutError):
        ask(client_for(url, timeout=0.15), [{"role": "user", "content": "hi"}])


def test_finish_reason_mismatch_on_final_answer(sim_url, write_scenarios):
    sc = entropy_scenario()
    turns = play(sim_url("finish-reason-mismatch", scenarios_dir=write_scenarios(sc)), sc)
    assert [t.finish_reason for t in turns] == ["stop", "tool_calls"]
    assert turns[-1].calls == [] and "1.5" in turns[-1].content


def test_capture_crash_refuses_to_serve():
    from harness.sim.server import SimBootCrash, serve_in_thread

    with (
        pytest.raises(SimBootCrash, match="RuntimeError"),
        serve_in_thread("capture-crash", capture=True, scenarios_dir=None),
    ):
        pass  # pragma: no cover
    with serve_in_thread("capture-crash", capture=False, scenarios_dir=None) as url:
        assert url.startswith("http://127.0.0.1:")
