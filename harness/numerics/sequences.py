"""The sequences both servers score: the same token ids on both sides, no sampling.

- :func:`from_scenario`: a scenario's reference conversation: its messages, then per
  expected step an assistant message with the reference tool calls, the tool results its
  simulators give them, and the reference final answer (as the reference server plays
  it: :meth:`harness.scenario.model.FinalAnswerExpectation.reference_text`); the
  follow-ups the same way.
- :func:`from_record`: a recorded run (``transcripts.jsonl``): the conversation the
  server actually had (what a compare run's baseline said, turn by turn).
- :func:`from_gsm8k`: GSM8K few-shot prompts (SGLang's format,
  :func:`harness.gsm8k.data.question_prompt`).
"""

from __future__ import annotations

import json
from typing import Any

from harness.gsm8k.data import Question, question_prompt
from harness.numerics.models import Sequence
from harness.scenario.model import Expectation, ExpectedCall, Scenario
from harness.scenario.tools import simulate
from harness.transcript import RunRecord

__all__ = ["from_gsm8k", "from_record", "from_scenario"]


def _steps(expect: Expectation) -> list[list[ExpectedCall]]:
    """Expected calls grouped into steps (consecutive ``parallel`` calls form one step)."""
    steps: list[list[ExpectedCall]] = []
    for call in expect.calls:
        if call.parallel and steps and steps[-1][-1].parallel:
            steps[-1].append(call)
        else:
            steps.append([call])
    return steps


def _segment(sc: Scenario, expect: Expectation, counts: dict[str, int], sid: str) -> list[Any]:
    msgs: list[dict[str, Any]] = []
    tools = {t.name: t for t in sc.tools}
    for s, step in enumerate(_steps(expect)):
        ids = [f"call_{sid}_{s}_{i}" for i in range(len(step))]
        args = [json.dumps(c.arguments) for c in step]
        calls = [
            {"id": i, "type": "function", "function": {"name": c.tool, "arguments": a}}
            for i, c, a in zip(ids, step, args, strict=True)
        ]
        msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call_id, c, a in zip(ids, step, args, strict=True):
            tool = tools.get(c.tool)
            result = "ok" if tool is None else simulate(tool, a, counts.get(c.tool, 0)).content
            counts[c.tool] = counts.get(c.tool, 0) + 1
            msgs.append({"role": "tool", "tool_call_id": call_id, "content": result})
    msgs.append({"role": "assistant", "content": expect.final_answer.reference_text()})
    return msgs


def from_scenario(sc: Scenario) -> Sequence:
    """The scenario's reference conversation (see the module docstring)."""
    msgs: list[dict[str, Any]] = [m.model_dump() for m in sc.messages]
    counts: dict[str, int] = {}
    msgs += _segment(sc, sc.expect, counts, "0")
    for n, f in enumerate(sc.followups, start=1):
        msgs.append({"role": "user", "content": f.user})
        msgs += _segment(sc, f.expect, counts, str(n))
    return Sequence(id=sc.id, source="scenario", messages=tuple(msgs))


def from_record(rec: RunRecord) -> Sequence:
    """The conversation of one recorded run: each turn's new messages, then the reply."""
    msgs: list[dict[str, Any]] = []
    for turn in rec.turns:
        msgs += [dict(m) for m in turn.new_messages]
        r = turn.response
        if r is None:
            break
        msg: dict[str, Any] = {"role": "assistant", "content": r.content}
        if r.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.arguments
                        if isinstance(c.arguments, str)
                        else json.dumps(c.arguments),
                    },
                }
                for c in r.tool_calls
            ]
        msgs.append(msg)
    return Sequence(id=rec.scenario_id, source="transcript", messages=tuple(msgs))


def from_gsm8k(questions: list[Question], n: int, *, shots: int = 5) -> list[Sequence]:
    """``n`` GSM8K few-shot prompts (questions ``shots`` .. ``shots + n - 1``, each after
    the first ``shots`` worked examples) as plain-text sequences."""
    last = min(len(questions), shots + n)
    return [
        Sequence(id=f"gsm8k-{i}", source="gsm8k", text=question_prompt(questions, shots, i))
        for i in range(shots, last)
    ]
