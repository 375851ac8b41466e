"""``harness run`` end to end on the reference server: summary.json, report and exit
codes (finding 8); resuming a folder recorded against another server refused (finding 4)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from harness.runfolder import RunFolder
from tests.compare.test_compare import CLOCK, ENTROPY
from tests.conftest import HarnessCli


def _run(cli: HarnessCli, scenarios: Path, url: str, *extra: str, run_id: str | None = None) -> int:
    return cli("run", scenarios, "--target", url, "--repeats", "2", *extra, run_id=run_id)


def test_run_scores_reports_and_exits_on_pass_rate(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(ENTROPY, CLOCK)
    healthy = sim_url("healthy", scenarios_dir=scenarios)
    fused = sim_url("fused-regression", scenarios_dir=scenarios)
    results = harness_cli.results
    assert _run(harness_cli, scenarios, healthy, run_id="ok") == 0
    out = capsys.readouterr().out
    folder = results / "ok"
    assert f"report: {folder / 'report.html'}" in out and (folder / "report.html").is_file()
    s = RunFolder.open(folder).read_summary()
    assert s.aggregate("target", "*").rates["passed"].k == 4  # type: ignore[union-attr]

    assert _run(harness_cli, scenarios, fused, "--label", "fused", run_id="bad") == 1
    out = capsys.readouterr().out
    assert "passed" in out and "failure kinds" in out and "repeat_loop" in out
    bad = RunFolder.open(results / "bad").read_summary()
    assert bad.aggregate("fused", "entropy").rates["passed"].k == 0  # type: ignore[union-attr]
    # the same folder, rescored with a lenient threshold: the model failures do not fail it
    assert _run(harness_cli, scenarios, fused, "--resume", "bad", "--label", "fused",
                "--min-pass-rate", "0") == 0  # fmt: skip
    assert main(["run", "--target", fused, "--min-pass-rate", "1.5"]) == 2


def test_resume_refuses_another_server_or_changed_scenarios(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    a = sim_url("healthy", scenarios_dir=scenarios)
    b = sim_url("healthy", scenarios_dir=scenarios)
    results = harness_cli.results
    assert _run(harness_cli, scenarios, a, run_id="x") == 0
    transcripts = (results / "x" / "transcripts.jsonl").read_text()
    capsys.readouterr()

    assert _run(harness_cli, scenarios, b, "--resume", "x") == 2
    err = capsys.readouterr().err
    assert f"--target '{a}' (now '{b}')" in err and len(err.strip().splitlines()) == 1
    assert _run(harness_cli, scenarios, a, "--stream", run_id="x") == 2
    assert "--stream 'off' (now 'on')" in capsys.readouterr().err
    assert _run(harness_cli, scenarios, a + "/v1/", "--resume", "x") == 0  # the same server

    clock = scenarios / "clock.yaml"
    clock.write_text(clock.read_text().replace("What time is it?", "What time is it now?"))
    assert _run(harness_cli, scenarios, a, "--resume", "x") == 2
    assert "scenario file(s) changed since: clock" in capsys.readouterr().err
    assert (results / "x" / "transcripts.jsonl").read_text() == transcripts  # nothing mixed in


def test_compare_run_id_of_another_comparison_is_refused(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    base = sim_url("healthy", scenarios_dir=scenarios)
    cand = sim_url("healthy", scenarios_dir=scenarios)
    other = sim_url("healthy", scenarios_dir=scenarios)

    def compare(*sides: str, repeats: str) -> int:
        return harness_cli("compare", scenarios, *sides, "--repeats", repeats, run_id="c")

    assert compare("--baseline", base, "--candidate", cand, repeats="1") == 0
    manifest = json.loads((harness_cli.results / "c" / "manifest.json").read_text())
    assert manifest["args"]["candidate"] == cand
    capsys.readouterr()
    assert compare("--baseline", base, "--candidate", other, repeats="1") == 2
    assert f"--candidate '{cand}' (now '{other}')" in capsys.readouterr().err
    assert compare("--baseline", base, "--candidate", cand, repeats="2") == 2
    assert "--repeats 1 (now 2)" in capsys.readouterr().err


def test_interrupted_run_says_how_to_resume(
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    harness_cli: HarnessCli,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.cli import run as run_cmd

    def ctrl_c(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cmd, "run_many_sync", ctrl_c)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/local/bin/{name}")  # on PATH
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)
    assert _run(harness_cli, scenarios, url, run_id="r") == 130
    err = capsys.readouterr().err
    assert "resume with: harness run " in err and "--no-progress --resume r" in err


def test_score_of_gsm8k_and_boot_folders(
    sim_url: Callable[..., str],
    tmp_path: Path,
    harness_cli: HarnessCli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"What is {i} plus {i}?", "answer": f"so\n#### {2 * i}"}) + "\n"
            for i in range(1, 7)
        )
    )
    url = sim_url("healthy", gsm8k_path=str(data))
    argv = ["--target", url, "--data", str(data), "--num-questions", "6", "--num-shots", "1"]
    assert harness_cli("gsm8k", *argv, run_id="g") == 0
    folder = harness_cli.results / "g"
    first = json.loads((folder / "gsm8k.json").read_text())
    (folder / "gsm8k.json").unlink()
    capsys.readouterr()
    assert main(["score", str(folder)]) == 0
    again = json.loads((folder / "gsm8k.json").read_text())
    assert again["sides"][0]["accuracy"] == first["sides"][0]["accuracy"]
    assert "GSM8K g" in capsys.readouterr().out
    boot = tmp_path / "boot-1"
    boot.mkdir()
    (boot / "boot.json").write_text("{}")
    assert main(["score", str(boot)]) == 2
    err = capsys.readouterr().err
    assert "a boot folder" in err and f"harness report {boot}" in err


def test_run_records_its_settings_in_the_summary(
    write_scenarios: Callable[..., Path], sim_url: Callable[..., str], harness_cli: HarnessCli
) -> None:
    scenarios = write_scenarios(CLOCK)
    url = sim_url("healthy", scenarios_dir=scenarios)
    assert _run(harness_cli, scenarios, url, "--stream", "both", run_id="st") == 0
    settings = RunFolder.open(harness_cli.results / "st").read_summary().settings
    assert (settings.stream, settings.repeats, settings.scenarios) == ("both", 2, ["clock"])


def test_aa_with_a_candidate_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "compare",
        "--aa",
        "--baseline",
        "http://127.0.0.1:9",
        "--candidate",
        "http://127.0.0.1:8",
    ]
    assert main(argv) == 2
    assert "--aa compares one server with itself" in capsys.readouterr().err
