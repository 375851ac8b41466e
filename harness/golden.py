"""The expectation of an imported scenario, from a golden run against a trusted server.

:func:`golden_runs` plays each imported scenario once, greedy as recorded, non-streaming,
through the harness's own agent loop (:func:`harness.runner.run_scenario`: tools answer
with the recorded results) against the trusted server; :func:`expectation` turns that
run's calls and how it ended into the scenario's ``expect``, under a match policy:

- ``exact``: every call with its arguments, each key compared for equality
  (the default :class:`~harness.scenario.model.ExpectedCall` check);
- ``schema-only``: the same tools in the same order, each argument only of the same JSON
  type (``match: {key: {type: ...}}``); the tool's JSON Schema is checked as always;
- ``tool-name-only``: the same tools in the same order, arguments not compared.

Calls in one assistant message after the first are ``parallel: true``. A golden run that
answered without calling a tool expects no call (``max_calls: 0``); one that reached a
final answer requires one. A golden call that breaks its tool's schema, or names no
offered tool, is not expected (it is reported). The golden run's first finish_reason
is kept as the tag ``golden-<finish_reason>``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.client.target import TargetConfig, fetch_target_info, make_client
from harness.errors import ScenarioError
from harness.runner import run_scenario
from harness.scenario.model import Scenario, scenario_from_data
from harness.transcript import RunRecord

__all__ = ["POLICIES", "GoldenOutcome", "MatchPolicy", "expectation", "golden_runs"]

MatchPolicy = Literal["exact", "schema-only", "tool-name-only"]
POLICIES: tuple[MatchPolicy, ...] = ("exact", "schema-only", "tool-name-only")
_JSON_TYPE = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


@dataclass
class GoldenOutcome:
    """The expectation built from one golden run, and calls left out (with why)."""

    expect: dict[str, Any]
    finish_reason: str | None
    calls: int
    dropped: list[str] = field(default_factory=list)


def _type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    return _JSON_TYPE.get(type(v), "number")


def _expected(
    name: str, args: dict[str, Any], parallel: bool, policy: MatchPolicy
) -> dict[str, Any]:
    call: dict[str, Any] = {"tool": name}
    if policy != "tool-name-only":
        call["arguments"] = args
    if policy == "schema-only":
        call["match"] = {k: {"type": _type(v)} for k, v in args.items()}
    if parallel:
        call["parallel"] = True
    return call


def _calls(
    record: RunRecord, sc: Scenario, policy: MatchPolicy
) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    for turn in record.turns:
        for i, c in enumerate(turn.response.tool_calls if turn.response else []):
            tool = sc.tool(c.name or "")
            raw = c.arguments if c.arguments is not None else "{}"
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                args = None
            if tool is None or not isinstance(args, dict):
                dropped.append(
                    f"turn {turn.index}: {c.name!r} (unknown tool or arguments not a JSON object)"
                )
                continue
            out.append(_expected(tool.name, args, i > 0, policy))
    return out, dropped


def expectation(record: RunRecord, sc: Scenario, policy: MatchPolicy) -> GoldenOutcome:
    """The ``expect`` mapping for ``sc`` from its golden run ``record`` (pure).

    Calls whose reference arguments break the tool's schema are expected by tool name only
    (noted in ``dropped``), so the scenario still loads.
    """
    calls, dropped = _calls(record, sc, policy)
    first = next((t.response for t in record.turns if t.response is not None), None)
    expect: dict[str, Any] = {
        "calls": calls,
        "final_answer": {"required": record.stop_reason == "final_answer"},
    }
    if not calls and not dropped:
        expect["max_calls"] = 0
    base = sc.model_dump(mode="json", exclude={"expect"})
    for j, call in enumerate(calls):
        try:
            scenario_from_data({**base, "expect": {"calls": [call]}})
        except ScenarioError as exc:
            dropped.append(f"call {j} {call['tool']}: {exc.reason}; expected by tool name only")
            call.pop("arguments", None)
            call.pop("match", None)
    return GoldenOutcome(expect, first.finish_reason if first else None, len(calls), dropped)


async def _run_all(
    scenarios: list[Scenario], target: TargetConfig, concurrency: int
) -> list[RunRecord]:
    info = await fetch_target_info(target)
    client = make_client(target)
    gate = asyncio.Semaphore(concurrency)

    async def one(sc: Scenario) -> RunRecord:
        async with gate:
            return await run_scenario(sc, target, repeat=0, stream=False, client=client, info=info)

    try:
        return list(await asyncio.gather(*(one(sc) for sc in scenarios)))
    finally:
        await client.close()


def golden_runs(
    scenarios: list[Scenario], target: TargetConfig, *, concurrency: int = 8
) -> list[RunRecord]:
    """One non-streaming run of each scenario against ``target``, in the given order.

    A server failure does not raise: that record ends with ``stop_reason="error"``
    (:attr:`RunRecord.error` says what failed).
    """
    return asyncio.run(_run_all(scenarios, target, concurrency))
