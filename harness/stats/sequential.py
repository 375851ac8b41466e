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
- nothing is even suggestive: every worse test's adjusted p is above ``FUTILITY`` (0.5)
  and the candidate shows no failure kind that no baseline run shows, NO CHANGE
  (futility; a non-binding futility stop never raises the false-alarm rate). A kind only
  the candidate shows keeps the rounds going even when its test is far from significant
  (a drift fault only two scenarios can show: one event in a round gives a p near 0.5):
  the stop would drop the evidence its verdict prints;
- it is the last look (the verdict of the last look stands, INCONCLUSIVE included).

At look ``k`` the band of INCONCLUSIVE (worse, not significant) keeps its ratio to the
look's level: adjusted p at most ``SUGGESTIVE_P * alpha_k / alpha``
(:func:`suggestive_p`; a fixed comparison's band, 0.1 at alpha 0.01, is the one-look
case). Only the verdict of the look that stops reads the band, which is the last look
whenever a worse test was within ``FUTILITY``: there the band is 0.044 (4 rounds), not
0.1, since the runs that continued were selected for looking worse.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.summary import Summary

__all__ = [
    "FUTILITY",
    "ROUNDS",
    "SUGGESTIVE_P",
    "Look",
    "first_look",
    "look_alpha",
    "should_stop",
    "suggestive_p",
]

#: default number of rounds (looks); with 5 repeats per round, at most 20 per side
ROUNDS = 4
#: adjusted p above which no worse test is worth another round (futility)
FUTILITY = 0.5
#: adjusted p at most which an unproven worse difference makes INCONCLUSIVE, at the
#: overall level (a fixed comparison); a look scales it by its share (:func:`suggestive_p`)
SUGGESTIVE_P = 0.1


@dataclass(frozen=True)
class Look:
    """Where a sequential comparison is: ``look`` (1-based) of ``rounds``, at overall
    level ``alpha`` (what :func:`harness.stats.verdict.decide` needs to speak of the rule)."""

    look: int
    rounds: int
    alpha: float

    @property
    def level(self) -> float:
        """This look's level (:func:`look_alpha`)."""
        return look_alpha(self.alpha, self.look, self.rounds)

    @property
    def final_level(self) -> float:
        """The last look's level."""
        return look_alpha(self.alpha, self.rounds, self.rounds)

    @property
    def left(self) -> int:
        """Rounds the design had left after this look."""
        return self.rounds - self.look


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


def suggestive_p(alpha_look: float, alpha: float) -> float:
    """The INCONCLUSIVE band at a look of level ``alpha_look`` of an overall ``alpha``:
    ``SUGGESTIVE_P * alpha_look / alpha`` (``SUGGESTIVE_P`` when they are equal: a fixed
    comparison). Raises ValueError when ``alpha`` is not positive."""
    if alpha <= 0:
        raise ValueError(f"need alpha > 0, got {alpha}")
    return SUGGESTIVE_P * min(1.0, alpha_look / alpha)


def should_stop(summary: Summary, look: int, rounds: int) -> bool:
    """Whether the comparison stops after ``look`` (see the module docstring)."""
    v = summary.verdict
    if v is None or look >= rounds:
        return True
    if (v.behaviour or v.verdict) in ("REGRESSION", "IMPROVEMENT") or v.infra_limited:
        return True  # (a numerics REGRESSION alone does not stop the behavioural rounds)
    worse = [
        r.p_adjusted
        for c in summary.comparisons
        for r in c.rows
        if r.decisive and r.worse and r.p_adjusted is not None
    ]
    if v.candidate_only_kinds:  # evidence the verdict prints: never dropped by futility
        return False
    return all(p > FUTILITY for p in worse)
