"""Which configuration attribute carries a failure: pure analysis of a deployment matrix.

Given deployments, each with attributes (``fusion: on``, ``moe_config: tuned-E129``...)
and an outcome (passing or failing), classify every attribute:

- ``carrier``: constant within the passing group, constant within the failing group,
  and different between them: its values split the outcomes perfectly.
- ``ruled_out``: one of its values occurs in both groups, or it varies within both
  groups: changing it does not change the outcome.
- ``confounded``: it splits the outcomes perfectly but also varies within a group
  (more values than outcomes), so it cannot be told apart from a carrier here.
- ``constant``: the same value everywhere: the matrix says nothing about it.
- ``undetermined``: none of the above (for example, it varies within one group only).

This is the reasoning reviewers do by hand with an isolation table (the seed case:
three fusion-off deployments with three kernel configs all terminated, two fusion-on
deployments looped, one of them with no tuned config: fusion is the carrier, the
kernel config is ruled out).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["AttributeFinding", "DeploymentOutcome", "analyse_attributes"]

AttributeClass = Literal["carrier", "ruled_out", "confounded", "constant", "undetermined"]


class DeploymentOutcome(BaseModel):
    """One deployment's attributes and whether it passed."""

    label: str
    attributes: dict[str, str] = Field(default_factory=dict)
    passed: bool


class AttributeFinding(BaseModel):
    """The verdict on one attribute, with the counts that show it.

    ``counts[value] = {"pass": n, "fail": m}`` (deployments).
    """

    attribute: str
    classification: AttributeClass
    counts: dict[str, dict[str, int]]
    explanation: str


def _explain(name: str, cls: AttributeClass, counts: Mapping[str, Mapping[str, int]]) -> str:
    pas = sorted(v for v, c in counts.items() if c["pass"])
    fail = sorted(v for v, c in counts.items() if c["fail"])
    both = sorted(set(pas) & set(fail))
    if cls == "carrier":
        return f"{name}={fail[0]} in every failing deployment, {name}={pas[0]} in every passing one"
    if cls == "ruled_out":
        if both:
            return f"{name}={both[0]} occurs in passing and failing deployments"
        return f"{name} varies within both groups ({', '.join(fail)} fail; {', '.join(pas)} pass)"
    if cls == "confounded":
        return f"{name} splits the outcomes but varies within a group; cannot isolate it"
    if cls == "constant":
        return f"{name} is the same everywhere"
    if not fail or not pas:
        return f"every deployment {'passed' if not fail else 'failed'}: nothing to separate"
    return f"{name} varies within one group only; more deployments are needed"


def _classify(counts: Mapping[str, Mapping[str, int]]) -> AttributeClass:
    pas = {v for v, c in counts.items() if c["pass"]}
    fail = {v for v, c in counts.items() if c["fail"]}
    if len(counts) == 1:
        return "constant"
    if pas & fail or (len(pas) > 1 and len(fail) > 1):
        return "ruled_out"
    if not pas or not fail:
        return "undetermined"
    if len(pas) == 1 and len(fail) == 1:
        return "carrier"
    return "confounded"


def analyse_attributes(deployments: Sequence[DeploymentOutcome]) -> list[AttributeFinding]:
    """Classify every attribute named by any deployment (missing values count as ``"-"``).

    Returns findings sorted carriers first, then ruled out, then the rest (by name).
    With no failing or no passing deployment every varying attribute is ``undetermined``.
    """
    names = sorted({k for d in deployments for k in d.attributes})
    order = {"carrier": 0, "ruled_out": 1, "confounded": 2, "undetermined": 3, "constant": 4}
    out: list[AttributeFinding] = []
    for name in names:
        counts: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "fail": 0})
        for d in deployments:
            counts[d.attributes.get(name, "-")]["pass" if d.passed else "fail"] += 1
        cls = _classify(counts)
        out.append(
            AttributeFinding(
                attribute=name,
                classification=cls,
                counts=dict(counts),
                explanation=_explain(name, cls, counts),
            )
        )
    return sorted(out, key=lambda f: (order[f.classification], f.attribute))
