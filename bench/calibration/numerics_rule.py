"""Error rates of the numerics decision rule itself (:func:`harness.numerics.decide.decide`),
on per-sequence divergences drawn from known distributions: no server.

Run: ``python -m bench.calibration.numerics_rule [--reps 2000] [--json
bench/calibration/numerics-rule.json]``; it writes the JSON, then the table between
``<!-- numerics-rule:begin -->`` and ``<!-- numerics-rule:end -->`` in docs/numerics.md
(:func:`render`; ``--render`` only re-renders the committed JSON).

Each draw is ``n`` sequences: the A/A floor ``aa_i`` and the A/B divergence ``ab_i = f_i +
d_i`` (``f_i``, ``aa_i`` independent Gamma(2, 5e-5): a floor of 1e-4 nats/token, as the
prompt cache gives llama-server), ``d_i`` the candidate's own divergence from a
:data:`CASES` distribution whose mean is stated in units of the tolerance ``tau`` (0.003).
Each draw is decided twice from the same evidence: by the signed-rank test alone (the rule
before the mean test: REGRESSION when its ``greater`` p < alpha, NO CHANGE when its
``less`` p < alpha) and by the shipped rule (signed rank or mean above; both within). Per
case and ``n``, the share of draws called REGRESSION and NO CHANGE under each rule.

- ``aa``: d = 0 (an A/A): REGRESSION is a false alarm.
- ``boundary``: the mean of d is exactly tau: REGRESSION at most alpha is the claim, NO
  CHANGE a miss.
- ``benign``: the mean of d is half of tau: REGRESSION is a false alarm.
- ``fault``: the mean of d above tau: REGRESSION is power, NO CHANGE the worst error (a
  fault called within tolerance).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.numerics.decide import ALPHA, TOLERANCE, decide
from harness.numerics.models import SequenceDivergence, SequenceResult

ROOT = Path(__file__).resolve().parents[2]
JSON = ROOT / "bench" / "calibration" / "numerics-rule.json"
DOC = ROOT / "docs" / "numerics.md"
BEGIN, END = "<!-- numerics-rule:begin -->", "<!-- numerics-rule:end -->"
SIZES = (10, 30, 75)
TAU = TOLERANCE

Draw = Callable[[np.random.Generator, int], np.ndarray]


@dataclass(frozen=True)
class Case:
    """A distribution of the candidate's per-sequence divergence ``d`` (nats/token)."""

    name: str
    kind: str  # aa, boundary, benign, fault
    mean_tau: float  # E[d] / tau
    draw: Draw


def _lognormal(mean: float, sigma: float) -> Draw:
    return lambda rng, n: mean * np.exp(sigma * rng.standard_normal(n) - sigma**2 / 2)


def _minority(share: float, mean: float) -> Draw:
    """A share of the sequences at ``mean / share``, the rest at 0 (mean ``mean``)."""
    return lambda rng, n: np.where(rng.random(n) < share, mean / share, 0.0)


CASES: tuple[Case, ...] = (
    Case("A/A (d = 0)", "aa", 0.0, lambda rng, n: np.zeros(n)),
    Case("lognormal, sigma 1", "boundary", 1.0, _lognormal(TAU, 1.0)),
    Case("lognormal, sigma 2", "boundary", 1.0, _lognormal(TAU, 2.0)),
    Case("10% of sequences at 10 tau, the rest 0", "boundary", 1.0, _minority(0.1, TAU)),
    Case("lognormal, sigma 1", "benign", 0.5, _lognormal(TAU / 2, 1.0)),
    Case("10% of sequences at 5 tau, the rest 0", "benign", 0.5, _minority(0.1, TAU / 2)),
    Case("lognormal, sigma 1", "fault", 2.0, _lognormal(2 * TAU, 1.0)),
    Case("lognormal, sigma 2", "fault", 2.0, _lognormal(2 * TAU, 2.0)),
    Case("30% of sequences at 0.1 nats, the rest 0", "fault", 0.03 / TAU, _minority(0.3, 0.03)),
    Case("10% of sequences at 0.15 nats, the rest 0", "fault", 0.015 / TAU, _minority(0.1, 0.015)),
    Case("20% of sequences at 10 tau, the rest 0", "fault", 2.0, _minority(0.2, 2 * TAU)),
)


def _rows(ab: np.ndarray, aa: np.ndarray) -> list[SequenceResult]:
    def div(m: float) -> SequenceDivergence:
        return SequenceDivergence(positions=32, mean_kl=float(m), p99_kl=float(m),
                                  max_kl=float(m), top1_agreement=1.0, mean_abs_dlogp=0.0)  # fmt: skip

    return [SequenceResult(id=f"s{i}", source="bench", tokens=33, ab=div(a), aa=div(b))
            for i, (a, b) in enumerate(zip(ab, aa, strict=True))]  # fmt: skip


def _signed_rank_only(p_reg: float | None, p_nc: float | None) -> str:
    if p_reg is not None and p_reg < ALPHA:
        return "REGRESSION"
    if p_nc is not None and p_nc < ALPHA:
        return "NO CHANGE"
    return "INCONCLUSIVE"


def measure(reps: int, seed: int = 0) -> dict[str, Any]:
    """Every case of :data:`CASES` at every size of :data:`SIZES`, ``reps`` draws each."""
    rng = np.random.default_rng(seed)
    out = []
    for case in CASES:
        for n in SIZES:
            counts = {"signed_rank": {"REGRESSION": 0, "NO CHANGE": 0, "INCONCLUSIVE": 0},
                      "shipped": {"REGRESSION": 0, "NO CHANGE": 0, "INCONCLUSIVE": 0}}  # fmt: skip
            for _ in range(reps):
                floor = rng.gamma(2.0, 5e-5, size=(2, n))
                rows = _rows(floor[0] + case.draw(rng, n), floor[1])
                verdict, _, st = decide(rows)
                counts["shipped"][verdict] += 1
                counts["signed_rank"][_signed_rank_only(st.p_regression, st.p_no_change)] += 1
            out.append({"case": case.name, "kind": case.kind, "mean_tau": case.mean_tau,
                        "n": n, "reps": reps, **counts})  # fmt: skip
    return {"alpha": ALPHA, "tolerance": TAU, "sizes": list(SIZES), "cases": out}


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f}%"


def render(doc: dict[str, Any]) -> str:
    """The block of docs/numerics.md: one row per case and size."""
    lines = [
        f"Command: `{doc['command']}` ({doc['seconds']:.0f} s). Per-sequence divergences drawn "
        f"from known distributions (mean in units of the tolerance tau = {doc['tolerance']:g}; "
        f"alpha {doc['alpha']:g}), {doc['cases'][0]['reps']} draws per row, each decided by the "
        "signed-rank test alone (the rule before) and by the shipped rule (signed rank or "
        "mean above; both within):",
        "",
        "| kind | candidate's divergence per sequence | mean / tau | sequences | REGRESSION: "
        "signed rank alone | REGRESSION: shipped | NO CHANGE: signed rank alone | "
        "NO CHANGE: shipped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in doc["cases"]:
        s, t, n = r["signed_rank"], r["shipped"], r["reps"]
        lines.append(
            f"| {r['kind']} | {r['case']} | {r['mean_tau']:g} | {r['n']} | "
            f"{_pct(s['REGRESSION'], n)} | {_pct(t['REGRESSION'], n)} | "
            f"{_pct(s['NO CHANGE'], n)} | {_pct(t['NO CHANGE'], n)} |"
        )
    lines += ["", *summary(doc)]
    return "\n".join(lines)


def _worst(doc: dict[str, Any], kinds: tuple[str, ...], rule: str, verdict: str) -> str:
    rows = [r for r in doc["cases"] if r["kind"] in kinds]
    r = max(rows, key=lambda r: r[rule][verdict] / r["reps"])
    return f"{_pct(r[rule][verdict], r['reps'])} ({r['kind']}, {r['case']}, {r['n']} sequences)"


def summary(doc: dict[str, Any]) -> list[str]:
    """The figures the table's rows add up to: each rule's largest false-alarm rate and
    its largest rate of NO CHANGE on a divergence at or above the tolerance."""
    out = []
    for rule, name in (("shipped", "shipped"), ("signed_rank", "signed rank alone")):
        out.append(
            f"- {name}: REGRESSION where the mean is at or below tau at most "
            f"{_worst(doc, ('aa', 'boundary', 'benign'), rule, 'REGRESSION')}; NO CHANGE where "
            f"it is at or above tau at most {_worst(doc, ('boundary', 'fault'), rule, 'NO CHANGE')}."
        )
    return out


def update(text: str, doc: dict[str, Any]) -> str:
    """``text`` with the block between :data:`BEGIN` and :data:`END` rendered from ``doc``.

    Raises:
        ValueError: ``text`` has no such markers."""
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < a:
        raise ValueError(f"{DOC}: no {BEGIN} ... {END} block: add the markers where it goes")
    return text[: a + len(BEGIN)] + "\n" + render(doc) + "\n" + text[b:]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m bench.calibration.numerics_rule",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--reps", type=int, default=2000, help="draws per case and size (2000)")
    p.add_argument("--json", type=Path, default=JSON)
    p.add_argument("--render", action="store_true", help="only re-render the committed JSON")
    args = p.parse_args(argv)
    if not args.render:
        t = time.monotonic()
        doc = measure(args.reps)
        doc = {"command": "python -m bench.calibration.numerics_rule "
               + " ".join(argv), **doc, "seconds": round(time.monotonic() - t, 1)}  # fmt: skip
        doc["command"] = doc["command"].strip()
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    doc = json.loads(args.json.read_text(encoding="utf-8"))
    DOC.write_text(update(DOC.read_text(encoding="utf-8"), doc), encoding="utf-8")
    print(f"{args.json} -> {DOC}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
