"""The e2e job's numerics figures carry the per-class statistics (``by_class``) into
``e2e.json``/``observed.json``, and the figures page names the largest class."""

from __future__ import annotations

from typing import Any

from e2e.figures import _largest_class
from e2e.logprobs_step import by_class


def _stats(positions: int, kld_mean: float, same: float) -> dict[str, Any]:
    return {"positions": positions, "kld_mean": kld_mean, "same_top_p": same}


def test_by_class_and_the_largest_class_on_the_figures_page() -> None:
    data = {"by_class": [
        {"token_class": "arg_value", "ab": _stats(12, 0.5, 0.75), "aa": _stats(12, 0.001, 1.0)},
        {"token_class": "prose", "ab": _stats(30, 0.2, 0.9), "aa": None},
    ]}  # fmt: skip
    got = by_class(data)
    assert list(got) == ["arg_value", "prose"]
    assert got["arg_value"] == {"positions": 12, "kld_mean": 0.5, "aa_kld_mean": 0.001,
                                "same_top_p": 0.75}  # fmt: skip
    assert got["prose"]["aa_kld_mean"] is None
    line = _largest_class({"by_class": got})
    assert line == "; largest KLD in arg_value tokens: 0.5 vs A/A 0.001 (12 positions)"
    assert by_class({}) == {} and _largest_class({}) == ""
