"""A server's refusal that the model's own history explains: the model writes an
unterminated call at turn 0, the agent sends it back as it came, and the server (which
re-parses earlier calls, as vLLM does) answers the next request HTTP 400 naming the
decoder error. Scored as the model's failure at turn 0, not as an infrastructure error;
a refusal nothing in the history explains stays one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.client.target import TargetConfig
from harness.kinds import FailureKind as K
from harness.present.evidence import format_run
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios
from harness.scoring.score import score_run
from harness.transcript import InfraError, RunRecord
from tests.contract_driver import scenario, tool

LEDGER = [tool("add_entry", item="string", qty="integer"), tool("total", item="string")]
SC = scenario(
    "ledger", "Add 3 jars of jam to the ledger, then give me the jam total.", LEDGER,
    expect={
        "calls": [{"tool": "add_entry", "arguments": {"item": "jam", "qty": 3}},
                  {"tool": "total", "arguments": {"item": "jam"}}],
        "final_answer": {"contains": ["jam"], "example": "You have 3 jars of jam."},
    },
)  # fmt: skip


def _run(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], out: Path, profile: str,
    *, stream: bool,
) -> RunRecord:  # fmt: skip
    folder = write_scenarios(SC)
    url = sim_url(profile, scenarios_dir=folder)
    tgt = TargetConfig(url, label=profile, max_retries=0, backoff_s=0.01)
    (rec,) = run_many_sync(
        load_scenarios([folder]), [tgt], repeats=1, stream=stream, out_dir=out, progress=False
    )
    return rec


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_refusal_over_the_models_unterminated_call_is_the_models_failure_at_its_turn(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path,
    stream: bool,
) -> None:  # fmt: skip
    rec = _run(sim_url, write_scenarios, tmp_path, "malformed-json-history-refused", stream=stream)
    # what happened on the wire: turn 1 refused, naming the decoder's error
    assert rec.stop_reason == "error" and rec.error is not None
    assert rec.error.status == 400 and rec.error.turn == 1
    assert "Expecting" in rec.error.message, rec.error.message
    score = score_run(rec)
    assert score.infra_error is None and score.termination == "malformed"
    assert K.TOOL_CALL_REFUSED_IN_HISTORY in score.failures, score.failures
    cause = {m.kind for m in score.malformed if m.turn == 0}
    assert cause & {K.MALFORMED_JSON, K.STREAM_TRUNCATED_ARGS}, score.malformed
    assert score.history_refusal is not None
    assert (score.history_refusal.turn, score.history_refusal.refused_turn) == (0, 1)
    assert score.history_refusal.tool == "add_entry"
    assert "Expecting" in score.history_refusal.message
    assert score.turns == 2 and score.tool_calls == 1  # the turn before the refusal is kept
    text = "\n".join(format_run(score))  # what a pytest failure shows
    assert "refused: turn 1 HTTP 400 over the call of turn 0 (add_entry): " in text


def test_the_same_calls_on_a_server_that_does_not_reparse_are_not_refused(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path
) -> None:
    rec = _run(sim_url, write_scenarios, tmp_path, "malformed-json", stream=False)
    assert rec.error is None
    score = score_run(rec)
    assert K.MALFORMED_JSON in score.failures
    assert K.TOOL_CALL_REFUSED_IN_HISTORY not in score.failures


def test_a_refusal_nothing_in_the_history_explains_stays_an_infrastructure_error(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path
) -> None:
    # reasoning-required refuses turn 1 (HTTP 400) over reasoning left out, not a call
    folder = write_scenarios(SC)
    url = sim_url("reasoning-required", scenarios_dir=folder)
    from harness.runner import SamplingPolicy

    (rec,) = run_many_sync(
        load_scenarios([folder]), [TargetConfig(url, label="r", max_retries=0)], repeats=1,
        out_dir=tmp_path, progress=False, sampling=SamplingPolicy(reasoning_history="drop"),
    )  # fmt: skip
    assert rec.error is not None and rec.error.status == 400 and rec.error.turn == 1
    score = score_run(rec)
    assert score.infra_error is not None and score.termination == "error"
    assert score.failures == []


def _refused(rec: RunRecord, **error: object) -> RunRecord:
    err = InfraError(**{"kind": "http_status", "status": 400, "turn": 1, **error})  # type: ignore[arg-type]
    turns = [rec.turns[0], rec.turns[1].model_copy(update={"response": None, "error": err})]
    return rec.model_copy(update={"turns": turns, "stop_reason": "error", "error": err})


@pytest.mark.parametrize(
    ("error", "explained"),
    [
        ({"message": "Expecting ',' delimiter: line 1 column 24 (char 23)"}, True),
        ({"message": "Unterminated string starting at: line 1 column 9 (char 8)"}, True),
        ({"message": "invalid tool_calls[0].function.arguments"}, True),
        ({"message": "This model's maximum context length is 4096 tokens."}, False),
        ({"message": "Expecting value", "status": 500}, False),
        ({"message": "Expecting value", "status": 429}, False),
        ({"message": "Expecting value", "kind": "timeout", "status": None}, False),
        ({"message": "Expecting value", "turn": 0}, False),
    ],
)
def test_which_refusals_the_history_explains(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path,
    error: dict[str, object], explained: bool,
) -> None:  # fmt: skip
    """The model's unterminated call at turn 0, then turn 1 refused in various ways."""
    rec = _run(sim_url, write_scenarios, tmp_path, "malformed-json", stream=False)
    score = score_run(_refused(rec, **error))
    assert (score.infra_error is None) == explained, score
    assert (K.TOOL_CALL_REFUSED_IN_HISTORY in score.failures) == explained
    healthy = _run(sim_url, write_scenarios, tmp_path / "h", "healthy", stream=False)
    assert score_run(_refused(healthy, **error)).infra_error is not None  # no bad call


def test_the_error_line_reads_a_vllm_flat_error_body(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path
) -> None:
    rec = _run(sim_url, write_scenarios, tmp_path, "malformed-json-history-refused", stream=False)
    assert rec.error is not None and "\n" not in rec.error.message
    assert "Expecting ',' delimiter" in rec.error.message
