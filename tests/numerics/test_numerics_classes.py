"""Token classes of scored positions (``harness.numerics.classes``): the labels on
hand-made token texts (the boundary rule, sorted and escaped arguments, a cut, reasoning),
on every adapter's shape against the reference server, and per class in a comparison."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from harness.cli import main
from harness.numerics.adapters import ADAPTERS
from harness.numerics.classes import label_conversation, label_generated
from harness.numerics.models import LogprobsResult, Sequence
from harness.numerics.run import LogprobsOptions, compare_logprobs
from harness.numerics.sequences import from_scenario
from harness.present.logprobs import logprobs_line
from harness.scenario.model import load_scenarios
from harness.sim.logprobs import tokenize
from harness.sim.server import serve_in_thread
from harness.sim.templates import TEMPLATES

ARGS = {"city": "Paris", "days": 3}
CONVERSATION: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}},
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny in Paris."},
)  # fmt: skip
SEQ = Sequence(id="weather", source="scenario", messages=CONVERSATION)


def _pairs(texts: list[str], classes: list[str]) -> list[tuple[str, str]]:
    return [(t, c) for t, c in zip(texts, classes, strict=True) if c != "markup"]


def test_tokens_across_a_boundary_take_the_content_class_with_most_characters() -> None:
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}]  # fmt: skip
    # BPE-like pieces: '{"name": "get' holds markup and 3 name characters; 'ather", "' the
    # name's last 5 and markup; 'city": "Pa' 4 key characters, 2 value ones; 'ris"}' value
    texts = ["<|im_start|>", "assistant\n", '{"name": "get', "_we", 'ather", "', "arguments",
             '": {"', 'city": "Pa', 'ris"}}', "<|im_end|>"]  # fmt: skip
    labels = label_conversation(msgs, texts)
    assert labels.missing == 0
    assert labels.classes == [
        "markup", "markup", "tool_name", "tool_name", "tool_name", "markup",
        "markup", "arg_key", "arg_value", "markup",
    ]  # fmt: skip
    # 'ty": "Pa' holds 2 key and 2 value characters: a tie goes to the earlier class
    tie = ['{"name": "get_weather", "arguments": {"ci', 'ty": "Pa', 'ris"}}']
    assert label_conversation(msgs, tie).classes == ["tool_name", "arg_key", "arg_value"]


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_every_template_labels_the_same_content(template: str) -> None:
    """Each class's token count is what the segments alone tokenise to (the reference
    tokenizer splits at a quote, a newline and a tag as in context), whatever the template
    does around them: JSON, a JSON string in JSON (escaped twice), sorted keys (tojson),
    XML parameters."""
    from harness.sim.templates import render

    text = render(template, list(CONVERSATION), add_generation_prompt=False)
    texts = [str(t) for t in _texts(tokenize(text))]
    assert "".join(texts) == text
    labels = label_conversation(CONVERSATION, texts)
    got = Counter(labels.classes)
    assert labels.missing == 0
    assert got["tool_name"] == len(tokenize("get_weather"))
    assert got["arg_key"] == len(tokenize("city")) + len(tokenize("days"))
    assert got["arg_value"] == len(tokenize("Paris")) + len(tokenize("3"))
    assert got["prose"] == len(tokenize("It is sunny in Paris."))
    inputs = ("Use the tools.", "Weather in Paris?", "sunny")
    assert got["input"] == sum(len(tokenize(s)) for s in inputs)
    pairs = _pairs(texts, labels.classes)
    assert ("Paris", "arg_value") in pairs and ("days", "arg_key") in pairs


def _texts(ids: list[int]) -> list[str]:
    from harness.sim.logprobs import _text

    return [_text(i) for i in ids]


def test_a_cut_sequence_labels_the_head_of_its_last_segment() -> None:
    texts = ["<|im_start|>", "assistant", "\n", "It", " is", " sun"]
    msgs = [{"role": "assistant", "content": "It is sunny in Paris."}]
    assert label_conversation(msgs, texts).classes == ["markup"] * 3 + ["prose"] * 3


def test_reasoning_from_think_blocks_and_reasoning_content() -> None:
    msgs = [{"role": "assistant", "content": "<think>Check it.</think>It is sunny."}]
    texts = ["<think>", "Check", " it.", "</think>", "It", " is", " sunny."]
    assert label_conversation(msgs, texts).classes == [
        "markup", "reasoning", "reasoning", "markup", "prose", "prose", "prose",
    ]  # fmt: skip
    msgs2 = [{"role": "assistant", "reasoning_content": "Check it.", "content": "Sunny."}]
    texts2 = ["<think>\n", "Check", " it.", "\n</think>\n", "Sunny", "."]
    assert label_conversation(msgs2, texts2).classes == [
        "markup", "reasoning", "reasoning", "markup", "prose", "prose",
    ]  # fmt: skip


def test_a_segment_the_text_does_not_hold_is_counted_missing() -> None:
    msgs = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi."}]
    labels = label_conversation(msgs, ["<|im_start|>", "user\n", "Bonjour", "\n", "Hi", "."])
    assert labels.missing == 1
    assert labels.classes == ["markup"] * 4 + ["prose"] * 2
    # segments after the last one found are not missing: the text ends before them (a cut)
    assert label_conversation(msgs, ["<|im_start|>", "user\n", "Hello", " there"]).missing == 0


def test_generated_text_is_labelled_from_itself() -> None:
    texts = ["<tool_call>", "\n", '{"', "name", '":', ' "', "get", "_weather", '",', ' "',
             "arguments", '":', ' {"', "city", '":', ' "', "Par", "is", '",', ' "', "days",
             '":', " 3", "}}", "</tool_call>", "<|im_end|>"]  # fmt: skip
    got = _pairs(texts, label_generated(texts).classes)
    assert got == [("\n", "prose"), ("get", "tool_name"), ("_weather", "tool_name"),
                   ("city", "arg_key"), ("Par", "arg_value"), ("is", "arg_value"),
                   ("days", "arg_key"), (" 3", "arg_value")]  # fmt: skip
    cut = ['{"name": "get_weather", "arguments": {"ci', 'ty": "Pa']  # cut mid-value
    assert label_generated(cut).classes == ["tool_name", "arg_key"]
    prose = label_generated(["<think>", "hm", "</think>", "It", " is", "<|im_end|>"])
    assert prose.classes == ["markup", "reasoning", "markup", "prose", "prose", "markup"]
    # tags split into several tokens (not special tokens of the tokenizer) are markup too
    tags = label_generated(["<", "tool", "_response", ">", "\n", "ok", "</", "tool_response", ">"])
    assert tags.classes == ["markup"] * 4 + ["prose"] * 2 + ["markup"] * 3


# ------------------------------------------------ every adapter's shape, over sockets


@pytest.mark.parametrize(
    ("api", "flavour"),
    [("vllm", "vllm-0.33"), ("sglang", "sglang-0.5.23"), ("llama-cpp", None)],
)
def test_labels_from_each_teacher_forced_shape(api: str, flavour: str | None) -> None:
    """vLLM's ``decoded_token``, SGLang's texts and the echo ``tokens`` all give the labels
    of the rendered text the reference server tokenised."""
    from harness.sim.templates import render

    kw: dict[str, Any] = {"flavour": flavour} if flavour else {}
    with serve_in_thread("healthy", scenarios_dir=None, **kw) as url, httpx.Client() as client:
        adapter = ADAPTERS[api](client, url, model=None, top_k=5)
        scored = adapter.score(SEQ)
    text = render("chatml", list(CONVERSATION), add_generation_prompt=False)
    expected = label_conversation(CONVERSATION, _texts(tokenize(text))).classes
    labels = label_conversation(CONVERSATION, scored.texts)
    assert labels.missing == 0
    assert labels.classes == expected
    assert Counter(labels.classes)["arg_value"] == len(tokenize("Paris")) + 1


def test_labels_of_the_greedy_shape_and_the_class_at_the_first_divergence(
    sim_url: Callable[..., str],
) -> None:
    seqs = [from_scenario(s) for s in load_scenarios(["scenarios"])][:6]
    opts = LogprobsOptions(api="greedy")
    res = compare_logprobs(seqs, sim_url("healthy"), sim_url("fused-regression", seed=3), opts)
    parted = [r for r in res.sequences if r.parted_at is not None]
    assert parted, "the fused profile's greedy paths part"
    # the reference server generates prose words and ends with <|im_end|>: a parting
    # inside the reply is at a prose token, and the table has no tool-call class
    assert {r.parted_class for r in parted} <= {"prose", "markup"}
    assert "prose" in {r.parted_class for r in parted}
    assert {c.token_class for c in res.by_class} <= {"prose", "markup"}
    assert "greedy paths part most at prose tokens" in logprobs_line(res)


# --------------------------------------------------- per class in a comparison


def test_statistics_per_class_against_a_hand_computation() -> None:
    """Two sequences' positions split by class: each class's figures are those of its own
    positions (KLD mean, same top p, the A/A floor from the A/A divergences' classes)."""
    from harness.numerics.divergence import pooled_by_class
    from harness.numerics.models import SequenceDivergence

    def div(kl: list[float], same: list[bool], classes: list[str]) -> SequenceDivergence:
        d = SequenceDivergence(positions=len(kl), mean_kl=None, p99_kl=None, max_kl=None,
                               top1_agreement=None, mean_abs_dlogp=None)  # fmt: skip
        d._values = (kl, [0.0] * len(kl), same)
        d._classes = classes
        return d

    ab1 = div([0.1, 0.3, 0.2], [True, False, True], ["arg_value", "arg_value", "prose"])
    ab2 = div([0.5, 0.4], [False, True], ["prose", "markup"])
    aa1 = div([0.01, 0.03, 0.02], [True] * 3, ab1._classes)
    aa2 = div([0.05, 0.04], [True] * 2, ab2._classes)
    got = {c.token_class: c for c in pooled_by_class([(ab1, aa1), (ab2, aa2)])}
    assert list(got) == ["arg_value", "prose", "markup"]  # CLASSES order, empty ones left out
    v, p = got["arg_value"], got["prose"]
    assert v.ab is not None and v.aa is not None and p.ab is not None
    assert (v.ab.positions, v.ab.kld_mean, v.ab.same_top_p) == (2, pytest.approx(0.2), 0.5)
    assert v.ab.kld["Maximum"] == pytest.approx(0.3) and v.aa.kld_mean == pytest.approx(0.02)
    assert (p.ab.positions, p.ab.kld_mean, p.ab.same_top_p) == (2, pytest.approx(0.35), 0.5)


def test_statistics_per_class_sum_to_the_pooled_ones_and_show_the_fault(
    sim_url: Callable[..., str], tmp_path: Any
) -> None:
    seqs = [from_scenario(s) for s in load_scenarios(["scenarios"])][:8]
    base = sim_url("healthy")
    res = compare_logprobs(seqs, base, sim_url("fused-regression"))
    assert res.kld is not None and res.by_class
    names = [c.token_class for c in res.by_class]
    assert {"tool_name", "arg_key", "arg_value", "prose", "input", "markup"} <= set(names)
    # the classes partition the positions: counts and the KLD sum add up to the pooled ones
    n = sum(c.ab.positions for c in res.by_class if c.ab)
    assert n == res.kld.positions
    total = sum(c.ab.kld_mean * c.ab.positions for c in res.by_class if c.ab)
    assert total == pytest.approx(res.kld.kld_mean * res.kld.positions, rel=1e-9)
    for c in res.by_class:  # the fault shifts every position: A/B above the A/A floor
        assert c.ab is not None and c.aa is not None
        if c.ab.positions >= 30:
            assert c.ab.kld_mean > 10 * c.aa.kld_mean, c.token_class
    assert all(sum(r.classes.values()) == r.ab.positions for r in res.sequences)
    top = res.largest_class()
    assert top is not None
    assert top.ab and top.ab.kld_mean == max(c.ab.kld_mean for c in res.by_class if c.ab)
    assert f"largest in {top.token_class} tokens" in logprobs_line(res)
    # written and read back (the report re-renders logprobs.json)
    again = LogprobsResult.model_validate_json(res.model_dump_json())
    assert [c.token_class for c in again.by_class] == names


def test_harness_logprobs_prints_the_largest_class(
    sim_url: Callable[..., str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = sim_url("healthy"), sim_url("fused-regression")
    code = main(["logprobs", "--baseline", base, "--candidate", cand, "scenarios",
                 "--results", str(tmp_path), "--run-id", "lp"])  # fmt: skip
    out = capsys.readouterr().out
    assert code in (0, 1)
    lines = [ln for ln in out.splitlines() if "largest in" in ln]
    assert len(lines) == 1, out
    res = LogprobsResult.model_validate_json((tmp_path / "lp" / "logprobs.json").read_text())
    top = res.largest_class()
    assert top is not None and f"largest in {top.token_class} tokens" in lines[0]
    page = (tmp_path / "lp" / "report.html").read_text()
    assert (
        "By token class" in page
        and f'<code>{top.token_class}</code> <span class="badge muted">largest' in page
    )
