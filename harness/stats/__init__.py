"""Statistics and the decision rule: tests, aggregates over repeats, the verdict."""
