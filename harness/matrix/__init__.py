"""Isolation matrix: which configuration attribute carries a failure."""
