"""``harness compare --baseline-cmd ... --candidate-cmd ...``: one server at a time.

The baseline is launched with the boot checks, recorded into ``<run folder>/baseline/``
(a recording, :mod:`harness.recording`, reusable later as ``--baseline``) and stopped,
freeing its port and GPUs; then the candidate is launched and compared against that
recording, and stopped. Both boots (fusion state, a crash quoted) are printed and kept in
the summary's sides; a side that crashes at boot is exit 1, with ``report.md`` quoting the
crash (:mod:`harness.cli._failure`). A killed comparison resumes (``--resume RUN_ID``) without
re-running a side that finished: a complete baseline recording is not launched again.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from harness.cli._common import launched_side, print_side_boot
from harness.cli._failure import boot_failed
from harness.recording import RECORD_KIND, Recording, record, save_info
from harness.runfolder import RunFolder
from harness.scenario.model import Scenario
from harness.server.boot import boot_summary
from harness.summary import Summary

__all__ = ["BASELINE_DIR", "CANDIDATE_BOOT_DIR", "compare_launched"]

#: the baseline's recording inside the comparison's run folder
BASELINE_DIR = "baseline"
#: the candidate's boot checks and server log inside the comparison's run folder
CANDIDATE_BOOT_DIR = "candidate-boot"


def _baseline(
    args: argparse.Namespace, scenarios: list[Scenario], folder: RunFolder, console: Any
) -> Recording | int:
    """The baseline's recording: the one already complete in the folder (resume), else
    launch, record, stop. An int is the exit code when it did not boot."""
    from harness.cli.record import new_info, record_options, target_config

    sub = folder.sub(BASELINE_DIR)
    try:
        done = Recording.open(sub.path)
    except Exception:
        done = None
    if done is not None:
        console.print(
            f"baseline: recorded in {sub.path} (resumed: not launched again)",
            markup=False, highlight=False, soft_wrap=True,
        )  # fmt: skip
        return done
    rec_folder = RunFolder.create(RECORD_KIND, results=folder.path, run_id=BASELINE_DIR)
    rec_folder.record_scenarios({s.id: s.content_hash() for s in scenarios})
    label = args.baseline_label or "baseline"
    numerics, _ = record_options(args)
    info = None
    rounds = args.rounds if args.sequential else 1
    with launched_side(args.baseline_cmd, sub.path, args) as (url, report):
        if url is not None:
            info = new_info(args, url, label)
            info.rounds = rounds
            target = target_config(args, url, label)
            info = record(
                scenarios, target, rec_folder, info, log=report.log_path, numerics=numerics,
                concurrency=args.concurrency or 8, progress=not args.no_progress,
                contract=not args.skip_contract,
            )  # fmt: skip
    boot = boot_summary(report)
    print_side_boot(console, "baseline", boot, label)
    if info is None:
        who = f"the baseline ({label})"
        return boot_failed("compare", folder.path, sub.path, who, boot, console)
    info.boot = boot
    if info.side is not None:
        info.side.boot = boot
    save_info(rec_folder, info)
    return Recording.open(sub.path)


def compare_launched(
    args: argparse.Namespace,
    scenarios: list[Scenario],
    stream: Any,
    folder: RunFolder,
    console: Any,
    run_compare: Callable[[argparse.Namespace, list[Scenario], Any, RunFolder], Summary],
    recheck: Callable[[argparse.Namespace], None],
) -> Summary | int:
    """Record the baseline when ``--baseline-cmd`` launches it, then compare, launching the
    candidate when ``--candidate-cmd`` is given (``run_compare``: ``harness compare``'s
    own; ``recheck(args)``: the recording checks, once the candidate's model is known);
    the summary, or an exit code when a side did not boot."""
    from harness.pipeline import attach_boot

    if args.baseline_cmd:
        rec = _baseline(args, scenarios, folder, console)
        if isinstance(rec, int):
            return rec
        args.baseline = str(rec.path)
        args.recordings = {**getattr(args, "recordings", {}), "baseline": rec}
    if not args.candidate_cmd:
        return run_compare(args, scenarios, stream, folder)
    boot_dir = folder.sub(CANDIDATE_BOOT_DIR).path
    summary: Summary | None = None
    with launched_side(args.candidate_cmd, boot_dir, args) as (url, report):
        if url is not None:
            args.candidate = url
            args.candidate_log = report.log_path
            recheck(args)
            summary = run_compare(args, scenarios, stream, folder)
    boot = boot_summary(report)
    print_side_boot(console, "candidate", boot, args.candidate_label)
    if summary is None:
        who = f"the candidate ({args.candidate_label or 'candidate'})"
        return boot_failed("compare", folder.path, boot_dir, who, boot, console)
    return attach_boot(folder, "candidate", boot)
