"""Per-run scores: pure functions of one transcript (score, drift, stream parity)."""
