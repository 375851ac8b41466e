"""Stream/non-stream parity (:mod:`harness.scoring.parity`): hand-made pairs, the reference server's
streaming faults over real sockets, and ``--stream both`` in ``harness run`` / ``compare``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.client.target import TargetConfig
from harness.runner import run_many_sync
from harness.scenario.model import load_scenario
from harness.scoring.parity import pair_runs, parity_report
from harness.transcript import (
    InfraError,
    ResponseRecord,
    RunRecord,
    TargetInfo,
    ToolCallRecord,
    TurnRecord,
)

SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "scenarios"

Call = tuple[str | None, Any, int | None, str | None]  # name, arguments, index, id
Turns = list[tuple[list[Call], str]]  # per turn: calls, finish_reason


def _record(stream: bool, turns: Turns, **kw: Any) -> RunRecord:
    recs = [
        TurnRecord(
            index=i,
            response=ResponseRecord(
                tool_calls=[
                    ToolCallRecord(name=n, arguments=a, index=ix, id=cid) for n, a, ix, cid in calls
                ],
                finish_reason=finish,
                content=None if calls else "done",
                stream=stream,
            ),
        )
        for i, (calls, finish) in enumerate(turns)
    ]
    mode = "stream" if stream else "nostream"
    fields: dict[str, Any] = {
        "run_key": f"t/sc/{kw.get('repeat', 0)}/{mode}",
        "scenario_id": "sc",
        "scenario_hash": "h",
        "scenario": {},
        "repeat": 0,
        "stream": stream,
        "target": TargetInfo(label="t", base_url="http://127.0.0.1:1"),
        "turns": recs,
        "stop_reason": "final_answer",
    }
    return RunRecord(**(fields | kw))


GOOD: Turns = [
    ([("f", '{"a": [1, 2]}', 0, "x1"), ("g", "{}", 1, "x2")], "tool_calls"),
    ([], "stop"),
]


def _pair(stream_turns: Turns, **kw: Any) -> list[Any]:
    return parity_report([_record(True, stream_turns, **kw), _record(False, GOOD)])


def test_identical_pair_has_no_difference_even_with_other_ids_and_spacing() -> None:
    other: Turns = [
        ([("f", '{"a":[1,2]}', 0, "y1"), ("g", "{}", 1, "y2")], "tool_calls"),
        ([], "stop"),
    ]
    assert _pair(other) == []
    assert len(pair_runs([_record(True, other), _record(False, GOOD)])) == 1


@pytest.mark.parametrize(
    ("calls", "finish", "field", "stream_value"),
    [
        ([("f", '{"a": [1, 2]', 0, "x1"), ("g", "{}", 1, "x2")], "tool_calls", "arguments", '{"a": [1, 2]'),
        ([("f", '{"a": [1, 2]}', 0, "x1"), ("g", "", 1, "x2")], "tool_calls", "arguments", ""),
        ([("f", '{"a": [1, 2]}', 1, "x1"), ("g", "{}", 2, "x2")], "tool_calls", "index", "[1, 2]"),
        ([("f", '{"a": [1, 2]}', 0, None), ("g", "{}", 1, "x2")], "tool_calls", "id", "missing"),
        ([("f", '{"a": [1, 2]}', 0, "x1"), ("g", "{}", 1, "x1")], "tool_calls", "id", "repeated"),
        ([("f", '{"a": [1, 2]}', 0, "x1"), ("h", "{}", 1, "x2")], "tool_calls", "name", "h"),
        ([("f", '{"a": [1.0, 2]}', 0, "x1"), ("g", "{}", 1, "x2")], "tool_calls", "arguments", '{"a": [1.0, 2]}'),
        ([("f", '{"a": [1, 2]}', 0, "x1"), ("g", "{}", 1, "x2")], "stop", "finish_reason", "stop"),
        ([("f", '{"a": [1, 2]}', 0, "x1")], "tool_calls", "calls", "1"),
    ],
)  # fmt: skip
def test_each_field_difference_is_named(
    calls: list[Call], finish: str, field: str, stream_value: str
) -> None:
    diffs = _pair([(calls, finish), ([], "stop")])
    assert [d.field for d in diffs] == [field], diffs
    d = diffs[0]
    assert (d.stream, d.scenario_id, d.turn, d.target) == (stream_value, "sc", 0, "t")
    assert field in d.message or d.message


def test_only_the_first_differing_turn_is_reported_plus_the_stop_reason() -> None:
    bad: Turns = [
        ([("f", "{", 0, "x1"), ("g", "{", 1, "x2")], "tool_calls"),
        ([("f", "{", 0, "z")], "tool_calls"),
    ]
    diffs = _pair(bad, stop_reason="turn_cap")
    assert [(d.field, d.turn, d.call_index) for d in diffs] == [
        ("arguments", 0, 0),
        ("arguments", 0, 1),
        ("stop_reason", None, None),
    ]
    assert (diffs[-1].stream, diffs[-1].nostream) == ("turn_cap", "final_answer")


def test_unpaired_and_infra_error_runs_are_skipped() -> None:
    assert parity_report([_record(True, GOOD)]) == []
    err = InfraError(kind="timeout", message="slow")
    broken = _record(True, [([], "stop")], stop_reason="error", error=err)
    assert parity_report([broken, _record(False, GOOD)]) == []
    other_repeat = _record(True, [([], "stop")], repeat=1, run_key="t/sc/1/stream")
    assert parity_report([other_repeat, _record(False, GOOD)]) == []


# ------------------------------------------------------------------ against the reference server


def _both(url: str, scenario: str, tmp_path: Path) -> list[RunRecord]:
    sc = load_scenario(SCENARIOS_DIR / f"{scenario}.yaml")
    target = TargetConfig(url, label="sim")
    return run_many_sync([sc], [target], repeats=1, stream="both", out_dir=tmp_path, progress=False)


@pytest.mark.parametrize(
    ("profile", "scenario", "field", "stream_value", "nostream_value"),
    [
        ("healthy", "parallel_calls", None, None, None),
        ("stream-truncated-args", "parallel_calls", "arguments", '{"city":"Par', '{"city":"Paris"}'),
        ("empty-arguments", "no_params_tool", "arguments", "", "{}"),
        ("index-offset", "parallel_calls", "index", "[1, 2]", "[0, 1]"),
    ],
)  # fmt: skip
def test_streaming_faults_of_the_reference_server_show_as_parity_differences(
    sim_url: Callable[..., str],
    tmp_path: Path,
    profile: str,
    scenario: str,
    field: str | None,
    stream_value: str | None,
    nostream_value: str | None,
) -> None:
    records = _both(sim_url(profile, scenarios_dir=SCENARIOS_DIR), scenario, tmp_path)
    assert len(pair_runs(records)) == 1
    diffs = parity_report(records)
    if field is None:
        assert diffs == []
        return
    first = diffs[0]
    assert (first.field, first.turn, first.call_index in (0, None)) == (field, 0, True)
    assert (first.stream, first.nostream) == (stream_value, nostream_value)


def test_harness_run_stream_both_prints_the_parity_table(
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    url = sim_url("index-offset", scenarios_dir=SCENARIOS_DIR)
    args = ["run", str(SCENARIOS_DIR / "parallel_calls.yaml"), "--target", url]
    args += ["--stream", "both", "--repeats", "1", "--results", str(tmp_path), "--no-progress"]
    assert main(args) == 1  # the streamed run starts its indices at 1: a failed run
    out = capsys.readouterr().out
    assert "parity: 1 of 1 pair differs" in out and "index" in out


def test_compare_stream_both_writes_parity_into_summary_json(
    sim_url: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = sim_url("empty-arguments", scenarios_dir=SCENARIOS_DIR)
    args = ["compare", str(SCENARIOS_DIR / "no_params_tool.yaml"), "--baseline", url]
    args += ["--candidate", url, "--stream", "both", "--repeats", "1"]
    args += ["--results", str(tmp_path), "--run-id", "par", "--no-progress"]
    assert main(args) == 0
    summary = json.loads((tmp_path / "par" / "summary.json").read_text())
    assert summary["settings"]["stream"] == "both"
    assert {(d["target"], d["field"], d["stream"]) for d in summary["parity"]} == {
        ("baseline", "arguments", ""),
        ("candidate", "arguments", ""),
    }
    assert "stream/non-stream parity" in capsys.readouterr().out


def test_compare_stream_value_that_is_no_mode_is_a_scenario_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `--stream scenarios/x.yaml` is a bare --stream then a path, as in `harness run`
    assert main(["compare", "--stream", "scenarios/missing.yaml", "--aa"]) == 2
    assert "missing.yaml: no such file or directory" in capsys.readouterr().err
    # a word that is neither a mode nor a path is a usage error naming the modes
    assert main(["compare", "--stream", "sometimes", "--aa"]) == 2
    assert "--stream sometimes: not a mode (on, off or both)" in capsys.readouterr().err
