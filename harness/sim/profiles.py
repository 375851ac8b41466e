"""Fault profiles of the reference server (issue 3 owns and extends this file).

Fields other modules rely on (keep their names and meanings):
  name, fusion ("on" | "off" | "unknown"), capture_crash (bool),
  routed_experts_fault (bool: shared expert id written into two columns),
  gsm8k_accuracy (float, probability a GSM8K answer is right).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimProfile:
    name: str = "healthy"
    fusion: str = "off"
    capture_crash: bool = False
    routed_experts_fault: bool = False
    gsm8k_accuracy: float = 0.88
