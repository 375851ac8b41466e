"""BFCL's pass criteria for a run of a BFCL task: pure, read from the record.

Replaces the harness's call-by-call sequence matching for BFCL tasks
(:func:`harness.scoring.score.score_run` calls :func:`bfcl_sequence`), with what BFCL's
``multi_turn_checker`` tolerates: calls in any order, extra calls, calls made in an
earlier turn, and different calls reaching the same result (another path, ``cd`` then
a relative name): a turn passes when the backends' state equals the ground truth's
(``state_mismatch`` otherwise) and every ground-truth result is among the run's results
so far (``missing_calls`` otherwise); a turn never reached is ``missing_calls``. Both
come from :class:`harness.transcript.StateCheck`, made by the runner. Everything else
the harness scores (arguments, drift, protocol, repeats, termination) applies as usual;
a call's drift reference is a ground-truth call of its turn with the same arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.kinds import FailureKind
from harness.scenario.model import ExpectedCall, Scenario
from harness.scoring.drift import canonical_json
from harness.scoring.models import SequenceMatch
from harness.transcript import StateCheck

if TYPE_CHECKING:
    from harness.scoring.calls import ParsedCall

__all__ = ["bfcl_sequence"]


def _key(tool: str | None, args: object) -> str:
    return canonical_json([tool, args])


def _match_exact(calls: Sequence[ParsedCall], expected: list[ExpectedCall]) -> int:
    """Ground-truth calls made with exactly its arguments (each call used once); sets
    each such call's ``reference``."""
    pool = {i: _key(e.tool, e.arguments) for i, e in enumerate(expected)}
    matched = 0
    for c in calls:
        hit = next((i for i, k in pool.items() if k == _key(c.raw.name, c.args)), None)
        if hit is not None and c.args is not None:
            c.reference = expected[hit]
            del pool[hit]
            matched += 1
    return matched


def bfcl_sequence(
    sc: Scenario, calls: Sequence[ParsedCall], checks: Sequence[StateCheck]
) -> tuple[SequenceMatch, set[FailureKind]]:
    """The sequence score of a BFCL task's run: see the module docstring.

    ``missing`` lists ``"seg<i>:not reached"`` or ``"seg<i>:<result excerpt>"``;
    ``matched``/``expected`` count ground-truth calls made exactly (information only).
    """
    seq, kinds = SequenceMatch(), set[FailureKind]()
    by_segment = {c.segment: c for c in checks}
    for si, seg in enumerate(sc.segments()):
        seq.expected += len(seg.calls)
        seq.matched += _match_exact([c for c in calls if c.segment == si], seg.calls)
        check = by_segment.get(si)
        if not seg.calls:
            if check is not None and not check.state_ok:
                kinds.add(FailureKind.STATE_MISMATCH)
            continue
        if check is None:
            seq.missing.append(f"seg{si}:not reached")
            kinds.add(FailureKind.MISSING_CALLS)
            continue
        if check.missing_results:
            seq.missing += [f"seg{si}:{r[:80]}" for r in check.missing_results]
            kinds.add(FailureKind.MISSING_CALLS)
        if not check.state_ok:
            kinds.add(FailureKind.STATE_MISMATCH)
    return seq, kinds
