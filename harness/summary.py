"""``summary.json``: the aggregates, the tests and the verdict of one run folder (small).

Written once per scoring by :func:`harness.pipeline.score_folder` (``harness compare``,
``harness run``, ``harness score``), read by the console, the report and people. It is a
pure function of ``scores.jsonl`` (itself a pure function of ``transcripts.jsonl``) plus
the targets' self-description, so ``harness score results/<run-id>`` can always rewrite
it. Its size grows with the number of scenarios and failure kinds, never with the number
of runs: per-run scores live in ``scores.jsonl``.

What a reader can rely on (stable within ``schema_version`` 2; later versions only add
optional fields):

- ``aggregates``: one :class:`Aggregate` per (side, scenario) and one per side with
  ``scenario_id == "*"`` pooling all scenarios of that side. Rates are of *failures*
  unless the metric says otherwise (``passed`` and ``final_answer`` are rates of
  success); a failure kind absent from ``rates`` occurred in none of the scored runs.
- ``comparisons``: one :class:`ScenarioComparison` per scenario plus ``"*"`` (pooled; left
  out when there is a single scenario), only when two sides ran (``kind == "compare"``).
- ``verdict``: the overall :class:`Verdict` of a comparison, decided once by
  :func:`harness.stats.verdict.decide`; ``outcome``: the :class:`RunOutcome` of a
  one-sided run (``kind == "run"``), decided once by :func:`harness.stats.verdict.judge_run`.
  Exit codes are not stored: the command line derives them (:mod:`harness.cli`).
- ``parity``: stream/non-stream differences (``--stream both``), ``parity_pairs`` the
  number of (side, scenario, repeat) pairs compared.
- ``sides``: :class:`SideInfo` per side (``"baseline"``/``"candidate"``, or the target
  label of a one-sided run), in that order, with the server's self-description and the
  fusion-engagement record.

Metric names are :class:`harness.kinds.FailureKind` values and the metrics of
:data:`harness.kinds.METRIC_LABELS`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness._version import __version__
from harness.kinds import VerdictName
from harness.scoring.models import Divergence
from harness.scoring.parity import ParityDiff
from harness.transcript import TargetInfo

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "Aggregate",
    "ContractCheck",
    "CountStat",
    "Divergence",
    "MetricRow",
    "Rate",
    "RunOutcome",
    "ScenarioComparison",
    "Settings",
    "SideContract",
    "SideInfo",
    "Summary",
    "Verdict",
    "scenario_name",
]

SUMMARY_SCHEMA_VERSION = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


def scenario_name(scenario_id: str) -> str:
    """How a scenario is named in tables and reasons: its id, or ``all scenarios`` for
    ``"*"`` (the pool)."""
    return "all scenarios" if scenario_id == "*" else scenario_id


class Rate(_Model):
    """``k`` of ``n`` with a 95% Wilson score interval ([0, 1] when ``n == 0``)."""

    k: int
    n: int
    rate: float | None
    low: float
    high: float

    def text(self) -> str:
        """How every view prints it: ``3/5``."""
        return f"{self.k}/{self.n}"


class CountStat(_Model):
    """A per-run count over the scored runs of one side and scenario.

    ``histogram``: value -> number of runs with that value (bounded by the distinct
    values, not by the runs).
    """

    n: int
    mean: float | None
    median: float | None
    total: int
    histogram: dict[int, int] = Field(default_factory=dict)

    def values(self) -> list[int]:
        """Every run's value, sorted (``n`` items)."""
        return [v for v, runs in sorted(self.histogram.items()) for _ in range(runs)]

    def text(self) -> str:
        """How every view prints it: ``15 (3 each)``, ``9 (1, 2, 2, 4)`` (up to 5 runs),
        ``155 (median 2)``; ``4`` for one run; ``-`` without runs."""
        if not self.n:
            return "-"
        if self.n == 1:
            return str(self.total)
        if len(self.histogram) == 1 and self.n > 1:
            return f"{self.total} ({next(iter(self.histogram))} each)"
        if self.n <= 5:
            return f"{self.total} ({', '.join(map(str, self.values()))})"
        return f"{self.total} (median {self.median:g})"


class Aggregate(_Model):
    """One side x one scenario (``scenario_id == "*"``: all scenarios pooled)."""

    side: str
    label: str
    scenario_id: str
    runs: int  # all runs, including infrastructure errors
    infra_errors: int
    scored: int
    #: "passed", "final_answer", and each failure kind seen in this scenario (either side)
    rates: dict[str, Rate]
    counts: dict[str, CountStat]  # "tool_calls", "repeated_calls", "malformed_args", ...
    #: tau-bench pass^k per scenario at k = 1 and k = scored runs (repeats under
    #: ``--stream both``: :attr:`units`) (``{"1": .., "5": ..}``)
    pass_hat_k: dict[str, float] = Field(default_factory=dict)
    termination: dict[str, int] = Field(default_factory=dict)
    #: how the runs that did not pass ended (runs not counted here passed, whatever their
    #: termination: a single-turn ``tool_choice`` scenario passes at the turn cap)
    termination_failed: dict[str, int] = Field(default_factory=dict)
    #: scored runs per outcome set: the run's outcomes (``passed``, ``final_answer``, its
    #: failure kinds) sorted and joined with ``,`` -> runs (what the permutation tests of
    #: :mod:`harness.stats.verdict` relabel; empty in summaries written before it)
    patterns: dict[str, int] = Field(default_factory=dict)
    #: per outcome set, the repeats that showed it, when some repeat has a streamed and a
    #: non-streamed scored run (``--stream both``: a repeat runs both ways on one request
    #: seed, often one draw twice, not two draws): a repeat's outcomes are its
    #: non-streamed run's, and its streamed run's stream-only kinds
    #: (:func:`harness.stats.aggregate.unit_outcomes`). The permutation tests relabel
    #: these units instead of ``patterns`` (empty when every repeat is one run, and in
    #: summaries written before it)
    units: dict[str, int] = Field(default_factory=dict)
    #: with :attr:`units`, ``counts`` over repeats: each repeat's non-streamed run (its
    #: streamed run when that is the only one scored); what the Mann-Whitney rows test
    #: (empty when :attr:`units` is)
    unit_counts: dict[str, CountStat] = Field(default_factory=dict)

    def unit_count(self) -> int:
        """The independent units of the tests: repeats with a scored run when ``units`` is
        set, else scored runs."""
        return sum(self.units.values()) if self.units else self.scored

    def rate(self, metric: str) -> Rate:
        """``rates[metric]``, or ``0/scored`` for a failure kind that never occurred."""
        found = self.rates.get(metric)
        if found is not None:
            return found
        return Rate(k=0, n=self.scored, rate=0.0 if self.scored else None, low=0.0, high=1.0)

    def failing_kinds(self) -> list[str]:
        """The failure kinds some scored run showed, sorted."""
        return sorted(
            k for k, r in self.rates.items() if r.k and k not in ("passed", "final_answer")
        )


class MetricRow(_Model):
    """One metric of one scenario, baseline against candidate (numbers only; views format
    the cells from the :class:`Aggregate` of each side).

    ``effect``: candidate minus baseline (rate difference, or difference of means).
    ``worse``: the candidate is worse on this metric (direction only, not significance).
    ``p_value``: one-sided p of the test in the direction of the observed effect;
    ``p_adjusted``: Westfall-Young adjusted within the decision family (None if not in it).
    """

    metric: str
    kind: Literal["rate", "count"]
    baseline: float | None
    candidate: float | None
    effect: float | None
    worse: bool | None
    p_value: float | None
    p_adjusted: float | None = None
    test: str
    significant: bool = False
    decisive: bool = False  # part of the family that decides the verdict


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
    #: one sentence on why the verdict is what it is (e.g. the family's size)
    note: str | None = None
    #: number of tests in the family (regression direction) this scenario was judged in (the
    #: name predates the Westfall-Young adjustment; kept for summaries already written)
    holm_tests: int | None = None

    @property
    def label(self) -> str:
        """What views call this comparison's verdict: ``display`` or ``verdict``."""
        return self.display or self.verdict


class Verdict(_Model):
    """The overall verdict, decided once (:func:`harness.stats.verdict.decide`).

    ``repeats_needed``: for INCONCLUSIVE, about how many more repeats per scenario would
    settle it; ``regressed_kinds``: failure kinds whose increase is significant;
    ``candidate_only_kinds``: other kinds seen in the candidate and never in the baseline
    (descriptive, not significant on their own); ``infra_limited``: the labels of the
    sides with more infrastructure errors than ``Settings.infra_error_limit`` (then the
    comparison cannot be trusted: the command line exits 3).
    """

    verdict: VerdictName
    message: str
    reasons: list[str] = Field(default_factory=list)
    regressed_kinds: list[str] = Field(default_factory=list)
    improved_kinds: list[str] = Field(default_factory=list)
    candidate_only_kinds: list[str] = Field(default_factory=list)
    repeats_needed: int | None = None
    #: INCONCLUSIVE against a recording (which holds no more runs): the rounds to record
    #: (``harness record --repeats R --rounds K``, R the comparison's ``--repeats``) that
    #: would hold :attr:`repeats_needed` more; None otherwise
    record_rounds: int | None = None
    infra_limited: list[str] = Field(default_factory=list)
    #: what the decision could see: the family (tests, permutations, critical p), the
    #: greedy scenarios counted once, and for NO CHANGE the smallest effect it would have
    #: detected with 80% probability
    power: str | None = None
    #: the behavioural verdict when a numerics REGRESSION made the verdict one (rule 7 of
    #: :mod:`harness.stats.verdict`); None otherwise. The sequential stopping rule reads it.
    behaviour: VerdictName | None = None


class RunOutcome(_Model):
    """The outcome of a one-sided run (``harness run``, the pytest plugin without a
    baseline), decided once (:func:`harness.stats.verdict.judge_run`).

    ``passed``: every scenario's pass rate (passed / scored runs) is at least
    ``min_pass_rate`` and no side is over the infrastructure-error limit; ``failing``:
    the scenarios below the rate; ``infra_limited``: the labels of the sides over the
    limit (the command line then exits 3).
    """

    passed: bool
    message: str
    min_pass_rate: float = 1.0
    failing: list[str] = Field(default_factory=list)
    infra_limited: list[str] = Field(default_factory=list)


class ContractCheck(_Model):
    """One check of the contract pre-flight (:mod:`harness.preflight`): ``status`` is
    ``ok`` (honoured), ``failed`` (not honoured), ``unsupported`` (refused, or not
    reproducible where that is the server's choice: a note, not a fault) or ``error``
    (no answer); ``detail`` one line saying what was seen."""

    name: str
    status: Literal["ok", "failed", "unsupported", "error"]
    detail: str = ""


class SideContract(_Model):
    """What one server honoured of a request's contract before any scenario ran
    (:func:`harness.preflight.check_contract`): the checks, the requests spent, and
    whether its repeats are independent trials (``sampling_ignored``: the same output at
    temperature 0.7 whatever the seed; its repeats are then copies, counted once per
    scenario as greedy ones are)."""

    checks: list[ContractCheck] = Field(default_factory=list)
    requests: int = 0
    duration_s: float = 0.0

    def check(self, name: str) -> ContractCheck | None:
        """The check called ``name``, if it ran."""
        return next((c for c in self.checks if c.name == name), None)

    @property
    def sampling_ignored(self) -> bool:
        """Whether the server ignored temperature and seed (its repeats are copies)."""
        found = self.check("temperature")
        return found is not None and found.status == "failed"


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
    #: one message per infrastructure-error kind, for the console and the report
    infra_error_examples: dict[str, str] = Field(default_factory=dict)
    #: the recording this side was read from (``--baseline results/<id>``), else None
    recorded: str | None = None
    #: the boot checks when the harness launched this side (``--baseline-cmd``, ``harness
    #: record --cmd``): ``{"verdict", "url", "checks": [{name, verdict, detail}], "crash"}``
    boot: dict[str, Any] | None = None
    #: the contract pre-flight of this side (None: skipped, or from before it existed)
    contract: SideContract | None = None


class Settings(_Model):
    """How the runs were made and decided."""

    repeats: int | None = None
    stream: bool | str = False
    aa: bool = False
    model: str | None = None
    concurrency: int | None = None
    scenarios: list[str] = Field(default_factory=list)
    alpha: float = 0.01
    infra_error_limit: float = 0.2
    min_pass_rate: float = 1.0  # one-sided runs: the pass rate every scenario must reach
    decision_rule: str = ""
    #: sampling temperature sent with every request unless a scenario sets its own
    #: (None: each scenario's own, as before temperature was an option)
    temperature: float | None = None
    #: base of every run's request seed and of the permutations (same seed, same verdict)
    seed: int = 0
    #: the reasoning of earlier turns sent back (``keep``/``drop``/``auto``; None: each
    #: scenario's, else ``auto``: :data:`harness.runner.REASONING_HISTORY`)
    reasoning_history: str | None = None
    #: the fields of earlier assistant messages sent back (``as-received``/``known``: None,
    #: as-received: :data:`harness.runner.HISTORY_FIELDS`)
    history_fields: str | None = None
    #: the contract pre-flight was skipped (``--skip-contract``)
    skip_contract: bool = False
    #: Westfall-Young permutations
    permutations: int = 10_000
    #: sequential mode (:mod:`harness.stats.sequential`): ``repeats`` per round, at most
    #: ``rounds`` rounds; ``look``: the round the verdict was decided at (its level is
    #: ``look_alpha(alpha, look, rounds)``)
    sequential: bool = False
    rounds: int = 4
    look: int | None = None


class Summary(_Model):
    """The whole of ``summary.json``."""

    schema_version: int = SUMMARY_SCHEMA_VERSION
    kind: Literal["compare", "run"] = "compare"
    run_id: str
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    harness_version: str = __version__
    settings: Settings = Field(default_factory=Settings)
    sides: list[SideInfo] = Field(default_factory=list)
    server_args_diff: dict[str, list[Any]] | None = None  # arg -> [baseline, candidate]
    warnings: list[str] = Field(default_factory=list)
    aggregates: list[Aggregate] = Field(default_factory=list)
    comparisons: list[ScenarioComparison] = Field(default_factory=list)
    verdict: Verdict | None = None
    #: one-sided runs (kind "run"); under the pytest plugin with a baseline, the candidate
    #: judged alone (its tests' pass/fail), beside the verdict
    outcome: RunOutcome | None = None
    parity: list[ParityDiff] = Field(default_factory=list)  # stream vs nostream (--stream both)
    parity_pairs: int = 0  # (side, scenario, repeat) pairs run both ways

    @cached_property
    def _aggregates(self) -> dict[tuple[str, str], Aggregate]:
        return {(a.side, a.scenario_id): a for a in self.aggregates}

    @cached_property
    def _comparisons(self) -> dict[str, ScenarioComparison]:
        return {c.scenario_id: c for c in self.comparisons}

    def aggregate(self, side: str, scenario_id: str) -> Aggregate | None:
        """The aggregate of ``side`` for ``scenario_id`` (``"*"``: pooled)."""
        return self._aggregates.get((side, scenario_id))

    def comparison(self, scenario_id: str) -> ScenarioComparison | None:
        """The comparison of ``scenario_id`` (``"*"``: pooled)."""
        return self._comparisons.get(scenario_id)

    def scenario_ids(self) -> list[str]:
        """The scenarios of the first side, in order (``"*"`` last if present)."""
        first = self.sides[0].side if self.sides else None
        return [a.scenario_id for a in self.aggregates if a.side == first]

    def side_label(self, side: str) -> str:
        """The label of ``side`` (``baseline`` -> ``unfused``), or ``side`` itself."""
        return next((s.label for s in self.sides if s.side == side), side)
