"""The scenario library: every scenario passes on the healthy reference server
and fails, with the failure kind named, on the fault profile(s) of the kinds it targets.

Mapping scenario -> profiles: a ``targets:`` kind with a single-fault profile of the same
name (``_`` for ``-``, e.g. ``repeat_loop`` -> ``repeat-loop``) is checked against that
profile; streaming-only faults are run with ``stream=True``. Kinds without a profile
(``missing_final_answer``, ``value_mismatch``, ...) must show up in at least one of the
scenario's fault runs. All runs: in-process sim, runner, ``score_run``, repeats 1,
temperature 0 (the scenarios' default).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.client.target import TargetConfig
from harness.kinds import FailureKind
from harness.runner import StreamMode, run_many_sync
from harness.scenario.model import ExpectedCall, Scenario, load_scenario, load_scenarios
from harness.scoring.models import RunScore
from harness.scoring.score import score_run
from harness.sim.profiles import PROFILES
from harness.sim.server import serve_in_thread
from harness.transcript import RunRecord

SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "scenarios"
#: pad_tokens used in the fast runs (the shipped long-context file is checked separately)
TEST_PAD_TOKENS = 30
#: faults the reference server shows only when streaming
STREAM_ONLY = {
    "stream_truncated_args", "empty_arguments", "index_offset", "missing_call_index",
    "shared_call_index", "ambiguous_call_deltas",
}  # fmt: skip

#: failure kind -> single-fault profile of the same name
KIND_PROFILES: dict[str, str] = {
    p.name.replace("-", "_"): p.name
    for p in PROFILES.values()
    if len(p.faults) == 1 and p.faults[0].kind == p.name.replace("-", "_")
}


def _library(pad: int | None = TEST_PAD_TOKENS) -> list[Scenario]:
    scenarios = load_scenarios([SCENARIOS_DIR])
    for sc in scenarios:
        for tool in sc.tools:
            if pad is not None and tool.simulator.pad_tokens:
                tool.simulator.pad_tokens = pad
    return scenarios


LIBRARY = _library()
BY_ID = {sc.id: sc for sc in LIBRARY}


def _run(profile: str, scenarios: list[Scenario], stream: StreamMode) -> list[RunRecord]:
    with (
        serve_in_thread(profile, scenarios_dir=SCENARIOS_DIR) as url,
        tempfile.TemporaryDirectory() as out,
    ):
        return run_many_sync(
            scenarios,
            [TargetConfig(url, label=profile)],
            repeats=1,
            stream=stream,
            out_dir=out,
            progress=False,
        )


@pytest.fixture(scope="module")
def healthy_scores() -> list[RunScore]:
    """Scores of every scenario on the healthy profile, both stream modes."""
    return [score_run(r) for r in _run("healthy", LIBRARY, "both")]


@pytest.fixture(scope="module")
def fault_scores() -> Iterator[dict[tuple[str, str], RunScore]]:
    """(targeted kind, scenario id) -> score of the scenario run on that kind's profile."""
    jobs = {kind: [sc for sc in LIBRARY if kind in sc.targets] for kind in sorted(KIND_PROFILES)}
    with ThreadPoolExecutor(max_workers=8) as pool:  # servers start and stop in parallel
        futures = {
            kind: pool.submit(_run, KIND_PROFILES[kind], scs, kind in STREAM_ONLY)
            for kind, scs in jobs.items()
            if scs
        }
        yield {(k, r.scenario_id): score_run(r) for k, f in futures.items() for r in f.result()}


# ------------------------------------------------------------------ the files


def test_targets_are_failure_kinds_and_one_has_a_fault_profile() -> None:
    kinds = {k.value for k in FailureKind}
    for sc in LIBRARY:
        unknown = set(sc.targets) - kinds
        assert not unknown, f"{sc.id}: targets {unknown} are not scoring failure kinds"
        assert any(k in KIND_PROFILES for k in sc.targets), f"{sc.id}: no profile-backed target"
        assert sc.description.strip(), sc.id


def _calls(sc: Scenario) -> list[ExpectedCall]:
    return [c for seg in sc.segments() for c in seg.calls]


def _props(sc: Scenario) -> list[dict[str, Any]]:
    return [p for t in sc.tools for p in t.parameters.get("properties", {}).values()]


def test_library_covers_the_issue_kinds() -> None:
    def has(pred: Callable[[Scenario], bool]) -> list[str]:
        return [sc.id for sc in LIBRARY if pred(sc)]

    calls, props = _calls, _props
    assert has(lambda sc: len(sc.expect.calls) >= 3 and sc.expect.order == "strict")
    assert has(lambda sc: any(c.parallel for c in calls(sc)))
    assert has(lambda sc: sc.tool_choice == "required")
    assert has(lambda sc: isinstance(sc.tool_choice, dict))
    assert has(lambda sc: sc.expect.max_calls == 0 and not sc.followups)
    assert has(lambda sc: len(sc.followups) >= 1)
    assert has(lambda sc: any(t.parameters.get("properties") == {} for t in sc.tools))
    assert has(lambda sc: any("enum" in p for p in props(sc)))
    assert has(lambda sc: any(p.get("type") == ["string", "null"] for p in props(sc)))
    assert has(lambda sc: any(r.error for t in sc.tools for r in t.simulator.match or []))
    looks_numeric = {"123_456", "007", "1e5", "true"}
    strings = {
        v for sc in LIBRARY for c in calls(sc) for v in c.arguments.values() if isinstance(v, str)
    }
    assert looks_numeric <= strings
    assert has(lambda sc: "reasoning_leak_args" in sc.targets)


def test_shipped_long_context_scenario_passes_30k_tokens() -> None:
    sc = load_scenario(SCENARIOS_DIR / "long_context_logs.yaml")
    assert sum(t.simulator.pad_tokens for t in sc.tools) > 0
    (rec,) = _run("healthy", [sc], False)
    responses = [t.response for t in rec.turns if t.response and t.response.usage]
    assert len(responses) == len(rec.turns) == 5  # 4 calls, then the answer
    prompts = [r.usage["prompt_tokens"] for r in responses if r.usage]
    calls_after = [
        r for r, p in zip(responses, prompts, strict=True) if p > 30_000 and r.tool_calls
    ]
    assert max(prompts) > 30_000 and calls_after, prompts
    assert score_run(rec).passed, score_run(rec).failures


# ------------------------------------------------------------------ healthy and faulty


def test_every_scenario_passes_on_the_healthy_server(healthy_scores: list[RunScore]) -> None:
    assert len(healthy_scores) == 2 * len(LIBRARY)  # stream and nostream
    failed = {(s.run_key, tuple(s.failures)) for s in healthy_scores if not s.passed}
    assert not failed


def test_reasoning_scenario_passes_on_a_healthy_reasoning_server() -> None:
    sc = BY_ID["reasoning_model_output"]
    recs = _run("healthy-reasoning", [sc], "both")
    assert all(r.turns[0].response and r.turns[0].response.reasoning_content for r in recs)
    assert [score_run(r).failures for r in recs] == [[], []]


@pytest.mark.parametrize("scenario_id", sorted(BY_ID))
def test_scenario_fails_on_each_targeted_profile(
    scenario_id: str, fault_scores: dict[tuple[str, str], RunScore]
) -> None:
    sc = BY_ID[scenario_id]
    backed = [k for k in sc.targets if k in KIND_PROFILES]
    seen: set[str] = set()
    for kind in backed:
        score = fault_scores[(kind, scenario_id)]
        assert not score.passed and kind in score.failures, (kind, score.failures)
        seen |= set(score.failures)
    for kind in set(sc.targets) - set(backed):
        assert kind in seen, f"{scenario_id}: target {kind} never observed in {sorted(seen)}"


def test_harness_list_shows_scenarios_with_their_targets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["list", str(SCENARIOS_DIR)]) == 0
    out = capsys.readouterr().out
    for sc in LIBRARY:
        row = next(line for line in out.splitlines() if f" {sc.id} " in line)
        assert sc.targets[0] in row, (sc.id, row)
        for kind in sc.targets:
            assert kind in out
