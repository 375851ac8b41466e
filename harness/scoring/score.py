"""Per-run scores: a pure function of one :class:`~harness.transcript.RunRecord`.

:func:`score_run` reads only the record (its embedded scenario included), never the
network or the scenario files, so any old run can be re-scored. The result is a
:class:`harness.scoring.models.RunScore`.

``RunScore.failures`` holds :class:`harness.kinds.FailureKind` values (the vocabulary,
with each kind's family, label and meaning, lives there; the reference server's faults,
:mod:`harness.sim.faults`, carry the same names). :func:`score_run` composes the
modules that find them, by family:

- calls (:mod:`harness.scoring.calls`): each call's arguments parsed (:func:`parse_call`:
  not JSON, cut short, reasoning before the JSON, an object where the wire wants a
  string, not an object, ``""`` for ``"{}"``, a tool the request did not offer), checked
  against the tool's JSON Schema, and a repeat loop: more identical calls than the
  scenario's own expected calls repeat;
- drift: each usable call against its reference, by :mod:`harness.scoring.drift`;
- sequence (:mod:`harness.scoring.sequence`): calls matched to each segment's expected
  calls (missing, spurious or more than ``max_calls``, out of a strict order); a suite's
  task is scored by its suite's criteria instead (BFCL's: :mod:`harness.scoring.bfcl`);
- answer (:mod:`harness.scoring.answers`): each segment's final answer (missing, or not
  what ``final_answer`` expects);
- protocol (:mod:`harness.scoring.protocol`): each response's ``finish_reason`` against
  its tool calls (and ``length`` with tool calls), markup or reasoning in ``content``, a
  call to a declared tool written into ``content`` (:mod:`harness.scoring.leaks`, any
  dialect, any turn), tool_call ids (missing, repeated in the run) and streamed indices
  (missing, shared by two calls, not 0..n-1); and :mod:`harness.scoring.contract` (the
  reasoning channel, argument markup, streamed calls two clients read differently, the
  request's constraints);
- termination (:mod:`harness.scoring.termination`): how the run ended, as scored;
- information (:func:`harness.scoring.protocol.information`): content beside a call that
  only restates it, in ``RunScore.information``, and in ``failures`` only where the
  scenario's ``targets`` name it.

A response whose ``content`` holds a leaked call or template markup is never a final
answer, whatever else it says.

A run *passes* when it has no failure kind at all. Infrastructure errors are scored as
termination ``error`` with no failure kinds and are excluded from every rate, except a
refusal the history the model wrote explains (:func:`harness.scoring.calls.history_refusal`:
a later request refused over the model's unreadable call): that run is scored up to the
refusal, with ``tool_call_refused_in_history`` and termination ``malformed``, the server's
message kept in ``RunScore.history_refusal``.
"""

from __future__ import annotations

from collections import OrderedDict

from harness.kinds import FailureKind, failure_kind
from harness.scenario.model import Scenario
from harness.scenario.suites import get_suite
from harness.scoring.answers import final_answers
from harness.scoring.calls import (
    ParsedCall,
    allowed_repeats,
    call_scores,
    history_refusal,
    parse_call,
    parse_calls,
    repeats,
    score_arguments,
)
from harness.scoring.drift import excerpt
from harness.scoring.leaks import MARKUP_PATTERNS, tool_params
from harness.scoring.models import RunScore
from harness.scoring.protocol import (
    information,
    leak_violations,
    leaked_calls,
    protocol_violations,
)
from harness.scoring.sequence import match_sequence
from harness.scoring.termination import termination
from harness.transcript import RunRecord

__all__ = ["MARKUP_PATTERNS", "ParsedCall", "allowed_repeats", "parse_call", "score_run"]


#: parsed scenarios by content hash, most recent last (a few hundred at most: records of
#: one scenario come together, and a suite of thousands must not stay in memory)
_SCENARIOS: OrderedDict[str, Scenario] = OrderedDict()
_SCENARIO_CACHE = 256


def _scenario(record: RunRecord) -> Scenario:
    key = record.scenario_hash
    sc = _SCENARIOS.get(key)
    if sc is None:
        sc = _SCENARIOS[key] = Scenario.model_validate(record.scenario)
        if len(_SCENARIOS) > _SCENARIO_CACHE:
            _SCENARIOS.popitem(last=False)
    else:
        _SCENARIOS.move_to_end(key)
    return sc


def _infra_score(record: RunRecord) -> RunScore:
    return RunScore(
        run_key=record.run_key,
        scenario_id=record.scenario_id,
        side=record.side,
        label=record.target.label,
        repeat=record.repeat,
        stream=record.stream,
        infra_error=record.error,
        termination="error",
        turns=len(record.turns),
    )


def score_run(record: RunRecord) -> RunScore:
    """Score one run (pure; no network, no files).

    Returns:
        The :class:`~harness.scoring.models.RunScore`; ``passed`` is True iff ``failures`` is empty.
        A run with an infrastructure error gets termination ``error``, ``passed=False``
        and no failures (callers exclude it from rates), unless the history the model
        wrote explains it (see the module docstring).
    """
    sc = _scenario(record)
    calls = parse_calls(record, sc)
    refusal = history_refusal(record, calls) if record.is_infra_error else None
    if record.is_infra_error and refusal is None:
        return _infra_score(record)
    reps, streak = repeats(calls)
    if sc.task is not None:  # a suite's own criteria (BFCL's: harness.scoring.bfcl)
        seq, kinds = get_suite(sc.task.suite).score(sc, calls, record.state_checks)
    else:
        seq, kinds = match_sequence(sc, calls)
    drift, schema = score_arguments(calls, sc)
    allowed = allowed_repeats(sc)
    looping = len(reps) > allowed
    tools = tool_params(t.model_dump() for t in sc.tools)
    reached, ok, final, answer_kinds = final_answers(record, sc, tools)
    leaked = leaked_calls(record, tools)
    protocol = protocol_violations(record, tools) + leak_violations(leaked)
    kinds |= {k for c in calls for k in c.kinds} | answer_kinds
    kinds |= {failure_kind(p.kind) for p in protocol}
    kinds |= {FailureKind.REPEAT_LOOP} if looping else set()
    info = information(record)
    kinds |= {failure_kind(o.kind) for o in info if o.kind in sc.targets}
    kinds |= {FailureKind.TOOL_CALL_REFUSED_IN_HISTORY} if refusal is not None else set()
    malformed = [c.malformed for c in calls if c.malformed]
    bad_args = [m for m in malformed if m.kind != FailureKind.UNKNOWN_TOOL]
    return RunScore(
        run_key=record.run_key, scenario_id=record.scenario_id, side=record.side,
        label=record.target.label, repeat=record.repeat, stream=record.stream,
        termination=termination(record, calls, tools, refused=refusal is not None),
        turns=len(record.turns), tool_calls=len(calls),
        repeated_calls=len(reps), longest_repeat_streak=streak, allowed_repeats=allowed,
        malformed_args=len(bad_args), malformed=malformed, history_refusal=refusal,
        schema_violations=schema, drift=drift, protocol_violations=protocol, leaked_calls=leaked,
        information=info,
        final_answer=reached, final_answer_ok=ok,
        final_excerpt=excerpt(final, 300) if final else None, sequence=seq,
        calls=call_scores(calls, reps, looping), failures=sorted(kinds), passed=not kinds,
    )  # fmt: skip
