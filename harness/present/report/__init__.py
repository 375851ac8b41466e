"""The reviewer's report of a run folder: self-contained HTML and a Markdown summary.

``write_report(run_dir)`` writes ``report.html`` (one file: inline CSS and SVG charts,
no scripts, opens offline) and ``report.md`` (a compact pull-request comment) from
the files in ``results/<run-id>/``: ``manifest.json``, ``transcripts.jsonl`` and,
when present, ``scores.jsonl``, ``summary.json``, ``gsm8k.json``, ``boot.json`` and
``matrix.json``. The report is a pure function of those files; it never recomputes a
score, and shows the same table rows and traces as the console
(:mod:`harness.present.views`). A command whose results already stand calls
``write_report_or_warning(run_dir)`` instead: a report that cannot be drawn becomes a
one-line warning naming the exception, not a failed command.

Large folders: ``transcripts.jsonl`` is read streaming and only a bounded number of
runs is rendered turn by turn (per scenario at most ``select.PER_SCENARIO`` repeats,
a failing and a passing run first; at most ``select.MAX_RUNS`` runs in the report);
the others are listed compactly (run key, how it stopped, calls, passed) with a count
of those left in ``transcripts.jsonl``. See :mod:`harness.present.report.select`.

Model output is untrusted: templates are autoescaped and nothing from a model is
marked safe; the page also carries a Content-Security-Policy that forbids scripts.
"""

from harness.errors import ReportInputError
from harness.present.report.load import ReportInput, load_run_folder
from harness.present.report.render import (
    render_html,
    render_markdown,
    write_report,
    write_report_or_warning,
)

__all__ = [
    "ReportInput",
    "ReportInputError",
    "load_run_folder",
    "render_html",
    "render_markdown",
    "write_report",
    "write_report_or_warning",
]
