"""On-disk shapes of a GSM8K run: per-question records and the summary.

A GSM8K run folder ``results/<run-id>/`` holds::

    manifest.json   RunManifest (see harness.runfolder)
    gsm8k.jsonl     one :class:`GSM8KRecord` per question and side
    gsm8k.json      :class:`GSM8KSummary` (schema_version, per side, paired comparison)

The summary is a pure function of the records plus the run's configuration
(:func:`harness.gsm8k.run.summarize` recomputes it from ``gsm8k.jsonl``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.kinds import VerdictName

__all__ = [
    "GSM8K_SCHEMA_VERSION",
    "Extracted",
    "GSM8KConfig",
    "GSM8KDiscordant",
    "GSM8KPaired",
    "GSM8KRecord",
    "GSM8KSideSummary",
    "GSM8KSummary",
    "Interval",
]

GSM8K_SCHEMA_VERSION = 1

Side = Literal["baseline", "candidate"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Interval(_Model):
    """A two-sided confidence interval ``[low, high]`` (same unit as its estimate)."""

    low: float
    high: float
    level: float = 0.95
    method: str = "wilson"


class Extracted(_Model):
    """The answer each extractor found in an output (a string, or None if invalid).

    ``sglang``: last integer after removing commas (SGLang few_shot_gsm8k);
    ``strict``: first ``#### n`` (lm-evaluation-harness strict-match);
    ``flexible``: last number-like token (lm-evaluation-harness flexible-extract).
    """

    sglang: str | None = None
    strict: str | None = None
    flexible: str | None = None


class GSM8KRecord(_Model):
    """One question answered by one side (a line of ``gsm8k.jsonl``).

    ``correct`` is None when the question errored (``error`` set): an
    infrastructure error is left out of scoring, never counted as wrong.
    """

    schema_version: int = GSM8K_SCHEMA_VERSION
    side: Side | None = None  # None for a single-target run
    label: str
    index: int  # 0-based index of the question in the test split
    is_shot: bool = False  # the question is also one of the few-shot examples
    prompt_sha256: str
    question: str = ""  # the question's text
    reference: str  # the dataset's answer value (SGLang's label)
    model: str | None = None  # the model name sent
    output: str | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    extracted: Extracted = Field(default_factory=Extracted)
    correct: bool | None = None  # SGLang's metric (the headline accuracy)
    correct_strict: bool | None = None
    correct_flexible: bool | None = None
    latency_s: float = 0.0  # seconds from request sent to answer received (last attempt)
    t_start: float = 0.0  # unix time the first attempt was sent
    t_end: float = 0.0  # unix time the answer (or final error) arrived
    attempts: int = 1
    error: str | None = None  # infrastructure error after retries (never a wrong answer)


class GSM8KConfig(_Model):
    """How the questions were asked (identical for both sides)."""

    num_questions: int
    num_shots: int
    max_tokens: int
    temperature: float = 0.0
    stop: list[str]
    api: Literal["completions", "chat"]
    exclude_shots: bool = False
    parallel: int
    alpha: float = 0.05  # McNemar significance level (one-sided, for REGRESSION)
    margin: float = 0.02  # INCONCLUSIVE while a larger drop is not ruled out
    max_error_rate: float = 0.1  # more errored questions on a side: INCONCLUSIVE, exit 3
    data_source: str  # file path or download URL
    data_sha256: str
    official_test_split: bool  # data_sha256 equals the pinned official test.jsonl


class GSM8KSideSummary(_Model):
    """Scores of one server. Rates are fractions of ``n`` (scored questions)."""

    label: str
    side: Side | None = None
    base_url: str
    model: str | None = None
    n: int  # questions scored (errors left out)
    n_errors: int  # questions that still errored after retries
    error_indices: list[int] = Field(default_factory=list)
    correct: int
    accuracy: float
    accuracy_interval: Interval
    invalid: int
    invalid_rate: float
    accuracy_strict: float  # lm-evaluation-harness strict-match
    accuracy_flexible: float  # lm-evaluation-harness flexible-extract
    latency_s: float  # wall-clock seconds for the whole side
    completion_tokens: int
    output_throughput: float  # completion tokens per second of wall clock


class GSM8KDiscordant(_Model):
    """A question one side answered right and the other wrong."""

    index: int
    question: str
    reference: str
    baseline_correct: bool
    baseline_answer: str | None
    candidate_answer: str | None
    baseline_output: str | None
    candidate_output: str | None


class GSM8KPaired(_Model):
    """Paired comparison on questions both sides answered (no error on either).

    ``b`` = baseline-only correct, ``c`` = candidate-only correct;
    ``mcnemar_p`` = exact two-sided binomial test of ``c`` among ``b + c`` (shown);
    ``p_worse`` = its one-sided version, which decides REGRESSION;
    ``accuracy_diff`` = candidate minus baseline accuracy over the pairs, with
    ``diff_interval`` by Newcombe's hybrid score method for paired proportions.
    """

    n_pairs: int
    both_correct: int
    b: int
    c: int
    neither: int
    baseline_accuracy: float
    candidate_accuracy: float
    mcnemar_p: float
    accuracy_diff: float
    diff_interval: Interval
    alpha: float = 0.05
    verdict: VerdictName  # the rule: harness.gsm8k.stats.paired_comparison
    reason: str
    #: exact one-sided McNemar p that the candidate is worse (``b`` among ``b + c``)
    p_worse: float | None = None
    #: INCONCLUSIVE when the interval still admits a drop larger than this (accuracy)
    margin: float = 0.02
    #: smallest drop detected with 80% probability at this question count and observed
    #: discordance (Connor 1987); None without discordant pairs
    min_detectable_drop: float | None = None
    discordant: list[GSM8KDiscordant] = Field(default_factory=list)


class GSM8KSummary(_Model):
    """``gsm8k.json``: the configuration, one entry per side, the paired comparison.

    ``sides`` holds the target alone, or ``[baseline, candidate]``; ``infra_error``: why
    the run cannot be judged (too many questions lost to infrastructure errors), if so.
    The command line derives its exit code from ``verdict`` and ``infra_error``.
    """

    schema_version: int = GSM8K_SCHEMA_VERSION
    kind: Literal["gsm8k"] = "gsm8k"
    run_id: str
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    config: GSM8KConfig
    sides: list[GSM8KSideSummary]
    paired: GSM8KPaired | None = None
    verdict: VerdictName | None = None  # None for a single-target run
    infra_error: str | None = None
