"""The README's detection table, regenerated from ``bench/power.json`` (``make bench``).

Usage: ``python -m bench.power_table [bench/power.json] [README.md]``: replaces the text
between ``<!-- power:begin -->`` and ``<!-- power:end -->`` in the README with the
tables rendered from the JSON that ``python -m bench.power`` wrote; ``--check`` exits 1
when the README differs from what the JSON gives (tests/test_bench.py runs it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["BEGIN", "END", "render", "update"]

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- power:begin -->", "<!-- power:end -->"


def _rate(t: dict[str, Any]) -> str:
    """``98/100 (98%)``: REGRESSION verdicts of a figure."""
    return f"{t['regression']}/{t['n']} ({t['regression'] / t['n']:.1%})"


def _runs(t: dict[str, Any]) -> str:
    rounds = ", ".join(f"{k}: {v}" for k, v in t["rounds"].items())
    return f"{t['mean_runs']:.0f} runs (rounds {rounds})"


def _main_rows(doc: dict[str, Any]) -> list[str]:
    rows = []
    if "aa" in doc:
        for mode in ("fixed", "sequential"):
            t = doc["aa"][mode]
            rows.append(
                f"| A/A healthy vs healthy, {mode} | REGRESSION {_rate(t)}; INCONCLUSIVE "
                f"{t['inconclusive_rate']:.1%} | {_runs(t)} | REGRESSION <= 1% |"
            )
    named = {
        "one_scenario": ("one scenario (`enum_units`) looping in every candidate run", ">= 99%"),
        "fused_regression": ("fused-regression (the seed case)", "100%, <= 3 rounds"),
    }
    for key, (what, target) in named.items():
        for mode in ("fixed", "sequential"):
            if key in doc:
                t = doc[key][mode]
                rows.append(f"| {what}, {mode} | {_rate(t)} | {_runs(t)} | {target} |")
    return rows


def _curve(doc: dict[str, Any]) -> list[str]:
    curve = doc.get("loop_curve")
    if not curve:
        return []
    budgets = list(next(iter(curve.values())))
    head = " | ".join(f"{b} repeats" if b.isdigit() else "sequential (runs spent)" for b in budgets)
    out = [
        "",
        "A loop in a share of all candidate runs (`repeat-loop@RATE`), REGRESSION verdicts "
        f"({next(iter(next(iter(curve.values())).values()))['n']} comparisons each):",
        "",
        f"| loop in | {head} |",
        "|---|" + "---|" * len(budgets),
    ]
    for rate, by in curve.items():
        cells = [
            _rate(t) + (f", {t['mean_runs']:.0f} runs" if b == "sequential" else "")
            for b, t in by.items()
        ]
        out.append(f"| {float(rate):.0%} of runs | " + " | ".join(cells) + " |")
    return out


def _gsm8k(doc: dict[str, Any]) -> list[str]:
    g = doc.get("gsm8k")
    if not g:
        return []
    drop, aa = g["drop_0.88_0.81"], g["aa_0.88"]
    return [
        "",
        f"GSM8K-{drop['questions']} (one-sided McNemar at alpha {drop['alpha']:g}, margin 2 "
        f"points, {drop['n']} comparisons each): 0.88 -> 0.81 REGRESSION in "
        f"{drop['regression_rate']:.1%} (target >= 80%); 0.88 vs 0.88 REGRESSION in "
        f"{aa['regression_rate']:.1%} (target <= alpha), INCONCLUSIVE in "
        f"{aa['inconclusive_rate']:.1%} (500 questions cannot rule out a 2-point drop at "
        "this discordance).",
    ]


def render(doc: dict[str, Any]) -> str:
    """The Markdown between the markers, from the benchmark's JSON."""
    d = doc["defaults"]
    lines = [
        f"Measured by `{doc['command']}` (`make bench`; figures in `bench/power.json`) at "
        f"the shipped defaults: {d['scenarios']} scenarios, temperature {d['temperature']:g}, "
        f"{d['repeats']} repeats per round, alpha {d['alpha']:g}, {d['permutations']} "
        f"permutations; sequential: at most {d['rounds']} rounds. Runs are both sides'.",
        "",
        "| case | REGRESSION verdicts | runs spent (mean) | target |",
        "|---|---|---|---|",
        *_main_rows(doc),
        *_curve(doc),
        *_gsm8k(doc),
    ]
    return "\n".join(lines)


def update(readme: str, doc: dict[str, Any]) -> str:
    """``readme`` with the block between the markers replaced.

    Raises:
        ValueError: the README has no ``BEGIN``/``END`` markers.
    """
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md: no {BEGIN} ... {END} block (add the two markers)")
    return readme[: start + len(BEGIN)] + "\n" + render(doc) + "\n" + readme[end:]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    source = Path(args[0] if args else ROOT / "bench" / "power.json")
    target = Path(args[1] if len(args) > 1 else ROOT / "README.md")
    doc = json.loads(source.read_text(encoding="utf-8"))
    old = target.read_text(encoding="utf-8")
    new = update(old, doc)
    if check:
        return 0 if new == old else 1
    target.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
