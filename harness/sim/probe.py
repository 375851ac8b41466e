"""The reference server's answers to the contract pre-flight (:mod:`harness.preflight`).

A conversation whose system message is :data:`harness.preflight.PROBE_SYSTEM` is answered
here, as a model would answer it:

- without tools: twelve words; greedy requests (temperature absent or 0) always the same
  twelve, sampled ones drawn from the request's nonce (:func:`harness.sim.model.nonce_for`:
  the same seed gives the same words, another seed others);
- with tools: under ``tool_choice: "none"`` a sentence; else one call per city (Paris, then
  Tokyo) of the named tool or of the first offered, only the first under
  ``parallel_tool_calls: false``.

The request as the profile's faults read it (:func:`harness.sim.faults.misread_request`),
and its ``max_tokens``, ``n`` and ``stop``, apply as for any reply; a profile with
``ignores_sampling`` makes every request greedy before it gets here.
"""

from __future__ import annotations

import random

from harness.preflight import PROBE_SYSTEM
from harness.sim.model import Conversation, Decision, PlannedCall, RequestOptions

__all__ = ["VOCABULARY", "is_probe", "probe_reply"]

#: the words a probe answer is drawn from
VOCABULARY = [
    "amber",
    "anchor",
    "basil",
    "beacon",
    "cedar",
    "cobalt",
    "delta",
    "ember",
    "fable",
    "falcon",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lantern",
    "maple",
    "meadow",
    "nectar",
    "onyx",
    "orchid",
    "pebble",
    "quartz",
    "raven",
    "saffron",
    "summit",
    "tundra",
    "umber",
    "velvet",
    "willow",
    "yarrow",
    "zephyr",
    "acorn",
    "bramble",
    "canyon",
    "dune",
    "fjord",
    "glacier",
    "heron",
    "island",
    "jasper",
    "kestrel",
    "lagoon",
    "marble",
    "nimbus",
    "oasis",
]
CITIES = ("Paris", "Tokyo")


def is_probe(conv: Conversation) -> bool:
    """Whether the conversation is one of the contract pre-flight's."""
    return conv.system == PROBE_SYSTEM


def probe_reply(req: RequestOptions, nonce: str) -> Decision:
    """The answer to a pre-flight request (module docstring)."""
    if req.tools:
        if req.tool_choice == "none":
            return Decision(content="I would look up the time in Paris and in Tokyo.")
        named = (
            req.tool_choice.get("function", {}).get("name")
            if isinstance(req.tool_choice, dict)
            else None
        )
        tool = named if named in req.tools else req.tools[0]
        cities = CITIES if req.parallel_tool_calls else CITIES[:1]
        return Decision(
            calls=[PlannedCall(tool, {"city": c}) for c in cities],
            reasoning="One lookup per city.",
        )
    rng = random.Random("greedy" if req.greedy else nonce)
    return Decision(content=" ".join(rng.sample(VOCABULARY, 12)), reasoning="Twelve words.")
