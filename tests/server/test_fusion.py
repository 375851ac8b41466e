"""Fusion engagement: decided from the log and /server_info, against the real sim server."""

from __future__ import annotations

from typing import Any

import pytest

from harness.server.fusion import (
    FusionEngagement,
    collect_engagement,
    decide_engagement,
    fusion_warning,
    server_args_diff,
)
from harness.sim.moe import boot_log_lines
from harness.sim.profiles import get_profile
from harness.sim.server import serve_in_thread

ON = "[2026-02-26 05:20:21 TP0] Shared experts fusion optimization enabled."
OFF = (
    "[2026-02-26 05:20:21 TP0] Config not support fused shared expert(s). "
    "Shared experts fusion optimization is disabled."
)
AUTO = "FlashInfer TRTLLM MoE is enabled. --disable-shared-experts-fusion is automatically set."


@pytest.mark.parametrize(
    ("lines", "info", "state"),
    [
        ([ON], None, "ON"),
        ([OFF], None, "OFF"),
        ([AUTO], None, "OFF"),
        ([], {"disable_shared_experts_fusion": True}, "OFF"),
        ([], {"disable_shared_experts_fusion": False}, "UNKNOWN"),  # the flag alone is no proof
        (
            [],
            {
                "disable_shared_experts_fusion": False,
                "internal_states": [{"disable_shared_experts_fusion": True}],
            },
            "OFF",
        ),
        ([ON, OFF], None, "UNKNOWN"),  # conflicting lines
        ([ON], {"disable_shared_experts_fusion": True}, "UNKNOWN"),
        (["nothing to see"], {}, "UNKNOWN"),
        ([ON], {"disable_shared_experts_fusion": False}, "ON"),
    ],
)
def test_decide_engagement(lines: list[str], info: dict[str, Any] | None, state: str) -> None:
    got, reason, evidence = decide_engagement(lines, info)
    assert got == state, reason
    if state != "UNKNOWN":
        assert evidence  # every definite verdict quotes what it rests on


@pytest.mark.parametrize(
    ("profile", "with_log", "state"),
    [
        ("fusion-on", True, "ON"),
        ("fusion-on", False, "UNKNOWN"),  # /server_info says false: not proof of ON
        ("healthy", True, "OFF"),
        ("healthy", False, "OFF"),  # the scheduler's copy in internal_states says true
        ("fusion-unknown", True, "UNKNOWN"),
        ("fusion-unknown", False, "UNKNOWN"),
    ],
)
def test_collect_engagement_from_sim(profile: str, with_log: bool, state: str) -> None:
    log = "\n".join(boot_log_lines(get_profile(profile), capture=False)) if with_log else None
    with serve_in_thread(profile, scenarios_dir=None) as url:
        eng = collect_engagement(url + "/v1", log_text=log)
    assert eng.state == state, eng.reason
    assert eng.endpoints["/server_info"] == "200" and eng.endpoints["/model_info"] == "200"
    assert eng.server_args["disable_shared_experts_fusion"] is False
    assert "internal_states" not in eng.server_args
    assert eng.model_info is not None and eng.model_info["n_routed_experts"] == 16


def test_collect_engagement_reads_a_log_file_and_survives_no_server(tmp_path: Any) -> None:
    log = tmp_path / "server.log"
    log.write_text("boot\n" + ON + "\nready\n")
    eng = collect_engagement("http://127.0.0.1:9", log_path=log, timeout_s=1)
    assert eng.state == "ON" and eng.evidence == [ON]
    assert eng.endpoints["/server_info"].startswith("error")
    assert eng.endpoints["/get_server_info"].startswith("error")


def test_server_args_diff_lists_what_differs() -> None:
    a = {"port": 1, "disable_shared_experts_fusion": True, "tp_size": 1, "only_a": "x"}
    b = {"port": 2, "disable_shared_experts_fusion": False, "tp_size": 1}
    assert server_args_diff(a, b) == {
        "disable_shared_experts_fusion": {"baseline": True, "candidate": False},
        "only_a": {"baseline": "x", "candidate": None},
    }


def test_fusion_warning_when_the_variable_does_not_differ() -> None:
    def eng(s: str) -> FusionEngagement:
        return FusionEngagement(state=s, reason="why")  # type: ignore[arg-type]

    both_off = fusion_warning(eng("OFF"), eng("OFF"))
    assert both_off is not None and "OFF on both sides" in both_off
    both_unknown = fusion_warning(eng("UNKNOWN"), eng("UNKNOWN"))
    assert both_unknown is not None and "UNKNOWN on both sides" in both_unknown
    assert fusion_warning(eng("OFF"), eng("ON")) is None
    assert fusion_warning(eng("UNKNOWN"), eng("ON")) is None


def test_every_verdict_names_what_decided_it() -> None:
    from harness.server.fusion import decide_fusion

    assert decide_fusion([ON], None).decided_by == "log: enabled line"
    assert decide_fusion([OFF], None).decided_by == "log: refusal or automatic-disable line"
    flag = {"disable_shared_experts_fusion": True}
    assert decide_fusion([], flag).decided_by == "server_info: disable_shared_experts_fusion"
    qwen = decide_fusion([], {}, model_info={"architectures": ["Qwen3MoeForCausalLM"]})
    assert (qwen.state, qwen.decided_by) == ("OFF", "architecture")
    narrow = "[x TP0] Routing experts device buffer allocated. #shape: (8192, 4, 4), size: 0.50 MB"
    got = decide_fusion([narrow], None, top_k=4)
    assert (got.state, got.decided_by) == ("OFF", "log: capture buffer width")
    assert decide_fusion([narrow], None).state == "UNKNOWN"  # no top-k: the width says nothing
    clash = decide_fusion([ON, narrow], None, top_k=4)
    assert (clash.state, clash.decided_by) == ("UNKNOWN", "conflict")


def test_server_args_diff_ignores_ports_and_ids_at_any_depth() -> None:
    a = {"parallel_config.master_port": 1, "instance_id": "a", "nccl_port": 5, "tp_size": 1}
    b = {"parallel_config.master_port": 2, "instance_id": "b", "nccl_port": 6, "tp_size": 1}
    assert server_args_diff(a, b) == {}
    assert server_args_diff({"lora_support": 1}, {"lora_support": 2}) != {}  # not a port


def test_a_refusal_line_decides_before_a_narrow_capture_buffer() -> None:
    from harness.server.fusion import decide_fusion

    narrow = "[x TP0] Routing experts device buffer allocated. #shape: (8192, 4, 4), size: 0.50 MB"
    got = decide_fusion([OFF, narrow], None, top_k=4)
    assert (got.state, got.decided_by) == ("OFF", "log: refusal or automatic-disable line")
    assert got.evidence == [OFF, narrow]
