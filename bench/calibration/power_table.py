"""The documentation's measured tables, regenerated from ``bench/calibration/power.json`` (``make calibrate``).

Usage: ``python -m bench.calibration.power_table [bench/calibration/power.json] [PAGE ...] [--check]`` (default
pages: :data:`PAGES`): in each page, replaces the text between ``<!-- power:begin -->`` and
``<!-- power:end -->`` with the tables rendered from the JSON that ``python -m bench.calibration.power``
wrote, the text between ``<!-- power-recorded:begin -->`` and ``<!-- power-recorded:end -->``
with the recorded baselines' table (the ``recorded`` part), and the text between
``<!-- numerics:begin -->`` and ``<!-- numerics:end -->`` with the numerics figures of
``bench/calibration/logprobs.json`` (``python -m bench.calibration.logprobs --json``), and
the text between ``<!-- power-stream-both:begin -->`` and ``<!-- power-stream-both:end -->``
with the ``--stream both`` A/A of ``bench/calibration/power-stream-both.json``, and the text
between ``<!-- numerics-paths:begin -->`` and ``<!-- numerics-paths:end -->`` with the
numerics paths' error rates of ``bench/calibration/paths.json`` (``python -m
bench.calibration.paths --json``). Every block the JSON has
figures for must be in one of the pages. ``--check`` writes nothing and exits 1 when a
page differs from what the JSON gives (``tests/bench/test_power_bench.py`` runs it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BEGIN",
    "BOTH_BEGIN",
    "BOTH_END",
    "END",
    "NUMERICS_BEGIN",
    "NUMERICS_END",
    "PAGES",
    "PATHS_BEGIN",
    "PATHS_END",
    "RECORDED_BEGIN",
    "RECORDED_END",
    "render",
    "render_numerics",
    "render_paths",
    "render_stream_both",
    "render_recorded",
    "update",
    "update_page",
]

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- power:begin -->", "<!-- power:end -->"
RECORDED_BEGIN, RECORDED_END = "<!-- power-recorded:begin -->", "<!-- power-recorded:end -->"
NUMERICS_BEGIN, NUMERICS_END = "<!-- numerics:begin -->", "<!-- numerics:end -->"
BOTH_BEGIN, BOTH_END = "<!-- power-stream-both:begin -->", "<!-- power-stream-both:end -->"
PATHS_BEGIN, PATHS_END = "<!-- numerics-paths:begin -->", "<!-- numerics-paths:end -->"
#: the pages that hold the blocks (power: the verdict; recorded: the recordings; numerics)
PAGES = [ROOT / "docs" / "verdict.md", ROOT / "docs" / "recorded-baselines.md",
         ROOT / "docs" / "numerics.md"]  # fmt: skip


def _rate(t: dict[str, Any]) -> str:
    """``98/100 (98%)``: REGRESSION verdicts of a figure."""
    return f"{t['regression']}/{t['n']} ({t['regression'] / t['n']:.1%})"


def _share(t: dict[str, Any], verdict: str) -> str:
    """``30/572 (5.2%)``: one verdict's share of a figure."""
    k = t["verdicts"].get(verdict, 0)
    return f"{k}/{t['n']} ({k / t['n']:.1%})"


def _runs(t: dict[str, Any]) -> str:
    rounds = ", ".join(f"{k}: {v}" for k, v in t["rounds"].items())
    return f"{t['mean_runs']:.0f} runs (rounds {rounds})"


def _main_rows(doc: dict[str, Any]) -> list[str]:
    rows = []
    if "aa" in doc:
        modes = {
            "fixed": ("fixed", "REGRESSION <= 1%"),
            "sequential": ("sequential", "REGRESSION <= 1%, INCONCLUSIVE <= 2%"),
            "sequential_earlier_rule": ("sequential, the earlier futility rule (same "
                                     "comparisons, same band)",
                                     "-"),
        }  # fmt: skip
        for mode, (what, target) in modes.items():
            if mode not in doc["aa"]:
                continue
            t = doc["aa"][mode]
            rows.append(
                f"| A/A healthy vs healthy, {what} | REGRESSION {_rate(t)}; INCONCLUSIVE "
                f"{_share(t, 'INCONCLUSIVE')} | {_runs(t)} | {target} |"
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


def _aa_note(doc: dict[str, Any]) -> list[str]:
    """Why identical servers end INCONCLUSIVE, and what the futility change costs them."""
    aa = doc.get("aa", {})
    seq, old = aa.get("sequential"), aa.get("sequential_earlier_rule")
    if not seq or not old:
        return []
    last = str(max(int(k) for k in seq["rounds"]))
    wide = seq["flags"].get("band_0.1", 0)
    return [
        "",
        f"A/A, sequential: {seq['rounds'].get(last, 0)} of {seq['n']} comparisons reach the "
        f"last look, selected for having looked worse at every look before it; there "
        f"{wide} ({wide / seq['n']:.1%} of all) had a worse test with adjusted p <= 0.1, the "
        "fixed comparison's band, and "
        f"{_share(seq, 'INCONCLUSIVE')} one "
        "within the last look's band (0.1 x 7/16 = 0.044): INCONCLUSIVE. The futility rule "
        "(a kind no baseline run shows earns another round) costs the A/A "
        f"{seq['mean_runs'] - old['mean_runs']:.0f} runs on average ({old['mean_runs']:.0f} "
        f"-> {seq['mean_runs']:.0f}; comparisons stopped at round 1: "
        f"{old['rounds'].get('1', 0)} -> {seq['rounds'].get('1', 0)} of {seq['n']}) and "
        f"changes its false alarms from {_rate(old)} to {_rate(seq)}; NO CHANGE verdicts "
        f"naming a candidate-only kind: {old['flags'].get('only', 0)} -> "
        f"{seq['flags'].get('only', 0)} (now only at the last look).",
        *_bands(doc.get("aa_bands")),
    ]


def _bands(t: dict[str, Any] | None) -> list[str]:
    """The A/A INCONCLUSIVE rate a band of X on adjusted p gives, from the flags."""
    if not t:
        return []
    counts = {b: t["flags"].get(f"band_{b}", 0) for b in ("0.1", "0.044", "0.03", "0.02")}
    cells = [f"{b}: {k}/{t['n']} ({k / t['n']:.1%})" for b, k in counts.items()]
    return [
        "",
        f"A/A INCONCLUSIVE by the band on adjusted p at the look that decides ({t['n']} "
        "sequential A/A comparisons with the bands flagged): " + "; ".join(cells) + ".",
    ]


def _loop_names(doc: dict[str, Any]) -> list[str]:
    """How often a loop REGRESSION's headline names the loop (sequential)."""
    curve = doc.get("loop_curve")
    if not curve:
        return []
    cells = []
    for rate, by in curve.items():
        t = by.get("sequential")
        if t and t["regression"]:
            named = t.get("flags", {}).get("loop", 0)
            sig = t.get("flags", {}).get("loop_sig", 0)
            cells.append(
                f"{float(rate):.0%}: {named}/{t['regression']} ({sig} with `repeat_loop` "
                "significant itself)"
            )
    return [
        "",
        "REGRESSION headlines (sequential) that name the loop (`repeat_loop` significant, or "
        "in at least half of the significant kind's candidate runs): " + "; ".join(cells) + ".",
    ]


def _drift(doc: dict[str, Any]) -> list[str]:
    """Argument drift in a share of all candidate runs: each kind only the scenarios whose
    arguments it can change can show."""
    drift = doc.get("drift")
    if not drift:
        return []
    first = next(iter(next(iter(drift.values())).values()))["sequential"]
    out = [
        "",
        "Argument drift in a share of all candidate runs (`KIND@RATE`: only the scenarios "
        "whose arguments the fault can change can show it), REGRESSION verdicts "
        f"({first['n']} comparisons each); sequential is the default; the earlier "
        "rule let futility stop while the candidate showed a kind no baseline run showed; "
        '"NO CHANGE, candidate-only": NO CHANGE verdicts whose message names a kind only the '
        "candidate shows:",
        "",
        "| fault | scenarios that can show it | in | sequential (runs spent) | NO CHANGE, "
        "candidate-only | the earlier rule | NO CHANGE, candidate-only | 20 repeats fixed "
        "(the early-stop case) | target (sequential) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    shown = doc.get("drift_scenarios", {})
    for kind, rates in drift.items():
        for rate, by in rates.items():
            seq, old = by["sequential"], by["earlier_rule"]
            fixed = _rate(by["20"]) if "20" in by else "-"
            target = ">= 90%" if float(rate) >= 0.2 else ">= 60%"
            out.append(
                f"| `{kind}` | {shown.get(kind, '?')} | {float(rate):.0%} of runs | "
                f"{_rate(seq)}, {seq['mean_runs']:.0f} runs | {seq['flags'].get('only', 0)} | "
                f"{_rate(old)}, {old['mean_runs']:.0f} runs | {old['flags'].get('only', 0)} | "
                f"{fixed} | {target} |"
            )
    return out


def _early(doc: dict[str, Any]) -> list[str]:
    """The early-stop case on the library it was found on (``bench/power-early-
    stop.json``: ``python -m bench.calibration.power --parts early --scenarios <that library>``)."""
    e = doc.get("early_stop_doc")
    if not e:
        return []
    ((kind, rates),) = e["early_stop"].items()
    ((rate, by),) = rates.items()
    seq, old = by["sequential"], by["earlier_rule"]
    fixed = by.get("20")
    return [
        "",
        f"The early-stop case on the library it was found on ({e['library']}: "
        f"`{kind}` can show in {e['early_stop_scenarios']} of its scenarios; `{e['command']}`, "
        f"`bench/calibration/power-early-stop.json`), `{kind}@{rate}`, {seq['n']} comparisons: "
        f"sequential {_rate(seq)}, {seq['flags'].get('only', 0)} NO CHANGE naming a "
        f"candidate-only kind, {seq['mean_runs']:.0f} runs (rounds "
        + ", ".join(f"{k}: {v}" for k, v in seq["rounds"].items())
        + f"); the earlier rule on the same comparisons {_rate(old)}, "
        f"{old['flags'].get('only', 0)} NO CHANGE naming a candidate-only kind, "
        f"{old['mean_runs']:.0f} runs (rounds "
        + ", ".join(f"{k}: {v}" for k, v in old["rounds"].items())
        + ")"
        + (f"; fixed at 20 repeats {_rate(fixed)}." if fixed else "."),
    ]


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
        f"Measured by `{doc['command']}` (`make calibrate`; figures in `bench/calibration/power.json`) at "
        f"the shipped defaults: {d['scenarios']} scenarios, temperature {d['temperature']:g}, "
        f"{d['repeats']} repeats per round, alpha {d['alpha']:g}, {d['permutations']} "
        f"permutations; sequential: at most {d['rounds']} rounds. Runs are both sides'."
        + (f" Sizes: {doc['sizes_note']}." if doc.get("sizes_note") else ""),
        "",
        "| case | REGRESSION verdicts | runs spent (mean) | target |",
        "|---|---|---|---|",
        *_main_rows(doc),
        *_aa_note(doc),
        *_curve(doc),
        *_loop_names(doc),
        *_drift(doc),
        *_early(doc),
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
        return "(not measured: `python -m bench.calibration.power --parts recorded`)"
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
            _rec_row(
                f"`{case}`, {t['recordings']} recordings x "
                f"{t['candidates_per_recording']} candidates",
                t["pooled"],
                False,
            )
        )
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


def render_numerics(m: dict[str, Any]) -> str:
    """The numerics figures of docs/numerics.md from ``bench/calibration/logprobs.json`` (``python -m
    bench.calibration.logprobs --json``)."""
    n, aa, reg, ben = m["sequences"], m["aa"], m["regression"], m["benign"]
    lp, beh = reg["requests_per_verdict"], m["behavioural"]
    per = (lp - m.get("probe_requests", 2)) // n if n else 0
    fa = aa["verdicts"].get("REGRESSION", 0)
    upper = 1 - 0.05 ** (1 / aa["n"])  # one-sided 95% bound of 0/n (exact)
    bound = f"; 95% upper bound {upper:.1%}" if fa == 0 else ""
    ben_reg = ben["verdicts"].get("REGRESSION", 0)
    return "\n".join([
        f"Measured on the reference server (`{m.get('command', 'python -m bench.calibration.logprobs')}`; "
        f"{n} sequences per side, every default; {m['seconds']:.0f} s; the servers are "
        "`harness sim` subprocesses):",
        "",
        "| | result | target |",
        "|---|---|---|",
        f"| false alarms, A/A healthy vs a second healthy server | {fa} / {aa['n']} REGRESSION "
        f"({_verdicts(aa)}{bound}) | <= 1% |",
        f"| detection, healthy vs fused-regression | "
        f"{reg['verdicts'].get('REGRESSION', 0)} / {reg['n']} REGRESSION (mean KL "
        f"{reg['ab_mean_kl']:.3f} vs A/A {reg['aa_mean_kl']:.2g} nats/token) | >= 99% |",
        f"| benign shift, healthy vs kv-cache-quant | {_verdicts(ben)}, {ben_reg} REGRESSION "
        f"(mean KL {ben['ab_mean_kl']:.2g}) | not a regression >= 99% |",
        f"| requests to a verdict on fused-regression | logprobs {lp} ({n} sequences x {per}, "
        f"+ {m.get('probe_requests', 2)} to detect the API) vs `harness compare` at its "
        f"defaults {beh['requests']} (sequential, every turn a request; {beh['verdict']}"
        + (f" at round {beh['rounds']}" if "rounds" in beh else "")
        + ", counted in process): "
        f"**{beh['requests'] / lp:.1f}x fewer** | >= 10x |",
        "",
        f"Every comparison here that is not INCONCLUSIVE gets at best the smallest p-value "
        f"{n} sequences allow ({2.0 ** -n:.2g}, the exact one-sided signed-rank test with "
        "every sequence on one side).",
    ])  # fmt: skip


def _verdicts(t: dict[str, Any]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(t["verdicts"].items()))


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _replace(readme: str, begin: str, end: str, text: Callable[[], str]) -> str:
    start, stop = readme.find(begin), readme.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"no {begin} ... {end} block (add the two markers)")
    return readme[: start + len(begin)] + "\n" + text() + "\n" + readme[stop:]


def update(readme: str, doc: dict[str, Any]) -> str:
    """``readme`` with the block between the markers replaced (and the recorded block,
    when the text has its markers or the JSON its figures).

    Raises:
        ValueError: the text has no ``BEGIN``/``END`` markers, or the JSON has the
            ``recorded`` figures and the text no ``RECORDED_BEGIN``/``RECORDED_END``.
    """
    out = _replace(readme, BEGIN, END, lambda: render(doc))
    if "recorded" in doc or RECORDED_BEGIN in out:
        out = _replace(out, RECORDED_BEGIN, RECORDED_END, lambda: render_recorded(doc))
    if "numerics" in doc and NUMERICS_BEGIN in out:
        out = _replace(out, NUMERICS_BEGIN, NUMERICS_END, lambda: render_numerics(doc["numerics"]))
    return out


def render_stream_both(doc: dict[str, Any]) -> str:
    """The A/A at ``--stream both`` (``python -m bench.calibration.power --parts aa-both``,
    ``bench/calibration/power-stream-both.json``): each comparison decided with a repeat
    as the unit (shipped) and with each run as one (the rule before), from the same runs."""
    figs, d = doc["aa_stream_both"], doc["defaults"]
    rows = [
        ("fixed", "fixed, a repeat a unit (shipped)"),
        ("fixed_runs_as_units", "fixed, each run a unit (before)"),
        (
            "fixed_independent_twins",
            "fixed, a repeat a unit, the candidate's twin runs independent draws (shipped)",
        ),
        (
            "fixed_independent_twins_runs_as_units",
            "fixed, each run a unit, the candidate's twin runs independent draws (before)",
        ),
        ("sequential", "sequential, a repeat a unit (shipped)"),
        ("sequential_runs_as_units", "sequential, each run a unit (before)"),
    ]
    lines = [
        f"Measured by `{doc['command']}` (figures in "
        "`bench/calibration/power-stream-both.json`): healthy against healthy on the "
        f"reference server, {d['scenarios']} scenarios, temperature {d['temperature']:g}, "
        f"{d['repeats']} repeats per round, each streamed and not on one request seed, "
        f"alpha {d['alpha']:g}; every comparison decided both ways from the same runs. "
        "Runs are both sides'.",
        "",
        "| A/A at `--stream both` | REGRESSION verdicts | IMPROVEMENT | INCONCLUSIVE "
        "| runs spent (mean) |",
        "|---|---|---|---|---|",
    ]
    for key, name in rows:
        if key in figs:
            t = figs[key]
            lines.append(
                f"| {name} | {_rate(t)} | {_share(t, 'IMPROVEMENT')} "
                f"| {_share(t, 'INCONCLUSIVE')} | {_runs(t)} |"
            )
    return "\n".join(lines)


_PART = {"live": "live (both servers up)", "recorded": "against a recording"}
_CASE = {
    "aa": "A/A, healthy vs a second healthy server",
    "decode_fault": "decode-fault (prefill healthy, generation shifted)",
}


def _wilson(k: int, n: int) -> str:
    from harness.stats.tests import wilson_interval

    lo, hi = wilson_interval(k, n)
    return f"{lo:.1%}-{hi:.1%}"


def render_paths(m: dict[str, Any]) -> str:
    """The numerics paths' error rates (``bench/calibration/paths.json``) as a table."""
    runs = m.get("runs") or [{"command": m["command"], "seconds": m["seconds"]}]
    said = "; ".join(f"`{r['command']}` ({r['seconds']:.0f} s)" for r in runs)
    cut = [r["command"] for r in runs if r.get("stopped")]
    head = (
        f"Command{'s' if len(runs) > 1 else ''}: {said}, the parts joined into "
        f"`bench/calibration/paths.json`; {m['sequences']} reference conversations of "
        "`scenarios/`, every default, `harness sim` subprocesses with noise drawn per request"
        + (
            f"; stopped at a time limit, every finished comparison counted: {', '.join(cut)}"
            if cut
            else ""
        )
        + ". A comparison's numerics verdict over its paths: REGRESSION when any path is "
        "one (rule 7):"
    )
    rows = [
        "| comparison | case | REGRESSION (any path) | 95% interval | prefill | decode | "
        "s per comparison |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for part, cases in m["parts"].items():
        for case, t in cases.items():
            n, k = t["n"], t["verdicts"].get("REGRESSION", 0)
            paths = t["by_path"]
            rows.append(
                f"| {_PART.get(part, part)} | {_CASE.get(case, case)} | {k} / {n} "
                f"({100 * k / n:.1f}%) | {_wilson(k, n)} | "
                f"{_verdicts({'verdicts': paths.get('prefill', {})})} | "
                f"{_verdicts({'verdicts': paths.get('decode', {})})} | "
                f"{t['seconds_per_comparison']:g} |"
            )
    return "\n".join([head, "", *rows])


def _blocks(doc: dict[str, Any]) -> list[tuple[str, str, Callable[[], str]]]:
    """The blocks the JSON has figures for: (begin marker, end marker, renderer)."""
    out: list[tuple[str, str, Callable[[], str]]] = [(BEGIN, END, lambda: render(doc))]
    if "recorded" in doc:
        out.append((RECORDED_BEGIN, RECORDED_END, lambda: render_recorded(doc)))
    if "numerics" in doc:
        out.append((NUMERICS_BEGIN, NUMERICS_END, lambda: render_numerics(doc["numerics"])))
    if "stream_both" in doc:
        out.append((BOTH_BEGIN, BOTH_END, lambda: render_stream_both(doc["stream_both"])))
    if "paths" in doc:
        out.append((PATHS_BEGIN, PATHS_END, lambda: render_paths(doc["paths"])))
    return out


def update_page(text: str, doc: dict[str, Any]) -> tuple[str, set[str]]:
    """``text`` with every block it has markers for replaced; and the markers it held."""
    found = set()
    for begin, end, render_block in _blocks(doc):
        if begin in text:
            text = _replace(text, begin, end, render_block)
            found.add(begin)
    return text, found


def _load(source: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(source.read_text(encoding="utf-8"))
    recorded = source.with_name("power-recorded.json")  # `--parts recorded` written apart
    if "recorded" not in doc and recorded.is_file():
        doc["recorded"] = json.loads(recorded.read_text(encoding="utf-8"))["recorded"]
    early = source.with_name("power-early-stop.json")  # `--parts early`, another library
    if "early_stop_doc" not in doc and early.is_file():
        doc["early_stop_doc"] = json.loads(early.read_text(encoding="utf-8"))
    numerics = source.with_name("logprobs.json")  # `python -m bench.calibration.logprobs --json`
    if "numerics" not in doc and numerics.is_file():
        doc["numerics"] = json.loads(numerics.read_text(encoding="utf-8"))
    paths = source.with_name("paths.json")  # `python -m bench.calibration.paths --json`
    if "paths" not in doc and paths.is_file():
        doc["paths"] = json.loads(paths.read_text(encoding="utf-8"))
    both = source.with_name("power-stream-both.json")  # `--parts aa-both`
    if "stream_both" not in doc and both.is_file():
        doc["stream_both"] = json.loads(both.read_text(encoding="utf-8"))
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the pages; 0 written or fresh, 1 stale.

    Raises:
        ValueError: a block the JSON has figures for is in none of the pages.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    source = Path(args[0] if args else ROOT / "bench" / "calibration" / "power.json")
    targets = [Path(a) for a in args[1:]] or PAGES
    doc = _load(source)
    found: set[str] = set()
    stale = []
    for target in targets:
        old = target.read_text(encoding="utf-8")
        new, held = update_page(old, doc)
        found |= held
        if new != old:
            stale.append(target)
            if not check:
                target.write_text(new, encoding="utf-8")
    missing = [b for b, _, _ in _blocks(doc) if b not in found]
    if missing:
        names = ", ".join(str(t) for t in targets)
        raise ValueError(f"{', '.join(missing)}: in none of {names} (add the markers)")
    for target in stale:
        verb = "stale: run `python -m bench.calibration.power_table`" if check else "written"
        print(f"{target}: {verb}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
