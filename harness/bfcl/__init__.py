"""BFCL multi-turn tasks as a scenario suite (``bfcl:multi_turn_base``) with stateful tools.

- :mod:`harness.bfcl.data`: the tasks of the installed ``bfcl-eval`` package as
  :class:`~harness.scenario.model.Scenario` objects (no data copied into this repository).
- :mod:`harness.bfcl.backends`: BFCL's backend classes per run (:class:`World`), tool
  results as BFCL's executor gives them, and BFCL's per-turn state check.

``bfcl-eval`` is optional (``make bfcl``); without it, loading a suite raises a
:class:`~harness.errors.ScenarioError` naming the install command.
"""

from harness.bfcl.data import BFCL_EVAL_VERSION, CATEGORIES, SUITE_PREFIX, load_suite

__all__ = ["BFCL_EVAL_VERSION", "CATEGORIES", "SUITE_PREFIX", "load_suite"]
