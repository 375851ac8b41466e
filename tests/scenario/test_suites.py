"""A second stateful suite (``tests/toysuite``: ``counter:N``) added the way a package adds
one: an entry point in the ``harness.suites`` group. It loads, runs against the reference
server with its own backend answering, and scores by its own criteria, while no module of
``harness/`` names it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from harness.client.target import TargetConfig
from harness.errors import ScenarioError
from harness.kinds import FailureKind
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario import load_scenarios, scenario_json_schema
from harness.scenario import suites as suites_module
from harness.scenario.model import Scenario
from harness.scenario.suites import get_suite, registered_suites
from harness.scoring.score import score_run
from harness.transcript import RunRecord

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def counter_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``counter`` registered by an installed distribution's entry point (a dist-info on
    ``sys.path``, as ``pip install`` leaves one), found by a fresh discovery."""
    info = tmp_path / "site" / "toy_counter_suite-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy-counter-suite\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[harness.suites]\ncounter = tests.toysuite:SUITE\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(suites_module, "_found", None)
    yield


def _run(url: str, scenarios: list[Scenario], out: Path, repeats: int = 1) -> list[RunRecord]:
    tgt = TargetConfig(base_url=url, label="sim", timeout_s=20, max_retries=1, backoff_s=0.01)
    run_many_sync(scenarios, [tgt], repeats=repeats, concurrency=4, out_dir=out, progress=False)
    return list(RunFolder(out).records())


def test_the_entry_point_registers_the_suite(counter_suite: None) -> None:
    assert "counter" in registered_suites() and "bfcl" in registered_suites()
    tasks = load_scenarios(["counter:3"])
    assert [t.id for t in tasks] == ["counter_0", "counter_1", "counter_2"]
    assert all(t.task is not None and t.task.suite == "counter" for t in tasks)
    with pytest.raises(ScenarioError, match="counter:N with N a positive number"):
        load_scenarios(["counter:x"])


def test_a_task_is_written_under_the_suite_name_and_read_back(
    counter_suite: None, tmp_path: Path
) -> None:
    sc = load_scenarios(["counter:2"])[1]
    data = sc.model_dump(mode="json")
    assert "task" not in data and data["counter"] == {"start": 10, "held_out": {"1": ["reset"]}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    [back] = load_scenarios([path])
    assert back.task == sc.task and back.content_hash() == sc.content_hash()
    bad = {**data, "counter": {"start": "ten"}}
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(ScenarioError, match="start"):
        load_scenarios([path])
    assert "counter" in scenario_json_schema()["properties"]


def test_without_its_registration_the_key_is_unknown(tmp_path: Path) -> None:
    data = {"id": "x", "description": "d", "messages": [{"role": "user", "content": "hi"}],
            "counter": {"start": 1}}  # fmt: skip
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ScenarioError, match="unknown key"):
        load_scenarios([path])
    with pytest.raises(ScenarioError, match="no scenario suite named 'counter'"):
        get_suite("counter")
    with pytest.raises(ScenarioError, match="no scenario suite named 'counter' is registered"):
        load_scenarios(["counter:3"])


def test_the_reference_server_plays_it_and_its_backend_answers(
    counter_suite: None, sim_url: Callable[..., str], tmp_path: Path
) -> None:
    tasks = load_scenarios(["counter:3"])
    recs = _run(sim_url("healthy", scenarios_dir="counter:3"), tasks, tmp_path, repeats=2)
    assert len(recs) == 6
    for rec in recs:
        score = score_run(rec)
        assert score.passed, (rec.scenario_id, score.failures, rec.state_checks)
        assert [c.state_ok for c in rec.state_checks] == [True, True]
        assert "reset" not in [t["function"]["name"] for t in rec.tools]  # held back
        start = 10 * int(rec.scenario_id.split("_")[1])
        first = rec.turns[0].tool_results[0]
        amount = json.loads(rec.turns[0].response.tool_calls[0].arguments)["amount"]  # type: ignore[union-attr,arg-type]
        assert json.loads(first.content) == {"total": start + amount}  # the counter answered


def test_its_own_criteria_fail_a_run_that_left_the_wrong_state(
    counter_suite: None, sim_url: Callable[..., str], tmp_path: Path
) -> None:
    tasks = load_scenarios(["counter:12"])
    recs = _run(sim_url("fused-regression", scenarios_dir="counter:12"), tasks, tmp_path)
    failed = [score_run(r) for r in recs if not score_run(r).passed]
    assert any(FailureKind.STATE_MISMATCH.value in s.failures for s in failed), [
        s.failures for s in failed
    ]


def test_no_module_of_the_harness_names_the_toy() -> None:
    names = ("toysuite", "CounterSuite", "counter:")
    hits = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in (ROOT / "harness").rglob("*.py")
        for n in names
        if n in p.read_text(encoding="utf-8")
    ]
    assert hits == []


def test_a_task_key_in_a_file_is_refused(tmp_path: Path) -> None:
    data = {"id": "x", "description": "d", "messages": [{"role": "user", "content": "hi"}],
            "task": {"suite": "bfcl", "data": {"garbage": 1}}}  # fmt: skip
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ScenarioError, match="write a suite's task under the suite's name"):
        load_scenarios([path])


def test_a_bfcl_task_without_its_registration_names_the_reinstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old venv (no `harness.suites` entry point): a BFCL task file, or a recorded BFCL
    run re-scored, says what is missing instead of "unknown key"."""
    monkeypatch.setattr(suites_module, "_found", {})
    data = {"id": "x", "description": "d", "messages": [{"role": "user", "content": "hi"}],
            "bfcl": {"category": "multi_turn_base", "task_id": "t", "version": "1",
                     "classes": []}}  # fmt: skip
    path = tmp_path / "x.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ScenarioError, match="no scenario suite named 'bfcl' is registered.*pip"):
        load_scenarios([path])
    legacy = {**data, "bfcl": None}  # every record before suites carried `bfcl: null`
    path.write_text(json.dumps(legacy), encoding="utf-8")
    assert load_scenarios([path])[0].task is None


def test_a_broken_suite_package_is_left_out_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "broken_suite-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-suite\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[harness.suites]\nbroken = no_such_module:SUITE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(suites_module, "_found", None)
    with pytest.warns(
        UserWarning, match="scenario suite broken = 'no_such_module:SUITE' not loaded"
    ):
        found = registered_suites()
    assert "broken" not in found and "bfcl" in found
    assert load_scenarios([ROOT / "scenarios"])  # plain scenario files still load


def test_the_reference_server_refuses_an_unregistered_suite(sim_url: Callable[..., str]) -> None:
    with pytest.raises(ScenarioError, match="no scenario suite named 'counter' is registered"):
        sim_url("healthy", scenarios_dir="counter:3")


def test_harness_list_shows_every_registered_suite(
    counter_suite: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    assert main(["list", "counter:2"]) == 0
    out = capsys.readouterr().out
    assert "counter tasks" in out and "counter_1" in out and "BFCL" not in out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "counter:N" in out and "BFCL suites" in out
