"""The README's detection table, regenerated from ``bench/power.json`` (``make bench``).

Usage: ``python -m bench.power_table [bench/power.json] [README.md]``: replaces the text
between ``<!-- power:begin -->`` and ``<!-- power:end -->`` in the README with the
tables rendered from the JSON that ``python -m bench.power`` wrote, and the text between
``<!-- power-recorded:begin -->`` and ``<!-- power-recorded:end -->`` with the recorded
baselines' table (the ``recorded`` part; required once the JSON has it); ``--check``
exits 1 when the README differs from what the JSON gives (tests/test_bench.py runs it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BEGIN", "END", "RECORDED_BEGIN", "RECORDED_END", "render", "render_recorded", "update"]

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- power:begin -->", "<!-- power:end -->"
RECORDED_BEGIN, RECORDED_END = "<!-- power-recorded:begin -->", "<!-- power-recorded:end -->"


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


def _ci(t: dict[str, Any]) -> str:
    lo, hi = t["regression_ci"]
    return f"{lo:.1%}-{hi:.1%}"


def _rec_row(what: str, t: dict[str, Any], aa: bool) -> str:
    rate = f"{_rate(t)}, {_ci(t)}"
    if aa:
        rate += f"; INCONCLUSIVE {t['inconclusive_rate']:.1%}"
    return f"| {what} | {rate} | {_runs(t)}; the candidate's {t['mean_candidate_runs']:.0f} |"


def render_recorded(doc: dict[str, Any]) -> str:
    """The Markdown between the recorded markers, from the JSON's ``recorded`` part."""
    rec = doc.get("recorded")
    if not rec:
        return "(not measured: `python -m bench.power --parts recorded`)"
    r, spread, det = rec["recording"], rec["spread"], rec["detection"]
    even = r["schedule"] == [5 * k for k in range(1, len(r["schedule"]) + 1)]
    reads = (
        "read round by round as a live baseline would be (look k: repeats < 5k)"
        if even
        else f"the baseline reading {', '.join(map(str, r['schedule']))} repeats at looks "
        "1, 2, ... (uneven sides: a design `harness compare` does not accept today)"
    )
    n_rec, n_cand = spread["recordings"], spread["candidates_per_recording"]
    lines = [
        f"One recording (`harness record`: {r['repeats']} repeats per scenario, {r['runs']} "
        f"runs, made once) judging candidates (`harness compare --baseline`), {reads}; "
        "sequential, as above; 95% Clopper-Pearson intervals; runs spent are both sides', "
        "then the candidate's alone (the live runs: the recording's were made once).",
        "",
        "| case | REGRESSION verdicts, 95% interval | runs spent (mean) |",
        "|---|---|---|",
        _rec_row("A/A, a fresh recording per comparison", rec["aa"], True),
        _rec_row(f"A/A, {n_rec} recordings x {n_cand} healthy candidates", spread["pooled"], True),
    ]
    for case, arms in det.items():
        t = arms["recorded"]
        lines.append(
            _rec_row(f"`{case}`, {t['recordings']} recordings x "
                     f"{t['candidates_per_recording']} candidates", t["pooled"], False)
        )  # fmt: skip
        lines.append(_rec_row(f"`{case}`, same candidates, fresh live baselines",
                              arms["live"]["pooled"], False))  # fmt: skip
    lines += ["", *_per_recording(spread, det)]
    return "\n".join(lines)


def _per_recording(spread: dict[str, Any], det: dict[str, Any]) -> list[str]:
    """The A/A false-alarm rate given each recording (luckiest first) and its detection."""
    per = sorted(spread["per_recording"], key=lambda p: (p["fail_rate"], p["recording"]))
    if not per:
        return []
    rho, disp = spread.get("luck_correlation"), spread.get("dispersion")
    out = [
        f"False alarms given the recording ({spread['candidates_per_recording']} healthy "
        "candidates each), luckiest recording first (its share of failed runs; mean "
        f"{spread['mean_fail_rate']:.1%}): at most {spread['max_rate']:.1%}; "
        f"{spread['over_alpha']} of {spread['recordings']} above alpha {spread['alpha']:g}, "
        f"{spread['clearly_over_alpha']} with the whole interval above it; dispersion "
        + (f"{disp:.2f}" if disp is not None else "n/a")
        + " (variance of the rates over the binomial one: 1 when the recording does not "
        "matter); Spearman correlation of the failed share with the false-alarm rate "
        f"{_num(rho)}, the INCONCLUSIVE rate {_num(spread.get('luck_correlation_inconclusive'))}"
        f", the runs spent {_num(spread.get('luck_correlation_runs'))}.",
        "",
        "| recording | failed runs (first round) | false alarms, 95% interval | "
        "INCONCLUSIVE | runs spent | " + " | ".join(f"`{c}` detected" for c in det) + " |",
        "|---|---|---|---|---|" + "---|" * len(det),
    ]
    found = {
        case: {p["recording"]: p for p in arms["recorded"]["per_recording"]}
        for case, arms in det.items()
    }
    for p in per:
        cells = [
            f"{d['regression']}/{d['n']}" if (d := found[c].get(p["recording"])) else "-"
            for c in det
        ]
        out.append(
            f"| {p['recording']} | {p['fail_rate']:.1%} ({p['fail_rate_first_round']:.1%}) | "
            f"{p['regression']}/{p['n']}, {_ci(p)} | {p['inconclusive_rate']:.0%} | "
            f"{p['mean_runs']:.0f} | " + " | ".join(cells) + " |"
        )
    return out


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _replace(readme: str, begin: str, end: str, text: Callable[[], str]) -> str:
    start, stop = readme.find(begin), readme.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"README.md: no {begin} ... {end} block (add the two markers)")
    return readme[: start + len(begin)] + "\n" + text() + "\n" + readme[stop:]


def update(readme: str, doc: dict[str, Any]) -> str:
    """``readme`` with the block between the markers replaced (and the recorded block,
    when the README has its markers or the JSON its figures).

    Raises:
        ValueError: the README has no ``BEGIN``/``END`` markers, or the JSON has the
            ``recorded`` figures and the README no ``RECORDED_BEGIN``/``RECORDED_END``.
    """
    out = _replace(readme, BEGIN, END, lambda: render(doc))
    if "recorded" in doc or RECORDED_BEGIN in out:
        out = _replace(out, RECORDED_BEGIN, RECORDED_END, lambda: render_recorded(doc))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    source = Path(args[0] if args else ROOT / "bench" / "power.json")
    target = Path(args[1] if len(args) > 1 else ROOT / "README.md")
    doc = json.loads(source.read_text(encoding="utf-8"))
    recorded = source.with_name("power-recorded.json")  # `--parts recorded` written apart
    if "recorded" not in doc and recorded.is_file():
        doc["recorded"] = json.loads(recorded.read_text(encoding="utf-8"))["recorded"]
    old = target.read_text(encoding="utf-8")
    new = update(old, doc)
    if check:
        return 0 if new == old else 1
    target.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
