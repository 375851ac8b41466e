"""Render a run folder to ``report.html`` (self-contained) and ``report.md``.

Templates live in ``harness/present/report/templates`` and are loaded with jinja2's
``PackageLoader``; ``.html`` templates are autoescaped (``select_autoescape(["html"])``),
and model text is never marked safe. The Markdown template neutralises HTML and
table pipes through the ``md``/``cell``/``code``/``fence`` filters.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from harness.kinds import plural
from harness.present.report.context import Report, build_report
from harness.present.report.load import load_run_folder
from harness.present.views import MAX_REASONS
from harness.runfolder import RunFolder, temp_path

__all__ = [
    "environment",
    "render_html",
    "render_markdown",
    "write_report",
    "write_report_or_warning",
]

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")
_INLINE_LIMIT = 400


def _num(x: float) -> str:
    """SVG coordinate: at most 1 decimal, no trailing zeros."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _md(text: Any) -> str:
    """Inline Markdown text: one line, Markdown punctuation escaped, no HTML."""
    s = " ".join(str(text).split())
    if len(s) > _INLINE_LIMIT:
        s = s[: _INLINE_LIMIT - 1] + "…"
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return s.replace("<", "&lt;").replace(">", "&gt;")


def _code(text: Any, table: bool = False) -> str:
    """A code span that cannot be broken out of (fence longer than any backtick run)."""
    s = " ".join(str(text).split())
    if len(s) > _INLINE_LIMIT:
        s = s[: _INLINE_LIMIT - 1] + "…"
    if table:
        s = s.replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    tick = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or run else ""
    return f"{tick}{pad}{s}{pad}{tick}" if s else "` `"


def _fence(text: Any) -> str:
    """Text inside a fenced block: one line, no fence terminator."""
    return str(text).replace("\n", "\\n").replace("```", "'''")


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The jinja2 environment of the report (templates from the package)."""
    env = Environment(
        loader=PackageLoader("harness.present.report", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters.update(
        n=_num,
        md=_md,
        code=_code,
        cell=lambda t: _code(t, table=True),
        fence=_fence,
        shjoin=lambda argv: shlex.join(str(a) for a in argv),
        json=lambda v: json.dumps(v, ensure_ascii=False, default=str),
        tojson_md=lambda v: _code(json.dumps(v, ensure_ascii=False), table=True),
        plural=lambda n, word: plural(int(n), word),
    )
    env.globals["MAX_REASONS"] = MAX_REASONS
    return env


def render_html(run_dir: str | Path) -> str:
    """The self-contained HTML report of ``run_dir`` (inline CSS and SVG, no scripts).

    Raises:
        harness.present.report.load.ReportInputError: the folder cannot be read.
    """
    report = build_report(load_run_folder(run_dir))
    return environment().get_template("report.html").render(r=report)


#: the longest Markdown summary (characters): a GitHub comment holds 65,536, and a CI step
#: may add a line or two around it
MAX_MARKDOWN_CHARS = 60_000
#: scenario sections a shortened summary keeps (those of its first rows)
MD_SECTIONS = 20


def render_markdown(run_dir: str | Path) -> str:
    """The compact Markdown summary of ``run_dir`` (for a pull-request comment), within
    :data:`MAX_MARKDOWN_CHARS` (see :func:`markdown_of`)."""
    return markdown_of(build_report(load_run_folder(run_dir)))


def markdown_of(report: Report) -> str:
    """``report.md`` of ``report``, within :data:`MAX_MARKDOWN_CHARS` characters.

    A summary too long for a pull-request comment (thousands of scenarios) lists the
    scenarios whose verdict differs first and gives up, in turn, scenario sections (those
    of the first :data:`MD_SECTIONS` rows are kept, then fewer, then none) and then the
    rows that do not fit; a line says how many rows and sections are left to
    ``report.html``. If even no row fits, the text is cut, saying so.
    """
    text = _markdown(report, report.scenario_rows, None)
    if len(text) <= MAX_MARKDOWN_CHARS:
        return text
    rows = sorted(report.scenario_rows, key=lambda row: not row.differs)  # stable
    for k in (MD_SECTIONS, MD_SECTIONS // 2, MD_SECTIONS // 4):
        text = _markdown(report, rows, {row.scenario_id for row in rows[:k]})
        if len(text) <= MAX_MARKDOWN_CHARS:
            return text
    lo, hi = 0, len(rows)  # no section: the most rows that fit, a binary search
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(_markdown(report, rows[:mid], set())) <= MAX_MARKDOWN_CHARS:
            lo = mid
        else:
            hi = mid - 1
    text = _markdown(report, rows[:lo], set())
    if len(text) > MAX_MARKDOWN_CHARS:
        note = "\n\n… cut here: the rest is in report.html\n"
        text = text[: MAX_MARKDOWN_CHARS - len(note)] + note
    return text


def _markdown(report: Report, rows: list[Any], section_ids: set[str] | None) -> str:
    """``report.md`` with ``rows`` of the scenario table and the sections of
    ``section_ids`` (None: every one)."""
    every = section_ids is None
    sections = report.scenarios if section_ids is None else report.scenarios.only(section_ids)
    template = environment().get_template("report.md")
    text = template.render(
        r=report,
        md_rows=rows,
        md_rows_left=len(report.scenario_rows) - len(rows),
        md_sections=sections,
        md_sections_left=0 if every else len(report.scenarios) - len(section_ids or ()),
    )
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def write_report(run_dir: str | Path, *, markdown: bool = True) -> Path:
    """Write ``report.html`` (and ``report.md`` if ``markdown``) into ``run_dir``.

    Returns the path of ``report.html``. Files are written atomically (temp + rename).
    """
    folder = Path(run_dir)
    report = build_report(load_run_folder(folder))
    env = environment()
    out = RunFolder(folder).file(RunFolder.REPORT_HTML)
    _write(out, env.get_template("report.html").generate(r=report))
    if markdown:
        _write(RunFolder(folder).file(RunFolder.REPORT_MD), markdown_of(report))
    return out


def write_report_or_warning(
    run_dir: str | Path, *, markdown: bool = True
) -> tuple[Path | None, str | None]:
    """:func:`write_report`, for a command whose results already stand on disk.

    Returns ``(path of report.html, None)``, or ``(None, warning)`` if the report could
    not be drawn: ``warning`` is one line naming the exception, ``"report not written:
    <ExceptionType>: <message>"``, for the caller to show; a report bug is then visible
    but never changes the command's outcome. Only ``Exception`` is caught (Ctrl-C
    still stops the command).
    """
    try:
        return write_report(run_dir, markdown=markdown), None
    except Exception as exc:  # the report is a view: the results and verdict stand
        message = " ".join(str(exc).split())  # one line
        return None, f"report not written: {type(exc).__name__}: {message}"


def _write(path: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` (or its pieces, streamed as a template generates them) atomically."""
    tmp = temp_path(path)  # unique per writer: a report redrawn beside another
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # left only by an exception
