"""The view of a numerics comparison (``logprobs.json``) for the report and the console.

Arranges what :class:`~harness.numerics.models.LogprobsResult` holds; computes nothing
new. Per sequence: the A/B vs A/A row, a per-token divergence strip (inline SVG bars,
log scale from 1e-6 to 1 nat; bars over the token tolerance marked; NaN/inf positions
full height) and the worst tokens with their context and both sides' top-5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.numerics.experts_ab import ExpertsComparison
from harness.numerics.kld import DP_PERCENTILES, KLD_PERCENTILES, KldStats
from harness.numerics.models import LogprobsResult, SequenceResult, TopToken, WorstToken

__all__ = [
    "ClassRow",
    "LogprobsView",
    "class_rows",
    "largest_class_line",
    "logprobs_line",
    "logprobs_view",
    "scored_with",
    "section_line",
]

STRIP_W, STRIP_H = 560.0, 40.0
_LOG_LO = -6.0  # 1e-6 nats at the bottom of the strip, 1 nat at the top


def _g(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.2g}"


@dataclass
class Bar:
    x: float
    y: float
    w: float
    h: float
    cls: str


@dataclass
class SeqView:
    id: str
    source: str
    tokens: int
    cells: list[str]  # A/B mean, A/A mean, A/B p99, A/B max, top-1 A/B, top-1 A/A
    first_over: str
    bars: list[Bar]
    tol_y: float
    worst: list[dict[str, Any]]
    nonfinite: str
    parted: str = ""  # generation-aligned: where the two greedy paths part
    parted_class: str = ""  # generation-aligned: the class of the token there


@dataclass
class ClassRow:
    """One token class's row of the report's per-class table."""

    token_class: str
    positions: int
    cells: list[str]  # A/B mean ± SE, A/A mean, A/B 99.0%, A/B RMS Δp, same top p A/B, A/A
    largest: bool = False


def class_rows(res: LogprobsResult) -> list[ClassRow]:
    """The per-class statistics of ``res`` as table rows (KLD in nats, Δp and same top p
    in %), the class with the largest A/B mean KLD flagged."""
    top = res.largest_class()
    out = []
    for c in res.by_class:
        ab, aa = c.ab, c.aa
        if ab is None:
            continue
        out.append(ClassRow(
            token_class=c.token_class,
            positions=ab.positions,
            cells=[
                f"{ab.kld_mean:.6f} ± {_se(ab.kld_mean_se, ab.positions, '.6f')}",
                f"{aa.kld_mean:.6f}" if aa is not None else "–",
                f"{ab.kld['99.0%']:.6f}",
                f"{100 * ab.dp_rms:.3f}%",
                f"{100 * ab.same_top_p:.2f}%",
                f"{100 * aa.same_top_p:.2f}%" if aa is not None else "–",
            ],
            largest=top is not None and c.token_class == top.token_class,
        ))  # fmt: skip
    return out


def _se(se: float, positions: int, spec: str) -> str:
    """A standard error as shown: "n/a" for 10 positions or fewer, where llama.cpp's
    estimator (:mod:`harness.numerics.kld`) gives none (it reports 0 there)."""
    return "n/a" if positions <= 10 else format(se, spec)


def largest_class_line(res: LogprobsResult) -> str:
    """Where the divergence is largest, for the console: the token class with the largest
    A/B mean KLD, its A/A floor and its positions ("" without classes)."""
    top = res.largest_class()
    if top is None or top.ab is None:
        return ""
    aa = f" vs A/A {top.aa.kld_mean:.3g}" if top.aa is not None else ""
    return (
        f"largest in {top.token_class} tokens: KLD mean {top.ab.kld_mean:.3g} ± "
        f"{_se(top.ab.kld_mean_se, top.ab.positions, '.2g')}{aa}, same top p "
        f"{100 * top.ab.same_top_p:.1f}% ({top.ab.positions} positions)"
    )


@dataclass
class LogprobsView:
    """A numerics comparison (``logprobs.json``) as the console and the report show it:
    the verdict, the settings, the pooled and per-sequence figures, the token classes."""

    verdict: str
    message: str
    api: str
    aa_source: str
    settings: dict[str, Any]
    requests: dict[str, int]
    pooled: list[str]
    sequences: list[SeqView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: llama-perplexity's statistics: (label, A/B, A/A) rows
    kld_rows: list[tuple[str, str, str]] = field(default_factory=list)
    #: the decode path's view (greedy decodes compared), when it was run
    decode: LogprobsView | None = None
    generation: bool = False
    #: routed experts A/B (:class:`~harness.numerics.experts_ab.ExpertsComparison`), when compared
    experts: ExpertsComparison | None = None
    #: per token class: (class, positions, A/B KLD mean ± SE, A/A KLD mean, A/B 99.0% KLD,
    #: A/B RMS Δp, A/B same top p, A/A same top p, largest); the largest A/B mean flagged
    class_rows: list[ClassRow] = field(default_factory=list)


def _height(kl: float) -> float:
    if kl < 0:  # NaN in the strip
        return STRIP_H
    frac = (math.log10(max(kl, 10**_LOG_LO)) - _LOG_LO) / -_LOG_LO
    return round(max(0.5, min(1.0, frac) * STRIP_H), 1)


def _bars(strip: list[float], tol: float) -> list[Bar]:
    if not strip:
        return []
    w = STRIP_W / len(strip)
    out = []
    for i, kl in enumerate(strip):
        h = _height(kl)
        cls = "nan" if kl < 0 else ("over" if kl > tol else "ok")
        out.append(Bar(round(i * w, 1), round(STRIP_H - h, 1), round(max(w, 0.6), 2), h, cls))
    return out


def _top(tops: list[TopToken]) -> str:
    return "  ".join(f"{t.token!r} {_g(t.logprob)}" for t in tops)


def _worst(w: WorstToken) -> dict[str, Any]:
    return {
        "position": w.position,
        "before": w.before,
        "token": w.token,
        "after": w.after,
        "kl": _g(w.kl) if w.kl is not None else "NaN/inf",
        "logprobs": f"{_g(w.baseline_logprob)} vs {_g(w.candidate_logprob)}",
        "baseline_top": _top(w.baseline_top),
        "candidate_top": _top(w.candidate_top),
    }


def _seq(r: SequenceResult, tol: float) -> SeqView:
    ab, aa = r.ab, r.aa
    fo = ab.first_over
    nf = ab.nonfinite
    return SeqView(
        id=r.id,
        source=r.source,
        tokens=r.tokens,
        cells=[
            _g(ab.mean_kl),
            _g(aa.mean_kl),
            _g(ab.p99_kl),
            _g(ab.max_kl),
            _g(ab.top1_agreement, True),
            _g(aa.top1_agreement, True),
        ],  # fmt: skip
        first_over="–"
        if fo is None
        else f"{fo.position}: …{fo.before[-30:]}[{fo.token}]{fo.after[:20]}…",
        bars=_bars(ab.strip, tol),
        tol_y=round(STRIP_H - _height(tol), 1),
        worst=[_worst(w) for w in ab.worst],
        nonfinite=", ".join(f"{k} {v}" for k, v in nf.items() if v),
        parted=r.parted or "",
        parted_class=r.parted_class or "",
    )


def logprobs_view(res: LogprobsResult) -> LogprobsView:
    """The report's view of ``res``."""
    tol = float(res.settings.get("token_tolerance", 0.1))
    st = res.stats
    return LogprobsView(
        verdict=res.verdict,
        message=res.message,
        api=scored_with(res),
        aa_source=res.aa_source,
        settings=res.settings,
        requests=res.requests,
        pooled=[
            _g(st.ab_mean_kl),
            _g(st.aa_mean_kl),
            _g(st.ab_top1_agreement, True),
            _g(st.aa_top1_agreement, True),
            _g(st.p_regression),
            _g(st.p_no_change),
            _g(st.p_regression_mean),
            _g(st.p_no_change_mean),
        ],  # fmt: skip
        sequences=[_seq(r, tol) for r in res.sequences],
        notes=list(res.notes),
        kld_rows=kld_rows(res.kld, res.kld_aa),
        decode=logprobs_view(res.decode) if res.decode is not None else None,
        generation=bool(res.settings.get("generation")),
        experts=res.experts,
        class_rows=class_rows(res),
    )


def kld_rows(ab: KldStats | None, aa: KldStats | None) -> list[tuple[str, str, str]]:
    """llama-perplexity's statistics as ``(label, A/B, A/A)`` rows, in its order and
    wording (KLD in nats, Δp and same top p in %)."""
    if ab is None:
        return []

    def both(fn: Callable[[KldStats], str]) -> tuple[str, str]:
        return fn(ab), (fn(aa) if aa is not None else "")

    rows = [("positions", *both(lambda s: str(s.positions)))]
    rows.append(("Mean    KLD", *both(lambda s: f"{s.kld_mean:.6f} ± {s.kld_mean_se:.6f}")))
    rows += [(f"{k} KLD", *both(lambda s, k=k: f"{s.kld[k]:.6f}")) for k in KLD_PERCENTILES]  # type: ignore[misc]
    rows.append(
        ("Mean    Δp", *both(lambda s: f"{100 * s.dp_mean:.3f} ± {100 * s.dp_mean_se:.3f} %"))
    )
    rows += [(f"{k} Δp", *both(lambda s, k=k: f"{100 * s.dp[k]:.3f}%")) for k in DP_PERCENTILES]  # type: ignore[misc]
    rows.append(("RMS Δp", *both(lambda s: f"{100 * s.dp_rms:.3f} ± {100 * s.dp_rms_se:.3f} %")))
    rows.append(
        ("Same top p", *both(lambda s: f"{100 * s.same_top_p:.3f} ± {100 * s.same_top_p_se:.3f} %"))
    )
    return rows


def scored_with(res: LogprobsResult) -> str:
    """The API each side was scored with (one name when both used the same)."""
    b, c = str(res.baseline.get("api")), str(res.candidate.get("api"))
    return b if b == c or c == "None" else f"baseline {b}, candidate {c}"


def section_line(res: LogprobsResult | None, why: str | None) -> str:
    """The console line of a numerics section (:func:`harness.numerics.section.logprobs_section`):
    the result's :func:`logprobs_line`, or why there is none."""
    return logprobs_line(res) if res is not None else (why or "logprobs: not compared")


def logprobs_line(res: LogprobsResult) -> str:
    """One line for the Markdown summary and the console."""
    n = sum(res.requests.values())
    what = "decode path" if res.settings.get("generation") else "token logprobs"
    line = f"numerics ({what}, {scored_with(res)}, {len(res.sequences)} sequences, {n} requests): {res.message}"
    if res.kld is not None:
        k = res.kld
        line += (
            f" [KLD mean {k.kld_mean:.3g}, 99.0% {k.kld['99.0%']:.3g}, same top p "
            f"{100 * k.same_top_p:.1f}%]"
        )
    where = largest_class_line(res)
    parted = [r.parted_class for r in res.sequences if r.parted_class is not None]
    if parted:
        most = max(sorted(set(parted)), key=parted.count)
        where += f"{'; ' if where else ''}greedy paths part most at {most} tokens ({parted.count(most)}/{len(parted)})"
    refused = set(res.missing_paths.values())
    notes = [f"  note: {note}" for note in res.notes if note not in refused]
    lines = [line, *([f"  {where}"] if where else []), *notes]
    # a path a recorded side predates: its own line, as a section that was not compared
    lines += [f"numerics: {why}" for why in res.missing_paths.values()]
    if res.experts is not None:
        lines.append(res.experts.line())
    if res.decode is not None:
        lines.append(logprobs_line(res.decode))
    return "\n".join(lines)
