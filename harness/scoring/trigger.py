"""Single-turn A/B as a vendor verifier reports it, with the baseline as the reference.

K2-Vendor-Verifier (MoonshotAI/K2-Vendor-Verifier, README "Evaluation Metrics" and
``tool_calls_eval.py``) sends each request of a corpus once and compares the vendor's
``finish_reason`` with the official API's. ``harness compare --single-turn`` does the same
with the baseline in the official API's place, for every paired run (same scenario,
repeat and stream mode on both sides; runs lost to infrastructure errors left out):

- tool-call trigger agreement: TP both sides ``finish_reason == "tool_calls"``, FP only
  the candidate, FN only the baseline, TN neither; ``precision = TP / (TP + FP)``,
  ``recall = TP / (TP + FN)``, ``F1 = 2 TP / (2 TP + FP + FN)`` (the harmonic mean of the
  two, defined as 0 when one of them is 0/0 and the other side has positives; ``None``
  when neither side ever calls a tool);
- schema accuracy per side: of the responses with ``finish_reason == "tool_calls"``, the
  share whose every call names an offered tool and has arguments that parse as a JSON
  object and validate against its JSON Schema (the verifier's ``validate_tool_call``:
  ``count_successful_tool_call / count_finish_reason_tool_calls``).

:func:`single_turn` cuts a scenario to its first response (``max_turns: 1``), expecting
only the first step of its calls, so the harness's own drift and protocol findings are
judged on the same single turn.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

import referencing.exceptions
from pydantic import BaseModel, Field, computed_field

from harness.scenario.model import Expectation, Scenario
from harness.scenario.schemas import validator
from harness.transcript import ResponseRecord, RunRecord

__all__ = [
    "SchemaAccuracy",
    "TriggerAgreement",
    "VerifierFigures",
    "calls_valid",
    "single_turn",
    "trigger_agreement",
    "verifier_figures",
]


class TriggerAgreement(BaseModel):
    """Confusion counts of ``finish_reason == "tool_calls"``, candidate vs baseline."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def precision(self) -> float | None:
        """TP / (TP + FP); None when nothing was predicted."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recall(self) -> float | None:
        """TP / (TP + FN); None when nothing was expected."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def f1(self) -> float | None:
        """2 TP / (2 TP + FP + FN); None when TP, FP and FN are all 0."""
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else None


class SchemaAccuracy(BaseModel):
    """One side: responses by finish_reason, and the tool_calls ones that validate."""

    finish_reasons: dict[str, int] = Field(default_factory=dict)
    tool_call_responses: int = 0  # count_finish_reason_tool_calls
    valid: int = 0  # count_successful_tool_call

    @computed_field  # type: ignore[prop-decorator]
    @property
    def accuracy(self) -> float | None:
        """Valid tool_calls responses / all tool_calls responses; None without any."""
        return self.valid / self.tool_call_responses if self.tool_call_responses else None


class VerifierFigures(BaseModel):
    """What a vendor verifier reports, per side, over ``pairs`` paired runs."""

    pairs: int = 0
    trigger: TriggerAgreement = Field(default_factory=TriggerAgreement)
    baseline: SchemaAccuracy = Field(default_factory=SchemaAccuracy)
    candidate: SchemaAccuracy = Field(default_factory=SchemaAccuracy)


def trigger_agreement(pairs: Iterable[tuple[bool, bool]]) -> TriggerAgreement:
    """Counts over ``(baseline triggered, candidate triggered)`` pairs."""
    t = TriggerAgreement()
    for base, cand in pairs:
        if base and cand:
            t.tp += 1
        elif cand:
            t.fp += 1
        elif base:
            t.fn += 1
        else:
            t.tn += 1
    return t


def calls_valid(response: ResponseRecord, tools: list[dict[str, Any]]) -> bool:
    """Every tool call names an offered tool and its arguments validate (K2VV's rule).

    ``tools``: the ``tools`` request field (``[{"type": "function", "function": {...}}]``).
    """
    schemas = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in tools
        if isinstance(t.get("function"), dict)
    }
    if not response.tool_calls:
        return False
    for call in response.tool_calls:
        schema = schemas.get(call.name or "")
        raw = call.arguments
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            return False
        if schema is None or not isinstance(args, dict):
            return False
        try:
            if not validator(schema).is_valid(args):
                return False
        except referencing.exceptions.Unresolvable:  # a $ref never fetched: not checkable
            return False
    return True


def _first(record: RunRecord) -> ResponseRecord | None:
    return next((t.response for t in record.turns if t.response is not None), None)


def _count(side: SchemaAccuracy, record: RunRecord, response: ResponseRecord) -> bool:
    """Add one response to ``side``; whether it triggered (``finish_reason == "tool_calls"``)."""
    reason = response.finish_reason or "none"
    side.finish_reasons = dict(Counter(side.finish_reasons) + Counter({reason: 1}))
    if reason != "tool_calls":
        return False
    side.tool_call_responses += 1
    side.valid += calls_valid(response, record.tools)
    return True


def verifier_figures(records: Iterable[RunRecord]) -> VerifierFigures:
    """The figures over the first response of each run paired across the two sides.

    Runs are paired by ``(scenario_id, repeat, stream)``; a pair is left out when either
    run is missing or ended in an infrastructure error before its first response.
    """
    by_side: dict[str, dict[tuple[str, int, bool], RunRecord]] = {"baseline": {}, "candidate": {}}
    for r in records:
        if r.target.side in by_side and _first(r) is not None:
            by_side[r.target.side][(r.scenario_id, r.repeat, r.stream)] = r
    out = VerifierFigures()
    pairs = []
    for key in sorted(by_side["baseline"].keys() & by_side["candidate"].keys()):
        base, cand = by_side["baseline"][key], by_side["candidate"][key]
        b = _count(out.baseline, base, _first(base))  # type: ignore[arg-type]
        c = _count(out.candidate, cand, _first(cand))  # type: ignore[arg-type]
        pairs.append((b, c))
    out.trigger = trigger_agreement(pairs)
    out.pairs = len(pairs)
    return out


def _first_step(seg: Expectation) -> Expectation:
    """The segment cut to its first response: the first call and the parallel ones after it."""
    calls = []
    for i, c in enumerate(seg.calls):
        if i > 0 and not c.parallel:
            break
        calls.append(c)
    answer = seg.final_answer.model_copy(
        update={"required": seg.final_answer.required and not calls}
    )
    return seg.model_copy(update={"calls": calls, "final_answer": answer})


def single_turn(sc: Scenario) -> Scenario:
    """``sc`` cut to its first response: ``max_turns: 1``, no follow-ups, the first step
    of its expected calls (a final answer required only when no call is expected)."""
    return sc.model_copy(update={"max_turns": 1, "followups": [], "expect": _first_step(sc.expect)})
