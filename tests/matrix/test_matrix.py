"""``harness matrix`` against in-process reference servers (real sockets on 127.0.0.1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.matrix.result
from harness import pipeline
from harness.cli import main
from harness.matrix.result import read_matrix
from harness.matrix.run import rescore_matrix
from harness.matrix.spec import MatrixError, load_matrix
from harness.runfolder import RunFolder

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "scenarios" / "sensor_entropy_pipeline.yaml")


def _write(tmp_path: Path, deployments: list[dict[str, Any]], **extra: Any) -> Path:
    doc = {"scenarios": [SCENARIO], "repeats": 1, "deployments": deployments, **extra}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _run(path: Path, tmp_path: Path, *more: str) -> tuple[int, Path]:
    code = main(["matrix", str(path), "--results", str(tmp_path / "res"), "--run-id", "m",
                 "--no-progress", *more])  # fmt: skip
    return code, tmp_path / "res" / "m"


SEED_CASE = """\
name: seed case
scenarios: [{scenario}]
repeats: 2
deployments:
  - {{label: fused-E129, sim: fused-regression, attributes: {{fusion: on, moe_config: tuned-E129}}}}
  - {{label: fused-none, sim: repeat-loop, attributes: {{fusion: on, moe_config: none}}}}
  - {{label: unfused-E128, sim: healthy, attributes: {{fusion: off, moe_config: tuned-E128}}}}
  - {{label: unfused-default, sim: healthy, attributes: {{fusion: off, moe_config: default}}}}
  - {{label: unfused-none, sim: healthy, attributes: {{fusion: off, moe_config: none}}}}
"""


def test_seed_case_names_fusion_as_carrier_and_rules_out_the_kernel_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_CASE.format(scenario=SCENARIO), encoding="utf-8")  # `on` unquoted
    code, folder = _run(path, tmp_path)
    out = capsys.readouterr().out
    assert code == 0
    result = read_matrix(folder)
    assert result.outcome == "CARRIER" and result.carriers == ["fusion"]
    findings = {f.attribute: f for f in result.findings}
    assert findings["fusion"].counts == {
        "on": {"pass": 0, "fail": 2},
        "off": {"pass": 3, "fail": 0},
    }
    assert findings["moe_config"].classification == "ruled_out"
    assert findings["moe_config"].counts["none"] == {"pass": 1, "fail": 1}
    status = {d.label: d.status for d in result.deployments}
    assert status == {"fused-E129": "fail", "fused-none": "fail", "unfused-E128": "pass",
                      "unfused-default": "pass", "unfused-none": "pass"}  # fmt: skip
    looping = next(d for d in result.deployments if d.label == "fused-none")
    assert looping.final_answers == 0 and looping.repeated_calls > 0
    assert "fusion: carrier" in out and "moe_config: ruled out" in out
    assert "on: 0 pass / 2 fail" in out
    # the repeat-loop sim reports fusion OFF although the attribute says on: the seed case's lesson
    assert any(w.startswith("fused-none: attribute fusion=on") for w in result.warnings)
    labels = {r.target.label for r in RunFolder(folder).records()}
    assert labels == set(status)
    summary = json.loads((folder / "summary.json").read_text())
    assert {s["side"] for s in summary["sides"]} == set(status)
    # the summary's one-sided outcome is judged at the matrix's criterion and names each side
    outcome = summary["outcome"]
    assert outcome["min_pass_rate"] == 0.8 and outcome["failing"] == ["sensor_entropy_pipeline"]
    assert "sensor_entropy_pipeline on fused-E129 (0/2 passed)" in outcome["message"]
    assert "sensor_entropy_pipeline on fused-none (0/2 passed)" in outcome["message"]
    assert "Isolation matrix" in (folder / "report.html").read_text()
    md = (folder / "report.md").read_text()
    assert "**moe\\_config**: ruled out" in md and "CARRIER" in md
    # matrix.json is a pure function of the folder
    again = rescore_matrix(folder)
    assert again.findings == result.findings and again.outcome == result.outcome


def test_two_deployments_reduce_to_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    decided: list[int] = []

    def summarize(records: Any, **kw: Any) -> Any:
        decided.append(len({r.target.label for r in records}))
        return pipeline.summarize(records, **kw)

    monkeypatch.setattr(harness.matrix.result, "summarize", summarize)
    path = _write(
        tmp_path,
        [
            {"label": "fused", "sim": "fused-regression", "attributes": {"fusion": "on"}},
            {"label": "unfused", "sim": "healthy", "attributes": {"fusion": "off"}},
        ],
        repeats=2,
    )
    code, folder = _run(path, tmp_path, "--no-report")
    out = capsys.readouterr().out
    result = read_matrix(folder)
    assert code == 0 and result.carriers == ["fusion"]
    # baseline is the passing deployment although it is listed second
    assert (result.compare_baseline, result.compare_candidate) == ("unfused", "fused")
    assert result.compare_verdict is not None
    assert result.compare_verdict.verdict in ("REGRESSION", "INCONCLUSIVE")
    assert "compare: the two deployments" in out and "repeat" in out
    # the console shows the verdict the matrix decided (decided once, not again to print it)
    assert decided == [2] and result.compare_verdict.message.split(": ", 1)[1] in out
    assert "compare" not in json.loads((folder / "matrix.json").read_text())


def test_attributes_that_vary_together_are_not_isolated(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"label": "a", "sim": "repeat-loop", "attributes": {"fusion": "on", "triton": 3.6}},
            {"label": "b", "sim": "healthy", "attributes": {"fusion": "off", "triton": "<b>3.5"}},
        ],
    )
    code, folder = _run(path, tmp_path)
    result = read_matrix(folder)
    assert code == 1 and result.outcome == "NOT ISOLATED"
    assert sorted(result.carriers) == ["fusion", "triton"]
    assert "vary together" in result.message
    html = (folder / "report.html").read_text()
    assert "&lt;b&gt;3.5" in html and "<b>3.5" not in html
    md = (folder / "report.md").read_text()
    assert md.count("<b>") == 1 and "`<b>3.5`" in md  # only inside a code span


def test_all_pass_and_a_server_that_never_boots(tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "raise RuntimeError('The expanded size of the tensor (5)')"]
    path = _write(
        tmp_path,
        [
            {"label": "ok", "sim": "healthy", "attributes": {"fusion": "off"}},
            {"label": "ok2", "sim": "healthy", "attributes": {"fusion": "off"}},
            {"label": "crash", "launch": crash, "attributes": {"fusion": "on"}},
        ],
    )
    code, folder = _run(path, tmp_path, "--no-report")
    result = read_matrix(folder)
    assert code == 3 and result.outcome == "INCOMPLETE"
    crashed = next(d for d in result.deployments if d.label == "crash")
    assert crashed.status == "error" and "did not boot" in crashed.reasons[0]
    assert "crash" in result.message and (folder / "server-crash.log").exists()


def test_launch_deployment_is_started_run_and_stopped(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "harness", "sim", "--profile", "healthy", "--port", "0",
           "--scenarios", str(ROOT / "scenarios")]  # fmt: skip
    path = _write(
        tmp_path,
        [
            {"label": "launched", "launch": cmd, "attributes": {"k": "x"}, "boot_timeout_s": 60},
            {"label": "inproc", "sim": "healthy", "attributes": {"k": "y"}},
        ],
    )
    code, folder = _run(path, tmp_path, "--no-report")
    result = read_matrix(folder)
    assert code == 0 and result.outcome == "ALL PASS"
    launched = next(d for d in result.deployments if d.label == "launched")
    assert launched.status == "pass" and launched.runs == 1
    assert launched.facts.url is not None and launched.facts.url.startswith("http://127.0.0.1:")


# ------------------------------------------------------------------ the matrix file


def test_yaml_on_off_and_numbers_read_as_written(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        f"scenarios: [{SCENARIO}]\nrepeats: 2\npass_criterion: {{min_pass_rate: 0.5}}\n"
        "deployments:\n"
        "  - {label: a, sim: healthy, attributes: {fusion: on, triton: 3.10, tp: 8, x: true}}\n"
        "  - {label: b, url: 'http://127.0.0.1:9', attributes: {fusion: off}}\n",
        encoding="utf-8",
    )
    spec = load_matrix(path)
    assert spec.deployments[0].attributes == {
        "fusion": "on",
        "triton": "3.10",
        "tp": "8",
        "x": "true",
    }
    assert spec.deployments[1].attributes == {"fusion": "off"}
    assert spec.repeats == 2 and spec.pass_criterion.min_pass_rate == 0.5


B = {"label": "b", "sim": "healthy"}


@pytest.mark.parametrize(
    ("deployments", "extra", "field", "phrase"),
    [
        ([{"label": "a", "sim": "healthy", "colour": 1}, B], {}, "deployments[0].colour", "unknown key"),
        ([{"label": "a", "sim": "healthy", "url": "http://x"}, B], {}, "deployments[0]", "exactly one of"),
        ([{"label": "a", "sim": "no-such-profile"}, B], {}, "deployments[0].sim", "unknown profile"),
        ([{"label": "a", "sim": "healthy"}, {"label": "a", "sim": "healthy"}], {}, "deployments[1].label", "used twice"),
        ([{"label": "a", "sim": "healthy"}], {}, "deployments", "at least 2"),
        ([{"label": "a", "sim": "healthy"}, {"label": "b", "sim": "healthy"}],
         {"scenarios": ["nope.yaml"]}, "scenarios[0]", "no such file"),
        ([{"label": "a", "sim": "healthy"}, {"label": "b", "sim": "healthy"}],
         {"pass_criterion": {"min_pass_rate": 2}}, "pass_criterion.min_pass_rate", "less than or equal"),
        ([{"label": "a", "launch": ""}, B], {}, "deployments[0].launch", "an empty command ('')"),
        ([{"label": "a", "launch": "   "}, B], {}, "deployments[0].launch", "an empty command"),
        ([{"label": "a", "launch": []}, B], {}, "deployments[0].launch", "an empty command ([])"),
        ([{"label": "a", "launch": None}, B], {}, "deployments[0]", "exactly one of url, launch, sim"),
        ([{"label": "a", "launch": 'a "b'}, B], {}, "deployments[0].launch", "not a command line"),
        ([{"label": "a", "sim": "healthy"}, B], {"repeats": 1001}, "repeats", "less than or equal"),
    ],
)  # fmt: skip
def test_bad_matrix_file_is_one_line_naming_file_and_field(
    tmp_path: Path,
    deployments: list[dict[str, Any]],
    extra: dict[str, Any],
    field: str,
    phrase: str,
) -> None:
    path = _write(tmp_path, deployments, **extra)
    with pytest.raises(MatrixError) as err:
        load_matrix(path)
    assert err.value.field == field and phrase in err.value.reason
    assert str(err.value).startswith(f"{path}: {field}: ") and "\n" not in str(err.value)


def test_unknown_key_points_at_the_format(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"label": "a", "sim": "healthy", "colour": 1}, B])
    with pytest.raises(MatrixError) as err:
        load_matrix(path)
    assert "harness/matrix/spec.py" in err.value.reason
    assert "examples/matrix-seed-case.yaml" in err.value.reason
    assert (ROOT / "harness" / "matrix" / "spec.py").is_file()
    assert (ROOT / "examples" / "matrix-seed-case.yaml").is_file()


def test_bad_matrix_file_exits_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("deployments: [\n", encoding="utf-8")
    code, folder = _run(path, tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and not folder.exists()
    assert err.startswith(f"error: {path}: line") and "Traceback" not in err


GSM8K_DATA = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


@pytest.mark.skipif(not GSM8K_DATA.is_file(), reason="no local GSM8K test split")
def test_gsm8k_accuracy_per_deployment(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"label": "drop", "sim": "gsm8k-drop", "attributes": {"fusion": "on"}},
            {"label": "ok", "sim": "healthy", "attributes": {"fusion": "off"}},
        ],
        gsm8k={"questions": 8, "data": str(GSM8K_DATA), "parallel": 4},
        pass_criterion={"min_gsm8k_accuracy": 0.0},
    )
    code, folder = _run(path, tmp_path)
    result = read_matrix(folder)
    assert code == 0 and result.outcome == "ALL PASS"
    for d in result.deployments:
        assert d.gsm8k_questions == 8 and d.gsm8k_accuracy is not None
        assert (folder / "gsm8k" / d.label / "gsm8k.json").is_file()
        sub = RunFolder(folder).sub(RunFolder.GSM8K_DIR, d.label)  # the same folder, by name
        assert sub.path == folder / "gsm8k" / d.label and sub.has(RunFolder.GSM8K_RECORDS)
    assert rescore_matrix(folder).deployments == result.deployments
    assert result.compare_gsm8k is not None and result.compare_gsm8k.n_pairs == 8
    md = (folder / "report.md").read_text()
    assert "McNemar exact" in md


def test_example_matrix_file_loads() -> None:
    spec = load_matrix(ROOT / "examples" / "matrix-seed-case.yaml")
    assert len(spec.deployments) == 5 and all(Path(s).exists() for s in spec.scenarios)
    fusion = {d.attributes["fusion"] for d in spec.deployments}
    assert fusion == {"on", "off"}


def test_score_of_a_matrix_folder_rescores_it_as_a_matrix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``harness score results/matrix-...`` re-writes matrix.json, prints the matrix console
    and exits as the matrix does (CARRIER: 0), not as a one-sided run (FAILED: 1)."""
    path = _write(
        tmp_path,
        [
            {"label": "fused", "sim": "repeat-loop", "attributes": {"fusion": "on"}},
            {"label": "unfused", "sim": "healthy", "attributes": {"fusion": "off"}},
            {"label": "unfused2", "sim": "healthy", "attributes": {"fusion": "off"}},
        ],
    )
    code, folder = _run(path, tmp_path, "--no-report")
    assert code == 0 and read_matrix(folder).outcome == "CARRIER"
    capsys.readouterr()
    stale = read_matrix(folder).model_copy(update={"outcome": "NOT ISOLATED", "message": "stale"})
    RunFolder(folder).write_model(RunFolder.MATRIX, stale)
    assert main(["score", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "CARRIER" in out and "fusion: carrier" in out and "FAILED" not in out
    again = read_matrix(folder)
    assert again.outcome == "CARRIER" and again.message != "stale"
    assert main(["score", str(folder), "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("CARRIER: fusion carries the failure")


def test_summary_outcome_uses_the_matrix_pass_criterion(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"label": "loop", "sim": "repeat-loop", "attributes": {"fusion": "on"}},
            {"label": "ok", "sim": "healthy", "attributes": {"fusion": "off"}},
        ],
        pass_criterion={"min_pass_rate": 0.0},
    )
    code, folder = _run(path, tmp_path, "--no-report")
    assert code == 0 and read_matrix(folder).outcome == "ALL PASS"
    summary = RunFolder(folder).read_summary()
    assert summary is not None and summary.outcome is not None
    assert summary.outcome.passed and summary.outcome.min_pass_rate == 0.0
    assert summary.settings.infra_error_limit == 0.2


def test_a_deployment_whose_every_run_failed_is_not_judged_even_at_limit_1(
    tmp_path: Path,
) -> None:
    """One infrastructure-error rule (harness.stats.verdict.over_infra_limit): every run
    an infrastructure error is too many to judge, whatever the limit."""
    path = _write(
        tmp_path,
        [
            {"label": "broken", "sim": "invalid-json", "attributes": {"fusion": "on"}},
            {"label": "ok", "sim": "healthy", "attributes": {"fusion": "off"}},
        ],
        pass_criterion={"max_infra_error_rate": 1.0},
    )
    code, folder = _run(path, tmp_path, "--no-report")
    result = read_matrix(folder)
    broken = next(d for d in result.deployments if d.label == "broken")
    assert broken.runs == broken.infra_errors == 1 and broken.status == "error"
    assert "infrastructure errors (limit 100%)" in broken.reasons[0]
    assert code == 3 and result.outcome == "INCOMPLETE"


def test_run_folder_is_printed_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path,
        [
            {"label": "a", "sim": "healthy", "attributes": {"k": "x"}},
            {"label": "b", "sim": "healthy", "attributes": {"k": "y"}},
        ],
    )
    code, folder = _run(path, tmp_path, "--no-report", "--repeats", "2")
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(f"run folder: {folder}\n")
    manifest = RunFolder(folder).manifest()
    assert manifest is not None and manifest.args["repeats"] == 2
    assert "argv" not in manifest.args and read_matrix(folder).deployments[0].runs == 2
