"""The console lines of ``harness compare --single-turn``: a vendor verifier's figures.

Read from the run folder's ``verifier.json`` (:class:`harness.scoring.trigger.VerifierFigures`,
computed by :func:`harness.scoring.trigger.verifier_figures` and written by
:func:`harness.pipeline.write_verifier`), printed after the comparison's own verdict,
tables and evidence (drift and protocol findings).
"""

from __future__ import annotations

from rich.console import Console

from harness.runfolder import RunFolder
from harness.scoring.trigger import SchemaAccuracy, VerifierFigures
from harness.summary import Summary

__all__ = ["render_verifier", "show_verifier", "verifier_lines"]


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _schema(label: str, side: SchemaAccuracy) -> str:
    acc = "-" if side.accuracy is None else f"{100 * side.accuracy:.2f}%"
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(side.finish_reasons.items()))
    return (
        f"  {label}: schema accuracy {side.valid}/{side.tool_call_responses} ({acc}); "
        f"finish_reason {reasons or 'none'}"
    )


def verifier_lines(fig: VerifierFigures, baseline: str, candidate: str) -> list[str]:
    """The block as plain lines (labels are the sides' names)."""
    t = fig.trigger
    return [
        f"single turn, as a vendor verifier reports it ({fig.pairs} paired first responses, "
        f"{baseline} as the reference):",
        f"  tool-call trigger ({candidate} vs {baseline}): precision {_rate(t.precision)}, "
        f"recall {_rate(t.recall)}, F1 {_rate(t.f1)} (TP {t.tp}, FP {t.fp}, FN {t.fn}, TN {t.tn})",
        _schema(baseline, fig.baseline),
        _schema(candidate, fig.candidate),
    ]


def render_verifier(fig: VerifierFigures, console: Console, baseline: str, candidate: str) -> None:
    """Print :func:`verifier_lines` (model text never reaches here: counts and labels only)."""
    for line in verifier_lines(fig, baseline, candidate):
        console.print(line, markup=False, highlight=False)


def show_verifier(folder: RunFolder, summary: Summary, console: Console) -> VerifierFigures | None:
    """Print the figures of the folder's ``verifier.json`` (``compare --single-turn``;
    ``harness score`` of such a folder), the sides named by ``summary``; returns them, or
    None (nothing printed) when the folder has no such file.

    Raises:
        RunFolderError: the file is there but unreadable.
    """
    figures: VerifierFigures | None = folder.read_model(RunFolder.VERIFIER, VerifierFigures)
    if figures is None:
        return None
    base, cand = summary.side_label("baseline"), summary.side_label("candidate")
    render_verifier(figures, console, base, cand)
    return figures
