"""Running an isolation matrix: every deployment, one run folder, then the result.

:func:`run_matrix` runs the scenarios of a :class:`~harness.matrix.spec.MatrixSpec`
against every deployment into one run folder ``results/<run-id>/``
(:class:`~harness.runfolder.RunFolder`):

- ``manifest.json`` (the matrix file, parsed, in ``extra["matrix"]``);
- ``transcripts.jsonl``: one record per run, ``run_key`` ``<label>/<scenario>/<repeat>/<mode>``
  (the deployment's label names its runs, as in ``harness run``);
- ``scores.jsonl`` and ``summary.json``: :func:`harness.pipeline.score_folder`, one side
  per deployment label; the summary's one-sided ``outcome`` is judged at the matrix's
  ``pass_criterion`` (``min_pass_rate``, ``max_infra_error_rate``);
- ``gsm8k/<label>/`` when ``gsm8k`` is set: each deployment's GSM8K run folder
  (:func:`harness.gsm8k.run.run_gsm8k`; ``RunFolder.sub(RunFolder.GSM8K_DIR, label)``);
- ``server-<label>.log``: the log of a ``launch`` deployment (and the boot log a ``sim``
  deployment prints);
- ``matrix.json``: :class:`~harness.matrix.result.MatrixResult`, the deployments x
  outcomes table and the attribute findings (:mod:`harness.matrix.result`).

Deployments given by ``url`` or ``sim`` run together (one :func:`~harness.runner.run_many`
over all of them); ``launch`` deployments are started one at a time (they usually share
the GPUs), run, and stopped (:mod:`harness.server.process`). :func:`rescore_matrix`
re-creates ``summary.json`` and ``matrix.json`` from the folder alone.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.client.target import TargetConfig, target_from_options
from harness.errors import RunFolderError
from harness.gsm8k.models import GSM8KRecord, GSM8KSummary
from harness.matrix.result import DeploymentFacts, MatrixResult, build_result, read_matrix
from harness.matrix.spec import DeploymentSpec, MatrixError, MatrixSpec
from harness.pipeline import FolderContext, score_folder
from harness.redaction import redact_data
from harness.runfolder import RunFolder
from harness.scenario.model import Scenario, load_scenarios
from harness.summary import Settings, SideInfo, Summary

__all__ = ["rescore_matrix", "run_matrix"]


# ------------------------------------------------------------------ servers


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

    :mod:`harness.server.process` launches it (own process group, log in
    ``server-<label>.log``); :func:`harness.server.boot.wait_healthy` judges its start.
    """
    from harness.server.boot import wait_healthy
    from harness.server.process import launch, stop_group, url_from_command

    argv, log = d.launch_argv(), folder / f"server-{d.label}.log"
    try:
        proc = launch(argv, log)
    except OSError as exc:
        yield DeploymentFacts(boot_error=f"cannot start {argv[0]!r}: {exc}")
        return
    try:
        check, url = wait_healthy(
            proc, log, url_from_command(argv),
            health_path="/health", timeout_s=d.boot_timeout_s, ignore=(),
        )  # fmt: skip
        if check.verdict != "PASS" or url is None:
            tail = f" ({check.evidence[-1]})" if check.evidence else ""
            yield DeploymentFacts(url=url, boot_error=check.detail + tail)
        else:
            yield _engagement(url, d.log or str(log))
    finally:
        stop_group(proc)


def _serve_all(
    spec: MatrixSpec, scenarios: Sequence[Scenario], stack: contextlib.ExitStack
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


# ------------------------------------------------------------------ running


def _targets(spec: MatrixSpec, urls: dict[str, str]) -> list[TargetConfig]:
    by = {d.label: d for d in spec.deployments}
    return [  # a deployment's model and api_key_env; the matrix file's per-request timeout
        target_from_options(url, label=label, options=by[label], timeout_s=spec.timeout_s)
        for label, url in urls.items()
    ]


def _run_group(
    spec: MatrixSpec,
    scenarios: Sequence[Scenario],
    urls: dict[str, str],
    folder: RunFolder,
    progress: bool,
) -> dict[str, tuple[float, int]]:
    """Run the scenarios (and GSM8K) against servers that are up; returns GSM8K results."""
    from harness.runner import run_many_sync

    if not urls:
        return {}
    targets = _targets(spec, urls)
    run_many_sync(
        scenarios, targets, repeats=spec.repeats, stream=spec.stream,
        concurrency=spec.concurrency * len(targets), out_dir=folder.path, progress=progress,
    )  # fmt: skip
    if spec.gsm8k is None:
        return {}
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        done = pool.map(lambda t: (t.label, _gsm8k(spec, t, folder)), targets)
        return {label: acc for label, acc in done if acc is not None}


def _gsm8k(spec: MatrixSpec, t: TargetConfig, folder: RunFolder) -> tuple[float, int] | None:
    """GSM8K of one deployment into ``gsm8k/<label>/``: ``(accuracy, questions scored)``."""
    from harness.gsm8k.run import GSM8K_TIMEOUT_S, run_gsm8k

    g = spec.gsm8k
    assert g is not None
    try:
        s = run_gsm8k(
            replace(t, timeout_s=max(t.timeout_s, GSM8K_TIMEOUT_S)),
            data=g.data, num_questions=g.questions, num_shots=g.shots, parallel=g.parallel,
            results=folder.sub(RunFolder.GSM8K_DIR).path, run_id=t.label,
        )  # fmt: skip
    except Exception as exc:  # the scenario results stand; the row shows GSM8K as missing
        print(f"warning: GSM8K of {t.label} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    side = s.sides[0]
    return (side.accuracy, side.n) if side.n else None


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
    on_folder: Callable[[RunFolder], None] | None = None,
) -> tuple[Path, MatrixResult]:
    """Run every deployment of ``spec``; write the run folder; return (folder, result).

    ``on_folder`` is called with the run folder as soon as it exists, before anything
    runs (the command prints where it is, so a killed run can be found). ``args``: the
    arguments the manifest records.

    Raises:
        harness.scenario.model.ScenarioError: a scenario file is invalid.
        harness.matrix.spec.MatrixError: the GSM8K data cannot be loaded (checked first).
    """
    scenarios = load_scenarios(spec.scenarios)
    _check_gsm8k_data(spec)
    folder = RunFolder.create(
        "matrix", results=results, run_id=run_id, args=args,
        extra={"matrix": redact_data(spec.model_dump(mode="json"))},  # no key written
    )  # fmt: skip
    if on_folder is not None:
        on_folder(folder)
    facts: dict[str, DeploymentFacts] = {}
    gsm8k: dict[str, tuple[float, int]] = {}
    by = {d.label: d for d in spec.deployments}
    with contextlib.ExitStack() as stack:
        urls = _serve_all(spec, scenarios, stack)
        gsm8k.update(_run_group(spec, scenarios, urls, folder, progress))
        facts.update(
            {k: _engagement(u, by[k].log or _sim_log(by[k], folder.path)) for k, u in urls.items()}
        )
    for d in spec.deployments:
        if d.launch is not None:
            with _launched(d, folder.path) as f:
                facts[d.label] = f
                if f.boot_error is None and f.url is not None:
                    gsm8k.update(_run_group(spec, scenarios, {d.label: f.url}, folder, progress))
    return folder.path, rescore_matrix(folder.path, spec=spec, facts=facts, gsm8k=gsm8k)


# ------------------------------------------------------------------ folders


def _gsm8k_on_disk(folder: RunFolder, spec: MatrixSpec) -> dict[str, tuple[float, int]]:
    """``(accuracy, questions scored)`` of each deployment's ``gsm8k/<label>/gsm8k.json``."""
    out: dict[str, tuple[float, int]] = {}
    for d in spec.deployments:
        sub = folder.sub(RunFolder.GSM8K_DIR, d.label)
        summary: GSM8KSummary | None = sub.read_model(RunFolder.GSM8K_SUMMARY, GSM8KSummary)
        side = summary.sides[0] if summary is not None and summary.sides else None
        if side is not None and side.n:
            out[d.label] = (side.accuracy, side.n)
    return out


def _gsm8k_records(folder: RunFolder, spec: MatrixSpec) -> dict[str, list[GSM8KRecord]]:
    from harness.gsm8k.run import read_gsm8k_records

    out = {}
    for d in spec.deployments:
        sub = folder.sub(RunFolder.GSM8K_DIR, d.label)
        if sub.has(RunFolder.GSM8K_RECORDS):
            out[d.label] = read_gsm8k_records(sub.path)
    return out


def _context(
    spec: MatrixSpec, scenarios: list[str], facts: dict[str, DeploymentFacts]
) -> FolderContext:
    """How the matrix's runs were made and are judged: one side per deployment (with the
    fusion state its server reported), the pass criterion as the one-sided outcome's."""
    crit = spec.pass_criterion
    settings = Settings(
        repeats=spec.repeats, stream=spec.stream, concurrency=spec.concurrency,
        scenarios=scenarios, min_pass_rate=crit.min_pass_rate,
        infra_error_limit=crit.max_infra_error_rate,
    )  # fmt: skip
    sides = {d.label: SideInfo(side=d.label, label=d.label) for d in spec.deployments}
    for label, f in facts.items():
        if f.fusion and label in sides:
            sides[label].fusion = {"state": f.fusion, "reason": f.fusion_reason}
    return FolderContext(settings=settings, sides=sides)


def rescore_matrix(
    run_dir: str | Path,
    *,
    spec: MatrixSpec | None = None,
    facts: dict[str, DeploymentFacts] | None = None,
    gsm8k: dict[str, tuple[float, int]] | None = None,
) -> MatrixResult:
    """(Re)write ``scores.jsonl``, ``summary.json`` and ``matrix.json`` of a matrix folder
    from its files; returns the result (with two deployments, its two-way summary in
    :attr:`~harness.matrix.result.MatrixResult.compare`).

    What is not given is read from the folder: the spec from ``manifest.json``, the
    deployments' facts from an existing ``matrix.json``, GSM8K from ``gsm8k/<label>/``.

    Raises:
        RunFolderError: not a matrix folder (no ``manifest.json``), or a file is unreadable.
    """
    rf = RunFolder.open(run_dir)
    manifest = rf.manifest()
    if manifest is None:
        raise RunFolderError(f"{rf.path}: no manifest.json (not a harness matrix folder)")
    spec = spec or MatrixSpec.model_validate(manifest.extra["matrix"])
    if facts is None:
        with contextlib.suppress(OSError, ValueError):
            facts = {d.label: d.facts for d in read_matrix(rf.path).deployments}
    records = list(rf.records())
    context = _context(spec, sorted({r.scenario_id for r in records}), facts or {})
    summary = score_folder(rf, context) if records else Summary(run_id=manifest.run_id)
    result = build_result(
        spec, summary, run_id=manifest.run_id, facts=facts,
        gsm8k=gsm8k if gsm8k is not None else _gsm8k_on_disk(rf, spec), records=records,
        gsm8k_records=_gsm8k_records(rf, spec),
    )  # fmt: skip
    rf.write_model(RunFolder.MATRIX, result)
    return result
