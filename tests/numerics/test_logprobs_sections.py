"""The numerics section where it shows: ``harness compare`` (on by default, ``--no-logprobs``,
one line when a server has no logprobs API), the HTML/Markdown report and the pytest plugin."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.numerics.models import LogprobsResult
from harness.runfolder import RunFolder

pytest_plugins = ["pytester"]

#: the scenario library (`harness compare` with no URLs plays it)
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _folder(tmp_path: Path, run_id: str) -> RunFolder:
    return RunFolder(tmp_path / run_id)


def test_compare_has_a_numerics_section_by_default(tmp_path: Path, capsys: Any) -> None:
    args = ["compare", "scenarios", "--repeats", "1", "--results", str(tmp_path), "--no-progress"]
    assert main([*args, "--run-id", "ab"]) == 1
    out = capsys.readouterr().out
    n = len(list(SCENARIOS.glob("*.yaml")))  # one sequence per scenario
    assert f"numerics (token logprobs, vllm, {n} sequences" in out and "REGRESSION: A/B KL" in out
    res = _folder(tmp_path, "ab").read_model(RunFolder.LOGPROBS, LogprobsResult)
    assert res.verdict == "REGRESSION" and {s.source for s in res.sequences} == {"transcript"}
    html = (tmp_path / "ab" / "report.html").read_text()
    assert 'id="logprobs"' in html and '<svg class="strip"' in html and "baseline top-5" in html
    md = (tmp_path / "ab" / "report.md").read_text()
    assert "**Numerics**: 🔴 numerics (token logprobs" in md
    # the verdict's reasons name the numerics' verdict once (the message opens with it)
    (reason,) = [ln for ln in md.splitlines() if ln.startswith("- numerics (prefill): ")]
    assert reason.startswith("- numerics (prefill): REGRESSION: A/B KL")
    assert not reason.endswith("(REGRESSION)")
    assert main([*args, "--run-id", "aa", "--aa"]) == 0
    assert "NO CHANGE: A/B KL" in capsys.readouterr().out
    assert main([*args, "--run-id", "skip", "--no-logprobs"]) == 1
    assert "numerics (token logprobs" not in capsys.readouterr().out
    assert not (tmp_path / "skip" / RunFolder.LOGPROBS).exists()


def test_compare_says_in_one_line_when_a_server_has_no_logprobs(
    sim_url: Callable[..., str], tmp_path: Path, capsys: Any
) -> None:
    base = sim_url("healthy", scenarios_dir="scenarios")
    cand = sim_url("connection-drop", scenarios_dir="scenarios")
    args = ["compare", "scenarios/enum_units.yaml", "--baseline", base, "--candidate", cand]
    main([*args, "--repeats", "1", "--results", str(tmp_path), "--run-id", "x", "--no-progress",
          "--max-retries", "0"])  # fmt: skip
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("logprobs:")]
    assert len(lines) == 1 and lines[0].startswith("logprobs: not compared: ")
    assert not (tmp_path / "x" / RunFolder.LOGPROBS).exists()


def test_a_numerics_regression_fails_a_compare_whose_behaviour_is_unchanged(
    sim_url: Callable[..., str], tmp_path: Path, capsys: Any
) -> None:
    """logprobs-nan behaves as healthy but returns NaN logprobs: exit 1, saying why."""
    base = sim_url("healthy", scenarios_dir=SCENARIOS)
    cand = sim_url("logprobs-nan", scenarios_dir=SCENARIOS)
    args = ["compare", str(SCENARIOS), "--baseline", base, "--candidate", cand, "--repeats", "1",
            "--no-sequential", "--temperature", "0", "--results", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main([*args, "--run-id", "nan"]) == 1
    out = capsys.readouterr().out
    summary = _folder(tmp_path, "nan").read_summary()
    assert summary is not None and summary.verdict.verdict == "REGRESSION"
    assert summary.verdict.message.startswith("REGRESSION: numerics (prefill): ")
    assert "; behaviour: NO CHANGE" in summary.verdict.message  # the behaviour kept beside
    res = _folder(tmp_path, "nan").read_model(RunFolder.LOGPROBS, LogprobsResult)
    assert res is not None and res.verdict == "REGRESSION"
    head = out[: out.index("numerics (token logprobs")]  # the headline, before the section
    assert "REGRESSION" in head and "numerics" in head
    md = (tmp_path / "nan" / "report.md").read_text()
    assert md.startswith("## 🔴") and "**REGRESSION** — numerics (prefill): " in md.splitlines()[0]
    assert main(["score", str(tmp_path / "nan"), "--quiet"]) == 1  # re-scored: the same
    assert main([*args, "--run-id", "behaviour", "--no-logprobs"]) == 0  # judged alone


def test_report_escapes_model_text_in_the_worst_tokens(tmp_path: Path) -> None:
    assert main(["logprobs", "--results", str(tmp_path), "--run-id", "r"]) == 1
    path = tmp_path / "r" / RunFolder.LOGPROBS
    data = json.loads(path.read_text())
    data["sequences"][0]["ab"]["worst"][0]["token"] = "<script>alert(1)</script>"
    path.write_text(json.dumps(data))
    assert main(["report", str(tmp_path / "r")]) == 0
    html = (tmp_path / "r" / "report.html").read_text()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_plugin_adds_the_numerics_line_with_a_baseline(
    pytester: pytest.Pytester, sim_url: Callable[..., str]
) -> None:
    pytester.makeini("[pytest]\n")
    scen = Path(__file__).resolve().parents[2] / "scenarios"
    base = sim_url("healthy", scenarios_dir=scen)
    cand = sim_url("fused-regression", scenarios_dir=scen)
    args = [
        str(scen),
        "--harness-target",
        cand,
        "--harness-baseline",
        base,
        "--harness-repeats",
        "1",
        "-p",
        "no:cacheprovider",
    ]
    result = pytester.runpytest_subprocess(*args)
    result.stdout.fnmatch_lines(
        ["*numerics (token logprobs, vllm, * sequences*REGRESSION: A/B KL*"]
    )
    off = pytester.runpytest_subprocess(*args, "--harness-logprobs", "false")
    assert "numerics (token logprobs" not in off.stdout.str()


def test_e2e_numerics_step_fails_the_job_unless_rope_is_a_regression() -> None:
    from e2e import driver
    from e2e.logprobs_step import failed

    def step(name: str, code: int, verdict: str) -> driver.Step:
        return driver.Step(name, ["logprobs"], exit_code=code, figures={"verdict": verdict})

    aa, rope = step("logprobs A/A", 0, "NO CHANGE"), step("logprobs A/B rope", 1, "REGRESSION")
    kv = step("logprobs A/B kv-q4_0", 0, "NO CHANGE")
    assert failed([aa, rope, kv]) == [] and driver.exit_code([aa, rope, kv]) == 0
    missed = step("logprobs A/B rope", 0, "NO CHANGE")
    assert failed([aa, missed]) == ["logprobs rope: NO CHANGE, expected REGRESSION"]
    assert driver.exit_code([aa, missed, kv]) == 1
    alarm = step("logprobs A/A", 1, "REGRESSION")
    assert driver.exit_code([alarm, rope]) == 1
    assert len(driver.failures([alarm, missed])[1]) == 2  # both named, one line each
    assert driver.exit_code([aa, rope, step("logprobs A/B kv-q4_0", 1, "REGRESSION")]) == 0


def test_the_section_sends_the_targets_key_and_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The numerics section scores with the comparison's own targets: their roots, the
    baseline's API key and its request timeout (an authenticated server is not refused)."""
    from harness.client.target import TargetConfig
    from harness.numerics import section
    from harness.numerics.run import LogprobsOptions

    assert main(["compare", "scenarios/enum_units.yaml", "--repeats", "1", "--no-logprobs",
                 "--results", str(tmp_path), "--run-id", "r", "--no-progress"]) in (0, 1)  # fmt: skip
    seen: dict[str, Any] = {}

    def fake(seqs: Any, base: str, cand: str, opts: LogprobsOptions) -> Any:
        seen.update(base=base, cand=cand, opts=opts)
        raise section.LogprobsError("stop here")

    monkeypatch.setattr(section, "compare_logprobs", fake)
    monkeypatch.setenv("HARNESS_TEST_KEY", "k-123")
    b = TargetConfig(base_url="http://h:1/v1", api_key_env="HARNESS_TEST_KEY", timeout_s=7)
    c = TargetConfig(base_url="http://h:2/v1", api_key_env="HARNESS_TEST_KEY")
    res, why = section.logprobs_section(_folder(tmp_path, "r"), b, c, LogprobsOptions(model="m"))
    assert res is None and why == "logprobs: not compared: stop here"
    assert (seen["base"], seen["cand"]) == ("http://h:1", "http://h:2")
    assert (seen["opts"].api_key, seen["opts"].timeout_s, seen["opts"].model) == ("k-123", 7, "m")
