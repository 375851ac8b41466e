"""The documentation's end-to-end figures page, generated from the latest measured run.

``make e2e`` writes ``results/e2e-<time>/e2e.json`` (:mod:`e2e.driver`). This module keeps
the latest one as ``e2e/observed.json`` with when, where and how it was measured, and
renders ``docs/e2e-figures.md`` from it: one table, the date, the machine and the command.
Earlier figures stay in git history, not on the page.

Usage::

    python -m e2e.figures --from results/e2e-<time>/e2e.json   # keep a new run, write the page
    python -m e2e.figures [--check]                            # write (or check) the page

``--check`` writes nothing and exits 1 when the page differs from what
``e2e/observed.json`` gives (``tests/docs/test_docs.py`` runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["OBSERVED", "PAGE", "keep", "main", "render"]

ROOT = Path(__file__).resolve().parents[1]
OBSERVED = ROOT / "e2e" / "observed.json"
PAGE = ROOT / "docs" / "e2e-figures.md"


def _machine() -> str:
    """This machine, in one phrase: CPUs, their model, memory, the OS."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        model = f" ({found.group(1).strip()})" if found else ""
    memory = ""
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
        memory = f", {gib:.0f} GiB of memory"
    return f"{os.cpu_count()} CPUs{model}{memory}, {platform.system()} {platform.machine()}"


def _started(path: Path) -> str:
    """When the run started: from its folder's name (``e2e-YYYYmmdd-HHMMSS``, UTC)."""
    found = re.search(r"e2e-(\d{8}-\d{6})", str(path.resolve()))
    if found:
        when = datetime.strptime(found.group(1), "%Y%m%d-%H%M%S")
    else:
        when = datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).replace(tzinfo=None)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def keep(path: Path, command: str = "make e2e") -> dict[str, Any]:
    """``e2e.json`` at ``path`` with when, where and how it was measured (for OBSERVED).

    Raises:
        OSError, json.JSONDecodeError: the file cannot be read as JSON.
    """
    result = json.loads(path.read_text(encoding="utf-8"))
    measured = {"date": _started(path), "machine": _machine(), "command": command}
    return {"measured": measured, "result": result}


def _side_passed(passed: dict[str, str], side: str) -> str:
    done = total = 0
    for key, frac in passed.items():
        if key.split("/")[0] == side:
            a, b = frac.split("/")
            done, total = done + int(a), total + int(b)
    return f"{done}/{total}"


def _figures(step: dict[str, Any]) -> str:
    """What a step measured, in one cell."""
    f = step["figures"]
    if step["name"].startswith("compare"):
        sides = sorted({k.split("/")[0] for k in f.get("passed", {})})
        passed = ", ".join(f"{s} {_side_passed(f['passed'], s)}" for s in sides)
        decode = ""
        if "decode_verdict" in f:  # the numerics' decode path (e2e.steps.numerics_figures)
            from harness.numerics.decide import EARLY

            decode = (f"; decode path: {f['decode_verdict'] or 'not compared'}, greedy paths "
                      f"parted within {EARLY} tokens on {f.get('decode_parted_early')} of "
                      f"{f.get('decode_units')} prompts (A's two scorings: "
                      f"{f.get('decode_aa_parted_early')})")  # fmt: skip
        return f"passed: {passed}; {f.get('message', '')}{decode}"
    if step["name"].startswith("gsm8k"):
        return "; ".join(f"{s}: {v['correct']}/{v['n']} correct, {v['invalid']} invalid"
                         for s, v in f.get("sides", {}).items())  # fmt: skip
    if step["role"] == "bfcl" and "runs" in f:
        return (f"passed {f['passed']}/{f['runs'] - f['infra_errors']} (turn checks "
                f"{f['turn_checks_passed']}/{f['turn_checks']}); infrastructure errors "
                f"{f['infra_errors']}, {f['infra_errors_by_server']} the server's")  # fmt: skip
    if "ab_mean_kl" in f:
        return (f"{f['message']}; top-1 agreement {f['ab_top1_agreement']:.0%}, "
                f"{f['sequences']} sequences{_largest_class(f)}")  # fmt: skip
    if "sides" in f:
        return "; ".join(f"{s}: {v['runs']} runs, {v['tool_calls']} tool calls, "
                         f"{v['final_answers']} final answers, {v['infra_errors']} infrastructure errors"
                         for s, v in f["sides"].items())  # fmt: skip
    return ""


def _largest_class(f: dict[str, Any]) -> str:
    """The token class of a numerics step's ``by_class`` with the largest A/B mean KLD, as
    a clause ("; largest KLD in <class> tokens: ..."), or "" without ``by_class``."""
    scored = {k: v for k, v in (f.get("by_class") or {}).items() if v.get("kld_mean") is not None}
    if not scored:
        return ""
    name, c = max(scored.items(), key=lambda kv: kv[1]["kld_mean"])
    aa = c.get("aa_kld_mean")
    floor = f" vs A/A {aa:.2g}" if aa is not None else ""
    return (
        f"; largest KLD in {name} tokens: {c['kld_mean']:.3g}{floor} ({c['positions']} positions)"
    )


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(observed: dict[str, Any]) -> str:
    """The page (Markdown) from OBSERVED's content."""
    m, r = observed["measured"], observed["result"]
    load = ", ".join(f"{x:.1f}" for x in r.get("load_average", []))
    lines = [
        "# End-to-end figures",
        "",
        "<!-- generated by `python -m e2e.figures` from e2e/observed.json: do not edit by hand -->",
        "",
        f"The latest measured run of the [end-to-end job](e2e.md) on {r['server']}: "
        f"`{m['command']}`, started {m['date']} on {m['machine']} (load average at the "
        f"end {load}). Exit **{r['exit_code']}**, {r['seconds'] / 60:.0f} min in all "
        f"(llama-server build: {_cell(str(r.get('build') or 'cached').split(';')[0])}). "
        f"Server: {_cell(r.get('version') or '?')}.",
        "",
        "| step | role | exit | verdict | figures | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for step in r["steps"]:
        verdict = step["figures"].get("verdict") or ""
        lines.append(f"| {_cell(step['name'])} | {step['role']} | {step['exit_code']} | "
                     f"{_cell(verdict)} | {_cell(_figures(step))} | {step['seconds']:.0f} |")  # fmt: skip
    lines += [
        "",
        "Roles: `aa` must not be a REGRESSION (an A/A that is one is run again on fresh "
        "request seeds, and the first kept as `aa-retried`: the rule false-alarms at its "
        "alpha, 0.01, between equal servers, and a false alarm does not reproduce), "
        "`catch` must be one, `report` is reported "
        "whatever it says (the numerics A/A and the wrong RoPE base are required by the "
        "numerics step: NO CHANGE and REGRESSION), `bfcl` must run to the end with no "
        "infrastructure error the server did not cause. Every step's folder holds its "
        "`report.html`; the run's `e2e.md` and `e2e.json` hold these figures. To put a new "
        "run here: `python -m e2e.figures --from results/e2e-<time>/e2e.json`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or check) the page; 0 written or fresh, 1 stale."""
    p = argparse.ArgumentParser(prog="python -m e2e.figures", description=__doc__.split("\n")[0])
    p.add_argument("--from", dest="source", type=Path, help="a run's e2e.json to keep first")
    p.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    p.add_argument("--page", type=Path, default=PAGE, help=f"the page (default {PAGE})")
    args = p.parse_args(argv)
    if args.source is not None:
        OBSERVED.write_text(json.dumps(keep(args.source), indent=1) + "\n", encoding="utf-8")
    text = render(json.loads(OBSERVED.read_text(encoding="utf-8")))
    old = args.page.read_text(encoding="utf-8") if args.page.is_file() else ""
    if args.check:
        if old != text:
            print(f"{args.page}: stale; run `python -m e2e.figures`", file=sys.stderr)
        return 0 if old == text else 1
    args.page.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
