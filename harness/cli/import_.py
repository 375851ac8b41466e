"""``harness import requests.jsonl -o scenarios/imported/``: scenarios from recorded traffic.

One OpenAI chat-completions request per line, bare or in a K2-Vendor-Verifier /
LiteLLM envelope (:mod:`harness.scenario.importer`), becomes ``<out>/<id>.yaml``. With
``--golden URL`` each scenario is played once against that trusted server and its calls
and finish_reason become the expectation, under ``--match`` (:mod:`harness.golden`);
without it only the schema and protocol checks apply.

Prints one line per line that could not be imported (``requests.jsonl:7: reason``, on
stderr; the first :data:`MAX_SHOWN`, then how many more), per duplicate merged and per
secret redacted, then a summary line. A line is refused alone (the others are imported)
when it is not JSON, not UTF-8, longer than
:data:`~harness.scenario.importer.MAX_LINE_BYTES`, nested too deep, or would make a
scenario file that ``harness list``/``run`` refuse (:mod:`harness.scenario.parse`).
Exit codes: 0 every line imported; 1 some lines (or golden runs) failed, the others were
written; 2 the file or the output folder cannot be used; 3 the golden server is unreachable.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from harness.cli import ExitCode
from harness.cli._common import preflight
from harness.client.target import target_from_options
from harness.errors import ScenarioError
from harness.golden import POLICIES, expectation, golden_runs
from harness.options import add_argument, folder, http_url
from harness.redaction import redact_url
from harness.scenario.importer import (
    ImportReport,
    LineProblem,
    ParsedLine,
    import_lines,
    loaded,
    read_lines,
    scenario_text,
)

#: refused lines printed one by one; past these, one line says how many more
MAX_SHOWN = 20

HELP = "Import recorded chat-completions requests (JSONL) as scenario files."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``harness import``, added to ``p``."""
    p.add_argument("requests", help="JSONL file: one request body (or envelope) per line")
    p.add_argument(
        "-o",
        "--out",
        required=True,
        metavar="DIR",
        type=folder,
        help="folder for the scenario files",
    )
    p.add_argument(
        "--golden", metavar="URL", type=http_url, default=None,
        help="trusted server whose answers become the expectation (default: none, "
        "schema and protocol checks only)",
    )  # fmt: skip
    p.add_argument(
        "--match", choices=POLICIES, default="exact",
        help="how the golden calls are matched: exact arguments, schema-only (same types), "
        "tool-name-only (default exact)",
    )  # fmt: skip
    for name in ("model", "concurrency", "request_timeout", "api_key_env", "max_retries"):
        add_argument(p, name)


def _golden(report: ImportReport, args: argparse.Namespace) -> list[str]:
    """Add each scenario's expectation from a golden run; the problems, one line each."""
    target = target_from_options(args.golden, label="golden", options=args)
    items = list(report.scenarios.values())
    records = golden_runs([loaded(p) for p in items], target, concurrency=args.concurrency)
    problems = []
    for parsed, record in zip(items, records, strict=True):
        where = f"{args.requests}:{parsed.line}"
        if record.is_infra_error:
            why = record.error.message if record.error else "failed"
            problems.append(f"{where}: golden run failed ({why}); written without an expectation")
            continue
        out = expectation(record, loaded(parsed), args.match)
        problems += [f"{where}: golden {d}" for d in out.dropped]
        parsed.data["expect"] = out.expect
        parsed.data["tags"].append(f"golden-{out.finish_reason}")
        parsed.data["description"] = parsed.data["description"].replace(
            "no golden run (schema and protocol checks only)",
            f"golden run: finish_reason {out.finish_reason}, {out.calls} calls "
            f"expected ({args.match})",
        )
    return problems


def _write(parsed: ParsedLine, out: Path) -> None:
    """Write the scenario file (a golden expectation may have grown it: checked again).

    Raises:
        ScenarioError: the scenario is over a limit of scenario files.
    """
    loaded(parsed)  # the file written is a loadable scenario
    text = scenario_text(parsed.data)
    (out / f"{parsed.data['id']}.yaml").write_text(text, encoding="utf-8")


def _print_notes(report: ImportReport, source: str) -> None:
    for problem in report.problems[:MAX_SHOWN]:
        print(problem, file=sys.stderr)
    if len(report.problems) > MAX_SHOWN:
        more = len(report.problems) - MAX_SHOWN
        print(f"{source}: {more} more lines refused (the first {MAX_SHOWN} shown)",
              file=sys.stderr)  # fmt: skip
    for line, first, rid in report.duplicates:
        print(f"{source}:{line}: the same request as line {first} ({rid}): merged")
    for r in report.redactions:
        print(f"{source}:{r.line}: {r.where}: looked like a secret ({r.kind}): redacted")


def _out_problem(out: Path) -> str | None:
    """Why ``-o`` cannot be the scenario folder (checked before anything is read), or None:
    a file, or under one, or under a folder this user cannot write."""
    if out.exists() and not out.is_dir():
        return f"{out}: not a folder (-o takes a folder for the scenario files)"
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{out}: {parent} is a file, not a folder; give a folder for the scenario files"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{out}: cannot create or write in {parent} (permission denied); give another -o"
    return None


def _write_all(report: ImportReport, out: Path, source: str) -> None:
    """Write every scenario; one over a limit once golden is a refused line (printed, and
    added to ``report.problems``).

    Raises:
        OSError: the folder cannot be made or written.
    """
    out.mkdir(parents=True, exist_ok=True)
    for rid, parsed in list(report.scenarios.items()):
        try:
            _write(parsed, out)
        except ScenarioError as exc:
            problem = LineProblem(source, parsed.line, "", exc.reason)
            print(problem, file=sys.stderr)
            report.problems.append(problem)
            del report.scenarios[rid]


def run(args: argparse.Namespace) -> int:
    """``harness import``: scenario files from logged request bodies; the exit code."""
    out = Path(args.out)
    problem = _out_problem(out)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    if args.golden:
        down = preflight("golden", args.golden, args.api_key_env)
        if down:
            print(f"error: {down}", file=sys.stderr)
            return ExitCode.INFRA_ERROR
    try:
        report = import_lines(read_lines(Path(args.requests)), args.requests)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE_ERROR
    _print_notes(report, args.requests)
    golden_problems = _golden(report, args) if args.golden and report.scenarios else []
    for line in golden_problems:
        print(line, file=sys.stderr)
    try:
        _write_all(report, out, args.requests)
    except OSError as exc:  # /proc/x: the check above cannot know every file system
        print(f"error: {out}: cannot write the scenario files ({exc.strerror or exc}); "
              "give another -o", file=sys.stderr)  # fmt: skip
        return ExitCode.USAGE_ERROR
    print(_summary(report, args, out, len(golden_problems)))
    failed = report.problems or golden_problems
    return ExitCode.REGRESSION if failed else ExitCode.OK


def _summary(report: ImportReport, args: Any, out: Path, golden_problems: int) -> str:
    n_bad = len(report.problems)
    parts = [
        f"imported {report.lines - n_bad} of {report.lines} lines into {out}/: "
        f"{len(report.scenarios)} scenarios ({len(report.duplicates)} duplicates merged)",
        f"{n_bad} lines failed" if n_bad != 1 else "1 line failed",
        f"{len(report.redactions)} secrets redacted",
    ]
    if args.golden:
        golden = redact_url(args.golden)  # no key in a URL is shown
        parts.append(f"golden {golden} ({args.match}), {golden_problems} problems")
    else:
        parts.append("no golden run: schema and protocol checks only")
    return "; ".join(parts)
