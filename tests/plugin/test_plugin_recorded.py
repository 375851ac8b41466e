"""The pytest plugin against a baseline: a recorded one (``harness record``, then
``--harness-baseline <folder>``) and a live one, over real sockets to the reference server.

A module-scoped recording of a healthy server (two shipped scenarios, 4 runs a round x 2
rounds, numerics and 40 GSM8K answers) is made first and its server stopped; the sessions
then run against fresh servers (other seeds: fresh noise). Each inner session runs in
process (pytester), as in tests/plugin/test_plugin.py.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness.gsm8k.run
import harness.numerics.section
import harness.pipeline
import harness.present.report
import harness.pytest_plugin.baseline
import harness.pytest_plugin.checks
import harness.pytest_plugin.items
from harness.cli import main
from harness.client.target import TargetConfig
from harness.runner import run_many_sync
from harness.scenario.model import load_scenario
from harness.sim.server import serve_in_thread

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
#: two shipped scenarios: fused-regression breaks the first, not the second
SCENARIOS = ("enum_units", "no_tool_needed")
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
#: what the recording holds: --harness-repeats 4 --harness-rounds 2
ROUND = ["--harness-repeats", "4", "--harness-rounds", "2"]
#: the same, as harness record's flags
RECORD_ROUND = ["--repeats", "4", "--rounds", "2"]


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("recorded") / "scenarios"
    folder.mkdir()
    for sid in SCENARIOS:
        shutil.copy(REPO / "scenarios" / f"{sid}.yaml", folder / f"{sid}.yaml")
    return folder


@pytest.fixture(scope="module")
def recording(scenario_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy server recorded as a baseline, then stopped (``harness record``)."""
    results = tmp_path_factory.mktemp("recordings")
    gsm8k = ["--gsm8k", "40", "--gsm8k-data", str(GSM8K)] if GSM8K.exists() else []
    data = GSM8K if GSM8K.exists() else None
    with serve_in_thread("healthy", scenarios_dir=scenario_dir, seed=1, gsm8k_path=data) as url:
        code = main([
            "record", str(scenario_dir), "--target", url, *RECORD_ROUND, "--results", str(results),
            "--run-id", "base", "--no-progress", *gsm8k,
        ])  # fmt: skip
    assert code == 0
    return results / "base"


def _serve(profile: str, scenario_dir: Path, seed: int) -> Iterator[str]:
    data = GSM8K if GSM8K.exists() else None
    with serve_in_thread(profile, scenarios_dir=scenario_dir, seed=seed, gsm8k_path=data) as url:
        yield url


@pytest.fixture(scope="module")
def healthy(recording: Path, scenario_dir: Path) -> Iterator[str]:
    """A fresh healthy server, started once the recorded one is gone."""
    yield from _serve("healthy", scenario_dir, 21)


@pytest.fixture(scope="module")
def fused(recording: Path, scenario_dir: Path) -> Iterator[str]:
    yield from _serve("fused-regression", scenario_dir, 23)


@pytest.fixture(scope="module", autouse=True)
def _warm_up(healthy: str, scenario_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Import in this process what the inner sessions import lazily (tests/plugin/test_plugin.py
    says why: pytester's in-process sessions drop modules first imported inside them)."""
    out = tmp_path_factory.mktemp("warm")
    target = TargetConfig(healthy, max_retries=0)
    scenario = load_scenario(scenario_dir / "no_tool_needed.yaml")
    run_many_sync([scenario], [target], repeats=1, out_dir=out, resume=False, progress=False)
    assert harness.pytest_plugin.items and harness.pytest_plugin.checks and harness.pipeline
    assert harness.present.report and harness.gsm8k.run and harness.numerics.section
    assert harness.pytest_plugin.baseline


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HARNESS_"):
            monkeypatch.delenv(name)


@pytest.fixture
def project(pytester: pytest.Pytester, scenario_dir: Path) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    shutil.copytree(scenario_dir, pytester.path / "scenarios")
    return pytester


#: ``--harness-baseline=DIR`` in one word: pytest takes the rootdir from the arguments that name
#: existing paths before the plugin's options are known (``--harness-baseline DIR`` would count)


def _folder(project: pytest.Pytester) -> Path:
    [folder] = sorted((project.path / "results").glob("pytest-*"))
    return folder


def _keys(folder: Path) -> list[str]:
    return [json.loads(line)["run_key"] for line in (folder / "transcripts.jsonl").open()]


def _count(keys: list[str], side: str, scenario: str) -> int:
    return sum(k.startswith(f"{side}/{scenario}/") for k in keys)


# ---------------------------------------------------------------- a recorded baseline


def test_healthy_target_against_a_recording_passes_reading_it_round_by_round(
    project: pytest.Pytester, recording: Path, healthy: str
) -> None:
    result = project.runpytest(
        "scenarios", "--harness-target", healthy, f"--harness-baseline={recording}", *ROUND
    )
    result.assert_outcomes(passed=2)
    folder = _folder(project)
    summary = json.loads((folder / "summary.json").read_text())
    look = summary["settings"]["look"]
    assert summary["settings"]["sequential"] and summary["settings"]["rounds"] == 2
    keys = _keys(folder)
    for sid in SCENARIOS:  # the recorded runs of the rounds looked at, no more
        assert _count(keys, "baseline", sid) == _count(keys, "candidate", sid) == 4 * look
    [base] = [s for s in summary["sides"] if s["side"] == "baseline"]
    assert base["recorded"] == str(recording)
    assert summary["verdict"]["verdict"] != "REGRESSION"
    out = result.stdout.str()
    assert f"against baseline {recording}: 2 passed, 0 failed" in out
    # the numerics section compares the live target with the recorded numerics
    result.stdout.fnmatch_lines(["numerics (token logprobs*sequences*"])
    assert "logprobs: not compared" not in out


def test_faulty_target_fails_the_scenario_it_breaks_with_the_comparison_as_reason(
    project: pytest.Pytester, recording: Path, fused: str
) -> None:
    result = project.runpytest(
        "scenarios", "--harness-target", fused, f"--harness-baseline={recording}", *ROUND, "-v"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*enum_units.yaml::enum_units FAILED*",
            "*no_tool_needed.yaml::no_tool_needed PASSED*",
            "compare verdict REGRESSION against the baseline: this scenario is significantly "
            "worse (passed: candidate 0/8, baseline */8*",
            "compare verdict: REGRESSION",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    folder = _folder(project)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["settings"]["look"] == 2  # not significant at round 1 (4 v 4): read on
    assert _count(_keys(folder), "baseline", "enum_units") == 8


def _edit(path: Path) -> None:
    text = path.read_text()
    path.write_text(text.replace("description: >-\n", "description: >-\n  Edited.\n", 1))


@pytest.mark.parametrize(
    ("change", "args", "said"),
    [
        ("edit", [], "scenario file changed since it was recorded: enum_units (enum_units.yaml)"),
        ("add", [], "scenario not in the recording (added since): extra_one"),
        (None, ["--harness-temperature", "0.2"], "temperature 0.7 recorded, 0.2 now"),
        (None, ["--harness-sampling-seed", "3"], "sampling seed 0 recorded, 3 now"),
        (None, ["--harness-stream=on"], "stream mode off recorded, on now"),
        (None, ["--harness-model", "other"], "model 'harness-sim' recorded, 'other' now"),
        (None, ["--harness-rounds", "3"], "too few runs: 8 per scenario recorded (4 x 2 rounds), "
         "the comparison asks up to 12"),
    ],
)  # fmt: skip
def test_a_recording_that_cannot_serve_is_one_usage_error(
    project: pytest.Pytester,
    recording: Path,
    healthy: str,
    change: str | None,
    args: list[str],
    said: str,
) -> None:
    if change == "edit":
        _edit(project.path / "scenarios" / "enum_units.yaml")
    if change == "add":
        sc = (project.path / "scenarios" / "no_tool_needed.yaml").read_text()
        (project.path / "scenarios" / "extra_one.yaml").write_text(
            sc.replace("id: no_tool_needed", "id: extra_one", 1)
        )
    base = ["scenarios", "--harness-target", healthy, f"--harness-baseline={recording}", *ROUND]
    result = project.runpytest(*base, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr.str()
    assert errors[0].startswith(
        f"ERROR: --harness-baseline: {recording} cannot serve as the baseline: "
    )
    assert said in errors[0]
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (project.path / "results").exists()  # nothing ran


@pytest.mark.parametrize("what", ["not a recording", "no such recording"])
def test_a_folder_that_is_no_recording_is_one_usage_error(
    project: pytest.Pytester, healthy: str, what: str
) -> None:
    folder = project.path / ("plain" if what == "not a recording" else "missing")
    if what == "not a recording":
        folder.mkdir()  # a folder, without a recording's manifest
    result = project.runpytest(
        "scenarios", "--harness-target", healthy, f"--harness-baseline={folder}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --harness-baseline: {folder}: {what}*"])
    assert "Traceback" not in result.stderr.str()


def test_a_selection_reads_only_its_scenarios_from_the_recording(
    project: pytest.Pytester, recording: Path, fused: str
) -> None:
    result = project.runpytest(
        "scenarios",
        "-k",
        "no_tool",
        "--harness-target",
        fused,
        f"--harness-baseline={recording}",
        *ROUND,
    )
    result.assert_outcomes(passed=1, deselected=1)
    folder = _folder(project)
    assert {k.split("/")[1] for k in _keys(folder)} == {"no_tool_needed"}
    summary = json.loads((folder / "summary.json").read_text())
    assert "unfinished" not in summary["verdict"]["message"]


def test_batch_off_compares_each_scenario_in_rounds_of_its_own(
    project: pytest.Pytester, recording: Path, fused: str
) -> None:
    result = project.runpytest(
        "scenarios", "--harness-target", fused, f"--harness-baseline={recording}", *ROUND,
        "--harness-batch", "off",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["compare verdict REGRESSION against the baseline: *"])
    folder = _folder(project)
    keys = _keys(folder)
    assert _count(keys, "baseline", "enum_units") == _count(keys, "candidate", "enum_units") == 8
    n = _count(keys, "baseline", "no_tool_needed")
    assert n in (4, 8) and _count(keys, "candidate", "no_tool_needed") == n
    summary = json.loads((folder / "summary.json").read_text())
    assert "unfinished" not in summary["verdict"]["message"]  # every side's runs are even


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present")
def test_gsm8k_against_a_recording_uses_its_recorded_answers(
    project: pytest.Pytester, recording: Path, healthy: str
) -> None:
    args = ["-m", "gsm8k", "--harness-target", healthy, f"--harness-baseline={recording}"]
    args += [f"--harness-gsm8k-data={GSM8K}"]
    ok = project.runpytest(*args, "--harness-gsm8k-questions", "40", "-v")
    ok.stdout.fnmatch_lines(["harness::gsm8k PASSED*"])
    gsm = json.loads(next((project.path / "results").glob("pytest-*/gsm8k.json")).read_text())
    assert [s["side"] for s in gsm["sides"]] == ["baseline", "candidate"]
    assert gsm["sides"][0]["n"] == 40
    other = project.runpytest(*args, "--harness-gsm8k-questions", "30")
    other.assert_outcomes(failed=1)
    other.stdout.fnmatch_lines(
        [
            f"gsm8k: {recording} cannot serve as the baseline: GSM8K num_questions 40 recorded, 30 now*"
        ]
    )
    assert "Traceback" not in other.stdout.str()


# ---------------------------------------------------------------- a live baseline


@pytest.fixture(scope="module")
def noisy_pair(scenario_dir: Path, recording: Path) -> Iterator[tuple[str, str]]:
    """Two equal servers whose enum_units runs loop half the time: healthy relative
    to each other, below every absolute threshold."""
    with (
        serve_in_thread("repeat-loop@0.5", scenarios_dir=scenario_dir, seed=31) as base,
        serve_in_thread("repeat-loop@0.5", scenarios_dir=scenario_dir, seed=32) as cand,
    ):
        yield base, cand


def test_live_baseline_judges_relatively_and_thresholds_only_when_given(
    project: pytest.Pytester, noisy_pair: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, cand = noisy_pair
    alone = project.runpytest("scenarios", "--harness-target", cand, "--harness-repeats", "5")
    alone.assert_outcomes(passed=1, failed=1)  # the absolute default: every run must pass
    alone.stdout.fnmatch_lines(["passed */5 runs (--harness-min-pass-rate 1)*"])
    relative = project.runpytest("scenarios", "--harness-target", cand, "--harness-baseline", base)
    relative.assert_outcomes(passed=2)  # as often as its baseline: not a regression
    assert "min-pass-rate" not in relative.stdout.str()
    given = project.runpytest(
        "scenarios",
        "--harness-target",
        cand,
        "--harness-baseline",
        base,
        "--harness-min-pass-rate",
        "1",
    )
    given.assert_outcomes(passed=1, failed=1)  # given explicitly, it applies on top
    given.stdout.fnmatch_lines(["passed */* runs (--harness-min-pass-rate 1)*"])
    monkeypatch.setenv("HARNESS_MAX_REPEATED_CALLS", "0")  # from the environment: given too
    env = project.runpytest("scenarios", "--harness-target", cand, "--harness-baseline", base)
    env.assert_outcomes(passed=1, failed=1)
    env.stdout.fnmatch_lines(
        ["repeated identical tool calls in */* runs*(--harness-max-repeated-calls 0)"]
    )
