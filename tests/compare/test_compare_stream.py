"""score_folder streams transcripts.jsonl: the same summary and scores as summarizing the list."""

from __future__ import annotations

from pathlib import Path

from harness.pipeline import score_folder, summarize
from harness.runfolder import RunFolder
from tests.report_data import baseline_record, candidate_record


def test_streamed_scoring_matches_the_list_with_parity_and_replaced_runs(tmp_path: Path) -> None:
    recs = [baseline_record(r) for r in range(3)] + [candidate_record(r) for r in range(3)]
    streamed = []
    for r in recs[:2] + recs[3:5]:  # a streamed twin of some runs; one drops a brace
        twin = r.model_copy(deep=True)
        twin.stream, twin.run_key = True, r.run_key.replace("nostream", "stream")
        streamed.append(twin)
    call = streamed[-1].turns[0].response.tool_calls[0]  # type: ignore[union-attr]
    call.arguments = str(call.arguments)[:-1]
    replaced = baseline_record(1, final="A later answer replaces the earlier record.")
    for r in [*recs, *streamed, replaced]:
        RunFolder(tmp_path).append_record(r)
    folder = RunFolder(tmp_path)
    listed, listed_scores = summarize(list(folder.records()), run_id=tmp_path.name)
    summary = score_folder(folder)
    assert summary.parity and any(d.field == "arguments" for d in summary.parity)
    assert summary.parity_pairs == 4
    scores = [s for _, s in folder.scores_with_offsets()]
    assert len(scores) == len(recs) + len(streamed)  # the replaced run counted once
    assert sorted(s.run_key for s in scores) == sorted(s.run_key for s in listed_scores)
    assert next(s for s in scores if s.run_key == replaced.run_key).final_excerpt == (
        "A later answer replaces the earlier record."
    )
    assert summary.comparisons[0].first_divergence is not None
    a = summary.model_dump(mode="json", exclude={"created_at"})
    b = listed.model_dump(mode="json", exclude={"created_at"})
    assert a == b
