"""The vLLM part of the e2e job (e2e/vllm.py) without vLLM: its server command, the check
that the bf16 decode fault still shows, what fails the job, the wire probe against the
reference server, the hermes templates, the driver's flags. The real run is ``make e2e``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e import driver
from e2e import vllm as v
from e2e.servers import E2EError

#: what the bf16 server wrote on the machine where the fault was first seen, and fp32
ISSUE_BF16 = "L'Étoile, la Marseillaise, la femme, la femme au"
FP32 = "The capital of France is Paris."


def _paths(tmp_path: Path) -> v.VllmPaths:
    py = tmp_path / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return v.VllmPaths(py, model)


def test_the_command_names_the_platform_and_avoids_the_version_lookup(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    cmd = v.vllm_command(paths, 18000, dtype="bfloat16", cores="1")
    assert cmd[0] == "env"
    env = [a for a in cmd[1 : cmd.index(str(paths.python))]]
    assert "VLLM_TARGET_DEVICE=cpu" in env and "VLLM_CPU_OMP_THREADS_BIND=1" in env
    assert "VLLM_CPU_KVCACHE_SPACE=1" in env
    # the module entry point, not the `vllm` script (which reads version("vllm"))
    i = cmd.index(str(paths.python))
    assert cmd[i + 1 : i + 3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = cmd[i + 3 :]
    pairs = dict(zip(flags[::2], flags[1::2], strict=False))
    assert flags[flags.index("--dtype") + 1] == "bfloat16"
    assert flags[flags.index("--host") + 1] == "127.0.0.1"
    assert flags[flags.index("--port") + 1] == "18000"
    assert flags[flags.index("--tool-call-parser") + 1] == "hermes"
    assert flags[flags.index("--tool-strict-level") + 1] == "parameter"
    assert "--enable-auto-tool-choice" in flags and "--enforce-eager" in flags
    assert Path(flags[flags.index("--chat-template") + 1]).is_file()
    assert pairs  # a flag list, not one string
    broken = v.vllm_command(paths, 1, template=v.BROKEN_TEMPLATE, extra=("--seed", "3"))
    assert broken[-2:] == ["--seed", "3"]
    assert broken[broken.index("--chat-template") + 1] == str(v.BROKEN_TEMPLATE)
    assert broken[broken.index("--dtype") + 1] == "float32"


def test_find_vllm_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_VLLM_PYTHON", raising=False)
    monkeypatch.delenv("HARNESS_VLLM_MODEL", raising=False)
    with pytest.raises(E2EError, match="install-vllm.sh.*--no-vllm"):
        v.find_vllm()
    paths = _paths(tmp_path)
    monkeypatch.setenv("HARNESS_VLLM_PYTHON", str(paths.python))
    monkeypatch.setenv("HARNESS_VLLM_MODEL", str(tmp_path))  # no config.json there
    with pytest.raises(E2EError, match="HARNESS_VLLM_MODEL=.*no config.json"):
        v.find_vllm()
    assert v.find_vllm(model=str(paths.model)) == paths
    paths.python.chmod(0o644)
    with pytest.raises(E2EError, match="not an executable"):
        v.find_vllm(model=str(paths.model))


@pytest.mark.parametrize(
    ("healthy", "broken", "state"),
    [
        (FP32, ISSUE_BF16, "reproduces"),
        (FP32, "The capital of France is Paris.", "gone"),
        (FP32, "Paris.", "gone"),
        (FP32, "", "reproduces"),  # no answer at all is no healthy answer
        ("I don't know.", ISSUE_BF16, "no-reference"),
        ("", "Paris", "no-reference"),
        (FP32, "Parisian cafés", "reproduces"),  # the word, not a prefix of another
    ],
)
def test_fault_state(healthy: str, broken: str, state: str) -> None:
    got, why = v.fault_state(healthy, broken)
    assert got == state
    assert "\n" not in why


def test_a_gone_fault_is_said_and_quotes_both_answers() -> None:
    state, why = v.fault_state(FP32, "Paris is the capital of France." + "x" * 500)
    assert state == "gone"
    assert "gone" in why and "pick another broken variant" in why
    assert len(why) < 400  # model output quoted within bounds


def _step(name: str, verdict: str | None, exit_code: int = 0, **fig: Any) -> driver.Step:
    figures = {"verdict": verdict, **fig} if verdict else dict(fig)
    return driver.Step(name, ["x"], exit_code=exit_code, figures=figures)


def test_failed_requires_the_aa_and_the_fault_while_it_reproduces() -> None:
    ok = [
        _step("vllm logprobs A/A prefill", "NO CHANGE"),
        _step("vllm logprobs A/A decode", "INCONCLUSIVE"),
        _step("vllm fault check", "reproduces", state="reproduces"),
        _step("vllm logprobs A/B decode", "REGRESSION", 1, required=True),
        _step("vllm logprobs A/B prefill", "NO CHANGE"),
    ]
    assert v.failed(ok) == []
    bad = [
        _step("vllm logprobs A/A prefill", "REGRESSION", 1),
        _step("vllm logprobs A/A decode", None, 2),
        _step("vllm logprobs A/B decode", "NO CHANGE", required=True),
    ]
    why = v.failed(bad)
    assert len(why) == 3
    assert why[0].startswith("vllm logprobs A/A prefill: REGRESSION (exit 1)")
    assert "no verdict (exit 2)" in why[1]
    assert "required: REGRESSION" in why[2]
    # the fault gone: the decode A/B is reported, not required; the check does not fail
    gone = [
        _step("vllm fault check", "gone", state="gone"),
        _step("vllm logprobs A/B decode", "NO CHANGE", required=False),
    ]
    assert v.failed(gone) == []
    broken_probe = [_step("vllm fault check", "no-reference", state="no-reference",
                          message="fp32 did not name Paris")]  # fmt: skip
    assert v.failed(broken_probe) == ["vllm fault check: fp32 did not name Paris"]


def test_the_driver_fails_on_a_vllm_step_and_keeps_its_exit_codes() -> None:
    aa = driver.Step("vllm compare A/A", ["compare"], role="aa", exit_code=0,
                     figures={"verdict": "NO CHANGE"})  # fmt: skip
    catch = driver.Step("vllm compare A/B broken-template", ["compare"], role="catch",
                        exit_code=0, figures={"verdict": "NO CHANGE"})  # fmt: skip
    code, why = driver.failures([aa, catch])
    assert code == 1 and why == [
        "vllm compare A/B broken-template: NO CHANGE, required: REGRESSION"
    ]
    code, why = driver.failures([aa, _step("vllm logprobs A/A decode", "REGRESSION", 1)])
    assert code == 1 and len(why) == 1
    boot = driver.Step("vllm boot", [], role="run", exit_code=2, figures={"message": "no vLLM"})
    assert driver.failures([aa, boot])[0] == 2


def test_the_driver_flags() -> None:
    args = driver._parser().parse_args(["--no-vllm"])
    assert args.no_vllm and not args.only_vllm
    args = driver._parser().parse_args(["--only-vllm", "--vllm-repeats", "2"])
    assert args.only_vllm and args.vllm_repeats == 2 and args.vllm_catch_repeats == 16


def test_the_only_vllm_job_without_vllm_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HARNESS_VLLM_PYTHON", raising=False)
    monkeypatch.delenv("HARNESS_VLLM_MODEL", raising=False)
    args = driver._parser().parse_args(["--only-vllm", "--out", str(tmp_path)])
    steps = driver._run_job(args, tmp_path, tmp_path / "unused.gguf")
    assert [s.name for s in steps] == ["vllm boot"]
    assert driver.failures(steps)[0] == 2


def test_the_wire_probe_against_a_real_server(sim_url: Callable[..., str], tmp_path: Path) -> None:
    base = sim_url("healthy", play_unknown=True)
    out = tmp_path / "wire.json"
    wire = v.wire_probe(base, out)
    assert json.loads(out.read_text()) == wire
    assert set(wire) == {"auto", "required"}
    for choice in wire.values():
        assert choice["finish_reason"] in ("stop", "tool_calls", "length")
        assert choice["stream"], "no streamed chunk was read"
        assert choice["stream"][-1]["finish_reason"] == choice["finish_reason"]
        for d in choice["stream"]:
            assert set(d) == {"keys", "content", "tool_calls", "finish_reason"}
    answer = v.probe_answer(base)
    assert isinstance(answer, str)


def test_summarise_wire_keeps_the_fragments_as_sent() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "chatcmpl-tool-1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}  # fmt: skip
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "chatcmpl-tool-1",
                                "function": {"name": "get_weather", "arguments": ""},
                            }
                        ]
                    },
                    "finish_reason": None,
                }
            ]
        },  # fmt: skip
        {
            "choices": [
                {
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]},
                    "finish_reason": None,
                }
            ]
        },  # fmt: skip
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    got = v.summarise_wire(message, "tool_calls", chunks)
    assert got["tool_calls"] == [{"id": "chatcmpl-tool-1", "type": "function",
                                  "name": "get_weather", "arguments": '{"city": "Paris"}'}]  # fmt: skip
    assert got["content"] is None and got["finish_reason"] == "tool_calls"
    assert [d["keys"] for d in got["stream"]] == [["content", "role"], ["tool_calls"],
                                                  ["tool_calls"], []]  # fmt: skip
    assert got["stream"][1]["tool_calls"][0]["name"] == "get_weather"
    assert got["stream"][2]["tool_calls"][0] == {"index": 0, "id": None, "name": None,
                                                 "arguments": '{"ci'}  # fmt: skip
    assert got["stream"][3]["finish_reason"] == "tool_calls"


def _render(template: Path, messages: list[dict[str, object]]) -> str:
    import jinja2

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    return (
        jinja2.Environment(autoescape=False)
        .from_string(template.read_text())
        .render(messages=messages, tools=tools, add_generation_prompt=True)
    )


CONVERSATION: list[dict[str, object]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'},
]  # fmt: skip


def test_the_hermes_template_writes_what_the_hermes_parser_reads() -> None:
    text = _render(v.HERMES_TEMPLATE, CONVERSATION)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert call in text
    assert '<tool_response>\n{"sky": "sunny"}\n</tool_response>' in text
    assert '"name": "get_weather"' in text.split("<tools>")[1].split("</tools>")[0]
    assert text.endswith("<|im_start|>assistant\n")  # no prefill: the model writes the tag
    # what vLLM's hermes parser matches (its regex, hermes_tool_parser.py in 0.32.0)
    import re

    found = re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)
    assert json.loads(found[-1]) == {"name": "get_weather", "arguments": {"city": "Paris"}}


def test_the_broken_hermes_template_drops_only_the_tool_results() -> None:
    good = _render(v.HERMES_TEMPLATE, CONVERSATION)
    bad = _render(v.BROKEN_TEMPLATE, CONVERSATION)
    assert "sunny" in good and "sunny" not in bad
    dropped = '<|im_start|>user\n<tool_response>\n{"sky": "sunny"}\n</tool_response><|im_end|>\n'
    assert good.replace(dropped, "") == bad


def test_install_times_reads_what_the_install_kept(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    assert v.install_times(paths) == {"install_seconds": None, "convert_seconds": None}
    (paths.python.parent.parent / ".e2e-seconds").write_text("205\n")
    (paths.model / ".e2e-seconds").write_text("90\n")
    assert v.install_times(paths) == {"install_seconds": 205, "convert_seconds": 90}


def test_doc_table_lists_the_vllm_rows_only() -> None:
    result = {"steps": [
        {"name": "boot", "role": "boot", "exit_code": 0, "seconds": 1, "figures": {}},
        {"name": "vllm logprobs A/A decode", "role": "report", "exit_code": 0, "seconds": 9.5,
         "figures": {"verdict": "NO CHANGE", "ab_mean_kl": 0.0, "aa_mean_kl": 0.0,
                     "ab_top1_agreement": 1.0, "sequences": 12, "parted_at": [],
                     "aa_parted_at": []}},
        {"name": "vllm times", "role": "report", "exit_code": 0, "seconds": 600,
         "figures": {"boot_seconds": {"A": 170.2}, "install_seconds": 205,
                     "convert_seconds": 90}},
    ]}  # fmt: skip
    table = v.doc_table(result).splitlines()
    assert len(table) == 4 and "boot |" not in table[2]
    assert table[2].startswith("| vllm logprobs A/A decode | report | 0 | 9.5 | NO CHANGE |")
    assert "sequences 12" in table[2] and "parted at []" in table[2]
    assert "install 205 s, convert 90 s" in table[3]


def test_convert_gguf_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    script = Path(driver.__file__).parent / "convert_gguf.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("usage:")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "x.gguf"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PYTHONPATH": ""})  # fmt: skip
    # no torch/transformers in the project's venv, or no such file: one line, exit 2
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("convert_gguf: ")


def test_logprobs_argv_per_path(tmp_path: Path) -> None:
    prefill = v.logprobs_argv("http://a", "http://b", "vllm", "p", tmp_path)
    decode = v.logprobs_argv("http://a", "http://b", "greedy", "d", tmp_path)
    assert prefill[prefill.index("--logprobs-api") + 1] == "vllm"
    assert prefill[prefill.index("--max-tokens") + 1] == str(v.PREFILL_TOKENS)
    assert decode[decode.index("--max-tokens") + 1] == str(v.DECODE_TOKENS)
    files = [a for a in decode if a.endswith(".yaml")]
    assert len(files) >= 7  # the paired test's minimum
    assert not any("long_context_logs" in f for f in files)  # over the 8192-token context
    # the decode window covers the parting rule's
    from harness.numerics.decide import EARLY

    assert v.DECODE_TOKENS >= EARLY
    assert decode[decode.index("--run-id") + 1] == "d"


def test_fill_reads_a_compare_verdict_from_its_folder(
    sim_url: Callable[..., str], write_scenarios: Callable[..., Path], tmp_path: Path
) -> None:
    """A compare step's verdict comes from the folder it wrote (against the reference
    server: a healthy baseline and a candidate whose finish_reason contradicts its reply,
    as tests/compare/test_compare.py drives it)."""
    from harness.cli import main as cli_main
    from tests.compare.test_compare import CLOCK, ENTROPY, LOOKUP

    scenarios = write_scenarios(ENTROPY, LOOKUP, CLOCK)
    base = sim_url("healthy", scenarios_dir=scenarios)
    cand = sim_url("finish-reason-mismatch", scenarios_dir=scenarios)
    argv = ["compare", str(scenarios), "--baseline", base, "--candidate", cand,
            "--repeats", "3", "--results", str(tmp_path), "--run-id", "c",
            "--no-progress"]  # fmt: skip
    code = cli_main(argv)
    step = driver.Step("vllm compare A/B broken-template", argv, role="catch", exit_code=code)
    step.run_dir = str(tmp_path / "c")
    v.fill([step])
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert step.figures["verdict"] == summary["verdict"]["verdict"] == "REGRESSION"
    assert "finish_reason_mismatch" in step.figures["regressed_kinds"]
    assert step.figures["passed"]  # the pass rates per side, scenario and stream mode
    assert driver.failures([step])[0] == 0  # the catch holds
    step.figures["verdict"] = "NO CHANGE"
    assert driver.failures([step])[0] == 1
