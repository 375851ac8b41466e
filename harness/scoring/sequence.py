"""The call-by-call sequence match: a run's calls matched to each segment's expected
calls (missing, spurious or more than ``max_calls``, out of a strict order). Pure.

A suite's task (BFCL's) replaces it with its own criteria (:mod:`harness.scoring.bfcl`).
"""

from __future__ import annotations

from harness.kinds import FailureKind
from harness.scenario.model import ArgMatcher, Expectation, ExpectedCall, Scenario
from harness.scoring.calls import ParsedCall
from harness.scoring.drift import canonical_json, matcher_accepts
from harness.scoring.models import SequenceMatch

__all__ = ["match_sequence"]


def _satisfies(call: ParsedCall, exp: ExpectedCall) -> bool:
    """Same tool, and every checked key present and accepted (ArgMatcher semantics)."""
    if call.args is None or call.raw.name != exp.tool:
        return False
    checks = {k: ArgMatcher(equals=v) for k, v in exp.arguments.items()} | exp.match
    return all(k in call.args and matcher_accepts(m, call.args[k]) for k, m in checks.items())


def _closest(call: ParsedCall, options: list[ExpectedCall]) -> ExpectedCall | None:
    """The expected call sharing most argument values with ``call`` (first on ties)."""
    args = call.args or {}

    def same_values(e: ExpectedCall) -> int:
        return sum(
            k in args and canonical_json(args[k]) == canonical_json(v)
            for k, v in e.arguments.items()
        )

    return max(options, key=same_values) if options else None


def _match_segment(
    seg: Expectation, si: int, calls: list[ParsedCall], seq: SequenceMatch
) -> list[FailureKind]:
    """Assign calls to expected calls; fill ``seq``; return failure kinds."""
    matched: dict[int, ParsedCall] = {}
    leftovers: list[ParsedCall] = []
    unexpected = 0
    for c in calls:
        j = next(
            (j for j, e in enumerate(seg.calls) if j not in matched and _satisfies(c, e)), None
        )
        if j is None:
            leftovers.append(c)
        else:
            matched[j], c.reference = c, seg.calls[j]
    for c in leftovers:
        same = [e for j, e in enumerate(seg.calls) if e.tool == c.raw.name and j not in matched]
        again = [e for e in seg.calls if e.tool == c.raw.name]
        c.reference = _closest(c, same or again)
        if not same and (seg.calls or seg.max_calls is not None):
            seq.unexpected.append(f"turn{c.turn}:{c.raw.name}")
            unexpected += 1
    seq.matched += len(matched)
    required = [j for j, e in enumerate(seg.calls) if not e.optional]
    seq.expected += len(required)
    seq.missing += [f"seg{si}:{seg.calls[j].tool}" for j in required if j not in matched]
    turns = [matched[j].turn for j in sorted(matched)]
    in_order = seg.order == "free" or turns == sorted(turns)
    seq.order_kept = seq.order_kept and in_order
    kinds = []
    if any(j not in matched for j in required):
        kinds.append(FailureKind.MISSING_CALLS)
    if unexpected or (seg.max_calls is not None and len(calls) > seg.max_calls):
        kinds.append(FailureKind.SPURIOUS_CALLS)
    if not in_order:
        kinds.append(FailureKind.ORDER_VIOLATION)
    return kinds


def match_sequence(sc: Scenario, calls: list[ParsedCall]) -> tuple[SequenceMatch, set[FailureKind]]:
    """Match each segment's calls to its expected calls; sets each call's ``reference``.

    Returns:
        ``(the sequence match, failure kinds)``: ``missing_calls``, ``spurious_calls``
        (unexpected, or more than the segment's ``max_calls``), ``order_violation``.
    """
    seq, kinds = SequenceMatch(), set[FailureKind]()
    for si, seg in enumerate(sc.segments()):
        kinds.update(_match_segment(seg, si, [c for c in calls if c.segment == si], seq))
    return seq, kinds
