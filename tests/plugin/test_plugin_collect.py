"""Which files the pytest plugin collects: any folder named on the command line, the ini
option ``harness_scenarios``, folders named ``scenarios``; never the rootdir's stray YAML;
and nothing at all, with no flag of its own, no test and nothing heavy imported, unless a
target asks for it (another suite in the same environment runs as without the plugin)."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.sim_driver import entropy_scenario

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _target(monkeypatch: pytest.MonkeyPatch) -> None:
    """A target (never asked: these sessions only collect), so scenarios are collected."""
    for name in list(os.environ):
        if name.startswith("HARNESS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HARNESS_TARGET", "http://127.0.0.1:9")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\ntestpaths = suite\n")
    for folder, sc_id in (("cases/deep", "in_cases"), ("suite", "in_suite"), ("lab", "in_lab")):
        path = pytester.path / folder
        path.mkdir(parents=True)
        sc = entropy_scenario(id=sc_id)
        (path / f"{sc_id}.yaml").write_text(yaml.safe_dump(sc), encoding="utf-8")
    (pytester.path / "docker-compose.yml").write_text("services: {}\n", encoding="utf-8")
    return pytester


def _collected(result: pytest.RunResult) -> list[str]:
    return sorted(line.split("::")[-1] for line in result.outlines if "::" in line)


def test_a_folder_named_on_the_command_line_is_collected(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("cases", "--collect-only", "-q")
    assert _collected(result) == ["in_cases"]


def test_a_folder_without_any_ini_file_is_collected(pytester: pytest.Pytester) -> None:
    """No ini file: pytest makes the named folder itself the rootdir; still collected."""
    folder = pytester.path / "loose"
    folder.mkdir()
    (folder / "one.yaml").write_text(yaml.safe_dump(entropy_scenario(id="loose_one")))
    result = pytester.runpytest_subprocess(str(folder), "--collect-only", "-q")
    assert _collected(result) == ["loose_one"]


def test_a_bare_run_walks_testpaths_without_taking_their_yaml(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--collect-only", "-q")
    assert _collected(result) == []
    named = project.runpytest_subprocess(".", "--collect-only", "-q")  # the rootdir itself
    assert _collected(named) == []


def test_the_ini_option_names_default_places(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\ntestpaths = suite lab\nharness_scenarios = lab\n")
    result = project.runpytest_subprocess("--collect-only", "-q")
    assert _collected(result) == ["in_lab"]


def test_the_ini_places_are_walked_by_a_bare_run(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\ntestpaths = suite\nharness_scenarios = lab\n")
    result = project.runpytest_subprocess("--collect-only", "-q")
    assert _collected(result) == ["in_lab"]
    named = project.runpytest_subprocess("cases", "--collect-only", "-q")  # paths given win
    assert _collected(named) == ["in_cases"]


# ---------------------------------------------------------------- inert unless asked

#: a suite's own conftest, as vLLM's tests/evals/gpt_oss/conftest.py adds --model: every
#: flag the plugin took before it had a prefix of its own
FOREIGN_CONFTEST = """
def pytest_addoption(parser):
    for flag in ("--model", "--target", "--baseline", "--repeats", "--stream",
                 "--temperature", "--results", "--concurrency", "--boot"):
        parser.addoption(flag, action="store", default=None)


def pytest_configure(config):
    config.foreign_model = config.getoption("--model")
"""

LIGHT_TEST = """
import sys


def test_theirs(pytestconfig):
    assert pytestconfig.foreign_model == "gpt-oss-20b"
    heavy = [m for m in ("scipy", "numpy", "openai", "harness.pytest_plugin.items")
             if m in sys.modules]
    assert heavy == [], heavy
"""


def _foreign_suite(pytester: pytest.Pytester) -> None:
    """Another project's suite: its conftest's flags, a load-test YAML under
    ``tests/scenarios/`` (not a scenario), one test of its own."""
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    tests = pytester.path / "tests"
    (tests / "scenarios").mkdir(parents=True)
    (tests / "conftest.py").write_text(FOREIGN_CONFTEST)
    (tests / "test_theirs.py").write_text(LIGHT_TEST)
    (tests / "scenarios" / "locust.yaml").write_text("users: 10\nspawn-rate: 2\n")


def test_another_suite_runs_as_without_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ``--model`` and the rest are its own; its YAML under ``scenarios/`` is not
    collected; neither scipy nor numpy is imported for it."""
    monkeypatch.delenv("HARNESS_TARGET")
    _foreign_suite(pytester)
    result = pytester.runpytest_subprocess("--model", "gpt-oss-20b", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1)
    assert "locust" not in result.stdout.str()


def test_a_foreign_yaml_under_scenarios_is_collected_only_when_asked(
    pytester: pytest.Pytester,
) -> None:
    """With a target (here from the environment) the plugin is asked for, and a YAML under
    ``scenarios/`` is read as a scenario: one collection error naming it."""
    _foreign_suite(pytester)
    result = pytester.runpytest_subprocess(
        "--model", "gpt-oss-20b", "--harness-repeats", "1", "--collect-only", "-q"
    )
    assert "tests/scenarios/locust.yaml" in result.stdout.str()
