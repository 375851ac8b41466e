"""The numerics section of a compare run (``harness compare``, the pytest plugin).

After the behavioural runs, :func:`logprobs_section` scores the conversations the
baseline had (its first recorded run of each scenario, ``transcripts.jsonl``) on both
servers, teacher-forced, and writes ``logprobs.json`` beside ``summary.json``; the report
shows it. It never changes the behavioural verdict (``harness compare`` exits 1 on a
numerics REGRESSION, saying so) and never breaks the comparison: a
server without a logprobs API, an HTTP error or a tokenisation mismatch is one line
saying so (and how to enable it), and no ``logprobs.json`` is written.
"""

from __future__ import annotations

from dataclasses import replace

from harness.client.target import TargetConfig, server_root
from harness.errors import LogprobsError
from harness.numerics.models import LogprobsResult, Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_record
from harness.runfolder import RunFolder

__all__ = ["baseline_sequences", "logprobs_section"]


def baseline_sequences(folder: RunFolder) -> list[Sequence]:
    """The baseline's first recorded run of each scenario, as sequences (recorded order)."""
    seen: dict[str, Sequence] = {}
    for rec in folder.records():
        if rec.target.side == "baseline" and rec.scenario_id not in seen and rec.turns:
            seen[rec.scenario_id] = from_record(rec)
    return list(seen.values())


def logprobs_section(
    folder: RunFolder,
    baseline: TargetConfig,
    candidate: TargetConfig,
    opts: LogprobsOptions | None = None,
) -> tuple[LogprobsResult | None, str]:
    """Score the folder's baseline conversations on both servers; write ``logprobs.json``.

    The servers are the comparison's targets: their roots, the baseline's API key
    (``TargetConfig.api_key``) and request timeout. Returns the result (None when it could
    not be computed) and one line for the console: the verdict, or why there is none
    (``logprobs: not compared: ...``). Never raises a
    :class:`~harness.errors.LogprobsError`.
    """
    from harness.present.logprobs import logprobs_line

    opts = replace(
        opts or LogprobsOptions(), api_key=baseline.api_key(), timeout_s=baseline.timeout_s
    )
    baseline_url, candidate_url = server_root(baseline.base_url), server_root(candidate.base_url)

    seqs = baseline_sequences(folder)
    if not seqs:
        return None, "logprobs: not compared: the baseline recorded no conversation"
    try:
        res = compare_logprobs(seqs, baseline_url, candidate_url, opts)
    except LogprobsError as exc:
        return None, f"logprobs: not compared: {exc}"
    folder.write_model(RunFolder.LOGPROBS, res)
    return res, logprobs_line(res)
