"""The pytest plugin, driven with ``pytester`` against the reference server on 127.0.0.1.

Each test runs an inner pytest session (in-process) on scenario files copied into the
pytester directory, with ``--target`` pointing at a ``harness.sim`` server started in a
thread by a module-scoped fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.plugin_items
from harness.client import TargetConfig
from harness.runner import run_many_sync
from harness.scenario import scenario_from_data
from harness.sim.server import serve_in_thread

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

ENTROPY: dict[str, Any] = {
    "id": "plugin_entropy",
    "description": "One array-valued tool call, then an answer.",
    "tags": ["arrays"],
    "messages": [
        {"role": "system", "content": "You are a careful assistant. Use the tools."},
        {"role": "user", "content": "Plugin test: entropy of [0.5, 0.25, 0.25] in bits?"},
    ],
    "tools": [
        {
            "name": "entropy",
            "description": "Shannon entropy of a probability vector.",
            "parameters": {
                "type": "object",
                "properties": {
                    "values": {"type": "array", "items": {"type": "number"}},
                    "base": {"type": "number"},
                },
                "required": ["values"],
            },
            "simulator": {"builtin": "entropy"},
        }
    ],
    "expect": {
        "calls": [{"tool": "entropy", "arguments": {"values": [0.5, 0.25, 0.25], "base": 2}}],
        "final_answer": {"required": True, "contains": ["1.5"]},
    },
    "repeats": 2,
}

NO_TOOLS: dict[str, Any] = {
    "id": "plugin_no_tools",
    "description": "A plain question: no tool, an answer.",
    "messages": [{"role": "user", "content": "Plugin test: say the word ready."}],
    "expect": {"final_answer": {"required": True, "contains": ["ready"]}},
    "repeats": 2,
}


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our two scenarios, written once; the sims and the inner sessions both read them."""
    folder = tmp_path_factory.mktemp("plugin") / "scenarios"
    folder.mkdir()
    for sc in (ENTROPY, NO_TOOLS):
        (folder / f"{sc['id']}.yaml").write_text(yaml.safe_dump(sc, sort_keys=False), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def healthy(scenario_dir: Path) -> Iterator[str]:
    with serve_in_thread("healthy", scenarios_dir=scenario_dir) as url:
        yield url


@pytest.fixture(scope="module")
def fused(scenario_dir: Path) -> Iterator[str]:
    with serve_in_thread("fused-regression", scenarios_dir=scenario_dir) as url:
        yield url


@pytest.fixture(scope="module", autouse=True)
def _warm_up(healthy: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One run against a live and one against a dead server, in this process, first.

    pytester's in-process sessions drop the modules first imported inside them, and the
    HTTP stack imports some lazily (on the first request, the first connection error);
    a second copy of an exception class would then escape the runner's ``except``.
    Importing them here, outside every inner session, keeps one copy, as in real use.
    """
    out = tmp_path_factory.mktemp("warm")
    dead = f"http://127.0.0.1:{_closed_port()}"
    scenario = scenario_from_data(NO_TOOLS)
    for url in (healthy, dead):
        target = TargetConfig(url, max_retries=0)
        run_many_sync([scenario], [target], repeats=1, out_dir=out, resume=False, progress=False)
    assert harness.plugin_items.ScenarioItem


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HARNESS_* variable of the outer environment leaks into an inner session."""
    for name in list(os.environ):
        if name.startswith("HARNESS_"):
            monkeypatch.delenv(name)


@pytest.fixture
def project(pytester: pytest.Pytester, scenario_dir: Path) -> pytest.Pytester:
    """A pytester project with an ini file and our scenarios under ``scenarios/``."""
    pytester.makeini("[pytest]\n")
    shutil.copytree(scenario_dir, pytester.path / "scenarios")
    return pytester


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("pytest-*") if p.is_dir())


# ---------------------------------------------------------------- the acceptance cases


def test_healthy_target_passes_and_writes_a_run_folder(project: pytest.Pytester, healthy: str) -> None:
    result = project.runpytest("scenarios", "--target", healthy, "-ra")
    result.assert_outcomes(passed=2)
    [folder] = run_dirs(project.path / "results")
    records = (folder / "transcripts.jsonl").read_text().splitlines()
    assert len(records) == 4  # 2 scenarios x 2 repeats (the scenarios' own repeats)
    assert {json.loads(r)["stop_reason"] for r in records} == {"final_answer"}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["args"]["target"] == healthy
    result.stdout.fnmatch_lines(["*- harness -*", "*2 passed, 0 failed*", "verdict: PASS", f"results: *{folder.name}"])


def test_fused_regression_fails_with_readable_evidence(project: pytest.Pytester, fused: str) -> None:
    result = project.runpytest("scenarios/plugin_entropy.yaml", "--target", fused)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Traceback" not in out
    result.stdout.fnmatch_lines(
        [
            "scenario 'plugin_entropy' failed:",
            "*acceptable final answer in 0/2 runs*",
            "*repeated identical tool calls in 2/2 runs*",
            "expected calls:",
            '*entropy {"values": [[]0.5, 0.25, 0.25[]], "base": 2}',
            "*stop reason: turn_cap after 12 turns",
            "*drifted arguments by turn:",
            '*turn 0 {"values":"[[]0.5, 0.25, 0.25[]]"*<- array sent as a string (values)',
            "*values collapsed to zeros*",
        ]
    )
    assert "verdict: FAIL" in out


def test_no_target_skips_everything_with_one_reason(project: pytest.Pytester) -> None:
    result = project.runpytest("scenarios", "-ra")
    result.assert_outcomes(skipped=2)
    skipped = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert len(skipped) == 1, skipped
    assert "[2]" in skipped[0] and "no --target given (or HARNESS_TARGET" in skipped[0]
    assert not (project.path / "results").exists()  # nothing run, no run folder


def test_baseline_mode_fails_on_regression_and_passes_on_equal_builds(
    project: pytest.Pytester, healthy: str, fused: str
) -> None:
    bad = project.runpytest("scenarios/plugin_entropy.yaml", "--target", fused, "--baseline", healthy)
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*candidate run 0*turn_cap*", "*baseline run 0*final_answer*"])
    good = project.runpytest("scenarios", "--target", healthy, "--baseline", healthy)
    good.assert_outcomes(passed=2)
    [_, folder] = run_dirs(project.path / "results")
    keys = {json.loads(x)["run_key"].split("/")[0] for x in (folder / "transcripts.jsonl").open()}
    assert keys == {"baseline", "candidate"}


def test_bad_scenario_file_is_a_one_line_collection_error(project: pytest.Pytester, healthy: str) -> None:
    bad = dict(ENTROPY, id="bad_one", colour="red")
    (project.path / "scenarios" / "bad_one.yaml").write_text(yaml.safe_dump(bad))
    result = project.runpytest("scenarios", "--target", healthy)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*scenarios/bad_one.yaml: colour: unknown key; check its spelling*"])
    assert "Traceback" not in result.stdout.str()
    assert "pydantic" not in result.stdout.str()


def test_readme_line_runs_the_repository_scenarios(pytester: pytest.Pytester) -> None:
    """``pytest scenarios/ --target <url>`` as the README writes it, on two repo scenarios."""
    files = sorted((REPO / "scenarios").glob("*.yaml"))[:2]
    assert files, "the repository has scenario files"
    (pytester.path / "scenarios").mkdir()
    for f in files:
        shutil.copy(f, pytester.path / "scenarios" / f.name)
    with serve_in_thread("healthy", scenarios_dir=pytester.path / "scenarios") as url:
        result = pytester.runpytest("scenarios/", "--target", url, "--repeats", "1")
    result.assert_outcomes(passed=len(files))


# ---------------------------------------------------------------- infrastructure errors


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_is_an_infrastructure_error_not_a_failure(project: pytest.Pytester) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = project.runpytest(
        "scenarios/plugin_no_tools.yaml", "--target", url, "--harness-retries", "0", "--repeats", "1"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*infrastructure error (not a model failure): target: 1 of 1 runs*connection*"])
    assert "verdict: ERROR (infrastructure)" in result.stdout.str()
