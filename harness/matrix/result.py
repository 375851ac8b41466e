"""The isolation matrix's result: ``matrix.json``, each deployment judged, the outcome (pure).

:func:`build_result` turns a matrix folder's scores (a :class:`~harness.summary.Summary`
with one side per deployment label) into a :class:`MatrixResult`: one
:class:`DeploymentResult` row per deployment, the attribute findings of
:func:`harness.matrix.analysis.analyse_attributes` over the judged deployments, and the
outcome. :mod:`harness.matrix.run` runs the deployments and writes the folder.

A deployment is ``pass`` or ``fail`` by the file's :class:`~harness.matrix.spec.PassCriterion`,
or ``error`` (not judged, left out of the analysis) when it did not boot or it has too
many infrastructure errors to judge (:func:`harness.stats.verdict.over_infra_limit` at
``max_infra_error_rate``: the rule of ``harness compare`` and ``harness run``).

Outcome (and the exit code of ``harness matrix``):

================  ====  ========================================================
outcome           exit  when
================  ====  ========================================================
``CARRIER``       0     exactly one attribute splits passing from failing deployments
``ALL PASS``      0     every deployment passed
``NOT ISOLATED``  1     some failed, and no single attribute is the carrier (none,
                        or several that vary together: add a deployment that
                        separates them; or every deployment failed)
``INCOMPLETE``    3     a deployment could not be judged (boot failure,
                        infrastructure errors); the findings cover the judged
                        deployments only
================  ====  ========================================================

With two deployments the result also holds ``harness compare``'s verdict between them
(baseline: the passing one if exactly one passes, else the first listed), decided once
by :func:`two_way_summary`; the whole two-way summary rides along in memory
(:attr:`MatrixResult.compare`) for the console.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness._version import __version__
from harness.gsm8k.models import GSM8KPaired, GSM8KRecord
from harness.matrix.analysis import AttributeFinding, DeploymentOutcome, analyse_attributes
from harness.matrix.spec import DeploymentSpec, MatrixSpec, PassCriterion
from harness.pipeline import FolderContext, summarize
from harness.redaction import redact_data, redact_text
from harness.runfolder import RunFolder
from harness.stats.verdict import over_infra_limit
from harness.summary import Aggregate, Settings, Summary, Verdict
from harness.transcript import RunRecord

__all__ = [
    "MATRIX_SCHEMA_VERSION",
    "DeploymentFacts",
    "DeploymentResult",
    "MatrixResult",
    "Outcome",
    "build_result",
    "judge",
    "read_matrix",
    "two_way_summary",
]

MATRIX_SCHEMA_VERSION = 1
Outcome = Literal["CARRIER", "ALL PASS", "NOT ISOLATED", "INCOMPLETE"]
Status = Literal["pass", "fail", "error"]


class DeploymentFacts(BaseModel):
    """What is known of a deployment besides its transcripts (kept in ``matrix.json``)."""

    url: str | None = None
    boot_error: str | None = None  # launch: why it never became healthy
    fusion: str | None = (
        None  # state reported by the server (harness.server.fusion): ON/OFF/UNKNOWN
    )
    fusion_reason: str = ""


class DeploymentResult(BaseModel):
    """One row of the matrix. Rates are shares of scored runs (None: nothing scored)."""

    label: str
    attributes: dict[str, str]
    source: Literal["url", "launch", "sim"]
    target: str  # URL, launch command or ``sim:<profile>``
    status: Status
    reasons: list[str] = Field(default_factory=list)  # why it failed / was not judged
    runs: int = 0
    scored: int = 0
    infra_errors: int = 0
    passed: int = 0
    pass_rate: float | None = None
    final_answers: int = 0
    final_answer_rate: float | None = None  # termination: runs that reached a final answer
    tool_calls_mean: float | None = None
    repeated_calls: int = 0  # total over scored runs
    drift: int = 0  # drifted arguments, total over scored runs
    failure_kinds: dict[str, int] = Field(default_factory=dict)  # kind -> runs with it
    gsm8k_accuracy: float | None = None
    gsm8k_questions: int | None = None
    facts: DeploymentFacts = Field(default_factory=DeploymentFacts)


class MatrixResult(BaseModel):
    """The whole of ``matrix.json``.

    ``compare``: with two deployments, the two-way :class:`~harness.summary.Summary`
    ``compare_verdict`` was taken from (:func:`two_way_summary`); in memory only (not
    written to ``matrix.json``; :func:`harness.matrix.run.rescore_matrix` makes it again).
    """

    schema_version: int = MATRIX_SCHEMA_VERSION
    kind: Literal["matrix"] = "matrix"
    run_id: str
    name: str | None = None
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    harness_version: str = __version__
    spec: dict[str, Any] = Field(default_factory=dict)  # the matrix file, parsed
    deployments: list[DeploymentResult]
    findings: list[AttributeFinding]
    carriers: list[str] = Field(default_factory=list)
    outcome: Outcome
    message: str
    warnings: list[str] = Field(default_factory=list)
    compare_baseline: str | None = None  # two deployments: harness compare between them
    compare_candidate: str | None = None
    compare_verdict: Verdict | None = None
    compare_gsm8k: GSM8KPaired | None = None  # two deployments with GSM8K: McNemar
    compare: Summary | None = Field(default=None, exclude=True)

    def attribute_names(self) -> list[str]:
        """Every attribute named by a deployment, sorted."""
        return sorted({a for r in self.deployments for a in r.attributes})

    def grouped(self) -> list[DeploymentResult]:
        """Deployments grouped by outcome: failing, passing, then not judged (file order within)."""
        rank = {"fail": 0, "pass": 1, "error": 2}
        return sorted(self.deployments, key=lambda r: rank[r.status])


def read_matrix(run_dir: str | Path) -> MatrixResult:
    """The run folder's ``matrix.json``.

    Raises:
        FileNotFoundError: the folder has no ``matrix.json``.
        RunFolderError: it cannot be read.
    """
    result: MatrixResult | None = RunFolder(run_dir).read_model(RunFolder.MATRIX, MatrixResult)
    if result is None:
        raise FileNotFoundError(f"{RunFolder(run_dir).file(RunFolder.MATRIX)}: no matrix result")
    return result


# ------------------------------------------------------------------ one deployment


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})" if n else "0/0"


def _fail_reasons(row: DeploymentResult, crit: PassCriterion, need_gsm8k: bool) -> list[str]:
    out = []
    if row.pass_rate is not None and row.pass_rate < crit.min_pass_rate:
        out.append(f"pass rate {_pct(row.passed, row.scored)} below {crit.min_pass_rate:.0%}")
    fa = crit.min_final_answer_rate
    if fa is not None and row.final_answer_rate is not None and row.final_answer_rate < fa:
        out.append(f"final answers {_pct(row.final_answers, row.scored)} below {fa:.0%}")
    ga = crit.min_gsm8k_accuracy
    if need_gsm8k and ga is not None and row.gsm8k_accuracy is not None and row.gsm8k_accuracy < ga:
        out.append(f"GSM8K accuracy {row.gsm8k_accuracy:.3f} below {ga:.3f}")
    return out


def _error_reasons(row: DeploymentResult, crit: PassCriterion, need_gsm8k: bool) -> list[str]:
    if row.facts.boot_error:
        return [f"did not boot: {row.facts.boot_error}"]
    if row.runs == 0:
        return ["no runs recorded"]
    if over_infra_limit(row.runs, row.infra_errors, crit.max_infra_error_rate):
        return [
            f"{row.infra_errors}/{row.runs} runs were infrastructure errors "
            f"(limit {crit.max_infra_error_rate:.0%}): the server failed, not the model"
        ]
    if need_gsm8k and crit.min_gsm8k_accuracy is not None and row.gsm8k_accuracy is None:
        return ["GSM8K was not scored"]
    return []


def judge(
    spec: DeploymentSpec,
    agg: Aggregate | None,
    crit: PassCriterion,
    *,
    facts: DeploymentFacts | None = None,
    gsm8k: tuple[float, int] | None = None,
    need_gsm8k: bool = False,
) -> DeploymentResult:
    """One deployment's row: its pooled aggregate (``scenario_id == "*"``) against ``crit``.

    ``gsm8k``: ``(accuracy, questions scored)``. Status ``error`` wins over ``fail``.
    """
    target = spec.url or (f"sim:{spec.sim}" if spec.sim else shlex.join(spec.launch_argv()))
    facts = facts or DeploymentFacts()
    facts = facts.model_copy(update=redact_data(facts.model_dump(include={"url", "boot_error"})))
    row = DeploymentResult(
        label=spec.label, attributes=spec.attributes, source=spec.source,  # type: ignore[arg-type]
        target=redact_text(target), status="pass", facts=facts,
    )  # fmt: skip
    if agg is not None:
        _fill(row, agg)
    if gsm8k is not None:
        row.gsm8k_accuracy, row.gsm8k_questions = gsm8k
    errors = _error_reasons(row, crit, need_gsm8k)
    fails = [] if errors else _fail_reasons(row, crit, need_gsm8k)
    row.status = "error" if errors else "fail" if fails else "pass"
    row.reasons = errors or fails
    return row


def _fill(row: DeploymentResult, agg: Aggregate) -> None:
    row.runs, row.scored, row.infra_errors = agg.runs, agg.scored, agg.infra_errors
    p, f = agg.rates["passed"], agg.rates["final_answer"]
    row.passed, row.pass_rate = p.k, p.rate
    row.final_answers, row.final_answer_rate = f.k, f.rate
    row.tool_calls_mean = agg.counts["tool_calls"].mean
    row.repeated_calls = agg.counts["repeated_calls"].total
    row.drift = agg.counts["drift"].total
    row.failure_kinds = {
        k: r.k for k, r in agg.rates.items() if k not in ("passed", "final_answer") and r.k
    }


# ------------------------------------------------------------------ the whole matrix


def _outcome(rows: list[DeploymentResult], findings: list[AttributeFinding]) -> tuple[Outcome, str]:
    carriers = [f for f in findings if f.classification == "carrier"]
    unjudged = [r.label for r in rows if r.status == "error"]
    failing = [r.label for r in rows if r.status == "fail"]
    if unjudged:
        found = f"; among the rest: {carriers[0].explanation}" if len(carriers) == 1 else ""
        return "INCOMPLETE", f"not judged: {', '.join(unjudged)}{found}"
    if not failing:
        return "ALL PASS", f"all {len(rows)} deployments passed"
    if len(carriers) == 1:
        return "CARRIER", f"{carriers[0].attribute} carries the failure: {carriers[0].explanation}"
    if len(failing) == len(rows):
        return "NOT ISOLATED", "every deployment failed: no attribute separates the outcomes"
    if carriers:
        names = " and ".join(c.attribute for c in carriers)
        return "NOT ISOLATED", (
            f"{names} vary together and each splits the outcomes; "
            "add a deployment that changes one without the other"
        )
    return "NOT ISOLATED", "no attribute separates passing from failing deployments"


def build_result(
    spec: MatrixSpec,
    summary: Summary,
    *,
    run_id: str,
    facts: dict[str, DeploymentFacts] | None = None,
    gsm8k: dict[str, tuple[float, int]] | None = None,
    records: Sequence[RunRecord] = (),
    gsm8k_records: dict[str, list[GSM8KRecord]] | None = None,
) -> MatrixResult:
    """The :class:`MatrixResult` of scored runs (pure). ``summary`` has one side per label.

    With two deployments, ``records`` (the transcripts) give ``harness compare``'s verdict
    and ``gsm8k_records`` (per label) McNemar's paired GSM8K comparison.
    """
    facts, gsm8k = facts or {}, gsm8k or {}
    need = spec.gsm8k is not None
    rows = [
        judge(d, summary.aggregate(d.label, "*"), spec.pass_criterion,
              facts=facts.get(d.label), gsm8k=gsm8k.get(d.label), need_gsm8k=need)
        for d in spec.deployments
    ]  # fmt: skip
    judged = [r for r in rows if r.status != "error"]
    findings = analyse_attributes(
        [
            DeploymentOutcome(label=r.label, attributes=r.attributes, passed=r.status == "pass")
            for r in judged
        ]
    )
    outcome, message = _outcome(rows, findings)
    result = MatrixResult(
        run_id=run_id, name=spec.name, spec=redact_data(spec.model_dump(mode="json")), deployments=rows,
        findings=findings, carriers=[f.attribute for f in findings if f.classification == "carrier"],
        outcome=outcome, message=message, warnings=_warnings(rows, need),
    )  # fmt: skip
    if len(rows) == 2:
        _compare_two(result, records, summary.settings, gsm8k_records or {})
    return result


def _compare_two(
    result: MatrixResult,
    records: Sequence[RunRecord],
    settings: Settings,
    gsm8k_records: dict[str, list[GSM8KRecord]],
) -> None:
    """Two deployments: ``harness compare``'s verdict between them (decided once, here)
    and, with both GSM8K runs, McNemar's paired comparison."""
    two = two_way_summary(records, result.deployments, run_id=result.run_id, settings=settings)
    if two is not None and two.verdict is not None:
        result.compare = two
        result.compare_baseline, result.compare_candidate = two.sides[0].label, two.sides[1].label
        result.compare_verdict = two.verdict
    base, cand = _two_sides(result.deployments)
    if base.label in gsm8k_records and cand.label in gsm8k_records:
        from harness.gsm8k.stats import paired_comparison

        result.compare_gsm8k = paired_comparison(
            gsm8k_records[base.label], gsm8k_records[cand.label]
        )


def _two_sides(rows: Sequence[DeploymentResult]) -> tuple[DeploymentResult, DeploymentResult]:
    """(baseline, candidate): the passing one when exactly one passes, else the first listed."""
    passing = [r for r in rows if r.status == "pass"]
    base = passing[0] if len(passing) == 1 else rows[0]
    return base, rows[1] if base is rows[0] else rows[0]


def _warnings(rows: list[DeploymentResult], need_gsm8k: bool) -> list[str]:
    """The seed case's lesson (a ``fusion`` attribute the server contradicts), and GSM8K
    requested but not scored."""
    out = [
        f"{r.label}: GSM8K was requested but not scored (see {RunFolder.GSM8K_DIR}/{r.label}/)"
        for r in rows
        if need_gsm8k and r.status != "error" and r.gsm8k_accuracy is None
    ]
    for r in rows:
        said, seen = r.attributes.get("fusion", "").lower(), r.facts.fusion
        want = {"on": "ON", "true": "ON", "off": "OFF", "false": "OFF"}.get(said)
        if want and seen in ("ON", "OFF") and seen != want:
            out.append(
                f"{r.label}: attribute fusion={said} but the server reports fusion {seen}"
                f" ({r.facts.fusion_reason or 'no reason given'})"
            )
        elif want == "ON" and seen == "UNKNOWN":
            out.append(
                f"{r.label}: declared fusion {said}, but the server does not prove it "
                f"(fusion UNKNOWN: {r.facts.fusion_reason or 'no reason given'})"
            )
    return out


def two_way_summary(
    records: Sequence[RunRecord],
    rows: Sequence[DeploymentResult],
    *,
    run_id: str,
    settings: Settings | None = None,
) -> Summary | None:
    """``harness compare``'s summary of two deployments (pure; None if not two).

    Baseline: the passing deployment when exactly one passes, else the first listed.
    """
    if len(rows) != 2:
        return None
    base, cand = _two_sides(rows)
    side = {base.label: "baseline", cand.label: "candidate"}
    resided = [
        r.model_copy(update={"target": r.target.model_copy(update={"side": side[r.target.label]})})
        for r in records
        if r.target.label in side
    ]
    if not resided:
        return None
    return summarize(resided, run_id=run_id, context=FolderContext(settings or Settings()))[0]
