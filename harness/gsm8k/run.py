"""GSM8K few-shot accuracy of one server, or of two servers paired (``harness gsm8k``).

The check that exposed the dropped routed expert (GSM8K-500: 0.81 fused against 0.88
unfused). Compatible with SGLang's few-shot GSM8K benchmark so figures compare with
SGLang's CI: k-shot prompts (harness.gsm8k.data), greedy (temperature 0), 512 new
tokens, stop strings ``["Question", "Assistant:", "<|separator|>"]``, answer = last
integer (harness.gsm8k.extract); lm-evaluation-harness strict-match and
flexible-extract accuracies are reported beside it.

Python API::

    summary = run_gsm8k("http://127.0.0.1:30000", data="test.jsonl")
    summary = compare_gsm8k(baseline_url, candidate_url, num_questions=500)
    summary = run_gsm8k(TargetConfig(url, model="m", timeout_s=600), num_questions=100)
    summary.paired.verdict  # "REGRESSION" | "IMPROVEMENT" | "NO CHANGE" | "INCONCLUSIVE"

Requests go out the way SGLang's own few-shot benchmark sends them: a
``ThreadPoolExecutor`` of ``parallel`` threads, each with its own blocking
``httpx.Client`` (measured faster than 64 asyncio workers on a busy CPU: ``make bench``,
benchmark 3). A target is the harness's one :class:`~harness.client.target.TargetConfig`.
A failed attempt is a :class:`~harness.errors.RequestFailed`; transient ones (connection,
timeout, HTTP 408/429/5xx) are retried with the target's exponential backoff, and a
question that still errors is reported (``kind: message``) and left out, never scored
as wrong. Records are written to ``gsm8k.jsonl`` as they finish.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import certifi
import httpx
from rich.progress import Progress

from harness.client.completions import retry_after_s
from harness.client.target import TargetConfig, openai_base_url, target_from_options
from harness.errors import RequestFailed
from harness.gsm8k.data import (
    GSM8K_STOP,
    GSM8KDataset,
    Question,
    chat_messages,
    load_dataset,
    question_prompt,
)
from harness.gsm8k.extract import extract_flexible, extract_sglang, extract_strict, score_lm_eval
from harness.gsm8k.models import (
    Extracted,
    GSM8KConfig,
    GSM8KRecord,
    GSM8KSummary,
)
from harness.gsm8k.stats import paired_comparison, side_summary
from harness.runfolder import RunFolder
from harness.stats.verdict import over_infra_limit
from harness.transcript import TargetInfo

if TYPE_CHECKING:
    from harness.recording import RecordedSide

__all__ = [
    "GSM8K_TIMEOUT_S",
    "GSM8KOptions",
    "compare_gsm8k",
    "read_gsm8k_records",
    "rescore",
    "run_gsm8k",
    "summarize",
]

Api = Literal["completions", "chat"]

#: per-request timeout (s) when a target is given as a URL: 512 new tokens at 64 in flight
GSM8K_TIMEOUT_S = 300.0


@dataclass
class GSM8KOptions:
    """How to run: the questions (first ``num_questions`` of ``data``, default the
    official test split), the prompt (``num_shots``, ``api``, ``max_tokens``), the
    client (``parallel`` requests in flight per server), the verdict (``alpha``,
    ``max_error_rate``) and the output (``results`` root, ``run_id``, rich ``progress``
    bar). The report is the caller's (``harness gsm8k`` writes it after the run)."""

    data: str | Path | None = None
    num_questions: int = 500
    num_shots: int = 5
    parallel: int = 64
    api: Api = "completions"
    exclude_shots: bool = False
    max_tokens: int = 512
    alpha: float = 0.05
    margin: float = 0.02
    max_error_rate: float = 0.1
    results: str | Path | None = None
    run_id: str | None = None
    progress: bool = False


@dataclass
class _Plan:
    dataset: GSM8KDataset
    config: GSM8KConfig
    indices: list[int] = field(default_factory=list)


def _headers(target: TargetConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {target.api_key()}"}


def _discover_model(client: httpx.Client, target: TargetConfig) -> str | None:
    if target.model:
        return target.model
    try:
        resp = client.get(f"{openai_base_url(target.base_url)}/models", timeout=10.0)
        data = resp.json().get("data") or []
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def _request_body(plan: _Plan, model: str | None, index: int) -> tuple[str, dict[str, Any]]:
    cfg, qs = plan.config, plan.dataset.questions
    body: dict[str, Any] = {
        "model": model or "default",
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "stop": list(cfg.stop),
    }
    if cfg.api == "chat":
        body["messages"] = chat_messages(qs, cfg.num_shots, index)
        return "chat/completions", body
    body["prompt"] = question_prompt(qs, cfg.num_shots, index)
    return "completions", body


def _parse(api: Api, data: Any) -> tuple[str, str | None, int | None]:
    """(output text, finish_reason, completion_tokens) of a response body."""
    try:
        choice = data["choices"][0]
        text = choice["message"].get("content") if api == "chat" else choice["text"]
        usage = data.get("usage") or {}
        tokens = usage.get("completion_tokens")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RequestFailed("invalid_body", "no choices[0] text in the response") from None
    if text is not None and not isinstance(text, str):
        raise RequestFailed("invalid_body", "choices[0] text is not a string")
    return text or "", choice.get("finish_reason"), tokens if isinstance(tokens, int) else None


def _post_once(
    client: httpx.Client, target: TargetConfig, path: str, body: dict[str, Any], api: Api
) -> tuple[str, str | None, int | None]:
    """One attempt: (output text, finish_reason, completion_tokens).

    Raises:
        RequestFailed: ``timeout``, ``connection``, ``http_status`` (any status but 200)
            or ``invalid_body``; ``.transient`` says whether to retry.
    """
    url = f"{openai_base_url(target.base_url)}/{path}"
    try:
        resp = client.post(url, json=body, timeout=target.timeout_s)
    except httpx.TimeoutException as exc:
        raise RequestFailed("timeout", f"{type(exc).__name__}: {exc}") from None
    except httpx.TransportError as exc:
        raise RequestFailed("connection", f"{type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        status = resp.status_code
        raise RequestFailed(
            "http_status",
            f"HTTP {status}: {resp.text[:200]}",
            status=status,
            retry_after_s=retry_after_s(resp.headers),
        )
    try:
        data = resp.json()
    except ValueError:
        raise RequestFailed("invalid_body", "the response is not JSON") from None
    return _parse(api, data)


def _score(q: Question, output: str) -> dict[str, Any]:
    ext = Extracted(
        sglang=extract_sglang(output),
        strict=extract_strict(output),
        flexible=extract_flexible(output),
    )
    return {
        "extracted": ext,
        "correct": ext.sglang == q.label,
        "correct_strict": score_lm_eval(ext.strict, q.answer),
        "correct_flexible": score_lm_eval(ext.flexible, q.answer),
    }


def _ask(
    client: httpx.Client, target: TargetConfig, plan: _Plan, model: str | None, index: int
) -> GSM8KRecord:
    """Ask one question, retrying transient errors; returns its record."""
    path, body = _request_body(plan, model, index)
    q = plan.dataset.questions[index]
    prompt_text = body.get("prompt") or json.dumps(body.get("messages"), sort_keys=True)
    rec: dict[str, Any] = {
        "side": target.side, "label": target.label, "index": index, "reference": q.label,
        "question": q.question, "model": model or "default",
        "is_shot": index < plan.config.num_shots,
        "prompt_sha256": hashlib.sha256(prompt_text.encode()).hexdigest(),
        "t_start": time.time(),
    }  # fmt: skip
    for attempt in range(1, target.max_retries + 2):
        t0 = time.perf_counter()
        try:
            text, finish, tokens = _post_once(client, target, path, body, plan.config.api)
        except RequestFailed as exc:
            error = f"{exc.kind}: {exc.message}"
            rec.update(error=error, attempts=attempt, latency_s=time.perf_counter() - t0)
            if not exc.transient or attempt > target.max_retries:
                break
            time.sleep(target.retry_delay_s(attempt, exc.retry_after_s))
            continue
        rec.update(error=None, attempts=attempt, latency_s=time.perf_counter() - t0)
        rec.update(output=text, finish_reason=finish, completion_tokens=tokens, **_score(q, text))
        break
    return GSM8KRecord(**rec, t_end=time.time())


@cache
def _ssl_context() -> ssl.SSLContext:
    """One verifying TLS context per process, shared by every client (thread-safe);
    building one costs ~30 ms of CPU (loading the CA bundle). ``certifi``'s bundle, as
    httpx's own default (certifi is a dependency of httpx)."""
    return ssl.create_default_context(cafile=certifi.where())


@contextmanager
def _thread_clients(target: TargetConfig) -> Iterator[Callable[[], httpx.Client]]:
    """Yields ``get()``: the calling thread's own one-connection ``httpx.Client``
    (created on first use); every client is closed on exit."""
    local, lock, made = threading.local(), threading.Lock(), []
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    tls = _ssl_context()

    def get() -> httpx.Client:
        client: httpx.Client | None = getattr(local, "client", None)
        if client is None:
            client = httpx.Client(headers=_headers(target), limits=limits, verify=tls)
            local.client = client
            with lock:
                made.append(client)
        return client

    try:
        yield get
    finally:
        for client in made:
            client.close()


def _run_side(
    target: TargetConfig, plan: _Plan, progress: Progress | None, sink: Any
) -> tuple[list[GSM8KRecord], str | None]:
    """Ask every planned question of one server; each record is appended to ``sink`` by
    the thread that finished it. Returns the records in question order and the model id.

    SGLang's benchmark client: a ``ThreadPoolExecutor`` of ``parallel`` threads, one
    blocking ``httpx.Client`` (one connection) per thread. The calling thread only waits,
    so it does not contend for the GIL per answer. An unexpected exception (or Ctrl-C)
    cancels the questions not yet started and propagates once the requests in flight
    have ended (each within ``target.timeout_s``), as SGLang's client does.
    """
    with httpx.Client(headers=_headers(target), verify=_ssl_context()) as probe:
        model = _discover_model(probe, target)
    task = progress.add_task(f"gsm8k {target.label}", total=len(plan.indices)) if progress else None
    records: list[GSM8KRecord] = []
    lock = threading.Lock()

    def ask(client: httpx.Client, index: int) -> None:
        rec = _ask(client, target, plan, model, index)
        line = rec.model_dump_json() + "\n"
        with lock:
            records.append(rec)
            sink.write(line)
        if progress is not None and task is not None:
            progress.advance(task)  # rich's Progress is thread-safe

    workers = max(1, min(plan.config.parallel, len(plan.indices)))
    with _thread_clients(target) as client:
        pool = ThreadPoolExecutor(workers, thread_name_prefix=f"gsm8k-{target.label}")
        try:
            futures = [pool.submit(lambda i: ask(client(), i), i) for i in plan.indices]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for fut in done:
                fut.result()  # re-raises a worker's unexpected exception
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return sorted(records, key=lambda r: r.index), model


def read_gsm8k_records(run_dir: str | Path) -> list[GSM8KRecord]:
    """The records of the run folder's ``gsm8k.jsonl`` (in file order).

    Raises:
        FileNotFoundError: the folder has no GSM8K records.
    """
    folder = RunFolder(run_dir)
    if not folder.has(RunFolder.GSM8K_RECORDS):
        raise FileNotFoundError(f"{folder.file(RunFolder.GSM8K_RECORDS)}: no GSM8K records")
    return list(folder.lines(RunFolder.GSM8K_RECORDS, GSM8KRecord))


def _infra_reason(summaries: list[Any], max_error_rate: float) -> str | None:
    for s in summaries:
        total = s.n + s.n_errors
        if total == 0 or over_infra_limit(total, s.n_errors, max_error_rate):
            return (
                f"{s.label}: {s.n_errors} of {total} questions failed with infrastructure "
                f"errors (more than {max_error_rate:.0%})"
            )
    return None


def summarize(
    records: list[GSM8KRecord],
    *,
    run_id: str,
    config: GSM8KConfig,
    targets: list[TargetConfig],
) -> GSM8KSummary:
    """The summary of a run: a pure function of its records and configuration.

    ``targets`` is ``[target]`` or ``[baseline, candidate]`` (sides ``baseline`` and
    ``candidate``). ``infra_error`` says when more than ``config.max_error_rate`` of a
    side's questions errored.
    """
    sides = []
    for t in targets:
        recs = [r for r in records if r.label == t.label and r.side == t.side]
        sides.append(side_summary(recs, label=t.label, base_url=t.base_url, model=t.model))
    infra = _infra_reason(sides, config.max_error_rate)
    paired = None
    if len(targets) == 2:
        base = [r for r in records if r.side == "baseline"]
        cand = [r for r in records if r.side == "candidate"]
        paired = paired_comparison(
            base, cand, alpha=config.alpha, infra=infra, margin=config.margin
        )
    verdict = paired.verdict if paired else None
    return GSM8KSummary(
        run_id=run_id, config=config, sides=sides, paired=paired, verdict=verdict,
        infra_error=infra,
    )  # fmt: skip


def _plan(opts: GSM8KOptions) -> _Plan:
    ds = load_dataset(opts.data)
    n = min(opts.num_questions, len(ds.questions))
    config = GSM8KConfig(
        num_questions=n, num_shots=opts.num_shots, max_tokens=opts.max_tokens,
        stop=list(GSM8K_STOP), api=opts.api, exclude_shots=opts.exclude_shots,
        parallel=opts.parallel, alpha=opts.alpha, margin=opts.margin,
        max_error_rate=opts.max_error_rate,
        data_source=ds.source, data_sha256=ds.sha256, official_test_split=ds.official,
    )  # fmt: skip
    start = opts.num_shots if opts.exclude_shots else 0
    return _Plan(ds, config, list(range(start, n)))


def _run_all(targets: list[Any], plan: _Plan, out: Path, show_progress: bool) -> list[GSM8KRecord]:
    records: list[GSM8KRecord] = []
    with RunFolder(out).file(RunFolder.GSM8K_RECORDS).open("w", encoding="utf-8") as sink:
        progress = Progress(transient=False) if show_progress else None
        if progress is not None:
            progress.start()
        try:
            for t in targets:  # one side at a time: each side's throughput is its own
                if not isinstance(t, TargetConfig):  # a recorded baseline: its answers
                    recs = _recorded_answers(t, plan)
                    for rec in recs:
                        sink.write(rec.model_dump_json() + "\n")
                else:
                    recs, model = _run_side(t, plan, progress, sink)
                    t.model = t.model or model
                records.extend(recs)
                sink.flush()
        finally:
            if progress is not None:
                progress.stop()
    return records


#: the GSM8K settings a recorded baseline's answers must share with the comparison
_RECORDED_KEYS = ("num_questions", "num_shots", "max_tokens", "api", "exclude_shots",
                  "data_sha256")  # fmt: skip


def _recorded_answers(side: Any, plan: _Plan) -> list[GSM8KRecord]:
    """A recorded baseline's answers to the planned questions (:mod:`harness.recording`),
    as side ``side.side`` labelled ``side.label``.

    Raises:
        RecordingError: the recording has no GSM8K answers, or they were asked with other
            settings (questions, shots, token budget, API or data).
    """
    from harness.errors import RecordingError

    rec = side.recording
    sub = rec.gsm8k_folder()
    if sub is None:
        raise RecordingError(
            f"{rec.path} cannot serve as the baseline: no GSM8K answers recorded; record "
            "them with harness record ... --gsm8k N"
        )
    manifest = sub.manifest()
    had = manifest.extra.get("gsm8k_config", {}) if manifest else {}
    now = plan.config.model_dump(mode="json")
    diffs = [f"{k} {had.get(k)!r} recorded, {now.get(k)!r} now" for k in _RECORDED_KEYS
             if had.get(k) != now.get(k)]  # fmt: skip
    if diffs:
        raise RecordingError(
            f"{rec.path} cannot serve as the baseline: GSM8K {'; '.join(diffs)}; give the "
            "recorded settings, or record again"
        )
    wanted = set(plan.indices)
    out = [
        r.model_copy(update={"side": side.side, "label": side.label})
        for r in read_gsm8k_records(sub.path)
        if r.index in wanted
    ]
    return sorted(out, key=lambda r: r.index)


def _execute(targets: list[Any], opts: GSM8KOptions) -> GSM8KSummary:
    plan = _plan(opts)
    infos = [
        TargetInfo(label=t.label, side=t.side, base_url=t.base_url, model=t.model) for t in targets
    ]
    folder = RunFolder.create(
        "gsm8k", results=opts.results, run_id=opts.run_id, targets=infos,
        args={"targets": [t.base_url for t in targets], **plan.config.model_dump()},
        extra={"gsm8k_config": plan.config.model_dump(mode="json")},
    )  # fmt: skip
    # a folder another command made (the pytest plugin's session) keeps its manifest
    folder.set_extra("gsm8k_config", plan.config.model_dump(mode="json"))
    out = folder.path
    records = _run_all(targets, plan, out, opts.progress)
    _record_models(out, targets)
    summary = summarize(records, run_id=out.name, config=plan.config, targets=targets)
    folder.write_model(RunFolder.GSM8K_SUMMARY, summary)
    return summary


def _record_models(folder: Path, targets: list[TargetConfig]) -> None:
    """Write the model ids found by ``GET /v1/models`` into the manifest's targets
    (the manifest is written before the servers are asked)."""
    RunFolder(folder).set_target_models({(t.label, t.side): t.model for t in targets if t.model})


def rescore(run_dir: str | Path, *, write: bool = True) -> GSM8KSummary:
    """Recompute ``gsm8k.json`` from ``manifest.json`` and ``gsm8k.jsonl`` (pure, offline).

    Raises FileNotFoundError if the run folder lacks either file.
    """
    folder = RunFolder(run_dir)
    manifest = folder.manifest()
    if manifest is None:
        raise FileNotFoundError(f"{folder.manifest_path}: no manifest (not a GSM8K run folder)")
    config = GSM8KConfig.model_validate(manifest.extra["gsm8k_config"])
    targets = [
        TargetConfig(t.base_url, model=t.model, label=t.label, side=t.side)
        for t in manifest.targets
    ]
    summary = summarize(
        read_gsm8k_records(folder.path), run_id=manifest.run_id, config=config, targets=targets
    )
    if write:
        folder.write_model(RunFolder.GSM8K_SUMMARY, summary)
    return summary


def _target(target: Any, label: str) -> Any:
    """A copy of ``target`` (the run fills in its model and side), or a new one for a URL
    (``label``, :data:`GSM8K_TIMEOUT_S`); a recorded side
    (:class:`harness.recording.RecordedSide`) is copied as it is."""
    if not isinstance(target, str):
        return dataclasses.replace(target)
    return target_from_options(target, label=label, timeout_s=GSM8K_TIMEOUT_S)


def run_gsm8k(target: str | TargetConfig, *, label: str = "target", **options: Any) -> GSM8KSummary:
    """GSM8K accuracy of one server; writes ``results/<run-id>/gsm8k.{jsonl,json}``.

    ``target``: a URL or a :class:`~harness.client.target.TargetConfig` (its ``base_url``,
    ``model``, ``label``, ``side``, ``api_key_env``, ``timeout_s``, ``max_retries`` and
    ``backoff_s`` apply; ``extra_body`` is not sent: the request is SGLang's benchmark's).
    It is not modified. ``options``: the fields of :class:`GSM8KOptions`. Raises
    harness.errors.GSM8KDataError if the data cannot be loaded, TypeError on an unknown
    option.
    """
    return _execute([_target(target, label)], GSM8KOptions(**options))


def compare_gsm8k(
    baseline: str | TargetConfig | RecordedSide,
    candidate: str | TargetConfig,
    *,
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
    **options: Any,
) -> GSM8KSummary:
    """Both servers answer the same questions; McNemar's exact test on the pairs.

    Targets as for :func:`run_gsm8k` (their sides are set to ``baseline`` and
    ``candidate``; equal labels get the side appended); the baseline may be a recording
    (:class:`harness.recording.RecordedSide`: its recorded answers, checked to share the
    questions, shots, token budget, API and data, else :class:`RecordingError`). Same
    ``options``.
    ``summary.verdict`` and ``summary.infra_error`` carry the outcome (the command line
    exits 1 on REGRESSION, 3 on too many infrastructure errors).
    """
    b, c = _target(baseline, baseline_label), _target(candidate, candidate_label)
    b.side, c.side = "baseline", "candidate"
    if b.label == c.label:
        b.label, c.label = f"{b.label} (baseline)", f"{c.label} (candidate)"
    return _execute([b, c], GSM8KOptions(**options))
