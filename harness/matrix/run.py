"""Isolation matrix: run several deployments, judge each, name the attribute that carries a failure.

:func:`run_matrix` runs the scenarios of a :class:`~harness.matrix.spec.MatrixSpec`
against every deployment into one run folder ``results/<run-id>/``:

- ``manifest.json`` (the matrix file, parsed, in ``extra["matrix"]``);
- ``transcripts.jsonl``: one record per run, ``run_key`` ``<label>/<scenario>/<repeat>/<mode>``
  (the deployment's label names its runs, as in ``harness run``);
- ``summary.json``: :mod:`harness.pipeline`'s scores, one side per deployment label;
- ``gsm8k/<label>/gsm8k.json`` when ``gsm8k`` is set (:func:`harness.gsm8k.run.run_gsm8k`);
- ``matrix.json``: :class:`MatrixResult`, the deployments x outcomes table and the
  attribute findings of :func:`harness.matrix.analysis.analyse_attributes`.

Deployments given by ``url`` or ``sim`` run together (one :func:`~harness.runner.run_many`
over all of them); ``launch`` deployments are started one at a time (they usually share
the GPUs), run, and stopped, with the log in ``server-<label>.log``.

A deployment is ``pass`` or ``fail`` by the file's :class:`~harness.matrix.spec.PassCriterion`,
or ``error`` (not judged, left out of the analysis) when it did not boot or more than
``max_infra_error_rate`` of its runs were infrastructure errors.

Outcome and exit code (:class:`MatrixResult`):

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

(2: bad matrix file or arguments, from the command.) With two deployments the matrix
also holds ``harness compare``'s verdict between them (baseline: the passing one if
exactly one passes, else the first listed).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness._version import __version__
from harness.client.target import TargetConfig
from harness.errors import RunFolderError
from harness.gsm8k.models import GSM8KPaired, GSM8KRecord
from harness.matrix.analysis import AttributeFinding, DeploymentOutcome, analyse_attributes
from harness.matrix.spec import DeploymentSpec, MatrixError, MatrixSpec, PassCriterion
from harness.pipeline import FolderContext, score_folder, summarize
from harness.runfolder import RunFolder
from harness.scenario.model import Scenario, load_scenarios
from harness.summary import Aggregate, Settings, SideInfo, Summary, Verdict
from harness.transcript import RunRecord

__all__ = [
    "MATRIX_SCHEMA_VERSION",
    "DeploymentResult",
    "MatrixResult",
    "Outcome",
    "build_result",
    "judge",
    "read_matrix",
    "rescore_matrix",
    "run_matrix",
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
    """The whole of ``matrix.json``."""

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

    def attribute_names(self) -> list[str]:
        """Every attribute named by a deployment, sorted."""
        return sorted({a for r in self.deployments for a in r.attributes})

    def grouped(self) -> list[DeploymentResult]:
        """Deployments grouped by outcome: failing, passing, then not judged (file order within)."""
        rank = {"fail": 0, "pass": 1, "error": 2}
        return sorted(self.deployments, key=lambda r: rank[r.status])


# ------------------------------------------------------------------ judging (pure)


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
    if row.infra_errors / row.runs > crit.max_infra_error_rate:
        return [
            f"{row.infra_errors}/{row.runs} runs were infrastructure errors "
            f"(more than {crit.max_infra_error_rate:.0%}): the server failed, not the model"
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
    target = spec.url or (f"sim:{spec.sim}" if spec.sim else shlex.join(_argv(spec)))
    row = DeploymentResult(
        label=spec.label, attributes=spec.attributes, source=spec.source,  # type: ignore[arg-type]
        target=target, status="pass", facts=facts or DeploymentFacts(),
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


def _argv(spec: DeploymentSpec) -> list[str]:
    cmd = spec.launch or []
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


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
        run_id=run_id, name=spec.name, spec=spec.model_dump(mode="json"), deployments=rows,
        findings=findings, carriers=[f.attribute for f in findings if f.classification == "carrier"],
        outcome=outcome, message=message, warnings=_warnings(rows, need),
    )  # fmt: skip
    if len(rows) == 2 and records:
        two = two_way_summary(records, rows, run_id=run_id, settings=summary.settings)
        if two is not None and two.verdict is not None:
            result.compare_baseline, result.compare_candidate = (
                two.sides[0].label,
                two.sides[1].label,
            )
            result.compare_verdict = two.verdict
    if len(rows) == 2 and gsm8k_records:
        base, cand = _two_sides(rows)
        if base.label in gsm8k_records and cand.label in gsm8k_records:
            from harness.gsm8k.stats import paired_comparison

            result.compare_gsm8k = paired_comparison(
                gsm8k_records[base.label], gsm8k_records[cand.label]
            )
    return result


def _two_sides(rows: Sequence[DeploymentResult]) -> tuple[DeploymentResult, DeploymentResult]:
    """(baseline, candidate): the passing one when exactly one passes, else the first listed."""
    passing = [r for r in rows if r.status == "pass"]
    base = passing[0] if len(passing) == 1 else rows[0]
    return base, rows[1] if base is rows[0] else rows[0]


def _warnings(rows: list[DeploymentResult], need_gsm8k: bool) -> list[str]:
    """The seed case's lesson (a ``fusion`` attribute the server contradicts), and GSM8K
    requested but not scored."""
    out = [
        f"{r.label}: GSM8K was requested but not scored (see gsm8k/{r.label}/)"
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


# ------------------------------------------------------------------ running


def _sim_dir(scenarios: Sequence[Scenario], stack: contextlib.ExitStack) -> Path:
    """A temporary folder holding just the matrix's scenario files (the reference server
    plays every file of a folder; loading only these keeps its start fast)."""
    out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-matrix-")))
    for i, s in enumerate(scenarios):
        if s.source:
            shutil.copy(s.source, out / f"{i:03d}-{Path(s.source).name}")
    return out


def _engagement(url: str, log: str | None) -> DeploymentFacts:
    facts = DeploymentFacts(url=url)
    try:
        from harness.server.fusion import collect_engagement

        e = collect_engagement(url, log_path=log)
        facts.fusion, facts.fusion_reason = e.state, e.reason
    except Exception as exc:  # the record is informative only; never fail the matrix on it
        facts.fusion_reason = f"not collected: {type(exc).__name__}: {exc}"
    return facts


def _sim_log(d: DeploymentSpec, folder: Path) -> str | None:
    """For a ``sim`` deployment, the boot log ``harness sim --profile P`` prints, written to
    ``server-<label>.log``, so its fusion engagement is judged as a real server's is."""
    if d.sim is None:
        return None
    from harness.sim.moe import boot_log_lines
    from harness.sim.profiles import get_profile

    path = folder / f"server-{d.label}.log"
    path.write_text("\n".join(boot_log_lines(get_profile(d.sim), capture=False)) + "\n")
    return str(path)


@contextlib.contextmanager
def _launched(d: DeploymentSpec, folder: Path) -> Iterator[DeploymentFacts]:
    """Start a ``launch`` deployment, wait for /health, yield its facts, stop its process group.

    Uses :mod:`harness.server.boot`'s launcher (own process group, log in ``server-<label>.log``).
    """
    from harness.server import boot

    argv, log = _argv(d), folder / f"server-{d.label}.log"
    proc = boot._launch(argv, log)
    if isinstance(proc, boot.Check):
        yield DeploymentFacts(boot_error=proc.detail)
        return
    try:
        check, url = boot._wait_healthy(
            proc, log, boot.url_from_command(argv),
            health_path="/health", timeout_s=d.boot_timeout_s, ignore=(),
        )  # fmt: skip
        if check.verdict != "PASS" or url is None:
            tail = f" ({check.evidence[-1]})" if check.evidence else ""
            yield DeploymentFacts(url=url, boot_error=check.detail + tail)
        else:
            yield _engagement(url, d.log or str(log))
    finally:
        boot.stop_group(proc)


def _targets(spec: MatrixSpec, urls: dict[str, str]) -> list[TargetConfig]:
    by = {d.label: d for d in spec.deployments}
    return [
        TargetConfig(url, model=by[label].model, label=label, api_key_env=by[label].api_key_env,
                     timeout_s=spec.timeout_s)
        for label, url in urls.items()
    ]  # fmt: skip


def _run_group(
    spec: MatrixSpec,
    scenarios: Sequence[Scenario],
    urls: dict[str, str],
    folder: Path,
    progress: bool,
) -> dict[str, tuple[float, int]]:
    """Run the scenarios (and GSM8K) against servers that are up; returns GSM8K results."""
    from harness.runner import run_many_sync

    if not urls:
        return {}
    targets = _targets(spec, urls)
    run_many_sync(
        scenarios, targets, repeats=spec.repeats, stream=spec.stream,
        concurrency=spec.concurrency * len(targets), out_dir=folder, progress=progress,
    )  # fmt: skip
    if spec.gsm8k is None:
        return {}
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        done = pool.map(lambda t: (t.label, _gsm8k(spec, t, folder)), targets)
        return {label: acc for label, acc in done if acc is not None}


def _gsm8k(spec: MatrixSpec, t: TargetConfig, folder: Path) -> tuple[float, int] | None:
    from harness.gsm8k.run import GSM8K_TIMEOUT_S, run_gsm8k

    g = spec.gsm8k
    assert g is not None
    try:
        s = run_gsm8k(
            replace(t, timeout_s=max(t.timeout_s, GSM8K_TIMEOUT_S)),
            data=g.data, num_questions=g.questions, num_shots=g.shots, parallel=g.parallel,
            results=folder / "gsm8k", run_id=t.label,
        )  # fmt: skip
    except Exception as exc:  # the scenario results stand; the row shows GSM8K as missing
        print(f"warning: GSM8K of {t.label} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    side = s.sides[0]
    return (side.accuracy, side.n) if side.n else None


def _serve_all(
    spec: MatrixSpec, scenarios: Sequence[Scenario], folder: Path, stack: contextlib.ExitStack
) -> dict[str, str]:
    """Base URLs of the ``url`` and ``sim`` deployments (sims started on ``stack``)."""
    urls: dict[str, str] = {}
    sim_dir = None
    for i, d in enumerate(spec.deployments):
        if d.url is not None:
            urls[d.label] = d.url
        elif d.sim is not None:
            from harness.sim.server import serve_in_thread

            sim_dir = sim_dir or _sim_dir(scenarios, stack)
            gsm8k = spec.gsm8k.data if spec.gsm8k else None
            cm = serve_in_thread(d.sim, scenarios_dir=sim_dir, gsm8k_path=gsm8k, seed=i)
            urls[d.label] = stack.enter_context(cm)
    return urls


def _check_gsm8k_data(spec: MatrixSpec) -> None:
    if spec.gsm8k is None:
        return
    from harness.gsm8k.data import GSM8KDataError, load_dataset

    try:
        load_dataset(spec.gsm8k.data)
    except GSM8KDataError as exc:
        reason = str(exc).replace("pass --data PATH", "set gsm8k.data to the path of")
        raise MatrixError(spec.source, "gsm8k.data", reason) from None


def run_matrix(
    spec: MatrixSpec,
    *,
    results: str | Path | None = None,
    run_id: str | None = None,
    progress: bool = True,
    args: dict[str, Any] | None = None,
) -> tuple[Path, MatrixResult]:
    """Run every deployment of ``spec``; write the run folder; return (folder, result).

    Raises:
        harness.scenario.model.ScenarioError: a scenario file is invalid.
        harness.matrix.spec.MatrixError: the GSM8K data cannot be loaded (checked first).
    """
    scenarios = load_scenarios(spec.scenarios)
    _check_gsm8k_data(spec)
    folder = RunFolder.create(
        "matrix", results=results, run_id=run_id, args=args,
        extra={"matrix": spec.model_dump(mode="json")},
    ).path  # fmt: skip
    facts: dict[str, DeploymentFacts] = {}
    gsm8k: dict[str, tuple[float, int]] = {}
    by = {d.label: d for d in spec.deployments}
    with contextlib.ExitStack() as stack:
        urls = _serve_all(spec, scenarios, folder, stack)
        gsm8k.update(_run_group(spec, scenarios, urls, folder, progress))
        facts.update(
            {k: _engagement(u, by[k].log or _sim_log(by[k], folder)) for k, u in urls.items()}
        )
    for d in spec.deployments:
        if d.launch is not None:
            with _launched(d, folder) as f:
                facts[d.label] = f
                if f.boot_error is None and f.url is not None:
                    gsm8k.update(_run_group(spec, scenarios, {d.label: f.url}, folder, progress))
    return folder, rescore_matrix(folder, spec=spec, facts=facts, gsm8k=gsm8k)


# ------------------------------------------------------------------ folders


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


def _gsm8k_on_disk(folder: Path) -> dict[str, tuple[float, int]]:
    from harness.gsm8k.models import GSM8KSummary

    out: dict[str, tuple[float, int]] = {}
    for f in sorted((folder / "gsm8k").glob(f"*/{RunFolder.GSM8K_SUMMARY}")):
        s = GSM8KSummary.model_validate_json(f.read_text(encoding="utf-8")).sides[0]
        if s.n:
            out[s.label] = (s.accuracy, s.n)
    return out


def _gsm8k_records(folder: Path, spec: MatrixSpec) -> dict[str, list[GSM8KRecord]]:
    from harness.gsm8k.run import read_gsm8k_records

    out = {}
    for d in spec.deployments:
        if RunFolder(folder / "gsm8k" / d.label).has(RunFolder.GSM8K_RECORDS):
            out[d.label] = read_gsm8k_records(folder / "gsm8k" / d.label)
    return out


def rescore_matrix(
    run_dir: str | Path,
    *,
    spec: MatrixSpec | None = None,
    facts: dict[str, DeploymentFacts] | None = None,
    gsm8k: dict[str, tuple[float, int]] | None = None,
) -> MatrixResult:
    """(Re)write ``summary.json`` and ``matrix.json`` of a matrix folder from its files.

    What is not given is read from the folder: the spec from ``manifest.json``, the
    deployments' facts from an existing ``matrix.json``, GSM8K from ``gsm8k/*/gsm8k.json``.
    """

    rf = RunFolder.open(run_dir)
    folder = rf.path
    manifest = rf.manifest()
    if manifest is None:
        raise RunFolderError(f"{folder}: no manifest.json (not a harness matrix folder)")
    spec = spec or MatrixSpec.model_validate(manifest.extra["matrix"])
    if facts is None:
        with contextlib.suppress(OSError, ValueError):
            facts = {d.label: d.facts for d in read_matrix(folder).deployments}
    records = list(rf.records())
    settings = Settings(repeats=spec.repeats, stream=spec.stream, concurrency=spec.concurrency,
                        scenarios=sorted({r.scenario_id for r in records}))  # fmt: skip
    sides = {d.label: SideInfo(side=d.label, label=d.label) for d in spec.deployments}
    for label, f in (facts or {}).items():
        if f.fusion and label in sides:
            sides[label].fusion = {"state": f.fusion, "reason": f.fusion_reason}
    summary = (
        score_folder(rf, FolderContext(settings=settings, sides=sides))
        if records
        else Summary(run_id=manifest.run_id)
    )
    result = build_result(
        spec, summary, run_id=manifest.run_id, facts=facts,
        gsm8k=gsm8k if gsm8k is not None else _gsm8k_on_disk(folder), records=records,
        gsm8k_records=_gsm8k_records(folder, spec),
    )  # fmt: skip
    rf.write_model(RunFolder.MATRIX, result)
    return result
