"""The e2e job (e2e.driver, e2e.servers): its pieces here, real llama.cpp servers under ``-m e2e``.

The fast tests need no inference server. The ``e2e`` tests boot upstream
``llama-server`` (``$HARNESS_LLAMA_SERVER``, built by ``make e2e``) and llama-cpp-python's
server with SmolLM2-135M; they run only with ``pytest -m e2e`` and each is skipped, with
the reason, when its server or the model is not installed, so ``make test`` stays fast.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e import driver as e2e
from e2e import servers
from harness.client.target import TargetConfig
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios

ROOT = Path(__file__).resolve().parents[2]
E2E_SCENARIOS = ROOT / "e2e" / "scenarios"
LEGACY_SCENARIOS = ROOT / "e2e" / "scenarios-llama-cpp-python"


def test_llama_server_scenarios_need_the_tool_result_and_allow_an_answer() -> None:
    scenarios = load_scenarios([E2E_SCENARIOS])
    assert len(scenarios) >= 3
    for sc in scenarios:
        assert sc.tools and sc.expect.calls, sc.id  # a tool loop, not plain chat
        assert sc.expect.final_answer.required, sc.id  # a written answer is possible
        assert 2 <= sc.max_turns <= 4, sc.id
        # sampled (independent repeats), cool enough that the healthy server passes
        # e2e_weather_city in most runs: 12/16 at 0.4 against 5/16 at 0.7 (see docs/e2e.md)
        assert sc.sampling.temperature == pytest.approx(0.4), sc.id
        # the answer must quote the tool result: it passes only if the result got through
        assert sc.expect.final_answer.regex or sc.expect.final_answer.contains, sc.id


def test_llama_cpp_python_scenarios_load_and_offer_tools() -> None:
    scenarios = load_scenarios([LEGACY_SCENARIOS])
    assert len(scenarios) >= 3
    assert any(sc.tools for sc in scenarios) and any(not sc.tools for sc in scenarios)
    for sc in scenarios:
        # llama-cpp-python's chatml-function-calling ignores tools unless tool_choice is set
        assert sc.tool_choice == ("auto" if sc.tools else None), sc.id
        # ... and shows the tools to the model only inside a system message
        assert sc.messages[0].role == "system", sc.id
        # the A/A comparisons run on real sampling noise
        assert sc.sampling.temperature == pytest.approx(0.7), sc.id


def test_find_model_names_the_missing_package() -> None:
    with pytest.raises(e2e.E2EError, match="no-such-dist-xyz is not installed: run `make e2e`"):
        e2e.find_model("no-such-dist-xyz")


def test_server_command_listens_on_loopback_with_tool_calling() -> None:
    cmd = e2e.server_command(Path("/m/model.gguf"), 8123, ["--type_k", "2"])
    assert cmd[:3] == [sys.executable, "-m", "llama_cpp.server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[cmd.index("--chat_format") + 1] == "chatml-function-calling"
    assert cmd[-2:] == ["--type_k", "2"]


def test_llama_server_command_serves_the_template_with_jinja(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    cmd = servers.llama_server_command(binary, Path("/m/model.gguf"), 8124,
                                       extra=["--rope-freq-base", "10000"])  # fmt: skip
    assert cmd[0] == str(binary)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "8124"
    assert "--jinja" in cmd
    assert cmd[cmd.index("--chat-template-file") + 1] == str(servers.TEMPLATE)
    assert servers.TEMPLATE.is_file() and servers.BROKEN_TEMPLATE.is_file()
    assert cmd[-2:] == ["--rope-freq-base", "10000"]


def test_find_llama_server_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_LLAMA_SERVER", raising=False)
    with pytest.raises(servers.E2EError, match="no llama-server binary: run `make e2e`"):
        servers.find_llama_server()
    not_exec = tmp_path / "llama-server"
    not_exec.write_text("")
    monkeypatch.setenv("HARNESS_LLAMA_SERVER", str(not_exec))
    with pytest.raises(servers.E2EError, match="not an executable file"):
        servers.find_llama_server()
    not_exec.chmod(0o755)
    assert servers.find_llama_server() == not_exec


def _render(template: Path, messages: list[dict[str, object]]) -> str:
    """The template rendered by Jinja2 (llama-server renders it with its own Jinja engine)."""
    import jinja2

    env = jinja2.Environment(autoescape=False)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    return env.from_string(template.read_text()).render(
        messages=messages, tools=tools, add_generation_prompt=True
    )


CONVERSATION: list[dict[str, object]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'},
]  # fmt: skip


def test_the_template_renders_tools_calls_and_results() -> None:
    text = _render(servers.TEMPLATE, CONVERSATION)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '"name": "get_weather"' in text.split("</tools>")[0]
    # a call is the bare JSON object (no marker: the grammar starts it at "{")
    call = (
        '<|im_start|>assistant\n{"name": "get_weather", "arguments": {"city": "Paris"}}<|im_end|>'
    )
    assert call in text
    assert '<|im_start|>user\n<tool_response>\n{"sky": "sunny"}\n</tool_response><|im_end|>' in text
    # after a tool response the model writes freely ...
    assert text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    # ... after the user's question the generation prompt starts the call
    first = _render(servers.TEMPLATE, CONVERSATION[:2])
    assert first.endswith("Weather in Paris?<|im_end|>\n<|im_start|>assistant\nFunction call:\n")


def test_the_broken_template_drops_only_the_tool_results() -> None:
    good = _render(servers.TEMPLATE, CONVERSATION)
    broken = _render(servers.BROKEN_TEMPLATE, CONVERSATION)
    assert "sunny" not in broken and "<tool_response>\n" not in broken
    response = '<|im_start|>user\n<tool_response>\n{"sky": "sunny"}\n</tool_response><|im_end|>\n'
    # without the response, the last turn rendered is the call: the template starts another
    assert broken == good.replace(response, "") + "Function call:\n"
    assert _render(servers.BROKEN_TEMPLATE, CONVERSATION[:2]) == _render(
        servers.TEMPLATE, CONVERSATION[:2]
    )


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_a_failed_llama_server_build_is_one_line_naming_the_log(tmp_path: Path) -> None:
    """scripts/build-llama-server.sh on a cached sdist whose llama.cpp does not configure."""
    tree = tmp_path / "src" / "llama_cpp_python-9.9.9" / "vendor" / "llama.cpp"
    tree.mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text('message(FATAL_ERROR "no compiler today")\n')
    sdist = tmp_path / "cache" / "llama-server" / "sdist"
    sdist.mkdir(parents=True)
    with tarfile.open(sdist / "llama_cpp_python-9.9.9.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "src" / "llama_cpp_python-9.9.9", "llama_cpp_python-9.9.9")
    env = {**os.environ, "HARNESS_E2E_CACHE": str(tmp_path / "cache"),
           "E2E_LLAMA_CPP_VERSION": "9.9.9", "VENV": str(Path(sys.executable).parents[1])}  # fmt: skip
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build-llama-server.sh")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    failed = [ln for ln in done.stderr.splitlines() if ln.startswith("e2e: FAILED")]
    assert len(failed) == 1, done.stderr
    log = failed[0].split("(log: ")[1].rstrip(")")
    assert "building llama-server 9.9.9-" in failed[0]
    assert "no compiler today" in Path(log).read_text()
    assert not list((tmp_path / "cache" / "llama-server").glob("9.9.9-*/llama-server"))


def test_serve_reports_a_server_that_dies_at_start(tmp_path: Path) -> None:
    port = e2e.free_port()
    script = "import sys; print('Traceback (most recent call last):'); print('ValueError: bad model'); sys.exit(3)"
    cmd = [sys.executable, "-c", script, "--port", str(port)]
    server = e2e.serve(cmd, tmp_path / "server.log", timeout_s=30)
    with pytest.raises(e2e.E2EError, match=r"exited with code 3: .*ValueError: bad model"):
        server.__enter__()


def test_serve_waits_for_models_then_stops_the_group(tmp_path: Path) -> None:
    port = e2e.free_port()
    # a real HTTP server answering /v1/models, in its own process group
    code = (
        "import http.server as h, json, sys\n"
        "class H(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = json.dumps({'data': [{'id': 'm'}]}).encode()\n"
        "        self.send_response(200 if self.path == '/v1/models' else 404)\n"
        "        self.end_headers(); self.wfile.write(body)\n"
        f"h.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    cmd = [sys.executable, "-c", code, "--port", str(port)]
    import httpx

    with e2e.serve(cmd, tmp_path / "server.log", timeout_s=30) as url:
        assert url == f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "m"
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/v1/models", timeout=2)


def _step(name: str, code: int, verdict: str | None = None, role: str = "report",
          kinds: tuple[str, ...] = ()) -> e2e.Step:  # fmt: skip
    figures = {"verdict": verdict, "regressed_kinds": list(kinds)} if verdict else {}
    return e2e.Step(name, [], role=role, exit_code=code, figures=figures)  # type: ignore[arg-type]


def test_exit_code_requires_aa_no_regression_and_the_broken_template_caught() -> None:
    caught = _step("compare A/B broken-template", 1, "REGRESSION", "catch", ("repeat_loop",))
    ok = [_step("boot", 0, role="boot"), _step("run", 0, role="run"),
          _step("compare A/A", 0, "NO CHANGE", "aa"), _step("gsm8k A/A", 0, role="aa"), caught]  # fmt: skip
    assert e2e.exit_code(ok) == 0
    # a report-only A/B never fails the job, whatever it says or however it ends
    assert e2e.exit_code([*ok, _step("compare A/B rope-base", 1, "REGRESSION")]) == 0
    assert e2e.exit_code([*ok, _step("compare A/B rope-base", 2)]) == 0
    # an A/A regression (a false alarm on real noise) fails it
    assert e2e.exit_code([*ok, _step("gsm8k A/A", 1, "REGRESSION", "aa")]) == 1
    assert e2e.exit_code([*ok, _step("compare A/A", 3, role="aa")]) == 3
    assert e2e.exit_code([*ok, _step("gsm8k A/A", 2, role="aa")]) == 2


def test_an_aa_regression_is_replicated_once_on_fresh_seeds_and_the_job_judged_on_that() -> None:
    ok = [_step("boot", 0, role="boot"), _step("compare A/B broken-template", 1, "REGRESSION",
                                                "catch", ("repeat_loop",))]  # fmt: skip
    calls: list[str] = []

    def again(code: int, verdict: str) -> Callable[[], list[e2e.Step]]:
        def run() -> list[e2e.Step]:
            calls.append(verdict)
            return [_step("compare A/A (seed 1)", code, verdict, "aa")]

        return run

    # not a REGRESSION: nothing more runs
    first = _step("compare A/A", 0, "NO CHANGE", "aa")
    assert e2e.confirm_aa(first, again(0, "NO CHANGE")) == [first] and calls == []
    # a false alarm that does not reproduce: shown, the job passes on the second
    first = _step("compare A/A", 1, "REGRESSION", "aa")
    steps = e2e.confirm_aa(first, again(0, "NO CHANGE"))
    assert [s.role for s in steps] == ["aa-retried", "aa"] and calls == ["NO CHANGE"]
    assert e2e.exit_code([*ok, *steps]) == 0
    # one that reproduces fails it, naming the second
    steps = e2e.confirm_aa(_step("compare A/A", 1, "REGRESSION", "aa"), again(1, "REGRESSION"))
    assert e2e.failures([*ok, *steps]) == (
        1,
        ["compare A/A (seed 1): REGRESSION (exit 1), required: not REGRESSION"],
    )
    # an infrastructure failure is not a false alarm: no second run, the job fails on it
    calls.clear()
    first = _step("compare A/A", 3, role="aa")
    assert e2e.confirm_aa(first, again(0, "NO CHANGE")) == [first] and calls == []
    assert e2e.exit_code([*ok, first]) == 3


def _fake_harness(
    monkeypatch: pytest.MonkeyPatch, exit_of: Callable[[list[str], int], int]
) -> list[list[str]]:
    """``run_harness`` and the launch commands faked: each step's exit code is
    ``exit_of(argv, its 1-based index)``; returns the argv list as the steps run."""
    ran: list[list[str]] = []

    def fake_run(step: e2e.Step) -> e2e.Step:
        ran.append(step.argv)
        step.exit_code = exit_of(step.argv, len(ran))
        return step

    monkeypatch.setattr(e2e, "run_harness", fake_run)
    monkeypatch.setattr(e2e, "_launch_args", lambda args, model, v: [f"serve {v.name}"])
    return ran


def test_the_recorded_aa_is_a_gate_replicated_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran = _fake_harness(monkeypatch, lambda argv, n: 1 if argv[0] == "compare" else 0)
    steps = e2e._recorded_aa(e2e._parser().parse_args([]), tmp_path, tmp_path / "m.gguf")
    assert [s.role for s in steps] == ["aa-retried", "run", "aa"] and len(ran) == 3
    assert e2e.failures(steps)[0] == 1  # REGRESSION twice: the job fails


def test_the_recorded_aa_replica_records_a_again_on_seed_1_and_compares_on_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran = _fake_harness(monkeypatch, lambda argv, n: 1 if argv[0] == "compare" and n == 1 else 0)
    args = e2e._parser().parse_args(["--repeats", "3", "--catch-repeats", "16"])
    steps = e2e._recorded_aa(args, tmp_path, tmp_path / "m.gguf")
    assert [s.name for s in steps] == ["compare A/A A-again", "record A (seed 1)",
                                       "compare A/A A-again (seed 1)"]  # fmt: skip
    assert [s.role for s in steps] == ["aa-retried", "run", "aa"]
    first, record, second = ran
    assert first[first.index("--baseline") + 1] == str(tmp_path / "record-A")
    assert first[first.index("--sampling-seed") + 1] == "0"
    # a recording of its own, on seed 1, at the A/A's repeats (not the catch step's 16)
    assert record[0] == "record" and record[record.index("--run-id") + 1] == "record-A-seed1"
    assert record[record.index("--sampling-seed") + 1] == "1"
    assert record[record.index("--repeats") + 1] == "3"
    assert second[second.index("--baseline") + 1] == str(tmp_path / "record-A-seed1")
    assert second[second.index("--sampling-seed") + 1] == "1"
    assert second[second.index("--run-id") + 1] == "compare-aa-a-again-seed1"
    # the replica's recording failed: no replica, and the job fails saying so (not passes)
    ran = _fake_harness(monkeypatch, lambda argv, n: {1: 1, 2: 3}.get(n, 0))  # record: 3
    steps = e2e._recorded_aa(args, tmp_path, tmp_path / "m.gguf")
    assert [s.role for s in steps] == ["aa-retried", "run", "aa"] and len(ran) == 2
    assert e2e.failures(steps) == (2, ["compare A/A A-again (seed 1): did not run (exit 2)"])
    assert steps[-1].figures["message"] == "not run: record A (seed 1) exited 3"


def test_the_broken_template_must_be_caught() -> None:
    base = [_step("compare A/A", 0, "NO CHANGE", "aa")]
    missed = _step("compare A/B broken-template", 0, "NO CHANGE", "catch")
    other_kind = _step("compare A/B broken-template", 1, "REGRESSION", "catch",
                       ("wrong_final_answer",))  # fmt: skip
    both = _step("compare A/B broken-template", 1, "REGRESSION", "catch",
                 ("wrong_final_answer", "repeat_loop"))  # fmt: skip
    assert e2e.exit_code([*base, missed]) == 1
    # the job names the step that failed it (CI shows only the tail of the output)
    assert e2e.failures([*base, missed])[1] == [
        "compare A/B broken-template: NO CHANGE, required: REGRESSION"
    ]
    assert e2e.failures([*base, other_kind]) == (0, [])
    # any significant regression catches it; the kinds it names are reported
    assert e2e.exit_code([*base, other_kind]) == 0
    assert e2e.exit_code([*base, both]) == 0
    assert not e2e.caught(missed) and e2e.caught(other_kind) and e2e.caught(both)


def test_record_figures_count_llama_cpp_quirks(tmp_path: Path) -> None:
    """A transcript line shaped like llama-cpp-python's answer (recorded from the server)."""
    raw_turn = {
        "index": 0,
        "response": {
            "content": None,
            "tool_calls": [{"id": "call__0_add_cmpl-1", "type": "function", "name": "add",
                            "arguments": '{"a": 17, "b": 25}'}],
            "function_call": {"name": "add:", "arguments": '{"a": 17, "b": 25}'},
            "finish_reason": "tool_calls",
        },
    }  # fmt: skip
    rec = {
        "run_key": "t/x/0/nostream", "scenario_id": "x", "scenario_hash": "h",
        "scenario": {}, "repeat": 0, "stream": False,
        "target": {"label": "llama.cpp", "base_url": "http://127.0.0.1:1"},
        "turns": [raw_turn, {"index": 1, "response": {"content": "42"}}],
        "stop_reason": "final_answer", "final_content": "42",
    }  # fmt: skip
    (tmp_path / "transcripts.jsonl").write_text(json.dumps(rec) + "\n")
    figs = e2e.record_figures(tmp_path)["sides"]["llama.cpp"]
    assert figs["runs"] == 1 and figs["tool_calls"] == 1 and figs["final_answers"] == 1
    assert figs["function_call_colon"] == 1
    assert figs["null_content_with_tool_calls"] == 1


def test_pass_rates_per_scenario_and_stream_mode(
    sim_url: Callable[..., str], tmp_path: Path
) -> None:
    """The e2e scenarios played by the reference server (healthy: each passes), scored."""
    from harness.pipeline import score_folder

    url = sim_url("healthy", scenarios_dir=E2E_SCENARIOS)
    scenarios = load_scenarios([E2E_SCENARIOS])
    run_many_sync(scenarios, [TargetConfig(url, label="sim")], repeats=2, stream="both",
                  concurrency=4, out_dir=tmp_path, progress=False)  # fmt: skip
    score_folder(RunFolder(tmp_path))
    rates = e2e.pass_rates(tmp_path)
    assert sorted(rates) == sorted(
        f"sim/{sc.id}/{mode}" for sc in scenarios for mode in ("nostream", "stream")
    )
    assert set(rates.values()) == {"2/2"}
    # required on the first turn, none once the result is in: a call, then the answer
    rec = next(RunFolder(tmp_path).records())
    assert [t.request_params["tool_choice"] for t in rec.turns] == ["required", "none"]
    assert rec.stop_reason == "final_answer"


# ---------------------------------------------------------------- the real servers


def _llama_server_argv(model: Path, port: int) -> list[str]:
    try:
        binary = servers.find_llama_server()
    except servers.E2EError as exc:
        pytest.skip(str(exc))
    return servers.llama_server_command(binary, model, port)


def _llama_cpp_python_argv(model: Path, port: int) -> list[str]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (`make e2e` builds and installs it)")
    return servers.server_command(model, port)


#: server name -> (argv builder, its scenario folder)
REAL_SERVERS = {
    "llama-server": (_llama_server_argv, E2E_SCENARIOS),
    "llama-cpp-python": (_llama_cpp_python_argv, LEGACY_SCENARIOS),
}


@pytest.fixture(scope="module", params=sorted(REAL_SERVERS))
def real_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str]:
    """(server name, base URL) of a real server serving SmolLM2-135M, up for the module."""
    if "e2e" not in (request.config.option.markexpr or ""):
        pytest.skip("opt-in (a minute or two on 2 cores): pytest -m e2e, or make e2e")
    try:
        model = e2e.find_model()
    except e2e.E2EError as exc:
        pytest.skip(str(exc))
    argv_of, _ = REAL_SERVERS[request.param]
    argv = argv_of(model, e2e.free_port())
    log = tmp_path_factory.mktemp(request.param) / "server.log"
    with e2e.serve(argv, log, timeout_s=300) as url:
        yield request.param, url  # type: ignore[misc]


@pytest.mark.e2e
def test_real_server_runs_are_recorded_and_scored(
    real_server: tuple[str, str], tmp_path: Path
) -> None:
    from harness.scoring.score import score_run

    name, url = real_server
    scenarios = load_scenarios([REAL_SERVERS[name][1]])
    target = TargetConfig(url, label=name)
    run_many_sync(scenarios, [target], repeats=1, stream="both", concurrency=2,
                  out_dir=tmp_path, progress=False)  # fmt: skip
    records = list(RunFolder(tmp_path).records())
    assert len(records) == 2 * len(scenarios)
    assert records[0].target.models  # what GET /v1/models answered was recorded
    # llama-cpp-python cannot stream tool calls (docs/e2e-llama-cpp-python.md); llama-server can
    judged = [r for r in records if name == "llama-server" or not r.stream]
    assert all(not r.is_infra_error for r in judged), [r.error for r in judged]
    for r in records:
        score = score_run(r)  # must not crash on the real server's quirks
        assert score.run_key == r.run_key
    assert sum(1 for r in judged for _ in r.all_tool_calls()) >= 1


def test_a_candidate_that_does_not_boot_fails_only_a_required_step() -> None:
    # harness compare --candidate-cmd exits 3 when the candidate does not boot
    ok = [_step("boot", 0, role="boot"), _step("compare A/A", 0, "NO CHANGE", "aa")]
    rope = _step("compare A/B rope-base", 3)
    assert e2e.exit_code([*ok, rope]) == 0  # reported, not a job failure
    broken = _step("compare A/B broken-template", 3, None, "catch")
    code, why = e2e.failures([*ok, broken])
    assert code == 3
    assert why == [
        "compare A/B broken-template: too many infrastructure errors to judge, or its "
        "server did not boot (exit 3)"
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_the_driver_with_143_and_every_server(tmp_path: Path) -> None:
    try:
        servers.find_model()  # the driver checks it is there before it starts anything
    except servers.E2EError as exc:
        pytest.skip(str(exc))
    # a fake llama-server: the reference server on the port given, logging "pid port"
    fake, pids = tmp_path / "llama-server", tmp_path / "pids"
    fake.write_text(
        "#!/bin/sh\n"
        'port=; while [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done\n'
        f'echo "$$ $port" >> {pids}\n'
        f'exec {sys.executable} -m harness sim --port "$port" --play-unknown --latency-ms 3000\n'
    )
    fake.chmod(0o755)
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    argv = [sys.executable, "-m", "e2e.driver", "--llama-server", str(fake),
            "--out", str(tmp_path / "out"), "--gsm8k-data", str(gsm8k), "--no-logprobs",
            "--bfcl-tasks", "0", "--boot-timeout", "30"]  # fmt: skip
    driver = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import httpx

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and driver.poll() is None:
            rows = [ln.split() for ln in pids.read_text().splitlines()] if pids.exists() else []
            # the second server is server A, started by the driver itself (e2e.servers.serve)
            if len(rows) >= 2 and servers.health_status(f"http://127.0.0.1:{rows[1][1]}",
                                                        "/health") == 200:  # fmt: skip
                break
            time.sleep(0.2)
        assert driver.poll() is None, driver.communicate()[1].decode()[-2000:]
        started = [int(r[0]) for r in (ln.split() for ln in pids.read_text().splitlines())]
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=60)
        assert driver.returncode == 143, err.decode()[-2000:]
        assert "e2e: interrupted (servers stopped)" in err.decode()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in started if _alive(p)]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{rows[1][1]}/health", timeout=2)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        rows = [ln.split() for ln in pids.read_text().splitlines()] if pids.exists() else []
        for pid in [int(r[0]) for r in rows]:  # orphans of a driver that did not stop them
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def test_the_recorded_comparisons_send_every_run_as_its_own_draw(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The recording and its comparisons are not streamed: with ``--stream both`` a repeat
    is one unit of the tests (its two runs share a request seed), so the catch step's 32
    repeats are 32 draws a scenario and side, the same runs as 16 repeats both ways."""
    monkeypatch.setattr(e2e, "_launch_args", lambda args, model, v: [f"serve {v.name}"])
    args = e2e._parser().parse_args([])
    assert (args.repeats, args.catch_repeats) == (8, 32)
    record = e2e._record_step(args, tmp_path, tmp_path / "m.gguf")
    catch = e2e._recorded_compare_step(
        args, tmp_path, tmp_path / "m.gguf", e2e.Variant("B"), "A/B broken-template", "catch"
    )
    aa = e2e._recorded_compare_step(
        args, tmp_path, tmp_path / "m.gguf", e2e.Variant("A2"), "A/A A-again", "aa"
    )
    for step, repeats in ((record, "32"), (catch, "32"), (aa, "8")):
        assert step.argv[step.argv.index("--stream") + 1] == "off"
        assert step.argv[step.argv.index("--repeats") + 1] == repeats


def test_the_panel_stops_on_sigterm_instead_of_going_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SIGTERM during one of the panel's comparisons (a real ``harness compare`` on the
    reference server) stops the panel with exit 143; the next comparison never starts."""
    from e2e import panel

    started: list[str] = []

    class Panel:  # the panel's comparisons, without its llama-servers
        def __init__(self, args: Any, out: Path) -> None:
            pass

        def run(self, pairs: Any) -> None:
            for run_id in ("first", "second"):
                started.append(run_id)
                panel._harness(["compare", "--results", str(tmp_path), "--run-id", run_id,
                                "--repeats", "40", "--no-sequential", "--no-progress"])  # fmt: skip

    monkeypatch.setattr(panel, "_Panel", Panel)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code = panel.main(["--out", str(tmp_path / "panel"), "--only", "0"])
    finally:
        timer.cancel()
    assert code == 143 and started == ["first"]
    assert "panel: interrupted (servers stopped)" in capsys.readouterr().err
