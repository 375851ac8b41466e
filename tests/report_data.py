"""Hand-made run folders for the report tests (the motivating fused-MoE case).

``write_case(folder)`` writes ``manifest.json`` and ``transcripts.jsonl`` of a
two-sided comparison: the baseline ("unfused") calls three tools and answers;
the candidate ("fused") loops to the 12-turn cap with decaying arguments
(an array sent as the string "[0.5, 0.25, 0.25]", then [0, 0, 0], then ["", "", ""]).
Model text may carry an HTML payload to check escaping.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.runfolder import RunFolder
from harness.transcript import (
    ResponseRecord,
    RunManifest,
    RunRecord,
    TargetInfo,
    ToolCallRecord,
    ToolResultRecord,
    TurnRecord,
)
from tests.sim_driver import ENTROPY_TOOL

XSS = "<script>document.title='pwned';document.body.innerHTML='PWNED'</script><img src=x onerror=\"document.title='pwned2'\"><b>bold</b>"

SCENARIO: dict[str, Any] = {
    "id": "entropy_array",
    "description": "Compute an entropy from a probability vector, then summarise.",
    "targets": ["container_as_string", "collapse", "repeat_loop"],
    "messages": [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Compute the entropy of [0.5, 0.25, 0.25] in bits."},
    ],
    "tools": [ENTROPY_TOOL],
    "expect": {
        "calls": [{"tool": "entropy", "arguments": {"values": [0.5, 0.25, 0.25], "base": 2}}],
        "final_answer": {"required": True, "contains": ["1.5"]},
    },
    "max_turns": 12,
}

GOOD = {"values": [0.5, 0.25, 0.25], "base": 2}
DECAY = [
    {"values": "[0.5, 0.25, 0.25]", "base": 2},
    {"values": [0, 0, 0], "base": 2},
    {"values": ["", "", ""], "base": 2},
]


def _target(side: str, label: str, url: str, fusion: bool) -> TargetInfo:
    return TargetInfo(
        label=label,
        side=side,  # type: ignore[arg-type]
        base_url=url,
        model="Qwen/Qwen3-30B-A3B",
        server_info={
            "tp_size": 1,
            "disable_shared_experts_fusion": not fusion,
            "attention_backend": "aiter" if fusion else "triton",
        },
    )


def _turn(
    i: int, calls: list[dict[str, Any]], content: str | None, prev: list[dict[str, Any]]
) -> TurnRecord:
    tcs = [
        ToolCallRecord(
            index=k, id=f"call_{i}_{k}", type="function", name="entropy", arguments=json.dumps(a)
        )
        for k, a in enumerate(calls)
    ]
    finish = "tool_calls" if tcs else "stop"
    raw = {
        "id": f"chatcmpl-{i}",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [c.model_dump() for c in tcs] or None,
                },
            }
        ],
    }
    results = [ToolResultRecord(tool_call_id=c.id, name=c.name, content="1.5") for c in tcs]
    return TurnRecord(
        index=i,
        new_messages=prev,
        request_params={"model": "Qwen/Qwen3-30B-A3B", "temperature": 0.0, "max_tokens": 1024},
        response=ResponseRecord(
            content=content,
            tool_calls=tcs,
            finish_reason=finish,
            latency_s=0.12 + 0.01 * i,
            raw=raw,
            usage={"prompt_tokens": 100 + 40 * i, "completion_tokens": 30},
        ),
        tool_results=results,
    )


def _followup_messages(turn: TurnRecord) -> list[dict[str, Any]]:
    assert turn.response is not None
    msgs: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": turn.response.content,
            "tool_calls": [c.model_dump() for c in turn.response.tool_calls],
        }
    ]
    msgs += [
        {"role": "tool", "tool_call_id": r.tool_call_id, "content": r.content}
        for r in turn.tool_results
    ]
    return msgs


def _record(
    side: str,
    label: str,
    url: str,
    repeat: int,
    plan: list[list[dict[str, Any]]],
    final: str | None,
) -> RunRecord:
    turns: list[TurnRecord] = []
    prev: list[dict[str, Any]] = list(SCENARIO["messages"])
    for i, calls in enumerate(plan):
        t = _turn(i, calls, None, prev)
        turns.append(t)
        prev = _followup_messages(t)
    if final is not None:
        turns.append(_turn(len(plan), [], final, prev))
    return RunRecord(
        run_key=f"{side}/entropy_array/{repeat}/nostream",
        scenario_id="entropy_array",
        scenario_hash="abc123",
        scenario=SCENARIO,
        repeat=repeat,
        stream=False,
        target=_target(side, label, url, fusion=(side == "candidate")),
        sampling={"temperature": 0.0, "max_tokens": 1024},
        tools=[{"type": "function", "function": SCENARIO["tools"][0]}],
        turns=turns,
        stop_reason="final_answer" if final is not None else "turn_cap",
        final_content=final,
    )


def baseline_record(repeat: int, final: str = "The entropy is 1.5 bits.") -> RunRecord:
    plan = [[GOOD], [dict(GOOD, base=2.0)], [dict(GOOD, base=10)]]
    return _record("baseline", "unfused", "http://127.0.0.1:30000", repeat, plan, final)


def candidate_record(repeat: int) -> RunRecord:
    plan = [[GOOD, GOOD, GOOD]] + [[DECAY[min(i // 4, 2)]] * 3 for i in range(11)]
    return _record("candidate", "fused", "http://127.0.0.1:30001", repeat, plan, None)


def write_summary_for(folder: Path) -> Path:
    """Score the folder's transcripts into ``scores.jsonl`` and ``summary.json`` (as
    ``harness score`` does); returns the summary's path."""
    from harness.pipeline import score_folder

    score_folder(RunFolder(folder))
    return RunFolder(folder).summary_path


def write_case(
    folder: Path,
    *,
    repeats: int = 3,
    xss: bool = False,
    one_side: bool = False,
    summary: bool = False,
) -> Path:
    """Write a run folder for the motivating case; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    recs = [
        baseline_record(r, final=(XSS if xss and r == 0 else "The entropy is 1.5 bits."))
        for r in range(repeats)
    ]
    if not one_side:
        recs += [candidate_record(r) for r in range(repeats)]
    targets = list({r.target.label: r.target for r in recs}.values())
    manifest = RunManifest(
        run_id=folder.name,
        command="harness compare",
        harness_version="0.1.0",
        git_revision="d8ef7cf",
        targets=targets,
        args={"repeats": repeats, "concurrency": 8, "stream": False},
    )
    (folder / "manifest.json").write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    for r in recs:
        RunFolder(folder).append_record(r)
    if summary:
        write_summary_for(folder)
    return folder
