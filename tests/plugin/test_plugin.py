"""The pytest plugin, driven with ``pytester`` against the reference server on 127.0.0.1.

Each test runs an inner pytest session (in-process) on scenario files copied into the
pytester directory, with ``--harness-target`` pointing at a ``harness.sim`` server started in a
thread by a module-scoped fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.gsm8k.run
import harness.pipeline
import harness.present.report
import harness.present.report.render
import harness.pytest_plugin.checks
import harness.pytest_plugin.items
import harness.server.boot
from harness.client.target import TargetConfig
from harness.runner import run_many_sync
from harness.scenario.model import scenario_from_data
from harness.sim.server import serve_in_thread
from tests.sim_driver import ENTROPY_TOOL

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]

ENTROPY: dict[str, Any] = {
    "id": "plugin_entropy",
    "description": "One array-valued tool call, then an answer.",
    "tags": ["arrays"],
    "messages": [
        {"role": "system", "content": "You are a careful assistant. Use the tools."},
        {"role": "user", "content": "Plugin test: entropy of [0.5, 0.25, 0.25] in bits?"},
    ],
    "tools": [{**ENTROPY_TOOL, "simulator": {"builtin": "entropy"}}],
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
        (folder / f"{sc['id']}.yaml").write_text(
            yaml.safe_dump(sc, sort_keys=False), encoding="utf-8"
        )
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
    # the plugin's lazy imports (scipy, numpy, jinja2...) likewise
    assert harness.pytest_plugin.items and harness.pytest_plugin.checks and harness.pipeline
    assert harness.present.report and harness.gsm8k.run and harness.server.boot


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


#: a target for sessions that only collect (nothing is sent to it)
DEAD_TARGET = "http://127.0.0.1:9"


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("pytest-*") if p.is_dir())


# ---------------------------------------------------------------- the acceptance cases


def test_healthy_target_passes_and_writes_a_run_folder(
    project: pytest.Pytester, healthy: str
) -> None:
    result = project.runpytest("scenarios", "--harness-target", healthy, "-ra")
    result.assert_outcomes(passed=2)
    [folder] = run_dirs(project.path / "results")
    records = (folder / "transcripts.jsonl").read_text().splitlines()
    assert len(records) == 4  # 2 scenarios x 2 repeats (the scenarios' own repeats)
    assert {json.loads(r)["stop_reason"] for r in records} == {"final_answer"}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["args"]["target"] == healthy
    result.stdout.fnmatch_lines(
        ["*- harness -*", "*2 passed, 0 failed*", "verdict: PASSED", f"results: *{folder.name}"]
    )


def test_fused_regression_fails_with_readable_evidence(
    project: pytest.Pytester, fused: str
) -> None:
    result = project.runpytest("scenarios/plugin_entropy.yaml", "--harness-target", fused)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Traceback" not in out
    result.stdout.fnmatch_lines(
        [
            "acceptable final answer in 0/2 runs (--harness-min-final-answer-rate 1)",
            "repeated identical tool calls in 2/2 runs*",
            "expected calls:",
            '*entropy {"values": [[]0.5, 0.25, 0.25[]], "base": 2}',
            "*stop reason: turn_cap after 12 turns",
            "*calls, turn by turn:",
            '*turn 0 entropy {"values": "[[]0.5, 0.25, 0.25[]]"*<- values: array sent as a string',
            "*values collapsed to zeros*",
            "*turns 3-11: the same call repeated 9 more times (repeated identical calls)",
        ]
    )
    assert "verdict: FAILED" in out


def test_a_broken_report_is_a_warning_and_the_outcomes_stand(
    project: pytest.Pytester, healthy: str, fused: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(*args: Any) -> Any:
        raise RuntimeError("template bug")

    monkeypatch.setattr(harness.present.report.render, "build_report", bug)
    good = project.runpytest("scenarios", "--harness-target", healthy)
    good.assert_outcomes(passed=2)
    assert good.ret == 0
    good.stdout.fnmatch_lines(["warning: report not written: RuntimeError: template bug"])
    bad = project.runpytest("scenarios/plugin_entropy.yaml", "--harness-target", fused)
    bad.assert_outcomes(failed=1)
    assert bad.ret == 1 and "report not written: RuntimeError: template bug" in bad.stdout.str()


def test_no_target_collects_no_scenario_and_says_so_in_one_line(project: pytest.Pytester) -> None:
    result = project.runpytest("scenarios", "-ra")
    result.assert_outcomes()  # inert: no test added, none skipped
    result.stdout.fnmatch_lines(
        ["harness: 2 scenario file(s) not collected: no --harness-target given (or HARNESS_TARGET*"]
    )
    assert not (project.path / "results").exists()  # nothing run, no run folder


def test_baseline_mode_fails_on_regression_and_passes_on_equal_builds(
    project: pytest.Pytester, healthy: str, fused: str
) -> None:
    bad = project.runpytest(
        "scenarios/plugin_entropy.yaml", "--harness-target", fused, "--harness-baseline", healthy,
        "--harness-min-pass-rate", "1",
    )  # fmt: skip
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(["*candidate run 0*turn_cap*", "*baseline run 0*final_answer*"])
    good = project.runpytest(
        "scenarios", "--harness-target", healthy, "--harness-baseline", healthy
    )
    good.assert_outcomes(passed=2)
    first, folder = run_dirs(project.path / "results")
    keys = {json.loads(x)["run_key"].split("/")[0] for x in (folder / "transcripts.jsonl").open()}
    assert keys == {"baseline", "candidate"}
    # the report gives the verdict and, beside it, the candidate's own tests when an
    # absolute threshold was given (with a baseline, only then do they judge)
    assert (
        "candidate tests: FAILED (1 scenario below pass rate 1" in (first / "report.md").read_text()
    )
    assert "candidate tests:" not in (folder / "report.md").read_text()


def test_results_option_that_is_a_file_is_a_usage_error(
    project: pytest.Pytester, healthy: str
) -> None:
    blocker = project.path / "afile"
    blocker.write_text("x")
    result = project.runpytest(
        "scenarios", "--harness-target", healthy, f"--harness-results={blocker}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --harness-results: '*afile' is a file, not a folder*"])
    assert "Traceback" not in result.stderr.str()


def test_bad_scenario_file_is_a_one_line_collection_error(
    project: pytest.Pytester, healthy: str
) -> None:
    bad = dict(ENTROPY, id="bad_one", colour="red")
    (project.path / "scenarios" / "bad_one.yaml").write_text(yaml.safe_dump(bad))
    result = project.runpytest("scenarios", "--harness-target", healthy)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*scenarios/bad_one.yaml: colour: unknown key; *(`harness schema` prints the format)*"]
    )
    assert "Traceback" not in result.stdout.str()
    assert "pydantic" not in result.stdout.str()


def test_readme_line_runs_the_repository_scenarios(pytester: pytest.Pytester) -> None:
    """``pytest scenarios/ --harness-target <url>`` as docs/pytest-plugin.md writes it, on two repo scenarios."""
    files = sorted((REPO / "scenarios").glob("*.yaml"))[:2]
    assert files, "the repository has scenario files"
    (pytester.path / "scenarios").mkdir()
    for f in files:
        shutil.copy(f, pytester.path / "scenarios" / f.name)
    with serve_in_thread("healthy", scenarios_dir=pytester.path / "scenarios") as url:
        result = pytester.runpytest("scenarios/", "--harness-target", url, "--harness-repeats", "1")
    result.assert_outcomes(passed=len(files))


# ---------------------------------------------------------------- infrastructure errors


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_server_is_an_infrastructure_error_not_a_failure(
    project: pytest.Pytester,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    result = project.runpytest(
        "scenarios/plugin_no_tools.yaml",
        "--harness-target",
        url,
        "--harness-max-retries",
        "0",
        "--harness-repeats",
        "1",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*infrastructure error (not a model failure): target: 1 of 1 runs*connection*"]
    )
    assert "verdict: ERROR (infrastructure)" in result.stdout.str()


# ---------------------------------------------------------------- relative to a baseline


def test_baseline_regression_fails_even_with_absolute_thresholds_relaxed(
    project: pytest.Pytester, healthy: str, fused: str
) -> None:
    """The compare verdict alone fails the test (8 repeats: Westfall-Young adjusted p < 0.01)."""
    relaxed = [
        "--harness-min-final-answer-rate",
        "0",
        "--harness-min-pass-rate",
        "0",
        "--harness-max-repeated-calls",
        "99",
    ]
    args = ["scenarios/plugin_entropy.yaml", "--harness-repeats", "8", *relaxed]
    bad = project.runpytest(
        *args, "--harness-target", fused, "--harness-baseline", healthy, "--junitxml", "j.xml"
    )
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines(
        [
            "compare verdict REGRESSION against the baseline: this scenario is significantly "
            "worse (passed: candidate 0/8, baseline 8/8; *; 5 more)",
            "compare verdict: REGRESSION",
            "*first divergence at turn 0:",
        ]
    )
    xml = (project.path / "j.xml").read_text()
    assert '<property name="verdict" value="REGRESSION"' in xml
    alone = project.runpytest(*args, "--harness-target", fused)
    alone.assert_outcomes(passed=1)  # the same runs pass the relaxed absolute thresholds


# ---------------------------------------------------------------- options


SHOW = "def test_show(harness_settings):\n    print('REPEATS=%s TARGET=%s' % (harness_settings.repeats, harness_settings.target))\n"


def test_option_precedence_is_cli_then_env_then_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nharness_repeats = 5\nharness_target = http://ini:1\n")
    pytester.makepyfile(test_show=SHOW)
    pytester.runpytest("-s").stdout.fnmatch_lines(["*REPEATS=5 TARGET=http://ini:1*"])
    monkeypatch.setenv("HARNESS_REPEATS", "4")
    pytester.runpytest("-s").stdout.fnmatch_lines(["*REPEATS=4 TARGET=http://ini:1*"])
    result = pytester.runpytest("-s", "--harness-repeats", "3", "--harness-target", "http://cli:2")
    result.stdout.fnmatch_lines(["*REPEATS=3 TARGET=http://cli:2*"])


def test_a_bad_option_value_is_a_usage_error_naming_its_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nharness_min_pass_rate = 1.5\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini option harness_min_pass_rate: '1.5' is not a rate between 0 and 1*"]
    )
    monkeypatch.setenv("HARNESS_REPEATS", "three")
    result = pytester.runpytest("--harness-min-pass-rate", "0.5")
    result.stderr.fnmatch_lines(
        ["*environment variable HARNESS_REPEATS: 'three' is not a whole number >= 1*"]
    )


# ---------------------------------------------------------------- collection


def test_only_files_under_a_scenarios_directory_are_collected(project: pytest.Pytester) -> None:
    (project.path / ".github").mkdir()
    (project.path / ".github" / "ci.yml").write_text("on: push\n")
    (project.path / "config").mkdir()
    (project.path / "config" / "settings.yaml").write_text("a: 1\n")
    (project.path / "config" / "data.json").write_text("[1, 2]\n")
    result = project.runpytest("--collect-only", "--harness-target", DEAD_TARGET, "-q", ".")
    result.stdout.fnmatch_lines(
        ["scenarios/plugin_entropy.yaml::plugin_entropy", "*2 tests collected*"]
    )
    out = result.stdout.str()
    assert "settings.yaml" not in out and "data.json" not in out and "ci.yml" not in out


def test_ini_harness_scenarios_adds_a_directory(
    pytester: pytest.Pytester, scenario_dir: Path
) -> None:
    shutil.copytree(scenario_dir, pytester.path / "cases")
    pytester.makeini("[pytest]\nharness_scenarios = cases\n")
    result = pytester.runpytest("--collect-only", "--harness-target", DEAD_TARGET, "-q", "cases")
    result.stdout.fnmatch_lines(
        ["cases/plugin_entropy.yaml::plugin_entropy", "*2 tests collected*"]
    )


def test_stream_both_makes_one_test_per_mode(project: pytest.Pytester, healthy: str) -> None:
    result = project.runpytest(
        "scenarios/plugin_entropy.yaml",
        "--harness-target",
        healthy,
        "--harness-stream-both",
        "--harness-repeats",
        "1",
        "-v",
    )
    result.stdout.fnmatch_lines(
        ["*plugin_entropy[[]nostream[]] PASSED*", "*plugin_entropy[[]stream[]] PASSED*"]
    )
    [folder] = run_dirs(project.path / "results")
    keys = sorted(json.loads(x)["run_key"] for x in (folder / "transcripts.jsonl").open())
    assert keys == ["target/plugin_entropy/0/nostream", "target/plugin_entropy/0/stream"]


def test_tags_are_keywords_and_items_carry_the_harness_marker(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--collect-only",
        "--harness-target",
        DEAD_TARGET,
        "-q",
        "scenarios",
        "-k",
        "arrays",
        "-m",
        "harness",
    )
    result.stdout.fnmatch_lines(
        ["scenarios/plugin_entropy.yaml::plugin_entropy", "*1/2 tests collected (1 deselected)*"]
    )


# ---------------------------------------------------------------- results, report, junit


def test_summary_report_and_junit_are_written(project: pytest.Pytester, healthy: str) -> None:
    result = project.runpytest(
        "scenarios", "--harness-target", healthy, "--harness-repeats", "1", "--harness-results", "out",
        "--harness-html", "site/harness.html", "--junitxml", "junit.xml",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    [folder] = run_dirs(project.path / "out")
    summary = json.loads((folder / "summary.json").read_text())
    assert {a["scenario_id"] for a in summary["aggregates"]} == {
        "plugin_entropy",
        "plugin_no_tools",
        "*",
    }
    assert summary["outcome"]["passed"] is True
    scores = [json.loads(x) for x in (folder / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 2 and all(r["passed"] for r in scores)
    html = (project.path / "site" / "harness.html").read_text()
    assert "plugin_entropy" in html
    xml = (project.path / "junit.xml").read_text()
    assert '<property name="tool_calls" value="1"' in xml
    assert f'<property name="run_dir" value="{folder}"' in xml or "run_dir" in xml
    result.stdout.fnmatch_lines(["report: site/harness.html"])


# ---------------------------------------------------------------- fixtures


FIXTURE_TEST = """
from pathlib import Path

def test_client(harness_client, harness_target):
    models = harness_client.models.list()
    assert models.data, "the target lists a model"
    assert harness_target.base_url.startswith("http://127.0.0.1:")

def test_run_scenario(run_scenario):
    runs = run_scenario(Path("scenarios/plugin_entropy.yaml"), repeats=2)
    assert len(runs) == 2
    for run in runs:
        assert run.record.scenario_id == "plugin_entropy"
        assert run.score.tool_calls == 1 and run.passed
"""


def test_fixtures_for_users_own_tests(project: pytest.Pytester, healthy: str, fused: str) -> None:
    project.makepyfile(test_mine=FIXTURE_TEST)
    project.runpytest("test_mine.py", "--harness-target", healthy).assert_outcomes(passed=2)
    bad = project.runpytest("test_mine.py", "--harness-target", fused)
    bad.assert_outcomes(passed=1, failed=1)  # the scenario's score shows the fused fault
    project.runpytest("test_mine.py").assert_outcomes(skipped=2)


# ---------------------------------------------------------------- opt-in checks


GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present")
def test_gsm8k_check_is_opt_in_and_judges_accuracy(project: pytest.Pytester) -> None:
    assert project.runpytest("--collect-only", "-q").stdout.str().count("harness::") == 0
    with serve_in_thread("healthy", scenarios_dir=None, gsm8k_path=GSM8K) as url:
        args = [
            "-m",
            "gsm8k",
            "--harness-target",
            url,
            f"--harness-gsm8k-data={GSM8K}",
            "--harness-gsm8k-questions",
            "40",
        ]
        ok = project.runpytest(*args, "--harness-gsm8k-min-accuracy", "0.5", "-v")
        bad = project.runpytest(*args, "--harness-gsm8k-min-accuracy", "1.0")
    ok.stdout.fnmatch_lines(["harness::gsm8k PASSED*"])
    ok.assert_outcomes(passed=1)  # the scenarios are deselected by -m gsm8k
    gsm = json.loads(next((project.path / "results").glob("pytest-*/gsm8k.json")).read_text())
    accuracy = gsm["sides"][0]["accuracy"]
    assert 0.5 <= accuracy < 1.0
    bad.assert_outcomes(failed=1)
    bad.stdout.fnmatch_lines([f"accuracy {accuracy:.3f} < --harness-gsm8k-min-accuracy 1"])
    # the session's folder is a GSM8K folder `harness score` can re-score
    from harness.cli import main

    folder = next((project.path / "results").glob("pytest-*/gsm8k.json")).parent
    assert main(["score", str(folder)]) == 0


def test_boot_check_of_the_running_target(project: pytest.Pytester, healthy: str) -> None:
    result = project.runpytest("-m", "boot", "--harness-target", healthy, "-v")
    result.stdout.fnmatch_lines(["harness::boot PASSED*"])
    result.assert_outcomes(passed=1)
    assert list((project.path / "results").glob("pytest-*/boot.json"))


def test_boot_cmd_that_crashes_fails_quoting_the_traceback(pytester: pytest.Pytester) -> None:
    cmd = (
        f"{sys.executable} -m harness sim --profile fused-regression --port 0 "
        "--enable-return-routed-experts"
    )
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(
        "-m", "boot", f"--harness-boot-cmd={cmd}", "--harness-boot-timeout", "60"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "boot health: *RuntimeError*",
            "*FAIL health: *RuntimeError*expanded size of the tensor (5)*",
        ]
    )
    assert list((pytester.path / "results").glob("pytest-*/server.log"))


def test_boot_cmd_on_a_port_that_answers_fails_in_one_line(
    pytester: pytest.Pytester, healthy: str
) -> None:
    """Another server holds the port: nothing is launched, the check says who holds it."""
    port = healthy.rsplit(":", 1)[1].split("/")[0]
    cmd = f"{sys.executable} -m harness sim --port {port}"
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(
        "-m", "boot", f"--harness-boot-cmd={cmd}", "--harness-boot-timeout", "20"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"boot launch: *127.0.0.1:{port}: the port already answers*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(("batch", "recorded"), [("on", 4), ("off", 2)])
def test_batching_runs_every_selected_scenario_at_the_first_test(
    project: pytest.Pytester, fused: str, batch: str, recorded: int
) -> None:
    """With ``-x`` the session stops at the first failure: batched, all runs were made."""
    result = project.runpytest(
        "scenarios", "-x", "--harness-target", fused, "--harness-batch", batch
    )
    result.assert_outcomes(failed=1)
    [folder] = run_dirs(project.path / "results")
    assert len((folder / "transcripts.jsonl").read_text().splitlines()) == recorded


def test_every_option_has_a_setting_and_shows_in_help(pytester: pytest.Pytester) -> None:
    from harness.pytest_plugin.options import OPTIONS, HarnessSettings

    defaults = HarnessSettings()
    assert all(hasattr(defaults, spec.name) for spec in OPTIONS)
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["harness: scenarios as tests*CLI > env > ini*", "  --harness-target=URL *"]
    )
    text = " ".join(result.stdout.str().split())
    for spec in OPTIONS:
        assert spec.flag in text and f"[env {spec.env}, ini {spec.ini}]" in text


def test_pytest_timeout_does_not_cut_harness_tests(project: pytest.Pytester, healthy: str) -> None:
    project.makeini("[pytest]\ntimeout = 0.01\n")
    result = project.runpytest("scenarios", "--harness-target", healthy, "--harness-repeats", "1")
    result.assert_outcomes(passed=2)


def test_two_files_with_one_id_is_a_collection_error(project: pytest.Pytester) -> None:
    (project.path / "scenarios" / "more").mkdir()
    (project.path / "scenarios" / "more" / "copy.json").write_text(json.dumps(ENTROPY))
    result = project.runpytest("--collect-only", "--harness-target", DEAD_TARGET, "-q", "scenarios")
    result.stdout.fnmatch_lines(
        ["scenarios/*: id: 'plugin_entropy' is already used by scenarios/*; ids must be unique"]
    )
    assert "Traceback" not in result.stdout.str()


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present")
def test_gsm8k_against_a_baseline_uses_the_drop_or_the_paired_verdict(
    project: pytest.Pytester,
) -> None:
    with (
        serve_in_thread("healthy", scenarios_dir=None, gsm8k_path=GSM8K) as base,
        serve_in_thread("fused-regression", scenarios_dir=None, gsm8k_path=GSM8K) as cand,
    ):
        args = [
            "-m",
            "gsm8k",
            "--harness-target",
            cand,
            "--harness-baseline",
            base,
            f"--harness-gsm8k-data={GSM8K}",
        ]
        args += ["--harness-gsm8k-questions", "100"]
        paired = project.runpytest(*args)
        tolerant = project.runpytest(*args, "--harness-gsm8k-max-drop", "0.5")
    paired.assert_outcomes(failed=1)
    paired.stdout.fnmatch_lines(
        ["paired verdict REGRESSION against the baseline", "paired: REGRESSION*McNemar*"]
    )
    tolerant.assert_outcomes(passed=1)  # the drop is within the allowed 0.5


def test_the_models_terminal_escapes_are_not_printed_in_the_evidence(
    pytester: pytest.Pytester, sim_url: Any, write_scenarios: Any
) -> None:
    """A final answer that sets the window title and clears the screen
    is shown as text, its escape sequences stripped (as the command line does)."""
    escapes = {
        **NO_TOOLS,
        "id": "plugin_escapes",
        "repeats": 1,
        "expect": {
            "final_answer": {
                "required": True,
                "contains": ["ready"],
                "example": "\x1b]0;owned\x07\x1b[2J\x1b[31mnot the word\x1b[0m\r",
            }
        },
    }
    folder = write_scenarios(escapes)
    url = sim_url("healthy", scenarios_dir=folder)
    pytester.makeini("[pytest]\n")
    shutil.copytree(folder, pytester.path / "scenarios")
    result = pytester.runpytest("scenarios", "--harness-target", url)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "final answer: not the word" in out
    assert "\x1b" not in out and "\x07" not in out and "owned" not in out


@pytest.mark.parametrize("batch", ["on", "off"])
def test_the_numerics_section_is_an_input_of_the_session_verdict(
    project: pytest.Pytester, healthy: str, scenario_dir: Path, batch: str
) -> None:
    """Batched (compare's hook, after the first round) or not (before the summary is
    scored), the numerics decide with the behaviour: summary.json's verdict names them."""
    with serve_in_thread("logprobs-nan", scenarios_dir=scenario_dir) as nan:
        result = project.runpytest(
            "scenarios",
            "--harness-target",
            nan,
            "--harness-baseline",
            healthy,
            f"--harness-batch={batch}",
        )
    result.stdout.fnmatch_lines(["*logprobs*REGRESSION*NaN*"])
    [folder] = run_dirs(project.path / "results")
    verdict = json.loads((folder / "summary.json").read_text())["verdict"]
    assert verdict["verdict"] == "REGRESSION", verdict["message"]
    assert verdict["reasons"][0].startswith("numerics (prefill): REGRESSION"), verdict["reasons"]
    assert (folder / "logprobs.json").is_file()
