"""The report of a run that stopped before a verdict: a boot crash, a refused recording,
an interruption.

A CI job's comment, annotation and artifact steps read ``results/<run-id>/report.md``
whatever happened; when nothing was judged this module writes it (and ``report.html``):
what happened, the evidence quoted (a crash's traceback), and the next step. It reads
nothing and decides nothing: the caller says what happened.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from harness.redaction import redact_text
from harness.runfolder import temp_path

__all__ = ["Failure", "write_failure_report"]

#: lines of evidence quoted at most (a traceback's end is where its exception is)
MAX_QUOTED = 40


@dataclass
class Failure:
    """What stopped a run before a verdict.

    ``headline``: a few words in capitals (``BOOT CRASH``, ``RECORDING REFUSED``,
    ``INTERRUPTED``); ``what``: one sentence, what happened; ``next_step``: what to do
    about it; ``quote``: the evidence (log lines, a traceback), shown verbatim;
    ``files``: where more is, as ``(what, path)``.
    """

    command: str
    headline: str
    what: str
    next_step: str
    quote: list[str] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)


def _markdown(f: Failure) -> str:
    lines = [f"## harness {f.command}: {f.headline}", "", f"**{f.headline}**: {f.what}", ""]
    if f.quote:
        body = "\n".join(redact_text(q) for q in f.quote[-MAX_QUOTED:]).replace("```", "'''")
        lines += ["```text", body, "```", ""]
    lines += [f"**Next step:** {f.next_step}", ""]
    lines += [f"- {what}: `{path}`" for what, path in f.files]
    return "\n".join(lines).rstrip() + "\n"


def _html(f: Failure) -> str:
    e = html.escape
    quote = "\n".join(redact_text(q) for q in f.quote[-MAX_QUOTED:])
    files = "".join(f"<li>{e(what)}: <code>{e(path)}</code></li>" for what, path in f.files)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">\n"
        f"<title>harness {e(f.command)}: {e(f.headline)}</title>\n"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "pre{background:#f4f4f4;padding:1em;white-space:pre-wrap}</style></head><body>\n"
        f"<h1>harness {e(f.command)}: {e(f.headline)}</h1>\n<p>{e(f.what)}</p>\n"
        + (f"<pre>{e(quote)}</pre>\n" if f.quote else "")
        + f"<p><strong>Next step:</strong> {e(f.next_step)}</p>\n"
        + (f"<ul>{files}</ul>\n" if files else "")
        + "</body></html>\n"
    )


def write_failure_report(run_dir: str | Path, failure: Failure) -> Path:
    """Write ``report.md`` and ``report.html`` of ``failure`` into ``run_dir`` (atomically,
    replacing a report of an earlier attempt); returns the path of ``report.md``. Quoted
    text is redacted (:func:`harness.redaction.redact_text`) and escaped."""
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.md", _markdown(failure)), ("report.html", _html(failure))):
        path, tmp = folder / name, temp_path(folder / name)
        try:
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return folder / "report.md"
