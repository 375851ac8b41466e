"""Which files the pytest plugin collects: any folder named on the command line, the ini
option ``harness_scenarios``, folders named ``scenarios``; never the rootdir's stray YAML."""

from __future__ import annotations

import pytest
import yaml

from tests.sim_driver import entropy_scenario

pytest_plugins = ["pytester"]


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
