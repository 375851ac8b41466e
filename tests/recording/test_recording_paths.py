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


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of the decode-fault profile (prefill healthy, generation shifted)."""
    return _record(tmp_path_factory.mktemp("paths"), "D", "decode-fault", seed=3)


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
    # the recorded decode path decides: REGRESSION (exit 1) naming it in the headline
    summary = RunFolder(tmp_path / "df").read_summary()
    assert summary is not None and summary.verdict is not None
    assert summary.verdict.message.startswith("REGRESSION: numerics (decode): REGRESSION"), (
        summary.verdict.message
    )
    assert main(["score", str(tmp_path / "df"), "--quiet"]) == 1


def test_two_recordings_compare_on_the_decode_path(
    healthy: Path, faulty: Path, tmp_path: Path, capsys: Any
) -> None:
    """No server at all: the scenarios' reference conversations, decoded greedily in both
    recordings, part early on the decode-fault's side."""
    res = _compare(tmp_path, "rr", str(healthy), str(faulty))
    assert "numerics (decode path, greedy" in capsys.readouterr().out
    assert res.decode is not None and res.decode.verdict == "REGRESSION", res.decode.message
    assert {r.source for r in res.decode.sequences} == {"scenario"}
    assert res.decode.candidate["url"] == _scores(faulty).url


def test_a_live_baseline_against_a_recorded_candidate_decodes_its_units(
    faulty: Path, tmp_path: Path
) -> None:
    """The live baseline decodes the recorded candidate's units twice (its A/A floor)."""
    with serve_in_thread("healthy", scenarios_dir="scenarios") as url:
        res = _compare(tmp_path, "lr", url, str(faulty))
    assert res.decode is not None and res.decode.verdict == "REGRESSION", res.decode.message
    assert len(res.decode.sequences) == len(_scores(faulty).decode.sequences)  # type: ignore[union-attr]


def _as_format_1(rec: Path, dest: Path) -> Path:
    """A copy of ``rec`` as a recording made before issue 46: ``numerics.json`` of
    format 1 (the prefill sequences only)."""
    import shutil

    shutil.copytree(rec, dest)
    path = dest / "numerics.json"
    data = json.loads(path.read_text())
    data["version"] = 1
    for key in ("decode", "experts", "not_recorded"):
        data.pop(key)
    path.write_text(json.dumps(data))
    return dest


def test_a_recording_of_the_earlier_format_is_refused_for_its_missing_paths(
    healthy: Path, tmp_path: Path, capsys: Any
) -> None:
    """No decode path in a format-1 recording: one line says so and how to record again,
    ``missing_paths`` names it, and no decode verdict is pretended. Its routed experts are
    not asked for: the candidate returns none."""
    old = _as_format_1(healthy, tmp_path / "copies" / "old")
    with serve_in_thread("decode-fault", scenarios_dir="scenarios") as url:
        res = _compare(tmp_path, "old", str(old), url)
    out = capsys.readouterr().out
    assert res.decode is None and list(res.missing_paths) == ["decode"]
    line = res.missing_paths["decode"]
    assert line.startswith(f"decode path: not compared: the recording {old} holds no decode path")
    assert "record the baseline again: harness record --target " in line
    assert "--repeats 1 --rounds 2" in line and line in res.notes
    refusals = [x for x in out.splitlines() if "holds no decode path" in x]
    assert [x for x in refusals if x.startswith("numerics: ")] == [f"numerics: {line}"]
    # and once among the verdict's reasons, as the path left undecided
    assert [x for x in refusals if "numerics (decode): INCONCLUSIVE" in x] == [
        f"  - numerics (decode): INCONCLUSIVE: {line}"
    ]
    assert "numerics (decode path" not in out
    on_disk = json.loads((tmp_path / "old" / RunFolder.LOGPROBS).read_text())
    assert on_disk["decode"] is None and on_disk["missing_paths"] == {"decode": line}
    # a path the recording lacks is not a pass: the comparison cannot be NO CHANGE
    summary = RunFolder(tmp_path / "old").read_summary()
    assert summary is not None and summary.verdict is not None
    assert summary.verdict.verdict != "NO CHANGE", summary.verdict.message
    assert f"numerics (decode): INCONCLUSIVE: {line}" in summary.verdict.reasons


# ------------------------------------------------------------------ routed experts


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face hub cache (``HF_HOME``) holding the reference server's models'
    configs: where the SGLang flavour's MoE geometry is read (its ``/model_info`` names
    the model path, and carries no geometry itself, as SGLang's)."""
    from harness.sim import moe

    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for path, cfg in moe.MOE_MODELS.values():
        repo = tmp_path / "hf" / "hub" / ("models--" + path.replace("/", "--"))
        (repo / "snapshots" / "0123abcd").mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0123abcd")
        (repo / "snapshots" / "0123abcd" / "config.json").write_text(json.dumps(cfg))
    return tmp_path / "hf" / "hub"


SGLANG = {"flavour": "sglang-0.5.23", "capture": True}


def test_on_sglang_a_recording_holds_the_routed_experts_and_compares_them(
    hub: Path, tmp_path: Path, capsys: Any
) -> None:
    """The SGLang flavour with routed-experts capture: the recording holds both passes of
    every sequence's routed experts; a candidate that writes the shared expert's id into
    routed columns is a routed-experts REGRESSION against it, a healthy one NO CHANGE."""
    rec = _record(tmp_path / "rec", "S", **SGLANG)
    scores = _scores(rec)
    assert scores.experts is not None, scores.not_recorded
    exp = scores.experts
    assert (exp.num_layers, exp.top_k, exp.num_routed_experts) == (4, 4, 16)
    assert len(exp.sequences) == len([s for s in scores.sequences if s.messages])
    first, second = exp.passes(exp.sequences[0])
    assert first.shape == second.shape == (exp.sequences[0].rows, 4, 4)
    assert exp.sequences[0].key == "input_ids" and exp.sequences[0].rows > 10
    capsys.readouterr()
    with serve_in_thread("experts-dup-shared", scenarios_dir="scenarios", **SGLANG) as url:
        bad = _compare(tmp_path, "dup", str(rec), url)
    out = capsys.readouterr().out
    assert bad.experts is not None and bad.experts.verdict == "REGRESSION"
    assert "routed experts (" in out and "two routed experts replaced" in out
    with serve_in_thread("healthy", scenarios_dir="scenarios", seed=9, **SGLANG) as url:
        good = _compare(tmp_path, "ok", str(rec), url)
        # a recording made before routed experts were recorded: refused for them (the
        # live side returns them), for the decode path too
        old = _as_format_1(rec, tmp_path / "copies" / "old")
        res = _compare(tmp_path, "old", str(old), url)
    assert good.experts is not None and good.experts.verdict == "NO CHANGE"
    assert good.decode is not None and good.missing_paths == {}
    assert list(res.missing_paths) == ["decode", "routed experts"] and res.experts is None
    assert res.missing_paths["routed experts"].startswith(
        f"routed experts: not compared: the recording {old} holds no routed experts"
    )
    # two recordings: the routed experts of the sequences both asked with the same tokens
    # (the references at least)
    bad_rec = _record(tmp_path / "rec", "S2", "experts-dup-shared", **SGLANG)
    both = _compare(tmp_path, "rr", str(rec), str(bad_rec))
    assert both.experts is not None and both.experts.verdict == "REGRESSION"
    assert both.experts.sequences >= len([s for s in scores.sequences if s.source == "scenario"])


# ------------------------------------------------------------------ settling an INCONCLUSIVE


def test_an_inconclusive_against_a_recording_says_what_to_record() -> None:
    """A recording holds no more runs than it recorded: the INCONCLUSIVE names
    ``harness record --rounds K``, K the rounds of the comparison's repeats that hold the
    repeats needed beyond those spent (structured: ``Verdict.record_rounds``)."""
    import math

    from harness.pipeline import recorded_budget
    from harness.stats.aggregate import aggregate
    from harness.stats.verdict import RecordedBudget, decide
    from harness.summary import Settings, SideInfo
    from tests.compare.test_compare_verdict import CLEAN, _scores

    some = [["collapse"], ["collapse"], [], [], []]
    base = {s: _scores("baseline", s, CLEAN) for s in "ab"}
    cand = {s: _scores("candidate", s, some) for s in "ab"}
    b = {s: aggregate("baseline", "b", s, v, ["collapse"]) for s, v in base.items()}
    c = {s: aggregate("candidate", "c", s, v, ["collapse"]) for s, v in cand.items()}
    b["*"] = aggregate("baseline", "b", "*", [x for v in base.values() for x in v], ["collapse"])
    c["*"] = aggregate("candidate", "c", "*", [x for v in cand.values() for x in v], ["collapse"])
    live = decide(b, c).verdict
    assert live.verdict == "INCONCLUSIVE" and live.repeats_needed and live.record_rounds is None
    budget = RecordedBudget(("baseline",), repeats=5, rounds=1)
    res = decide(b, c, recorded=budget)
    v = res.verdict
    assert v.verdict == "INCONCLUSIVE" and v.repeats_needed == live.repeats_needed
    k = 1 + math.ceil(live.repeats_needed / 5)
    assert v.record_rounds == k == budget.rounds_for(live.repeats_needed)
    assert f"record the baseline again with harness record --repeats 5 --rounds {k}" in v.message
    assert f"compare with --rounds {k}" in v.message
    assert "more repeat" in v.message and "more than the recording holds" in v.message
    notes = [x.note for x in res.comparisons if x.repeats_needed]
    assert notes and all("harness record --repeats 5 --rounds" in (n or "") for n in notes)
    # from the comparison's sides and settings: the recorded side, the repeats, the look
    sides = [SideInfo(side="baseline", label="b", recorded="results/R"),
             SideInfo(side="candidate", label="c")]  # fmt: skip
    got = recorded_budget(sides, Settings(repeats=5, sequential=True, rounds=4, look=4))
    assert got == RecordedBudget(("baseline",), 5, 4)
    assert recorded_budget([SideInfo(side="baseline", label="b")], Settings(repeats=5)) is None


def test_compare_against_a_recording_ends_inconclusive_naming_the_rounds_to_record(
    tmp_path: Path, capsys: Any
) -> None:
    """Through the command line: a candidate looping in some runs (seeded to land in the
    band) against a 4 x 1 recording: INCONCLUSIVE, and the console says which
    ``harness record --rounds K`` would settle it."""
    files = FILES
    runs = ("--repeats", "4", "--rounds", "1", "--no-logprobs")
    with serve_in_thread("healthy", scenarios_dir="scenarios") as url:
        assert main(["record", *files, "--target", url, *runs, "--results", str(tmp_path),
                     "--run-id", "R", "--no-progress"]) == 0  # fmt: skip
    with serve_in_thread("repeat-loop@0.4", scenarios_dir="scenarios", seed=2) as url:
        main(["compare", *files, "--baseline", str(tmp_path / "R"), "--candidate", url, *runs,
              "--results", str(tmp_path), "--run-id", "C", "--no-progress"])  # fmt: skip
    summary = RunFolder(tmp_path / "C").read_summary()
    assert summary is not None
    v = summary.verdict
    assert v is not None and v.verdict == "INCONCLUSIVE" and v.repeats_needed, v
    assert v.record_rounds == 1 + -(-v.repeats_needed // 4)
    advice = f"harness record --repeats 4 --rounds {v.record_rounds}"
    assert advice in v.message and advice in capsys.readouterr().out
