"""Recorded baselines: ``harness record``, then ``harness compare``/``logprobs``
against the recording once its server is gone, over real sockets to the reference server.

The recordings are made once per module (``recordings``): each inside its own
``serve_in_thread`` block, so the server is stopped before anything compares against it;
every comparison starts another server on a new port, or none at all. The launched forms
(``record --cmd``, ``compare --baseline-cmd/--candidate-cmd``) and GSM8K answers are in
``tests/recording/test_recording_cli.py``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.errors import TokenizationMismatch
from harness.numerics.models import RecordedScores
from harness.numerics.run import LogprobsOptions, check_recorded_tokens, live_sequences
from harness.recording import Recording, RecordingInfo
from harness.runfolder import RunFolder
from harness.sim.server import serve_in_thread
from harness.summary import Summary

ROOT = Path(__file__).parents[2]
#: three scenarios the fused-regression profile breaks in two (a loop, collapsed values)
#: and leaves alone in one
SCENARIO_FILES = ("no_params_tool.yaml", "parallel_calls.yaml", "tool_choice_required.yaml")
#: runs per scenario per round, and rounds, of the healthy recording A (3 x 4: enough for
#: `make compare`'s default 4 rounds at REPEATS=3)
REPEATS, ROUNDS = 3, 4


def _gsm8k_file(folder: Path) -> Path:
    """A tiny GSM8K-format file: its few-shot prompts are extra numerics sequences
    (``--logprobs-gsm8k``), so two recordings share >= 7 sequences (the paired test)."""
    rows = [
        {"question": f"Tom has {i} apples and buys {i + 2} more. How many now?",
         "answer": f"{i} + {i + 2} = {2 * i + 2}\n#### {2 * i + 2}"}
        for i in range(1, 11)
    ]  # fmt: skip
    path = folder / "gsm8k-mini.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@dataclass
class Recorded:
    root: Path
    scenarios: Path
    gsm8k: Path
    #: healthy (3 x 4), fused-regression (3 x 2), another healthy (3 x 2, other seed)
    a: Path
    b: Path
    a2: Path
    #: the URL each was recorded from (its server stopped since)
    urls: dict[str, str]


def _record(
    rec: dict[str, Any], profile: str, run_id: str, rounds: int, seed: int, label: str
) -> tuple[int, str]:
    """Record ``profile`` into ``<root>/recordings/<run_id>``; the server is stopped on
    return (its ``with`` block left)."""
    with serve_in_thread(profile, scenarios_dir=str(rec["scenarios"]), seed=seed) as url:
        code = main(
            ["record", str(rec["scenarios"]), "--target", url, "--label", label,
             "--repeats", str(REPEATS), "--rounds", str(rounds), "--results",
             str(rec["root"] / "recordings"), "--run-id", run_id, "--no-progress",
             "--logprobs-gsm8k", "4", "--gsm8k-data", str(rec["gsm8k"])]
        )  # fmt: skip
    return code, url


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("recording")
    scen = root / "scenarios"
    scen.mkdir()
    for name in SCENARIO_FILES:
        shutil.copy(ROOT / "scenarios" / name, scen / name)
    ctx: dict[str, Any] = {"root": root, "scenarios": scen, "gsm8k": _gsm8k_file(root)}
    urls = {}
    for profile, run_id, rounds, seed, label in (
        ("healthy", "A", ROUNDS, 0, "unfused"),
        ("fused-regression", "B", 2, 1, "fused"),
        ("healthy", "A2", 2, 5, "unfused-again"),
    ):
        code, urls[run_id] = _record(ctx, profile, run_id, rounds, seed, label)
        assert code == 0, f"harness record of {profile} exited {code}"
    rec = root / "recordings"
    return Recorded(root, scen, ctx["gsm8k"], rec / "A", rec / "B", rec / "A2", urls)


def _compare(results: Path, run_id: str, base: str, cand: str, *extra: str) -> int:
    return main(
        ["compare", "--baseline", base, "--candidate", cand, "--repeats", str(REPEATS),
         "--rounds", "2", "--results", str(results), "--run-id", run_id, "--no-progress",
         *extra]
    )  # fmt: skip


def _per_side(folder: Path) -> dict[tuple[str, str], list[int]]:
    """(side, scenario) -> the repeats in the folder's transcripts."""
    out: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    for r in RunFolder(folder).records():
        out[(r.side, r.scenario_id)].append(r.repeat)
    return {k: sorted(v) for k, v in out.items()}


def _summary(folder: Path) -> Summary:
    s = RunFolder.open(folder).read_summary()
    assert s is not None, f"{folder}: no summary.json"
    return s


# ------------------------------------------------------------------ 1. record, stop, compare


def test_record_writes_a_complete_recording(recordings: Recorded) -> None:
    """Manifest kind ``record``, complete; repeats x rounds runs per scenario, every
    scenario; numerics.json: the conversations, the scenario references (and the GSM8K
    prompts), each scored twice; the server's facts (fusion state) in the recording info."""
    folder = RunFolder(recordings.a)
    manifest = folder.manifest()
    assert manifest is not None and manifest.kind == "record"
    info = RecordingInfo.model_validate(manifest.extra["recording"])
    assert info.complete and info.repeats_per_round == REPEATS and info.rounds == ROUNDS
    assert info.label == "unfused" and info.model == "harness-sim"
    assert set(info.scenarios) == {"no_params_tool", "parallel_calls", "tool_choice_required"}
    runs = _per_side(recordings.a)
    assert runs == {("baseline", sid): list(range(REPEATS * ROUNDS)) for sid in info.scenarios}
    assert info.side is not None and info.side.fusion is not None
    assert info.side.fusion["state"] == "OFF"  # healthy: fusion off, read from /server_info
    assert info.boot is None  # --target: nothing launched
    b_info = Recording.open(recordings.b).info
    assert b_info.side is not None and b_info.side.fusion is not None
    assert b_info.side.fusion["state"] in ("ON", "UNKNOWN")

    scores = folder.read_model("numerics.json", RecordedScores)
    assert scores is not None and scores.api == "vllm" and scores.top_k == 5
    sources = collections.Counter(s.source for s in scores.sequences)
    assert sources == {"transcript": 3, "scenario": 3, "gsm8k": 4}
    refs = {s.id for s in scores.sequences if s.source == "scenario"}
    assert refs == {f"{sid} (reference)" for sid in info.scenarios}
    for s in scores.sequences:  # scored twice, the same tokens both times
        assert s.first.keys and s.first.keys == s.second.keys
    assert info.numerics is not None and info.numerics.startswith("recorded")


def test_compare_recording_with_healthy_server_is_no_change(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recorded server is gone; another healthy one on a new port: NO CHANGE, exit 0;
    the baseline side says ``recorded``; sequential, stopped at round 1: the baseline holds
    exactly 1 x repeats runs per scenario (copied round by round, not all 12)."""
    with serve_in_thread("healthy", scenarios_dir=str(recordings.scenarios), seed=3) as url:
        assert url != recordings.urls["A"]  # another server, another port
        code = _compare(tmp_path, "ok", str(recordings.a), url, str(recordings.scenarios))
    out = capsys.readouterr().out
    assert code == 0, out
    s = _summary(tmp_path / "ok")
    assert s.verdict is not None and s.verdict.verdict == "NO CHANGE", s.verdict
    base = next(x for x in s.sides if x.side == "baseline")
    assert base.recorded == str(recordings.a) and base.label == "unfused"
    assert base.fusion is not None and base.fusion["state"] == "OFF"
    assert f"(recorded: {recordings.a})" in out
    look = s.settings.look
    assert look == 1  # nothing looked worse: stopped early
    runs = _per_side(tmp_path / "ok")
    for sid in ("no_params_tool", "parallel_calls", "tool_choice_required"):
        assert runs[("baseline", sid)] == list(range(look * REPEATS))
        assert runs[("candidate", sid)] == list(range(look * REPEATS))
    lp = json.loads((tmp_path / "ok" / "logprobs.json").read_text())
    assert lp["verdict"] != "REGRESSION" and lp["aa_source"].startswith("recorded baseline")
    assert len(lp["sequences"]) == 10  # every recorded sequence, scored by the candidate


def test_compare_recording_with_fused_regression_server_is_a_regression(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_in_thread("fused-regression", scenarios_dir=str(recordings.scenarios)) as url:
        code = _compare(tmp_path, "bad", str(recordings.a), url, str(recordings.scenarios))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "REGRESSION" in out and f"(recorded: {recordings.a})" in out
    s = _summary(tmp_path / "bad")
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    assert "repeat_loop" in s.verdict.regressed_kinds
    base = next(x for x in s.sides if x.side == "baseline")
    assert base.recorded == str(recordings.a)
    runs = _per_side(tmp_path / "bad")
    look = s.settings.look
    assert look is not None and 1 <= look <= 2
    for sid in ("no_params_tool", "parallel_calls", "tool_choice_required"):
        # copied round by round: the recording holds 12, the look reads look x 3
        assert runs[("baseline", sid)] == list(range(look * REPEATS))
        assert len(runs[("candidate", sid)]) == look * REPEATS
    lp = json.loads((tmp_path / "bad" / "logprobs.json").read_text())
    assert lp["verdict"] == "REGRESSION"  # the numerics see the fused build too


# ------------------------------------------------------------------ 3. two recordings, no server


def test_two_recordings_compare_without_any_server(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """healthy A vs fused-regression B, both recorded, nothing running: REGRESSION (both
    in compare and in logprobs, on the scenario references both recorded); A vs another
    healthy recording A2: not a regression."""
    a, b, a2 = str(recordings.a), str(recordings.b), str(recordings.a2)
    scen = str(recordings.scenarios)
    assert _compare(tmp_path, "ab", a, b, scen) == 1
    out = capsys.readouterr().out
    s = _summary(tmp_path / "ab")
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    sides = {x.side: x for x in s.sides}
    assert sides["baseline"].recorded == a and sides["candidate"].recorded == b
    assert sides["candidate"].label == "fused"
    assert "REGRESSION" in out

    assert main(["logprobs", "--baseline", a, "--candidate", b, "--results", str(tmp_path),
                 "--run-id", "lab"]) == 1  # fmt: skip
    out = capsys.readouterr().out
    lp = json.loads((tmp_path / "lab" / "logprobs.json").read_text())
    assert lp["verdict"] == "REGRESSION" and "REGRESSION" in out
    ids = {r["id"] for r in lp["sequences"]}
    assert {f"{sid} (reference)" for sid in ("no_params_tool", "parallel_calls")} <= ids
    assert {"gsm8k-5", "gsm8k-8"} <= ids

    assert _compare(tmp_path, "aa2", a, a2, scen) == 0
    s = _summary(tmp_path / "aa2")
    assert s.verdict is not None and s.verdict.verdict != "REGRESSION"
    assert main(["logprobs", "--baseline", a, "--candidate", a2, "--results", str(tmp_path),
                 "--run-id", "laa2"]) == 0  # fmt: skip
    lp = json.loads((tmp_path / "laa2" / "logprobs.json").read_text())
    assert lp["verdict"] != "REGRESSION"


# ------------------------------------------------------------------ 6. refusals: one line, exit 2


def _edited_scenarios(recordings: Recorded, tmp: Path, how: str) -> Path:
    folder = tmp / f"scenarios-{how}"
    shutil.copytree(recordings.scenarios, folder)
    if how == "changed":
        p = folder / "parallel_calls.yaml"
        p.write_text(p.read_text().replace("Paris", "Lyon", 1), encoding="utf-8")
    elif how == "added":
        shutil.copy(ROOT / "scenarios" / "enum_units.yaml", folder / "enum_units.yaml")
    elif how == "missing":
        (folder / "tool_choice_required.yaml").unlink()
    return folder


def _copy_recording(recordings: Recorded, tmp: Path, name: str) -> Path:
    dest = tmp / name
    shutil.copytree(recordings.a, dest)
    return dest


def _unfinished(recordings: Recorded, tmp: Path) -> Path:
    dest = _copy_recording(recordings, tmp, "unfinished")
    m = json.loads((dest / "manifest.json").read_text())
    m["extra"]["recording"]["complete"] = False
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


def _retokenised(recordings: Recorded, tmp: Path) -> Path:
    """The recording's first numerics sequence, first pass, with other token ids: the
    candidate no longer tokenises it as recorded."""
    dest = _copy_recording(recordings, tmp, "retokenised")
    n = json.loads((dest / "numerics.json").read_text())
    keys = n["sequences"][0]["first"]["keys"]
    n["sequences"][0]["first"]["keys"] = [keys[0], "123456789", *keys[2:]]
    (dest / "numerics.json").write_text(json.dumps(n))
    return dest


def _edited_transcripts(recordings: Recorded, tmp: Path, how: str) -> Path:
    """A copy of recording A whose transcripts were truncated, emptied, padded,
    renumbered or given another scenario's runs."""
    dest = _copy_recording(recordings, tmp, how)
    path = dest / "transcripts.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    recs = [json.loads(ln) for ln in lines]
    if how == "truncated":
        lines = lines[: len(lines) // 3]
    elif how == "emptied":
        lines = []
    elif how == "padded":
        lines = [*lines, lines[0]]  # a run twice
    elif how == "renumbered":
        for r in recs:
            r["repeat"] += 100  # run_key kept: it disagrees
        lines = [json.dumps(r) + "\n" for r in recs]
    elif how == "transcripts-dev-zero":
        path.unlink()
        path.symlink_to("/dev/zero")
        return dest
    elif how == "nested-line":
        deep = "[" * 100_000 + "]" * 100_000
        lines = [lines[0], '{"x": ' + deep + ', "run_key": "baseline/a/0/nostream"}\n', *lines]
    elif how == "another-scenario":
        other = next(r for r in recs if r["scenario_id"] == "parallel_calls")
        for i, r in enumerate(recs):
            if r["scenario_id"] == "no_params_tool":
                r |= {k: other[k] for k in ("scenario_hash", "scenario", "turns")}
                lines[i] = json.dumps(r) + "\n"
    path.write_text("".join(lines))
    return dest


def _edited_manifest(recordings: Recorded, tmp: Path, how: str) -> Path:
    dest = _copy_recording(recordings, tmp, how)
    m = json.loads((dest / "manifest.json").read_text())
    if how == "newer-harness":
        m["extra"]["recording"]["harness_version"] = "9.0.0"
    elif how == "newer-format":
        m["extra"]["recording"]["format"] = 2
    elif how == "unknown-version":
        m["extra"]["recording"]["harness_version"] = "whatever"
    elif how == "manifest-dev-zero":
        (dest / "manifest.json").unlink()
        (dest / "manifest.json").symlink_to("/dev/zero")
        return dest
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


TRANSCRIPT_EDITS = ("truncated", "emptied", "padded", "renumbered", "another-scenario",
                    "transcripts-dev-zero", "nested-line")  # fmt: skip
MANIFEST_EDITS = ("newer-harness", "newer-format", "unknown-version", "manifest-dev-zero")

#: (case, extra compare arguments, what the one line must name); the test body makes the
#: edited scenario folder or the baseline folder each case needs
REFUSALS: list[tuple[str, list[str], list[str]]] = [
    ("changed", [], ["scenario file changed since it was recorded", "parallel_calls.yaml"]),
    ("added", [], ["not in the recording", "enum_units"]),
    ("missing", [], ["missing", "tool_choice_required"]),
    ("temperature", ["--temperature", "0.2"], ["temperature 0.7 recorded, 0.2 now"]),
    ("seed", ["--sampling-seed", "7"], ["sampling seed 0 recorded, 7 now"]),
    ("stream", ["--stream", "on"], ["stream mode off recorded, on now"]),
    ("model", ["--model", "other-model"], ["model 'harness-sim' recorded, 'other-model' now"]),
    ("repeats", ["--repeats", "10"], ["too few runs: 12 per scenario recorded", "up to 20"]),
    ("rounds", ["--rounds", "5"], ["too few runs: 12 per scenario recorded", "up to 15"]),
    ("compare-folder", [], ["not a recording", "made by harness compare"]),
    ("no-folder", [], ["no such recording"]),
    ("unfinished", [], ["did not finish", "--resume unfinished"]),
    ("tokens", [], ["no longer tokenises the same", "123456789"]),
    ("truncated", [], ["transcripts.jsonl lacks", "runs the comparison reads", "record it again"]),
    ("emptied", [], ["transcripts.jsonl lacks 18 of the 18 runs"]),
    ("padded", [], ["1 run(s) recorded twice"]),
    ("renumbered", [], ["run_key disagrees", "transcripts.jsonl lacks 18 of the 18"]),
    ("another-scenario", [], ["of another scenario or scenario version", "no_params_tool #0"]),
    ("newer-harness", [], ["recorded by harness 9.0.0", "upgrade the harness"]),
    ("newer-format", [], ["recording format 2", "upgrade the harness"]),
    ("unknown-version", [], ["unknown harness version ('whatever'", "record the baseline again"]),
    ("transcripts-dev-zero", [], ["transcripts.jsonl: not a regular file"]),
    ("manifest-dev-zero", [], ["manifest.json: not a regular file"]),
    ("nested-line", [], ["1 line(s) of transcripts.jsonl are not valid JSON (or nested too deep)"]),
]


@pytest.mark.parametrize("case,extra,names", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_a_recording_that_cannot_serve_is_refused_in_one_line(
    recordings: Recorded,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    extra: list[str],
    names: list[str],
) -> None:
    scen, base = recordings.scenarios, recordings.a
    if case in ("changed", "added", "missing"):
        scen = _edited_scenarios(recordings, tmp_path, case)
    elif case == "compare-folder":
        base = RunFolder.create("compare", results=tmp_path, run_id="a-comparison").path
    elif case == "no-folder":
        base = tmp_path / "no-such-recording"
    elif case == "unfinished":
        base = _unfinished(recordings, tmp_path)
    elif case == "tokens":
        base = _retokenised(recordings, tmp_path)
    elif case in TRANSCRIPT_EDITS:
        base = _edited_transcripts(recordings, tmp_path, case)
    elif case in MANIFEST_EDITS:
        base = _edited_manifest(recordings, tmp_path, case)
    results = tmp_path / "results"
    with serve_in_thread("healthy", scenarios_dir=str(recordings.scenarios)) as url:
        capsys.readouterr()
        code = _compare(results, "refused", str(base), url, str(scen), *extra)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for name in names:
        assert name in lines[0], (name, lines[0])
    if case != "no-folder":
        assert str(base) in lines[0]
    # refused before any run: the folder holds the report a CI job posts, nothing else
    assert sorted(p.name for p in (results / "refused").iterdir()) == ["report.html", "report.md"]
    report = (results / "refused" / "report.md").read_text()
    assert "RECORDING REFUSED" in report and names[0] in report and "**Next step:**" in report


def test_a_recording_refused_as_the_candidate_names_the_candidate(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both sides recorded, the candidate recorded with fewer rounds than asked."""
    code = _compare(tmp_path, "x", str(recordings.a), str(recordings.b), str(recordings.scenarios),
                    "--rounds", "3")  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"{recordings.b} cannot serve as the candidate" in err[0]
    assert "too few runs: 6 per scenario recorded (3 x 2 rounds)" in err[0]


def test_one_recording_on_both_sides_or_two_models_is_refused(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, scen = str(recordings.a), str(recordings.scenarios)
    assert _compare(tmp_path, "same", a, a, scen) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "both the baseline and the candidate" in err[0], err
    other = _copy_recording(recordings, tmp_path, "other-model")
    m = json.loads((other / "manifest.json").read_text())
    m["extra"]["recording"]["model"] = "another-model"
    (other / "manifest.json").write_text(json.dumps(m))
    assert _compare(tmp_path, "models", a, str(other), scen) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different models" in err[0] and "'another-model'" in err[0], err
    # refused before any run: no run folder's manifest, only the refusal's report.md
    for run in ("same", "models"):
        assert not (tmp_path / run / "manifest.json").exists()
        assert (
            "cannot" in (tmp_path / run / "report.md").read_text()
            or "refused" in (tmp_path / run / "report.md").read_text().lower()
        )


def test_the_harness_version_says_which_code_wrote_it() -> None:
    """Not a constant: the release and, from a git checkout, its commit."""
    import sys

    from harness._version import RELEASE
    from harness.runfolder import git_revision

    version = subprocess.run(  # a fresh import: the commit checked out now
        [sys.executable, "-c", "import harness; print(harness.__version__)"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    assert version.startswith(RELEASE) and version != RELEASE or not (ROOT / ".git").exists()
    rev = git_revision()
    if rev is not None and (ROOT / ".git").exists():
        assert f"+g{rev.split('+')[0]}" in version, version


def test_check_recorded_tokens_directly(recordings: Recorded, tmp_path: Path) -> None:
    """One request on the candidate: the recorded tokens pass, other ones are a
    TokenizationMismatch naming the sequence and the position."""
    scores = Recording.open(recordings.a).numerics()
    assert scores is not None
    assert live_sequences(scores)[0].id == scores.sequences[0].id
    with serve_in_thread("fused-regression", scenarios_dir=str(recordings.scenarios)) as url:
        check_recorded_tokens(scores, url, LogprobsOptions())  # the same tokenizer: passes
        bad = Recording.open(_retokenised(recordings, tmp_path)).numerics()
        with pytest.raises(TokenizationMismatch, match="position 1"):
            check_recorded_tokens(bad, url, LogprobsOptions())


# ------------------------------------------------------------------ 7. make compare UNFUSED=<rec>


def test_makefile_passes_a_recording_folder_through() -> None:
    out = subprocess.run(
        ["make", "-n", "compare", "UNFUSED=results/x", "FUSED=http://h:1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "compare --baseline results/x --baseline-label unfused --candidate http://h:1" in out


def test_make_compare_of_a_recording_alone_does_not_suggest_aa() -> None:
    """AA=1 is refused for a recording: the hint names the candidate instead."""
    res = subprocess.run(
        ["make", "compare", "UNFUSED=results/x", "STAMP=Makefile"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2
    assert "AA=1" not in res.stderr and "FUSED=url" in res.stderr, res.stderr
    res = subprocess.run(
        ["make", "compare", "UNFUSED=http://h:1", "STAMP=Makefile"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2 and "AA=1" in res.stderr  # a live server can be compared with itself


def test_score_of_a_recording_exits_as_record_did(recordings: Recorded, tmp_path: Path) -> None:
    """The fused-regression recording's own runs fail, but a recording is not judged."""
    dest = tmp_path / "B"
    shutil.copytree(recordings.b, dest)
    assert main(["score", str(dest), "--quiet"]) == 0
    assert main(["score", str(dest)]) == 0


def _venv_is_installed() -> bool:
    """Whether ``make``'s install stamp is up to date (else ``make compare`` would install)."""
    if shutil.which("make") is None:
        return False
    q = subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True)
    return q.returncode == 0 and (ROOT / ".venv/bin/harness").exists()


def test_make_compare_against_a_recording(recordings: Recorded, tmp_path: Path) -> None:
    """``make compare UNFUSED=<recording> FUSED=<url>`` (the Makefile's default 4 rounds:
    recording A holds 3 x 4) against a fused-regression server: exit 1, REGRESSION."""
    if not _venv_is_installed():
        pytest.skip("the .venv install stamp is not up to date (make compare would install)")
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path)}
    with serve_in_thread("fused-regression", scenarios_dir=str(recordings.scenarios)) as url:
        proc = subprocess.run(
            ["make", "-s", "compare", f"UNFUSED={recordings.a}", f"FUSED={url}",
             f"REPEATS={REPEATS}", f"SCENARIOS={recordings.scenarios}"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert proc.returncode != 0 and "REGRESSION" in proc.stdout, (proc.stdout, proc.stderr)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    s = _summary(folder)
    assert s.verdict is not None and s.verdict.verdict == "REGRESSION"
    base = next(x for x in s.sides if x.side == "baseline")
    assert base.recorded == str(recordings.a) and base.label == "unfused"


# ------------------------------------------------------------------ resumed recordings


def test_a_resumed_recording_serves_the_runs_that_replaced_its_errors(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recording whose server failed every request (exit 3: kept, not judged), resumed
    once the server is back on the same URL: a comparison reads each run's last record
    (the one that replaced the infrastructure error), not its first."""
    scen = str(recordings.scenarios / "no_params_tool.yaml")
    argv = ["record", scen, "--repeats", "2", "--rounds", "1", "--results", str(tmp_path),
            "--no-progress", "--no-logprobs", "--max-retries", "0"]  # fmt: skip
    with serve_in_thread("http-500", scenarios_dir=str(recordings.scenarios)) as url:
        assert main([*argv, "--target", url, "--run-id", "flaky"]) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "too many infrastructure errors" in err[0]
        port = int(url.rsplit(":", 1)[1])
    with serve_in_thread("healthy", scenarios_dir=str(recordings.scenarios), port=port) as url:
        assert main([*argv, "--target", url, "--resume", "flaky"]) == 0
    stops = [r.stop_reason for r in RunFolder(tmp_path / "flaky").records()]
    assert stops == ["error", "error", "final_answer", "final_answer"]
    with serve_in_thread("healthy", scenarios_dir=str(recordings.scenarios)) as url:
        code = main(["compare", scen, "--baseline", str(tmp_path / "flaky"), "--candidate", url,
                     "--repeats", "2", "--rounds", "1", "--results", str(tmp_path),
                     "--run-id", "cmp", "--no-progress", "--no-logprobs"])  # fmt: skip
    assert code == 0
    base = [r for r in RunFolder(tmp_path / "cmp").records() if r.target.side == "baseline"]
    assert sorted(r.repeat for r in base) == [0, 1]
    assert all(r.stop_reason == "final_answer" for r in base)
    s = _summary(tmp_path / "cmp")
    assert s.verdict is not None and not s.verdict.infra_limited


# ------------------------------------------------------------------ the other commands


def test_logprobs_recording_against_a_live_candidate(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_in_thread("fused-regression", scenarios_dir=str(recordings.scenarios)) as url:
        code = main(["logprobs", "--baseline", str(recordings.a), "--candidate", url,
                     "--results", str(tmp_path), "--run-id", "lp"])  # fmt: skip
    assert code == 1
    lp = json.loads((tmp_path / "lp" / "logprobs.json").read_text())
    assert lp["verdict"] == "REGRESSION" and len(lp["sequences"]) == 10


def test_gsm8k_against_a_recording_without_answers_is_refused(
    recordings: Recorded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_in_thread("healthy") as url:
        code = main(["gsm8k", "--target", url, "--baseline", str(recordings.a),
                     "--data", str(recordings.gsm8k), "--num-questions", "8",
                     "--results", str(tmp_path), "--run-id", "g", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"{recordings.a} cannot serve as the baseline: no GSM8K answers recorded" in err[0]


@contextlib.contextmanager
def _serve_with_key(scenarios: Path, key: str) -> Iterator[str]:
    """The reference server behind a bearer key (as vLLM/SGLang with ``--api-key``): 401
    to a request without it, on a real socket."""
    import threading
    import time

    import uvicorn
    from starlette.responses import JSONResponse

    from harness.sim.app import create_app

    app = create_app("healthy", scenarios_dir=str(scenarios))

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and headers.get(b"authorization") != f"Bearer {key}".encode():
            await JSONResponse({"error": {"message": "bad key"}}, status_code=401)(
                scope, receive, send
            )
            return
        await app(scope, receive, send)

    config = uvicorn.Config(guarded, host="127.0.0.1", port=0, log_level="warning",
                            lifespan="off")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_record_of_a_server_behind_an_api_key_records_its_numerics(
    recordings: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--api-key-env``: the key goes with the numerics requests too, not only the runs."""
    monkeypatch.setenv("RECORDING_TEST_KEY", "s3cret")
    scen = str(recordings.scenarios / "no_params_tool.yaml")
    with _serve_with_key(recordings.scenarios, "s3cret") as url:
        code = main(["record", scen, "--target", url, "--api-key-env", "RECORDING_TEST_KEY",
                     "--repeats", "1", "--rounds", "1", "--results", str(tmp_path),
                     "--run-id", "keyed", "--no-progress"])  # fmt: skip
    assert code == 0
    rec = Recording.open(tmp_path / "keyed")
    assert rec.info.numerics is not None and rec.info.numerics.startswith("recorded"), (
        rec.info.numerics
    )
    assert rec.numerics() is not None
