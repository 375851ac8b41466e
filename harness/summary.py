"""``summary.json``: every score, aggregate, comparison and verdict of one run folder.

Written by ``harness compare`` and ``harness score`` (:mod:`harness.pipeline`), read by
the report (:mod:`harness.present.report`) and by people. It is a pure function of
``transcripts.jsonl`` (plus the targets' self-description), so ``harness score
results/<run-id>`` can always rewrite it.

What a reader can rely on (stable within ``schema_version`` 1; later versions only add
optional fields):

- ``runs``: one :class:`RunScore` per run (``run_key`` matches ``transcripts.jsonl``), with
  its per-call annotations in ``calls`` (repeat marks, drift kinds) so a report can mark
  calls without re-scoring. Infrastructure errors have ``infra_error`` set and are excluded
  from every rate and test.
- ``aggregates``: one :class:`Aggregate` per (side, scenario) and one with
  ``scenario_id == "*"`` pooling all scenarios of a side.
- ``comparisons``: one :class:`ScenarioComparison` per scenario plus ``"*"`` (pooled; left
  out when there is a single scenario), only when two sides were run; each row is a
  :class:`MetricRow`.
- ``verdict``: the overall :class:`Verdict` (``None`` for a one-sided run).
- ``parity``: :class:`harness.scoring.parity.ParityDiff` per stream/non-stream difference (runs
  made with ``--stream both``; empty when the modes agree or only one mode was run).
- ``sides``: :class:`SideInfo` for each side (``"baseline"``/``"candidate"``, or the
  target label of a one-sided run), in that order, with the server's self-description
  and the fusion-engagement slot filled by :mod:`harness.server.fusion` when available.

Rates are of *failures* unless the metric name says otherwise (``final_answer`` and
``passed`` are rates of success). Metric names are the failure kinds of
:mod:`harness.scoring.score` (``repeat_loop``, ``container_as_string``, ...).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness._version import __version__
from harness.scoring.parity import ParityDiff
from harness.transcript import InfraError, TargetInfo

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "Aggregate",
    "CallScore",
    "CountStat",
    "Divergence",
    "DriftFinding",
    "MalformedCall",
    "MetricRow",
    "ProtocolViolation",
    "Rate",
    "RunScore",
    "ScenarioComparison",
    "SchemaViolation",
    "SequenceMatch",
    "Settings",
    "SideInfo",
    "Summary",
    "Termination",
    "Verdict",
    "VerdictName",
    "read_summary",
    "write_summary",
]

SUMMARY_SCHEMA_VERSION = 1

#: How a run ended, as scored. ``malformed``: the model tried to call a tool but the
#: calls could not be parsed (markup left in ``content`` or unparseable arguments on the
#: last turn). ``error``: an infrastructure error, not a model outcome.
Termination = Literal["final_answer", "turn_cap", "length", "empty_stop", "malformed", "error"]

VerdictName = Literal["REGRESSION", "IMPROVEMENT", "NO CHANGE", "INCONCLUSIVE"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DriftFinding(_Model):
    """One drifted argument of one call.

    ``kind``: ``container_as_string``, ``scalar_as_string``, ``int_as_float``, ``collapse``,
    ``dropped_keys``, ``unexpected_keys``, ``enum_violation`` or ``value_mismatch``.
    ``path``: the argument's path inside the arguments object (``values``, ``items[2].id``).
    ``turn``: turn index; ``call_index``: 0-based index of the call within the run.
    ``value``/``expected``: JSON excerpts (at most ~120 characters), ``expected`` may be None.
    ``phrase``: what a reviewer reads, e.g. ``"array sent as a string"``.
    """

    kind: str
    phrase: str
    tool: str
    path: str
    turn: int
    call_index: int
    value: str
    expected: str | None = None


class SchemaViolation(_Model):
    """A jsonschema error of one call's arguments against the tool's ``parameters``."""

    tool: str
    turn: int
    call_index: int
    path: str  # "" for the arguments object itself
    message: str
    validator: str = ""


class MalformedCall(_Model):
    """A call whose arguments could not be used (``kind`` is a failure kind)."""

    kind: str  # malformed_json | stream_truncated_args | object_not_string | not_an_object | unknown_tool
    tool: str | None
    turn: int
    call_index: int
    reason: str
    raw: str  # excerpt of what was received


class ProtocolViolation(_Model):
    """A broken invariant of the OpenAI chat-completions protocol."""

    kind: str  # finish_reason_mismatch | markup_in_content | repeated_ids | missing_call_id | stream_truncated_args | reasoning_leak
    turn: int
    message: str


class SequenceMatch(_Model):
    """The calls made against the calls expected (all segments together).

    ``matched``: expected calls matched by a call whose tool and arguments satisfy them;
    ``expected``: number of required (non-optional) expected calls;
    ``missing``: the required expected calls not matched, as ``"seg<i>:<tool>"``;
    ``unexpected``: calls matching no expected call, as ``"turn<t>:<tool>"``;
    ``order_kept``: strict-order segments matched in order.
    """

    matched: int = 0
    expected: int = 0
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(default_factory=list)
    order_kept: bool = True


class CallScore(_Model):
    """One tool call as scored (for marking calls in a report)."""

    turn: int
    call_index: int
    tool: str | None
    arguments: str  # canonical JSON of the parsed arguments, or the raw excerpt
    repeat_of: int | None = None  # call_index of the earlier identical call
    kinds: list[str] = Field(default_factory=list)  # failure kinds found on this call


class RunScore(_Model):
    """Scores of one run (:func:`harness.scoring.score.score_run`)."""

    run_key: str
    scenario_id: str
    side: str  # "baseline" / "candidate", or the target label of a one-sided run
    label: str
    repeat: int
    stream: bool = False
    infra_error: InfraError | None = None
    termination: Termination
    turns: int = 0
    tool_calls: int = 0
    repeated_calls: int = 0
    longest_repeat_streak: int = 0
    allowed_repeats: int = 0
    malformed_args: int = 0
    malformed: list[MalformedCall] = Field(default_factory=list)
    schema_violations: list[SchemaViolation] = Field(default_factory=list)
    drift: list[DriftFinding] = Field(default_factory=list)
    protocol_violations: list[ProtocolViolation] = Field(default_factory=list)
    final_answer: bool = False  # every segment reached a final answer
    final_answer_ok: bool = False  # ... and each meets the segment's expectations
    final_excerpt: str | None = None
    sequence: SequenceMatch = Field(default_factory=SequenceMatch)
    calls: list[CallScore] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)  # sorted failure kinds
    passed: bool = False


class Rate(_Model):
    """``k`` of ``n`` with a 95% Wilson score interval ([0, 1] when ``n == 0``)."""

    k: int
    n: int
    rate: float | None
    low: float
    high: float


class CountStat(_Model):
    """A per-run count over the scored runs of one side and scenario."""

    n: int
    mean: float | None
    median: float | None
    total: int
    values: list[int]


class Aggregate(_Model):
    """One side x one scenario (``scenario_id == "*"``: all scenarios pooled)."""

    side: str
    label: str
    scenario_id: str
    runs: int  # all runs, including infrastructure errors
    infra_errors: int
    scored: int
    rates: dict[str, Rate]  # "passed", "final_answer", and each failure kind
    counts: dict[str, CountStat]  # "tool_calls", "repeated_calls", "malformed_args", ...
    pass_hat_k: dict[str, float]  # "1".."n": tau-bench pass^k (per scenario only)
    termination: dict[str, int]
    #: how the runs that did not pass ended (None: written before this field existed);
    #: runs not counted here passed, whatever their termination (a single-turn
    #: ``tool_choice`` scenario passes at the turn cap)
    termination_failed: dict[str, int] | None = None


class MetricRow(_Model):
    """One metric of one scenario, baseline against candidate.

    ``effect``: candidate minus baseline (rate difference, or difference of means).
    ``worse``: the candidate is worse on this metric (direction only, not significance).
    ``p_value``: one-sided p of the test in the direction of the observed effect;
    ``p_adjusted``: Holm-adjusted within the decision family (None if not in it).
    """

    metric: str
    label: str
    kind: Literal["rate", "count"]
    baseline: float | None
    candidate: float | None
    baseline_text: str
    candidate_text: str
    effect: float | None
    worse: bool | None
    p_value: float | None
    p_adjusted: float | None = None
    test: str
    significant: bool = False
    decisive: bool = False  # part of the family that decides the verdict


class Divergence(_Model):
    """The first turn at which the two sides' call sequences differ."""

    turn: int
    baseline_run: str
    candidate_run: str
    baseline: list[str]  # "tool {args}" per call, or "final answer: ..." / "(ended: ...)"
    candidate: list[str]


class ScenarioComparison(_Model):
    """Baseline against candidate for one scenario (``"*"``: pooled)."""

    scenario_id: str
    rows: list[MetricRow]
    verdict: VerdictName
    reasons: list[str] = Field(default_factory=list)
    new_failure_kinds: list[str] = Field(default_factory=list)  # in candidate, not baseline
    first_divergence: Divergence | None = None
    repeats_needed: int | None = None  # INCONCLUSIVE: about this many more repeats
    #: the label views show for ``verdict`` (e.g. ``WORSE (not significant alone)`` for an
    #: INCONCLUSIVE scenario whose candidate is worse); None: show ``verdict``
    display: str | None = None
    #: one sentence on why the verdict is what it is (e.g. the Holm family's size)
    note: str | None = None
    #: number of tests in the Holm family (regression direction) this scenario was judged in
    holm_tests: int | None = None


class Verdict(_Model):
    """The overall verdict. ``repeats_needed``: for INCONCLUSIVE, about how many more
    repeats per scenario would settle it; ``regressed_kinds``: failure kinds whose
    increase is significant; ``candidate_only_kinds``: other kinds seen in the candidate
    and never in the baseline (descriptive, not significant on their own)."""

    verdict: VerdictName
    message: str
    reasons: list[str] = Field(default_factory=list)
    regressed_kinds: list[str] = Field(default_factory=list)
    improved_kinds: list[str] = Field(default_factory=list)
    candidate_only_kinds: list[str] = Field(
        default_factory=list
    )  # seen only there, not significant
    repeats_needed: int | None = None
    exit_code: int = 0


class SideInfo(_Model):
    """One side of the comparison: the target and what it says about itself.

    ``fusion``: engagement record from :func:`harness.server.fusion.collect_engagement`
    (e.g. ``{"state": "OFF", "evidence": [...]}``), ``None`` when not collected.
    """

    side: str
    label: str
    target: TargetInfo | None = None
    fusion: dict[str, Any] | None = None
    runs: int = 0
    infra_errors: int = 0
    infra_error_kinds: dict[str, int] = Field(default_factory=dict)


class Settings(_Model):
    """How the comparison was run and decided."""

    repeats: int | None = None
    stream: bool | str = False
    aa: bool = False
    model: str | None = None
    concurrency: int | None = None
    scenarios: list[str] = Field(default_factory=list)
    alpha: float = 0.01
    infra_error_limit: float = 0.2
    decision_rule: str = ""


#: id(list) -> (the list, its length, key -> first item): a few recent lookups
_LOOKUPS: OrderedDict[int, tuple[list[Any], int, dict[Any, Any]]] = OrderedDict()


def _lookup(items: list[Any], key: Callable[[Any], Any]) -> dict[Any, Any]:
    """A dict over ``items`` (first item per key), built once per list and length.

    Held outside the model so that summaries still compare by their fields; the list
    itself is kept in the entry, so its id cannot be reused while cached.
    """
    hit = _LOOKUPS.get(id(items))
    if hit is None or hit[0] is not items or hit[1] != len(items):
        table: dict[Any, Any] = {}
        for x in items:
            table.setdefault(key(x), x)
        hit = _LOOKUPS[id(items)] = (items, len(items), table)
        while len(_LOOKUPS) > 8:
            _LOOKUPS.popitem(last=False)
    return hit[2]


class Summary(_Model):
    """The whole of ``summary.json``."""

    schema_version: int = SUMMARY_SCHEMA_VERSION
    kind: Literal["compare", "score"] = "compare"
    run_id: str
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    harness_version: str = __version__
    settings: Settings = Field(default_factory=Settings)
    sides: list[SideInfo] = Field(default_factory=list)
    server_args_diff: dict[str, list[Any]] | None = None  # arg -> [baseline, candidate]
    runs: list[RunScore] = Field(default_factory=list)
    aggregates: list[Aggregate] = Field(default_factory=list)
    comparisons: list[ScenarioComparison] = Field(default_factory=list)
    verdict: Verdict | None = None
    infra_errors: dict[str, int] = Field(default_factory=dict)  # side -> count
    warnings: list[str] = Field(default_factory=list)
    parity: list[ParityDiff] = Field(default_factory=list)  # stream vs nostream (--stream both)

    def aggregate(self, side: str, scenario_id: str) -> Aggregate | None:
        """The aggregate of ``side`` for ``scenario_id`` (``"*"``: pooled); O(1) after
        the first call."""
        table = _lookup(self.aggregates, lambda a: (a.side, a.scenario_id))
        found: Aggregate | None = table.get((side, scenario_id))
        return found

    def comparison(self, scenario_id: str) -> ScenarioComparison | None:
        """The comparison of ``scenario_id`` (``"*"``: pooled); O(1) after the first call."""
        table = _lookup(self.comparisons, lambda c: c.scenario_id)
        found: ScenarioComparison | None = table.get(scenario_id)
        return found


def write_summary(run_dir: str | Path, summary: Summary) -> Path:
    """Write ``<run_dir>/summary.json`` (indented); returns its path."""
    path = Path(run_dir) / "summary.json"
    # the same bytes as model_dump_json(indent=2), without a str copy (large folders)
    path.write_bytes(summary.__pydantic_serializer__.to_json(summary, indent=2))
    return path


def read_summary(run_dir: str | Path) -> Summary:
    """Read ``<run_dir>/summary.json`` (or the file itself if a file is given).

    Raises:
        FileNotFoundError: no summary there.
        pydantic.ValidationError: the file is not a summary.
    """
    p = Path(run_dir)
    path = p if p.is_file() else p / "summary.json"
    return Summary.model_validate_json(path.read_text(encoding="utf-8"))
