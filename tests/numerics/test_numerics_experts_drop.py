"""The reference server's fused path that drops one routed expert and writes the shared
expert's id in its place (``experts-drop-one``), end to end over real sockets: named as
exactly that in ``logprobs.json``, the console and the report's strip per layer; a healthy
pair agrees on every layer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.cli import main
from harness.numerics.experts_ab import compare_experts
from harness.numerics.models import LogprobsResult
from harness.numerics.run import LogprobsOptions
from harness.numerics.sequences import from_scenario
from harness.runfolder import RunFolder
from harness.scenario.model import load_scenarios

SHARED = 16  # the reference model's 16 routed experts: the shared expert's id is 16
SEQS = [from_scenario(s) for s in load_scenarios(["scenarios/enum_units.yaml"])]


def test_one_dropped_routed_expert_is_named_as_exactly_that(sim_url: Callable[..., str]) -> None:
    base = sim_url("healthy", capture=True)
    res = compare_experts(SEQS, base, sim_url("experts-drop-one", capture=True), LogprobsOptions())
    assert res is not None and res.verdict == "REGRESSION"
    assert res.pattern == (
        "one routed expert replaced by the shared expert's id (16) on every token of 3 MoE "
        "layers (1, 2, 3)"
    )
    assert [lay.ab_share for lay in res.layers] == [1.0, 0.0, 0.0, 0.0]
    assert [lay.aa_share for lay in res.layers] == [1.0] * 4
    fp = res.first_parting
    assert fp is not None and (fp.token, fp.layer) == (0, 1)
    # one slot of k differs: the candidate's row is the baseline's with its last routed
    # expert dropped and the shared id in its place
    assert fp.candidate.count(SHARED) == 1 and SHARED not in fp.baseline
    assert len(set(fp.baseline) & set(fp.candidate)) == len(fp.baseline) - 1
    assert res.shared_in == ["candidate"]


def test_a_healthy_pair_agrees_on_every_layer(sim_url: Callable[..., str]) -> None:
    base, cand = sim_url("healthy", capture=True), sim_url("fusion-on", capture=True, seed=9)
    res = compare_experts(SEQS, base, cand, LogprobsOptions())
    assert res is not None and res.verdict == "NO CHANGE" and res.pattern is None
    assert all(lay.ab_share == 1.0 == lay.aa_share for lay in res.layers)
    assert res.shared_in == [] and res.first_parting is None


def test_compare_reports_it_with_a_strip_per_layer_and_the_token_classes(
    sim_url: Callable[..., str], tmp_path: Path, capsys: Any
) -> None:
    scen = Path("scenarios")
    base = sim_url("healthy", capture=True, scenarios_dir=scen)
    cand = sim_url("experts-drop-one", capture=True, scenarios_dir=scen)
    main(["compare", "scenarios/enum_units.yaml", "--baseline", base, "--candidate", cand,
          "--repeats", "1", "--results", str(tmp_path), "--run-id", "ab", "--no-progress"])  # fmt: skip
    res = RunFolder(tmp_path / "ab").read_model(RunFolder.LOGPROBS, LogprobsResult)
    assert res is not None and res.experts is not None and res.by_class
    out = capsys.readouterr().out
    assert "one routed expert replaced by the shared expert's id (16)" in out
    assert "largest in" in out
    html = (tmp_path / "ab" / "report.html").read_text()
    strips = html.count('aria-label="layer ')
    assert strips == 4 and html.count("below floor") == 3
    assert "one routed expert replaced by the shared expert&#39;s id (16)" in html
    assert 'id="lp-classes"' in html and "<code>arg_value</code>" in html
