"""The decode-only fault of the e2e job (e2e.decode_step): its requirement, its figures and
its place in the job; no inference server (the real one runs in ``make e2e``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e import decode_step
from e2e import driver as e2e
from e2e.steps import compare_figures, numerics_figures


def _step(name: str, code: int, verdict: str | None, decode: str | None) -> e2e.Step:
    figures: dict[str, Any] = {"verdict": verdict, "regressed_kinds": []}
    if decode is not None:
        figures |= {"decode_verdict": decode, "decode_message": f"{decode}: the figures"}
    return e2e.Step(name, [], role="catch", exit_code=code, figures=figures)


def _ok() -> list[e2e.Step]:
    return [
        e2e.Step("boot", [], role="boot", exit_code=0),
        e2e.Step(
            "compare A/A A-again", [], role="aa", exit_code=0, figures={"verdict": "NO CHANGE"}
        ),
    ]


def test_a_decode_fault_caught_on_its_decode_path_passes_live_and_recorded() -> None:
    steps = [*_ok(), *(_step(n, 1, "REGRESSION", "REGRESSION") for n in decode_step.NAMES)]
    assert decode_step.failed(steps) == []
    assert e2e.failures(steps) == (0, [])


@pytest.mark.parametrize("name", decode_step.NAMES)
def test_a_decode_fault_that_is_not_regression_fails_the_job_in_one_line(name: str) -> None:
    missed = _step(name, 0, "NO CHANGE", "NO CHANGE")
    assert e2e.failures([*_ok(), missed]) == (1, [
        f"{name}: the decode path is NO CHANGE (NO CHANGE: the figures), required: REGRESSION",
        f"{name}: NO CHANGE, required: REGRESSION",
    ])  # fmt: skip
    inconclusive = _step(name, 0, "INCONCLUSIVE", "INCONCLUSIVE")
    code, why = e2e.failures([*_ok(), inconclusive])
    assert code == 1 and why[-1] == f"{name}: INCONCLUSIVE, required: REGRESSION"


def test_a_behavioural_regression_alone_does_not_catch_a_decode_only_fault() -> None:
    # the comparison is REGRESSION (its behaviour), the decode path said NO CHANGE
    behaviour = _step(decode_step.LIVE, 1, "REGRESSION", "NO CHANGE")
    assert e2e.failures([*_ok(), behaviour]) == (1, [
        f"{decode_step.LIVE}: the decode path is NO CHANGE (NO CHANGE: the figures), "
        "required: REGRESSION",
    ])  # fmt: skip
    # no numerics at all (no logprobs.json: a server without logprobs, an error)
    none = _step(decode_step.RECORDED, 1, "REGRESSION", None)
    assert e2e.failures([*_ok(), none]) == (1, [
        f"{decode_step.RECORDED}: the decode path is not compared, required: REGRESSION",
    ])  # fmt: skip


def test_a_decode_fault_step_that_did_not_run_fails_on_its_catch_role_alone() -> None:
    for code, job in ((2, 2), (3, 3)):
        step = _step(decode_step.LIVE, code, None, None)
        assert decode_step.failed([step]) == []  # the driver's catch role says it
        found, why = e2e.failures([*_ok(), step])
        assert found == job and len(why) == 1 and why[0].startswith(decode_step.LIVE)


def _logprobs(generation: bool, verdict: str, parted: list[int | None]) -> dict[str, Any]:
    rows = [{"id": f"s{i}", "parted_at": p, "aa_parted_at": None} for i, p in enumerate(parted)]
    return {"verdict": verdict, "message": f"{verdict}: m", "settings": {"generation": generation},
            "stats": {"ab_mean_kl": 0.001, "aa_mean_kl": 0.001}, "sequences": rows}  # fmt: skip


def test_the_figures_read_the_decode_path_whether_it_is_the_whole_result_or_a_section(
    tmp_path: Path,
) -> None:
    # llama-server: no teacher-forced API, the numerics are the decode path
    (tmp_path / "logprobs.json").write_text(json.dumps(_logprobs(True, "REGRESSION", [1, 3, 20])))
    f = numerics_figures(tmp_path)
    assert f["prefill"] is False and f["decode_verdict"] == "REGRESSION"
    assert (f["decode_units"], f["decode_parted_early"], f["decode_aa_parted_early"]) == (3, 2, 0)
    # vLLM/SGLang: prefill at the top, the decode path beside it
    data = {**_logprobs(False, "NO CHANGE", []), "decode": _logprobs(True, "REGRESSION", [2])}
    (tmp_path / "logprobs.json").write_text(json.dumps(data))
    f = numerics_figures(tmp_path)
    assert f["prefill"] is True and f["numerics_verdict"] == "NO CHANGE"
    assert f["decode_verdict"] == "REGRESSION" and f["decode_parted_early"] == 1
    # prefill only: no decode path
    (tmp_path / "logprobs.json").write_text(json.dumps(_logprobs(False, "NO CHANGE", [])))
    assert numerics_figures(tmp_path)["decode_verdict"] is None
    # a compare's figures carry them; none without logprobs.json
    assert compare_figures(tmp_path)["decode_verdict"] is None
    (tmp_path / "logprobs.json").unlink()
    assert numerics_figures(tmp_path) == {} and "decode_verdict" not in compare_figures(tmp_path)


def test_the_recorded_step_compares_f_with_numerics_against_a_recording_that_has_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(e2e, "_launch_args", lambda args, model, v: [f"serve {v.name} {v.extra}"])
    args = e2e._parser().parse_args([])
    record = e2e._record_step(args, tmp_path, tmp_path / "m.gguf")
    assert "--no-logprobs" not in record.argv  # A's recording holds the numerics
    step = e2e._recorded_compare_step(
        args, tmp_path, tmp_path / "m.gguf", e2e.FAULT, "decode-fault recorded", "catch",
        repeats=decode_step.REPEATS, numerics=True, label=decode_step.LABEL,
    )  # fmt: skip
    assert step.name == decode_step.RECORDED and step.role == "catch"
    argv = step.argv
    assert "--no-logprobs" not in argv
    assert argv[argv.index("--baseline") + 1] == str(tmp_path / "record-A")
    assert argv[argv.index("--candidate-cmd") + 1] == f"serve F {decode_step.FAULT_ARGS}"
    assert argv[argv.index("--repeats") + 1] == str(decode_step.REPEATS)
    assert argv[argv.index("--candidate-label") + 1] == decode_step.LABEL
    assert argv[argv.index("--run-id") + 1] == decode_step.run_id(decode_step.RECORDED)
    # the other recorded comparisons stay without numerics
    aa = e2e._recorded_compare_step(args, tmp_path, tmp_path / "m.gguf", e2e.Variant("A2"),
                                    "A/A A-again", "aa")  # fmt: skip
    assert "--no-logprobs" in aa.argv


def test_the_live_step_compares_two_live_servers_with_numerics(tmp_path: Path) -> None:
    argv = decode_step.live_argv("http://a", "http://f", "e2e/scenarios", tmp_path, 4)
    assert argv[:5] == ["compare", "--baseline", "http://a", "--candidate", "http://f"]
    assert "--no-logprobs" not in argv and argv[argv.index("--stream") + 1] == "off"
    assert argv[argv.index("--run-id") + 1] == decode_step.run_id(decode_step.LIVE)


def test_the_measured_block_of_the_page_is_what_the_kept_json_gives(tmp_path: Path) -> None:
    assert decode_step.main(["--check"]) == 0, "run `python -m e2e.decode_step`"
    page = tmp_path / "e2e.md"
    page.write_text(decode_step.PAGE.read_text().replace(decode_step.END, "x" + decode_step.END))
    assert decode_step.main(["--check", "--page", str(page)]) == 1
    assert decode_step.main(["--page", str(page)]) == 0
    assert page.read_text() == decode_step.PAGE.read_text()


def test_the_figures_page_says_what_the_decode_path_said() -> None:
    from e2e import figures

    f = {"passed": {"baseline/s/nostream": "1/2"}, "message": "REGRESSION: numerics: ...",
         "decode_verdict": "REGRESSION", "decode_units": 5, "decode_parted_early": 5,
         "decode_aa_parted_early": 0}  # fmt: skip
    cell = figures._figures({"name": decode_step.LIVE, "role": "catch", "figures": f})
    assert cell.endswith(
        "decode path: REGRESSION, greedy paths parted within 8 tokens on 5 of 5 prompts "
        "(A's two scorings: 0)"
    )
    del f["decode_verdict"]  # a compare without numerics: as before
    assert figures._figures({"name": "compare A/A", "role": "aa", "figures": f}).endswith("...")
