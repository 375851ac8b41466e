"""MoE conformance with the released servers: routed experts, MoE geometry,
fusion evidence, server arguments.

Each fixture in ``tests/conformance/fixtures/<flavour>/`` is what a released server's code
produces (its ``source`` names the package and file). Every feature is tested twice:
(a) the fixture parsed by the harness's own code gives the right result; (b) the reference
server playing that flavour, over a real socket, leads the harness to the same result, and
answers in the fixture's shape (keys and types).
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from harness.server.experts import (
    check_response,
    find_moe_shape,
    hf_hub_cache,
    locate_model_config,
    model_path_from_command,
    moe_shape_from_config,
    probe_routed_experts,
)
from harness.server.fusion import (
    DEVICE_BUFFER,
    HOST_BUFFER,
    LOAD_END,
    collect_engagement,
    decide_fusion,
    server_args_diff,
    server_args_from_info,
)
from harness.sim import moe
from harness.sim.profiles import get_profile
from harness.sim.server import serve_in_thread

FIXTURES = Path(__file__).parent / "fixtures"
SGLANG = ["sglang-0.5.10.post1", "sglang-0.5.23"]
ALL = [*SGLANG, "vllm-0.33"]
#: the real model of the fusion/model_info fixtures (GLM-4.5-Air's config.json, abridged)
GLM_AIR = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "num_hidden_layers": 46,
    "first_k_dense_replace": 1,
    "n_routed_experts": 128,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
}
#: the reference server's model geometry (the routed-experts fixtures' example values)
SIM_SHAPE = moe_shape_from_config(moe.MOE_CONFIG, source="the reference server's config")
VLLM_CMD = ["vllm", "serve", moe.MODEL_PATH, "--enable-return-routed-experts"]


def fixture(flavour: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / flavour / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def shape_of(obj: Any) -> Any:
    """Keys and types, recursively (a list by its first item)."""
    if isinstance(obj, dict):
        return {k: shape_of(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape_of(obj[0])] if obj else []
    return None if obj is None else type(obj).__name__


def _put_in_cache(cache: Path, repo_id: str, config: dict[str, Any]) -> Path:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (snap / "config.json").write_text(json.dumps(config))
    return snap / "config.json"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face hub cache (``HF_HOME``) holding the configs of the fixtures' and the
    reference server's models, as a server machine that downloaded them has."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    cache = tmp_path / "hf" / "hub"
    _put_in_cache(cache, "zai-org/GLM-4.5-Air", GLM_AIR)
    for path, cfg in moe.MOE_MODELS.values():
        _put_in_cache(cache, path, cfg)
    return cache


def _start(request: dict[str, Any]) -> int:
    body = request["body"]
    return int(body.get("routed_experts_start_len") or body.get("routed_experts_prompt_start") or 0)


def _endpoint(request: dict[str, Any]) -> Any:
    return {"/generate": "generate", "/v1/chat/completions": "chat"}[request["path"]]


EXPECTED_FIELD = {
    "sglang-0.5.10.post1": "meta_info.routed_experts",
    "sglang-0.5.23": "sglext.routed_experts",
    "vllm-0.33": "choices[0].routed_experts",
}


# ------------------------------------------------------------------ 4, 9b: routed experts


#: rows each server returns for the fixture's request (9 + 8 - 1 - start); 0.5.10.post1
#: accepts ``routed_experts_start_len`` on /generate and ignores it
EXPECTED_ROWS = {"sglang-0.5.10.post1": 16, "sglang-0.5.23": 13, "vllm-0.33": 13}


def _judged_as(flavour: str, res: Any) -> None:
    """0.5.10.post1's ignored start is a ``rows`` violation that says so; else OK."""
    if flavour != "sglang-0.5.10.post1":
        assert res.ok, res.summary()
        return
    assert [v.kind for v in res.violations] == ["rows"], res.summary()
    assert "the server ignored the requested start" in res.violations[0].detail


@pytest.mark.parametrize("flavour", ALL)
def test_routed_experts_fixture_is_read_with_the_requests_start(flavour: str) -> None:
    fx = fixture(flavour, "routed_experts.json")
    assert SIM_SHAPE is not None and _start(fx["request"]) == 3
    res = check_response(
        _endpoint(fx["request"]), fx["response"]["body"], SIM_SHAPE, start_len=_start(fx["request"])
    )
    _judged_as(flavour, res)
    assert res.field == EXPECTED_FIELD[flavour]
    assert res.rows == EXPECTED_ROWS[flavour]
    assert (res.encoding, res.dtype) == (
        ("npy", "uint8") if flavour == "vllm-0.33" else ("int32", "int32")
    )


def test_npy_payload_is_not_read_as_raw_int32() -> None:
    """The .npy header would be garbage ids; and a payload of the wrong geometry is named."""
    fx = fixture("vllm-0.33", "routed_experts.json")
    wrong = SIM_SHAPE.model_copy(update={"top_k": 2}) if SIM_SHAPE else None
    assert wrong is not None
    res = check_response("chat", fx["response"]["body"], wrong, start_len=3)
    assert not res.ok and res.violations[0].kind == "shape"
    assert ".npy shape (13, 4, 4)" in res.violations[0].detail


def _sim_answer(url: str, request: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url + request["path"], json=request["body"], timeout=30)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _holder(flavour: str, body: dict[str, Any]) -> Any:
    if flavour == "vllm-0.33":
        return body["choices"][0]["routed_experts"]
    return body["meta_info"] if "meta_info" in body else body["sglext"]


@pytest.mark.parametrize("flavour", ALL)
def test_routed_experts_over_a_socket(flavour: str, hub: Path) -> None:
    fx = fixture(flavour, "routed_experts.json")
    request, start = fx["request"], _start(fx["request"])
    model = model_path_from_command(VLLM_CMD) if flavour == "vllm-0.33" else None
    with serve_in_thread("healthy", capture=True, flavour=flavour, scenarios_dir=None) as url:
        got = _sim_answer(url, request)
        res = probe_routed_experts(
            url, endpoint=_endpoint(request), start_len=start, model_path=model
        )
    want = _holder(flavour, fx["response"]["body"])
    have = _holder(flavour, got)
    if isinstance(want, dict):
        assert shape_of(have) == shape_of(want)
        want, have = want["routed_experts"], have["routed_experts"]
    raw_want, raw_have = base64.b64decode(want), base64.b64decode(have)
    assert raw_have.startswith(b"\x93NUMPY") == raw_want.startswith(b"\x93NUMPY")
    _judged_as(flavour, res)
    assert res.field == EXPECTED_FIELD[flavour] and res.start_len == start
    ignored = start if flavour == "sglang-0.5.10.post1" else 0
    want = res.prompt_tokens + res.completion_tokens - 1 - start + ignored  # type: ignore[operator]
    assert res.rows == want
    assert res.shape is not None and "hub cache" in res.shape.source


def test_vllm_sends_routed_experts_on_the_server_flag_alone(hub: Path) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = {"path": "/v1/chat/completions", "body": body}
    with serve_in_thread("healthy", capture=True, flavour="vllm-0.33", scenarios_dir=None) as on:
        assert isinstance(_sim_answer(on, request)["choices"][0]["routed_experts"], str)
    with serve_in_thread("healthy", capture=False, flavour="vllm-0.33", scenarios_dir=None) as off:
        assert "routed_experts" not in _sim_answer(off, request)["choices"][0]
        res = probe_routed_experts(off, endpoint="chat", model_path=moe.MODEL_PATH)
    assert [v.kind for v in res.violations] == ["missing"]
    assert "choices[i].routed_experts" in res.violations[0].detail


# ------------------------------------------------------------------ 3: MoE geometry


def _mock(bodies: dict[str, tuple[int, Any]]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        status, body = bodies.get(request.url.path, (404, {"detail": "Not Found"}))
        return httpx.Response(status, json=body)

    return httpx.Client(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("flavour", ALL)
def test_model_info_fixture_has_no_geometry_and_the_config_is_found(
    flavour: str, hub: Path
) -> None:
    fx = fixture(flavour, "model_info.json")
    status, body = fx["response"]["status"], fx["response"]["body"]
    assert moe_shape_from_config(body) is None
    launch = ["python", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-4.5-Air"]
    launched = model_path_from_command(launch) if flavour == "vllm-0.33" else None
    with _mock({"/model_info": (status, body)}) as client:
        shape, tried = find_moe_shape(client, "http://server", model_path=launched)
    assert shape is not None, tried
    assert (shape.num_layers, shape.top_k, shape.num_routed_experts) == (46, 8, 128)
    assert shape.dense_layers == [0]
    where = "launch command --model-path" if launched else "/model_info model_path"
    assert shape.source.startswith(where) and "(hub cache)" in shape.source
    assert str(hub) in shape.source


@pytest.mark.parametrize("flavour", ALL)
def test_model_info_and_geometry_over_a_socket(flavour: str, hub: Path) -> None:
    fx = fixture(flavour, "model_info.json")
    with serve_in_thread("healthy", capture=True, flavour=flavour, scenarios_dir=None) as url:
        r = httpx.get(url + "/model_info", timeout=10)
        no_geometry = probe_routed_experts(url, endpoint="chat")
    assert r.status_code == fx["response"]["status"]
    if r.status_code == 200:
        assert shape_of(r.json()) == shape_of(fx["response"]["body"])
        assert no_geometry.ok and no_geometry.shape is not None
        assert no_geometry.shape.source.startswith("/model_info model_path (hub cache)")
    else:  # vLLM: no /model_info; the model comes from the launch command (or flags)
        assert no_geometry.error is not None and "MoE geometry unknown" in no_geometry.error


def test_hub_cache_location_honours_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert hf_hub_cache() == Path("~/.cache/huggingface/hub").expanduser()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_hub_cache() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hf_hub_cache() == tmp_path / "cache"
    cfg = _put_in_cache(tmp_path / "cache", "org/model", {"num_hidden_layers": 1})
    assert locate_model_config("org/model") == (cfg, "hub cache")
    assert locate_model_config(str(cfg.parent)) == (cfg, "local")
    assert locate_model_config("org/absent") is None


def test_model_path_from_launch_commands() -> None:
    assert model_path_from_command(VLLM_CMD) == moe.MODEL_PATH
    sglang = ["python", "-m", "sglang.launch_server", "--model-path=a/b"]
    assert model_path_from_command(sglang) == "a/b"
    assert model_path_from_command(["vllm", "serve", "--model", "c/d", "--port", "1"]) == "c/d"
    assert model_path_from_command(["python", "-m", "x", "--port", "1"]) is None


# ------------------------------------------------------------------ 5, 9d: fusion evidence


def _fusion(fx: dict[str, Any], lines: list[str] | None = None, top_k: int | None = None) -> Any:
    return decide_fusion(
        fx["log_lines"] if lines is None else lines,
        fx.get("server_info"),
        model_info=fx.get("model_info"),
        top_k=top_k,
    )


@pytest.mark.parametrize("flavour", SGLANG)
def test_glm_fusion_is_proved_by_the_capture_buffer_in_both_wordings(flavour: str) -> None:
    fx = fixture(flavour, "fusion_log.json")
    top_k = 8 if flavour == "sglang-0.5.10.post1" else None  # 0.5.23 logs the host width
    d = _fusion(fx, top_k=top_k)
    assert (d.state, d.decided_by) == ("ON", "log: capture buffer width"), d.reason
    assert any(DEVICE_BUFFER.search(ln) for ln in d.evidence)


@pytest.mark.parametrize(
    ("flavour", "state", "decided_by"),
    [
        ("sglang-0.5.10.post1", "ON", "server_info.internal_states"),
        ("sglang-0.5.23", "ON", "log: no refusal before Load weight end"),
    ],
)
def test_glm_fusion_without_capture(flavour: str, state: str, decided_by: str) -> None:
    fx = fixture(flavour, "fusion_log.json")
    lines = [ln for ln in fx["log_lines"] if not DEVICE_BUFFER.search(ln)]
    lines = [ln for ln in lines if "Routing experts host" not in ln and not HOST_BUFFER.search(ln)]
    d = _fusion(fx, lines)
    assert (d.state, d.decided_by) == (state, decided_by), d.reason
    no_log = _fusion(fx, [])
    if flavour == "sglang-0.5.23":  # the flag in server_info says nothing about the model
        assert no_log.state == "UNKNOWN" and "Glm4MoeForCausalLM" in no_log.reason


@pytest.mark.parametrize("flavour", SGLANG)
def test_refusal_evidence_per_version(flavour: str) -> None:
    fx = fixture(flavour, "fusion_refused.json")
    from_log = _fusion(fx)
    assert from_log.state == "OFF"
    assert from_log.decided_by == "log: refusal or automatic-disable line"
    from_info = _fusion(fx, [])
    if flavour == "sglang-0.5.10.post1":
        assert (from_info.state, from_info.decided_by) == ("OFF", "server_info.internal_states")
    else:  # 0.5.23: a refusal stays in the model; only the log says it
        assert (from_info.state, from_info.decided_by) == ("UNKNOWN", "none")


def test_vllm_logs_no_fusion_state() -> None:
    d = _fusion(fixture("vllm-0.33", "fusion_log.json"))
    assert (d.state, d.decided_by) == ("UNKNOWN", "none")


_LOG_KINDS = [
    LOAD_END,
    DEVICE_BUFFER,
    HOST_BUFFER,
    re.compile(r"Routing experts host buffer allocated\. #tokens: \d+, size: [\d.]+ GB"),
    re.compile(
        r"RoutedExpertsCapturer: allocating buffer with max_tokens=\d+, num_layers=\d+, "
        r"num_experts_per_tok=\d+ \(hf_config\.model_type=\w+\)"
    ),
]


@pytest.mark.parametrize("flavour", ALL)
def test_glm_fusion_over_a_socket(flavour: str, hub: Path) -> None:
    fx = fixture(flavour, "fusion_log.json")
    lines = moe.boot_log_lines(
        get_profile("fusion-on"), capture=True, flavour=flavour, moe_model="glm-4.5"
    )
    for kind in _LOG_KINDS:  # the sim's log holds each kind of line the real one does
        real, sim = (any(kind.search(ln) for ln in log) for log in (fx["log_lines"], lines))
        assert real <= sim, kind.pattern
    with serve_in_thread(
        "fusion-on", capture=True, flavour=flavour, moe_model="glm-4.5", scenarios_dir=None
    ) as url:
        eng = collect_engagement(url, log_text="\n".join(lines))
    if flavour == "vllm-0.33":
        assert (eng.state, eng.server) == ("UNKNOWN", "vllm")
        return
    assert (eng.state, eng.decided_by) == ("ON", "log: capture buffer width"), eng.reason
    assert eng.architecture == "Glm4MoeForCausalLM" and eng.server == "sglang"
    assert eng.server_version == fx["server_info"]["version"]


@pytest.mark.parametrize(
    ("flavour", "without_log"), [("sglang-0.5.10.post1", "OFF"), ("sglang-0.5.23", "UNKNOWN")]
)
def test_refusal_over_a_socket(flavour: str, without_log: str) -> None:
    fx = fixture(flavour, "fusion_refused.json")
    lines = moe.boot_log_lines(get_profile("healthy"), capture=False, flavour=flavour)
    assert any("Shared experts fusion optimization is disabled." in ln for ln in lines)
    with serve_in_thread("healthy", flavour=flavour, scenarios_dir=None) as url:
        body = httpx.get(url + "/server_info", timeout=10).json()
        with_log = collect_engagement(url, log_text="\n".join(lines))
        no_log = collect_engagement(url)
    flag = "disable_shared_experts_fusion"
    want = fx["server_info"]["internal_states"][0][flag]
    assert body["internal_states"][0][flag] is want
    assert with_log.state == "OFF" and no_log.state == without_log


# ------------------------------------------------------------------ 8: server arguments


def test_sglang_0523_server_info_facts_are_not_arguments() -> None:
    body = fixture("sglang-0.5.23", "server_info.json")["response"]["body"]
    args = server_args_from_info(body)
    for key in ("startup_time", "launch_command", "kv_events", "version", "frontend"):
        assert key in body and key not in args
    later = json.loads(json.dumps(body))
    later["startup_time"]["load_weight"] += 3.0
    later["launch_command"] = later["launch_command"].replace("30000", "30001")
    later["port"] = 30001
    assert server_args_diff(args, server_args_from_info(later)) == {}
    later["tp_size"] = 2
    assert server_args_diff(args, server_args_from_info(later)) == {
        "tp_size": {"baseline": 1, "candidate": 2}
    }


def test_sglang_0510_server_info_arguments() -> None:
    body = fixture("sglang-0.5.10.post1", "server_info.json")["response"]["body"]
    args = server_args_from_info(body)
    assert args["tp_size"] == 1 and args["disable_shared_experts_fusion"] is False
    assert "internal_states" not in args and "version" not in args


@pytest.mark.parametrize("name", ["server_info.json", "server_info_json.json"])
def test_vllm_server_info_is_read_as_vllm_config(name: str) -> None:
    body = fixture("vllm-0.33", name)["response"]["body"]
    args = server_args_from_info(body)
    assert not {"vllm_config", "vllm_env", "system_env"} & set(args)
    assert args["env.VLLM_SERVER_DEV_MODE"] is True
    if name == "server_info.json":  # str(VllmConfig): text values, nested reprs kept whole
        assert args["tensor_parallel_size"] == "1" and args["model"] == "'zai-org/GLM-4.5-Air'"
        assert args["compilation_config"].startswith("{'level': None")
        assert args["aux_output_config"] == "AuxOutputConfig(enable_return_routed_experts=True)"
        return
    assert args["parallel_config.tensor_parallel_size"] == 1
    other = json.loads(json.dumps(body))
    other["vllm_config"]["instance_id"] = "ffff0000"
    other["vllm_config"]["parallel_config"]["master_port"] = 41234
    other["system_env"]["gpu_models_and_configuration"] = "GPU 0: NVIDIA A100"
    assert server_args_diff(args, server_args_from_info(other)) == {}


@pytest.mark.parametrize("flavour", ALL)
def test_server_args_over_a_socket(flavour: str) -> None:
    fx = fixture(flavour, "server_info.json")
    with serve_in_thread("fusion-on", capture=True, flavour=flavour, scenarios_dir=None) as a:
        body = httpx.get(a + "/server_info", timeout=10).json()
        on = collect_engagement(a)
    with serve_in_thread("fusion-on", capture=False, flavour=flavour, scenarios_dir=None) as b:
        off = collect_engagement(b)
    assert shape_of(body).keys() == shape_of(fx["response"]["body"]).keys()
    for key, kind in shape_of(fx["response"]["body"]).items():
        if not isinstance(kind, (dict, list)):
            assert shape_of(body)[key] == kind, key
    if flavour != "vllm-0.33":
        want = fx["response"]["body"]["internal_states"][0].keys()
        assert body["internal_states"][0].keys() == want
    diff = server_args_diff(on.server_args, off.server_args)
    key = (
        "aux_output_config.enable_return_routed_experts"
        if flavour == "vllm-0.33"
        else "enable_return_routed_experts"
    )
    assert diff == {key: {"baseline": True, "candidate": False}}


def test_decoded_fixture_ids_are_the_example_geometry() -> None:
    """The fixtures' payloads decode to [rows, 4, 4] with layer 0 all zero."""
    fx = fixture("vllm-0.33", "routed_experts.json")
    raw = base64.b64decode(fx["response"]["body"]["choices"][0]["routed_experts"])
    arr = np.load(io.BytesIO(raw), allow_pickle=False)
    assert arr.dtype == np.uint8 and arr.shape == (13, 4, 4) and not arr[:, 0].any()


def test_probing_generate_on_vllm_says_which_endpoints_it_has(hub: Path) -> None:
    with serve_in_thread("healthy", capture=True, flavour="vllm-0.33", scenarios_dir=None) as url:
        res = probe_routed_experts(url, endpoint="generate", model_path=moe.MODEL_PATH)
    assert res.error is not None and "HTTP 404" in res.error and "probe chat" in res.error


def test_harness_sim_offers_every_simulated_moe_model() -> None:
    import argparse

    from harness.cli import sim as sim_cli

    parser = argparse.ArgumentParser()
    sim_cli.add_arguments(parser)
    action = next(a for a in parser._actions if a.dest == "moe_model")
    assert list(action.choices or []) == list(moe.MOE_MODELS)
