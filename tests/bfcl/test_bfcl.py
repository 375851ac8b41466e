"""The BFCL multi-turn suite (harness.bfcl): loading, backends, BFCL's state check, the
reference server playing the tasks over real sockets, miss_func, the missing-package line."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ScenarioError
from harness.scenario.model import Scenario, load_scenarios

bfcl_eval = pytest.importorskip(
    "bfcl_eval",
    reason="bfcl-eval is not installed (make bfcl, or make install, which CI runs, installs it)",
)

from harness.bfcl import load_suite  # noqa: E402
from harness.bfcl.backends import Referee, World  # noqa: E402
from harness.bfcl.data import backend_counts  # noqa: E402
from harness.bfcl.task import task_of  # noqa: E402
from harness.client.target import TargetConfig  # noqa: E402
from harness.runfolder import RunFolder  # noqa: E402
from harness.runner import run_many_sync  # noqa: E402
from harness.scoring.score import score_run  # noqa: E402
from harness.transcript import RunRecord  # noqa: E402


def _task(spec: str, task_id: str) -> Scenario:
    return next(s for s in load_suite(spec) if s.id == task_id)


def _run(url: str, scenarios: list[Scenario], out: Path, repeats: int = 1) -> list[RunRecord]:
    tgt = TargetConfig(base_url=url, label="sim", timeout_s=20, max_retries=1, backoff_s=0.01)
    run_many_sync(scenarios, [tgt], repeats=repeats, concurrency=4, out_dir=out, progress=False)
    return list(RunFolder(out).records())


def test_base_suite_loads_every_task_with_its_ground_truth_and_tools() -> None:
    suite = load_scenarios(["bfcl:multi_turn_base"])
    assert len(suite) == 200
    sc = next(s for s in suite if s.id == "multi_turn_base_0")
    task = task_of(sc)
    assert task is not None and task.classes == ["TwitterAPI", "GorillaFileSystem"]
    assert len(sc.segments()) == 4 and sc.messages[0].content.startswith("Move 'final_report.pdf'")
    first = [(c.tool, c.arguments) for c in sc.segments()[0].calls]
    assert first == [
        ("cd", {"folder": "document"}),
        ("mkdir", {"dir_name": "temp"}),
        ("mv", {"source": "final_report.pdf", "destination": "temp"}),
    ]
    # "sort('final_report.pdf')": the positional argument named by the method's signature
    assert sc.segments()[2].calls[0].arguments == {"file_name": "final_report.pdf"}
    mv = sc.tool("mv")
    assert mv is not None and mv.parameters["type"] == "object"  # BFCL's "dict" as JSON Schema
    assert "backend:GorillaFileSystem" in sc.tags
    assert len(load_suite("bfcl:multi_turn_base:7")) == 7


def test_state_check_passes_the_ground_truth_and_names_what_a_wrong_call_changed() -> None:
    sc = _task("bfcl:multi_turn_base:1", "multi_turn_base_0")
    good, bad = Referee(sc), Referee(sc)
    for c in sc.segments()[0].calls:
        good.call(c.tool, json.dumps(c.arguments))
    bad.call("cd", '{"folder": "document"}')
    bad.call("mkdir", '{"dir_name": "tmp"}')  # the wrong directory name
    bad.call("mv", '{"source": "final_report.pdf", "destination": "tmp"}')
    ok, wrong = good.check(0), bad.check(0)
    assert ok.passed and ok.differences == [] and ok.missing_results == []
    assert not wrong.state_ok and wrong.differences == ["GorillaFileSystem.root"]
    assert wrong.missing_results  # mkdir/mv of 'temp' answer differently


def test_a_backend_call_that_raises_is_the_tools_error_result() -> None:
    world = World(task_of(_task("bfcl:multi_turn_base:1", "multi_turn_base_0")))  # type: ignore[arg-type]
    missing = world.call("mv", '{"source": "final_report.pdf"}')
    assert missing.error and missing.content.startswith("Error during execution: ")
    assert "destination" in missing.content
    assert world.call("rm_rf", "{}").error  # no such method: an error, never a lookup elsewhere
    assert world.call("_load_scenario", "{}").content.startswith("Error during execution")
    assert world.call("cd", "[1]").error  # not an object


def test_a_raising_call_is_recorded_as_its_result_and_the_run_goes_on(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    sc = _task("bfcl:multi_turn_base:1", "multi_turn_base_0").model_copy(deep=True)
    sc.id = "bfcl_raises"
    sc.expect.calls[0].arguments = {"folder": "document", "depth": 3}  # an unexpected keyword
    folder = tmp_path / "sc"
    folder.mkdir()
    (folder / "t.json").write_text(json.dumps(sc.model_dump(mode="json")), encoding="utf-8")
    [rec] = _run(sim_url("healthy", scenarios_dir=folder), load_scenarios([folder]), tmp_path / "r")
    first = rec.turns[0].tool_results[0]
    assert first.error and first.content.startswith("Error during execution: ")
    assert "depth" in first.content
    assert rec.stop_reason == "final_answer" and len(rec.state_checks) == 4
    second = rec.turns[1].tool_results[0]  # the run went on: mkdir answered by the backend
    assert second.name == "mkdir" and not second.error


def test_healthy_reference_server_plays_base_tasks_and_passes(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    # 90 and 147 post tweets with lists a backend keeps: repeats must not share them
    suite = [s for s in load_suite("bfcl:multi_turn_base") if s.id.endswith(("_90", "_147"))]
    suite += load_suite("bfcl:multi_turn_base:6")
    url = sim_url("healthy", scenarios_dir="bfcl:multi_turn_base")
    recs = _run(url, suite, tmp_path, repeats=2)
    assert len(recs) == 16
    for rec in recs:
        score = score_run(rec)
        assert score.passed, (rec.scenario_id, score.failures, rec.state_checks)
        assert len(rec.state_checks) == len(rec.scenario["followups"]) + 1


def test_miss_func_holds_the_tool_back_until_its_turn(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    sc = _task("bfcl:multi_turn_miss_func:1", "multi_turn_miss_func_0")
    task = task_of(sc)
    assert task is not None and task.held_out == {"3": ["sort"]}
    assert "sort" not in [t.name for t in sc.tools_at(2)]
    assert "sort" in [t.name for t in sc.tools_at(3)]
    assert sc.segments()[2].calls == []  # BFCL expects no call while sort is missing
    [rec] = _run(sim_url("healthy", scenarios_dir="bfcl:multi_turn_miss_func:1"), [sc], tmp_path)
    assert "sort" not in [t["function"]["name"] for t in rec.tools]  # the opening's offer
    sorts = [
        t for t in rec.turns if t.response and any(c.name == "sort" for c in t.response.tool_calls)
    ]
    assert [t.segment for t in sorts] == [3]
    assert not sorts[0].tool_results[0].error
    assert score_run(rec).passed, rec.state_checks


def test_fused_regression_fails_tasks_the_healthy_server_passes(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    suite = load_suite("bfcl:multi_turn_base:20")
    recs = _run(
        sim_url("fused-regression", scenarios_dir="bfcl:multi_turn_base:20"), suite, tmp_path
    )
    failed = [r.scenario_id for r in recs if not score_run(r).passed]
    assert len(failed) >= 3, failed


def test_harness_list_shows_the_suite_with_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    assert main(["list", "bfcl:multi_turn_base"]) == 0
    out = capsys.readouterr().out
    assert "200 scenarios" in out and "GorillaFileSystem" in out


def test_without_bfcl_eval_one_line_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    task = load_suite("bfcl:multi_turn_base:1")[0].model_dump(mode="json")
    (tmp_path / "task.json").write_text(json.dumps(task), encoding="utf-8")
    real = importlib.import_module

    def no_bfcl(name: str, *a: Any) -> Any:
        if name.startswith("bfcl_eval"):
            raise ImportError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", no_bfcl)
    with pytest.raises(ScenarioError) as err:
        load_scenarios(["bfcl:multi_turn_base"])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("bfcl:multi_turn_base: bfcl-eval is not installed")
    assert "make bfcl" in msg and "--no-deps bfcl-eval==" in msg
    with pytest.raises(ScenarioError) as err:  # a task written out as a file, too
        load_scenarios([tmp_path / "task.json"])
    assert str(err.value).startswith(f"{tmp_path / 'task.json'}: bfcl-eval is not installed")


def test_compare_on_a_bfcl_subset_is_a_regression_and_the_report_groups_by_backend(
    tmp_path: Path,
) -> None:
    """`harness compare bfcl:multi_turn_base:N` with the built-in reference servers
    (healthy vs fused-regression), as `make compare SCENARIOS=bfcl:...` runs it."""
    from harness.cli import main
    from harness.present.report.render import render_markdown

    args = ["compare", "bfcl:multi_turn_base:8", "--repeats", "2", "--no-progress"]
    code = main([*args, "--results", str(tmp_path), "--run-id", "ab"])
    summary = RunFolder(tmp_path / "ab").read_summary()
    assert code == 1 and summary is not None and summary.verdict.verdict == "REGRESSION"
    md = render_markdown(tmp_path / "ab")
    table = md.split("**BFCL tasks by backend**", 1)[1]
    counts = backend_counts(load_suite("bfcl:multi_turn_base:8"))
    assert len(counts) >= 2 and counts["GorillaFileSystem"] == 8
    for name, n in counts.items():  # every task of the backend, its runs on both sides
        assert f"| {name} | {n} | {2 * n}/{2 * n} | " in table, table[:600]
    assert "| GorillaFileSystem | 8 | 16/16 | 0/16 |" in table  # fused fails every run


def test_e2e_bfcl_tasks_for_llama_cpp_play_on_the_reference_server(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    """e2e.bfcl's task files (tool_choice auto, a system message prepended) are BFCL's
    tasks still: the healthy server passes them,
    and its figures count runs, turns and BFCL's checks."""
    from e2e.bfcl import SYSTEM, bfcl_figures, prepare

    tasks = prepare("bfcl:multi_turn_base", 3, tmp_path / "tasks")
    assert [s.messages[0].content for s in tasks] == [SYSTEM] * 3
    loaded = load_scenarios([tmp_path / "tasks"])
    assert [s.tool_choice for s in loaded] == ["auto"] * 3 and all(task_of(s) for s in loaded)
    _run(sim_url("healthy", scenarios_dir=tmp_path / "tasks"), loaded, tmp_path / "run")
    from harness.pipeline import score_folder

    score_folder(RunFolder(tmp_path / "run"))
    figures = bfcl_figures(tmp_path / "run")
    turns = sum(len(s.segments()) for s in loaded)
    assert figures["runs"] == 3 and figures["infra_errors"] == 0
    assert figures["pass_rate"] == 1.0 and figures["turn_checks_passed"] == turns


def test_e2e_bfcl_step_fails_only_on_infra_errors_the_server_did_not_cause() -> None:
    """The job's BFCL step: a server 5xx (llama-server's tool-call parser refusing the
    model's output) or a full context is reported; another 4xx, a timeout or a step that
    did not finish fails, and the failure line lists only the errors that fail it."""
    from e2e.bfcl import failed, server_caused
    from e2e.driver import Step, failures

    assert server_caused("http_status", 500) and server_caused("http_status", 503)
    assert not server_caused("http_status", 400) and not server_caused("timeout", None)
    full = "Error code: 400 - the request exceeds the available context size, try increasing it"
    assert server_caused("http_status", 400, full)
    assert not server_caused("http_status", 400, "Error code: 400 - bad context in template")

    server_500 = "t/a/0/nostream: http_status 500 " + "peg-native format " * 40
    timeout = "t/b/0/nostream: timeout no answer in 600 s (did not run to the deadline)"

    def step(code: int | None, theirs: int = 0, ours: int = 0) -> Step:
        figures = {"runs": 3, "infra_errors": theirs + ours, "infra_errors_by_server": theirs,
                   "infra_messages": [server_500] * theirs + [timeout] * ours,
                   "infra_messages_not_server": [timeout] * ours}  # fmt: skip
        return Step("bfcl bfcl:multi_turn_base:3", [], role="bfcl", exit_code=code,
                    figures=figures if code is not None else {"error": "would not boot"})  # fmt: skip

    assert failed(step(0)) is None and failed(step(1)) is None  # model failures are findings
    assert failed(step(3, theirs=2)) is None  # the server's 500s: reported
    code, line = failed(step(3, theirs=1, ours=1)) or (0, "")
    # exit 3, and the line names the timeout, not the server's (long) 500 message; a
    # message saying "did not run" does not turn it into exit 2
    assert code == 3 and "1 infrastructure error(s) not caused by the server" in line
    assert timeout in line and "peg-native" not in line
    assert failed(step(None)) == (
        2,
        "bfcl bfcl:multi_turn_base:3: did not run to the end (would not boot)",
    )
    assert failures([step(0)]) == (0, [])
    assert failures([step(3, theirs=1, ours=1)])[0] == 3
    assert failures([step(None)])[0] == 2
    # precedence over the other steps: did not run (2) > infrastructure (3) > verdict (1)
    missed = Step("compare A/B broken-template", [], role="catch", exit_code=0,
                  figures={"verdict": "NO CHANGE"})  # fmt: skip
    assert failures([missed, step(3, ours=1)])[0] == 3
    assert failures([missed, step(3, ours=1), step(None)])[0] == 2
    assert len(failures([missed, step(3, ours=1)])[1]) == 2  # one line per failing step


def test_e2e_driver_bfcl_step_that_cannot_run_is_a_failed_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's BFCL step: a server that will not start (here no binary) is a failed
    ``bfcl`` row (exit 2), not a crash of the job; no bfcl-eval is a ``skipped`` row."""
    import argparse

    import harness.bfcl.data
    from e2e import driver
    from harness.errors import ScenarioError

    args = argparse.Namespace(server="llama-server", llama_server=str(tmp_path / "no-llama-server"),
                              bfcl_suite="bfcl:multi_turn_base", bfcl_tasks=1,
                              template=str(driver.TEMPLATE), boot_timeout=5.0)  # fmt: skip
    [step] = driver._bfcl(args, tmp_path, tmp_path / "model.gguf")
    assert (
        step.role == "bfcl" and step.exit_code == 2 and "no-llama-server" in step.figures["error"]
    )
    assert driver.failures([step])[0] == 2

    def missing(where: object) -> None:
        raise ScenarioError(str(where), "", "bfcl-eval is not installed; run `make bfcl`")

    monkeypatch.setattr(harness.bfcl.data, "require_bfcl", missing)
    [skipped] = driver._bfcl(args, tmp_path, tmp_path / "model.gguf")
    assert skipped.role == "report" and skipped.figures["verdict"].startswith("skipped: ")
    assert driver.failures([skipped]) == (0, [])


@pytest.mark.e2e
def test_e2e_bfcl_on_llama_server(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A BFCL task on llama-server with SmolLM2-135M (make e2e builds and installs both):
    the run ends without an infrastructure error the server did not cause; the pass rate
    is what it is."""
    if "e2e" not in (request.config.option.markexpr or ""):
        pytest.skip("opt-in (~2 minutes on 2 cores): pytest -m e2e tests/bfcl/test_bfcl.py")
    from e2e.bfcl import main as bfcl_main
    from e2e.servers import E2EError, find_llama_server, find_model

    try:
        find_llama_server(None), find_model()
    except E2EError as exc:
        pytest.skip(str(exc))
    code = bfcl_main(["--tasks", "1", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bfcl.json").read_text())
    assert code == 0 and result["runs"] == 1, result
    assert result["infra_errors"] == result["infra_errors_by_server"], result
    assert result["turn_checks"] >= 1 or result["infra_errors"]  # BFCL's check ran


def test_sim_noise_fails_a_bfcl_task_about_as_often_as_a_one_turn_scenario() -> None:
    """At temperature > 0 the reference server's noise failure is per run: spread over a
    BFCL task's user turns (``noise_failure_rate / turns`` each), not drawn at every turn
    (which failed ~7% of healthy 4-turn tasks at the 2% rate)."""
    from types import SimpleNamespace

    from harness.sim.model import RequestOptions, plan_for
    from harness.sim.profiles import get_profile

    profile = get_profile("healthy")
    task = _task("bfcl:multi_turn_base:5", "multi_turn_base_0")
    turns = len(task.segments())
    assert turns >= 3
    req = RequestOptions(tools=[], temperature=0.7)
    failed = 0
    n = 4000
    for i in range(n):
        plans = [plan_for(task, SimpleNamespace(user_count=seg + 1), req, f"{i:08x}", profile)  # type: ignore[arg-type]
                 for seg in range(turns)]  # fmt: skip
        failed += any(p is not None and p.failure for p in plans)
    rate = profile.noise_failure_rate
    # binomial(4000, 0.02): sd 0.0022; per-turn draws would give 1 - 0.98**turns >= 0.059
    assert abs(failed / n - rate) < 0.01, (failed, n, turns)


def test_a_backend_call_past_its_time_limit_is_the_tools_error_off_the_event_loop(
    sim_url: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend call runs off the loop within a limit; one that overruns
    is the tool's error result, and the other runs' requests are not stalled."""
    import asyncio
    import time

    from harness.bfcl import backends
    from harness.runner import run_many

    real = backends.backend_class
    slow_calls = iter(range(2))  # the first cd of each run (the ground truth's come later)

    def slow_class(name: str) -> Any:
        cls = real(name)
        if name != "GorillaFileSystem":
            return cls

        class Slow(cls):  # type: ignore[misc, valid-type]
            def cd(self, folder: str) -> Any:
                if next(slow_calls, None) is not None:
                    time.sleep(3.0)  # a backend computing for long (mpmath, precision 300000)
                return super().cd(folder)

        return Slow

    monkeypatch.setattr(backends, "backend_class", slow_class)
    monkeypatch.setattr(backends, "CALL_TIME_LIMIT", 0.3, raising=False)
    sc = _task("bfcl:multi_turn_base:1", "multi_turn_base_0")
    task = task_of(sc)
    assert task is not None
    for name in task.classes:  # imported now: a first import is not a stall under test
        real(name)
    url = sim_url("healthy", scenarios_dir="bfcl:multi_turn_base")
    tgt = TargetConfig(base_url=url, label="sim", timeout_s=20, max_retries=0)
    gaps: list[float] = []

    async def session() -> None:
        done = asyncio.Event()

        async def heartbeat() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.02)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        beat = asyncio.create_task(heartbeat())
        try:
            await run_many([sc], [tgt], repeats=2, concurrency=2, out_dir=tmp_path, progress=False)
        finally:
            done.set()
            await beat

    asyncio.run(session())
    recs = list(RunFolder(tmp_path).records())
    assert len(recs) == 2 and all(r.error is None for r in recs)  # no infrastructure error
    assert max(gaps) < 1.5  # the loop was never held by a backend call (3 s each)
    first = recs[0].turns[0].tool_results[0]
    assert first.name == "cd" and first.error
    assert first.content == "Error during execution: the call did not finish within 0.3 s"
