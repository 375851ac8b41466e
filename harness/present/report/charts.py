"""Inline SVG charts as plain geometry (rects, lines, texts) rendered by one Jinja macro.

Python computes coordinates (SVG user units, 1 unit = 1 CSS px at scale 1); the
template writes the elements, so every label passes through autoescaping. Colours
are CSS classes (``s-a``/``s-b`` for the sides, ``t-<termination>`` for outcomes).

Charts:
- :func:`calls_per_turn`: grouped bars, mean tool calls at each turn, one bar per side;
- :func:`termination_bars`: one stacked bar per side of how runs ended;
- :func:`outcome_bars`: the same, by what matters: passed runs (whatever their stop
  reason: a single-turn ``tool_choice`` scenario passes at the turn cap), then the
  failed runs by stop reason;
- :func:`accuracy_whiskers`: accuracy bars with 95% interval whiskers (GSM8K).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "Chart",
    "accuracy_whiskers",
    "calls_per_turn",
    "outcome_bars",
    "termination_bars",
    "TERMINATION_ORDER",
]

TERMINATION_ORDER = ["final_answer", "turn_cap", "length", "empty_stop", "malformed", "error"]


@dataclass
class Rect:
    x: float
    y: float
    w: float
    h: float
    css: str
    title: str = ""


@dataclass
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    css: str = "axis"


@dataclass
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"
    css: str = "lbl"


@dataclass
class Chart:
    """An SVG drawing: ``width`` x ``height`` user units, plus a legend of (css, label)."""

    width: float
    height: float
    title: str
    rects: list[Rect] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)


def _nice_max(v: float) -> float:
    for step in (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100):
        if v <= step:
            return float(step)
    return float(int(v) + 1)


def calls_per_turn(series: list[tuple[str, str, list[float]]], *, width: float = 560) -> Chart:
    """Grouped bars. ``series``: ``(label, css, mean calls per turn)`` per side."""
    turns = max((len(v) for _, _, v in series), default=0)
    top = _nice_max(max((x for _, _, v in series for x in v), default=1.0) or 1.0)
    left, right, head, foot, height = 34.0, 8.0, 10.0, 30.0, 170.0
    plot_w, plot_h = width - left - right, height - head - foot
    ch = Chart(width, height, "mean tool calls per turn")
    for frac in (0.0, 0.5, 1.0):
        y = head + plot_h * (1 - frac)
        ch.lines.append(Line(left, y, width - right, y, "grid"))
        ch.texts.append(Text(left - 5, y + 4, f"{top * frac:g}", "end", "tick"))
    slot = plot_w / max(turns, 1)
    bar_w = min(18.0, slot * 0.8 / max(len(series), 1))
    for t in range(turns):
        x0 = left + slot * t + (slot - bar_w * len(series)) / 2
        for s, (label, css, vals) in enumerate(series):
            v = vals[t] if t < len(vals) else 0.0
            h = plot_h * v / top
            ch.rects.append(
                Rect(
                    x0 + s * bar_w,
                    head + plot_h - h,
                    bar_w - 1,
                    h,
                    css,
                    f"{label}, turn {t}: {v:g} {'call' if v == 1 else 'calls'}",
                )
            )
        if turns <= 16 or t % 2 == 0:
            ch.texts.append(
                Text(left + slot * (t + 0.5), height - foot + 14, str(t), "middle", "tick")
            )
    ch.texts.append(Text(left + plot_w / 2, height - 3, "turn", "middle", "tick"))
    ch.lines.append(Line(left, head + plot_h, width - right, head + plot_h))
    ch.legend = [(css, label) for label, css, _ in series]
    return ch


def termination_bars(rows: list[tuple[str, dict[str, int]]], *, width: float = 560) -> Chart:
    """One stacked horizontal bar per side. ``rows``: ``(side label, termination -> runs)``."""
    return _stacked(rows, TERMINATION_ORDER, lambda k: k.replace("_", " "), width)


#: segment keys of :func:`outcome_bars`: ``passed``, then ``failed_<termination>``
OUTCOME_ORDER = ["passed", *(f"failed_{k}" for k in TERMINATION_ORDER)]


def _outcome_label(key: str) -> str:
    if key == "passed":
        return "passed (ended as expected)"
    return "failed: " + key.removeprefix("failed_").replace("_", " ")


def outcome_bars(rows: list[tuple[str, int, dict[str, int]]], *, width: float = 560) -> Chart:
    """One stacked bar per side: passed runs, then failed runs by how they ended.

    ``rows``: ``(side label, passed runs, termination -> failed runs)``. Segment CSS
    classes are ``t-passed`` and ``t-failed_<termination>``.
    """
    counted = [
        (label, {"passed": passed, **{f"failed_{k}": n for k, n in failed.items()}})
        for label, passed, failed in rows
    ]
    return _stacked(counted, OUTCOME_ORDER, _outcome_label, width)


def _stacked(
    rows: list[tuple[str, dict[str, int]]],
    order: list[str],
    name: Callable[[str], str],
    width: float,
) -> Chart:
    """Stacked horizontal bars, segments in ``order`` (others after, sorted)."""
    left, right, bar_h, gap = 110.0, 40.0, 22.0, 12.0
    height = gap + len(rows) * (bar_h + gap) + 4
    ch = Chart(width, height, "how runs ended")
    plot_w = width - left - right
    used: set[str] = set()
    for i, (label, counts) in enumerate(rows):
        y = gap + i * (bar_h + gap)
        total = sum(counts.values()) or 1
        x = left
        ch.texts.append(Text(left - 8, y + bar_h / 2 + 4, label, "end", "lbl"))
        kinds = [k for k in order if counts.get(k)] + sorted(
            k for k in counts if k not in order and counts[k]
        )
        for k in kinds:
            w = plot_w * counts[k] / total
            ch.rects.append(
                Rect(x, y, w, bar_h, f"t-{k}", f"{label}: {counts[k]} of {total} runs {name(k)}")
            )
            if w >= 22:
                ch.texts.append(
                    Text(x + w / 2, y + bar_h / 2 + 4, str(counts[k]), "middle", "inbar")
                )
            x += w
            used.add(k)
        ch.texts.append(
            Text(width - right + 6, y + bar_h / 2 + 4, f"n={sum(counts.values())}", "start", "tick")
        )
    ch.legend = [(f"t-{k}", name(k)) for k in order if k in used]
    ch.legend += [(f"t-{k}", name(k)) for k in sorted(used - set(order))]
    return ch


def accuracy_whiskers(
    rows: list[tuple[str, str, float, float, float]], *, width: float = 560
) -> Chart:
    """Accuracy bars with interval whiskers. ``rows``: ``(label, css, accuracy, low, high)``
    with values in [0, 1]; the axis spans 0-100%."""
    left, right, bar_h, gap, foot = 110.0, 60.0, 20.0, 14.0, 22.0
    height = gap + len(rows) * (bar_h + gap) + foot
    plot_w = width - left - right
    ch = Chart(width, height, "accuracy, 95% interval")
    axis_y = height - foot
    for frac in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        x = left + plot_w * frac
        ch.lines.append(Line(x, gap / 2, x, axis_y, "grid"))
        ch.texts.append(Text(x, axis_y + 14, f"{frac:.0%}", "middle", "tick"))
    for i, (label, css, acc, low, high) in enumerate(rows):
        y = gap + i * (bar_h + gap)
        mid = y + bar_h / 2
        ch.texts.append(Text(left - 8, mid + 4, label, "end", "lbl"))
        ch.rects.append(
            Rect(left, y, plot_w * acc, bar_h, css, f"{label}: {acc:.3f} [{low:.3f}, {high:.3f}]")
        )
        xl, xh = left + plot_w * low, left + plot_w * high
        ch.lines += [
            Line(xl, mid, xh, mid, "whisker"),
            Line(xl, y + 3, xl, y + bar_h - 3, "whisker"),
            Line(xh, y + 3, xh, y + bar_h - 3, "whisker"),
        ]
        ch.texts.append(Text(xh + 6, mid + 4, f"{acc:.1%}", "start", "lbl"))
    return ch
