"""A recording carries every numerics path (issue 46): ``harness record`` stores the
prefill sequences, the decode path (greedy decodes with per-step logprobs) and the routed
experts, each scored twice, and a comparison against a recording runs all three, as a
live one does; a recording made before (format 1) is refused for the paths it lacks, in
one line saying how to record again. Real reference servers over 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.numerics.models import RECORDED_VERSION, LogprobsResult, RecordedScores
from harness.recording import Recording
from harness.runfolder import RunFolder
from harness.sim.server import serve_in_thread

#: three scenarios whose turns a decode-only fault parts within a few tokens
#: (tests/numerics/test_logprobs_decode.py)
FILES = ("scenarios/enum_units.yaml", "scenarios/typed_scalars.yaml",
         "scenarios/followup_conversion.yaml")  # fmt: skip
RUNS = ("--repeats", "1", "--rounds", "2")


def _record(results: Path, run_id: str, profile: str = "healthy", **kw: Any) -> Path:
    """Record ``profile`` (its server stopped on return) into ``results/run_id``."""
    with serve_in_thread(profile, scenarios_dir="scenarios", **kw) as url:
        code = main(["record", *FILES, "--target", url, *RUNS, "--results", str(results),
                     "--run-id", run_id, "--no-progress"])  # fmt: skip
    assert code == 0, f"harness record of {profile} exited {code}"
    return results / run_id


def _compare(results: Path, run_id: str, base: str, cand: str) -> LogprobsResult:
    main(["compare", *FILES, "--baseline", base, "--candidate", cand, *RUNS,
          "--results", str(results), "--run-id", run_id, "--no-progress"])  # fmt: skip
    res = RunFolder(results / run_id).read_model(RunFolder.LOGPROBS, LogprobsResult)
    assert res is not None, f"{run_id}: no logprobs.json"
    return res


def _scores(rec: Path) -> RecordedScores:
    scores = Recording.open(rec).numerics()
    assert isinstance(scores, RecordedScores)
    return scores


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy recording, its server gone."""
    return _record(tmp_path_factory.mktemp("paths"), "H")


def test_a_recording_holds_the_decode_path_scored_twice(healthy: Path) -> None:
    scores = _scores(healthy)
    assert scores.version == RECORDED_VERSION == 2 and not scores.generation
    dec = scores.decode
    assert dec is not None and dec.generation and dec.api == "greedy"
    # one unit per assistant turn of every conversation, each decoded twice, bounded
    assert len(dec.sequences) > len(scores.sequences)
    assert all("@turn" in r.id for r in dec.sequences if r.messages and len(r.messages) > 2)
    for r in dec.sequences:
        assert 1 < len(r.first.keys) <= 65 and r.first.top[1] and r.second.keys
    # the plain reference server returns no routed experts: said, not pretended
    assert scores.experts is None and "returned no routed experts" in scores.not_recorded["experts"]
    info = Recording.open(healthy).info.numerics or ""
    assert "decode path:" in info and "greedy units" in info


def test_a_decode_only_fault_against_a_recording_is_seen_on_the_decode_path(
    healthy: Path, tmp_path: Path, capsys: Any
) -> None:
    """Prefill cannot see the decode-fault profile; the recorded decode path does."""
    with serve_in_thread("decode-fault", scenarios_dir="scenarios") as url:
        res = _compare(tmp_path, "df", str(healthy), url)
    out = capsys.readouterr().out
    assert "numerics (decode path, greedy" in out
    assert res.verdict != "REGRESSION" and res.decode is not None
    assert res.decode.verdict == "REGRESSION", res.decode.message
    assert res.decode.aa_source == "recorded baseline, scored twice"
    assert res.missing_paths == {}
    on_disk = json.loads((tmp_path / "df" / RunFolder.LOGPROBS).read_text())
    assert on_disk["decode"]["verdict"] == "REGRESSION"
