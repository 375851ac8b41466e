"""Sequential comparison: repeats in rounds, stopping as soon as the decision is clear.

A group-sequential design (Jennison & Turnbull 2000, *Group Sequential Methods with
Applications to Clinical Trials*) with up to ``rounds`` looks, one after each round of
``repeats`` runs per scenario and side. Look ``k`` of ``K`` decides with the
Westfall-Young rule (:mod:`harness.stats.verdict`) at the level the alpha-spending
function of the power family with ``rho = 2`` gives it (Kim & DeMets 1987; Jennison &
Turnbull 2000, section 7.3)::

    alpha_k = alpha * ((k / K) ** 2 - ((k - 1) / K) ** 2)

The levels sum to ``alpha``, so by the union bound the family-wise false-alarm rate over
all looks is at most ``alpha`` whatever the correlation between looks (conservative next
to an exact boundary). A look stops the comparison when:

- REGRESSION or IMPROVEMENT is significant at its level (efficacy);
- nothing is even suggestive: every worse test's adjusted p is above ``FUTILITY`` (0.5),
  NO CHANGE (futility; a non-binding futility stop never raises the false-alarm rate);
- it is the last look (the verdict of the last look stands, INCONCLUSIVE included).
"""

from __future__ import annotations

from harness.summary import Summary

__all__ = ["FUTILITY", "ROUNDS", "first_look", "look_alpha", "should_stop"]

#: default number of rounds (looks); with 5 repeats per round, at most 20 per side
ROUNDS = 4
#: adjusted p above which no worse test is worth another round (futility)
FUTILITY = 0.5


def look_alpha(alpha: float, look: int, rounds: int) -> float:
    """The level spent at look ``look`` (1-based) of ``rounds`` (power family, rho 2).

    Raises:
        ValueError: ``look`` outside ``[1, rounds]``.
    """
    if not 1 <= look <= rounds:
        raise ValueError(f"need 1 <= look <= rounds, got look={look}, rounds={rounds}")
    return alpha * ((look / rounds) ** 2 - ((look - 1) / rounds) ** 2)


def first_look(done: int, per_round: int, rounds: int) -> int:
    """The look a resumed comparison starts at: the round its ``done`` runs reach
    (``per_round`` runs a round, both sides), so a round interrupted half-way is finished
    before any look (a look never sees part of a round)."""
    if per_round <= 0:
        return 1
    return min(rounds, max(1, -(-done // per_round)))


def should_stop(summary: Summary, look: int, rounds: int) -> bool:
    """Whether the comparison stops after ``look`` (see the module docstring)."""
    v = summary.verdict
    if v is None or look >= rounds:
        return True
    if v.verdict in ("REGRESSION", "IMPROVEMENT") or v.infra_limited:
        return True
    worse = [
        r.p_adjusted
        for c in summary.comparisons
        for r in c.rows
        if r.decisive and r.worse and r.p_adjusted is not None
    ]
    return all(p > FUTILITY for p in worse)
