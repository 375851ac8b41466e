"""Routed-experts decoding and checks (hand-made arrays) and the probe (real sim server)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest

from harness.server.experts import (
    MoeShape,
    check_routed_experts,
    decode_routed_experts,
    load_model_config,
    moe_shape_from_config,
    probe_routed_experts,
)
from harness.sim.server import serve_in_thread

SHAPE = MoeShape(num_layers=3, top_k=2, num_routed_experts=8, dense_layers=[0])


def _b64(arr: np.ndarray, dtype: str = "<i4") -> str:
    return base64.b64encode(arr.astype(dtype).tobytes()).decode()


def _healthy(rows: int) -> np.ndarray:
    arr = np.zeros((rows, 3, 2), dtype=np.int64)
    for r in range(rows):
        arr[r, 1] = [r % 8, (r + 1) % 8]
        arr[r, 2] = [(r + 3) % 8, (r + 5) % 8]
    return arr


# ------------------------------------------------------------------ decoding


def test_decode_int32_little_endian_round_trip() -> None:
    arr = np.array([0, 1, 7, 255, 70000], dtype=np.int64)
    assert decode_routed_experts(_b64(arr)).tolist() == arr.tolist()
    # big-endian bytes decode differently: the decoder really reads little-endian
    big = base64.b64encode(np.array([1], dtype=">i4").tobytes()).decode()
    assert decode_routed_experts(big).tolist() == [1 << 24]


def test_decode_honours_dtype_field() -> None:
    arr = np.array([3, 4, 5], dtype=np.int64)
    assert decode_routed_experts(_b64(arr, "<i2"), dtype="int16").tolist() == [3, 4, 5]
    assert decode_routed_experts(_b64(arr, "<i8"), dtype="torch.int64").tolist() == [3, 4, 5]


@pytest.mark.parametrize(
    ("payload", "dtype", "message"),
    [
        ("not base64!!", None, "not valid base64"),
        (base64.b64encode(b"\x01\x02\x03").decode(), None, "do not divide"),
        (_b64(np.array([1])), "float32", "not an integer type"),
        (_b64(np.array([1])), "bogus", "unknown routed_experts_dtype"),
    ],
)
def test_decode_rejects_bad_payloads(payload: str, dtype: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_routed_experts(payload, dtype=dtype)


# ------------------------------------------------------------------ checks


def test_healthy_array_passes_and_rows_match() -> None:
    rows, found = check_routed_experts(
        _healthy(6).ravel(), SHAPE, prompt_tokens=4, completion_tokens=3
    )
    assert rows == 6 and found == []


def test_size_not_divisible_is_a_shape_violation() -> None:
    rows, found = check_routed_experts(np.zeros(7, dtype=np.int64), SHAPE)
    assert rows is None
    assert [v.kind for v in found] == ["shape"] and "3 x 2 = 6" in found[0].detail


def test_row_count_must_follow_token_counts_and_start_len() -> None:
    _, found = check_routed_experts(
        _healthy(6).ravel(), SHAPE, prompt_tokens=5, completion_tokens=3
    )
    assert [v.kind for v in found] == ["rows"] and "= 7" in found[0].detail
    _, ok = check_routed_experts(
        _healthy(4).ravel(), SHAPE, prompt_tokens=5, completion_tokens=3, start_len=3
    )
    assert ok == []


def test_shared_expert_id_named_with_token_and_layer() -> None:
    arr = _healthy(5)
    arr[3, 2] = [8, 8]  # shared expert id (== num_routed_experts) in both columns
    _, found = check_routed_experts(arr.ravel(), SHAPE, start_len=10)
    kinds = {(v.kind, v.token, v.layer) for v in found}
    assert kinds == {("shared_expert_id", 13, 2), ("duplicate", 13, 2)}
    assert "token 13, layer 2" in found[0].line()


def test_out_of_range_duplicates_and_dense_nonzero() -> None:
    arr = _healthy(3)
    arr[0, 1] = [-1, 2]
    arr[1, 2] = [9, 1]
    arr[2, 1] = [4, 4]
    arr[2, 0] = [0, 5]  # dense layer 0 must stay zero
    _, found = check_routed_experts(arr.ravel(), SHAPE)
    got = [(v.kind, v.token, v.layer) for v in found]
    assert got == [
        ("out_of_range", 0, 1),
        ("out_of_range", 1, 2),
        ("dense_nonzero", 2, 0),
        ("duplicate", 2, 1),
    ]


def test_shape_from_config_variants() -> None:
    deepseek = {
        "hf_config": {
            "num_hidden_layers": 61,
            "num_experts_per_tok": 8,
            "n_routed_experts": 256,
            "first_k_dense_replace": 3,
        }
    }
    s = moe_shape_from_config(deepseek)
    assert s is not None and (s.num_layers, s.top_k, s.num_routed_experts) == (61, 8, 256)
    assert s.dense_layers == [0, 1, 2]
    qwen = {
        "num_hidden_layers": 4,
        "num_experts_per_tok": 2,
        "num_experts": 8,
        "mlp_only_layers": [3],
    }
    q = moe_shape_from_config(qwen)
    assert q is not None and q.num_routed_experts == 8 and q.dense_layers == [3]
    assert moe_shape_from_config({"num_hidden_layers": 4}) is None
    assert moe_shape_from_config(None) is None


# ------------------------------------------------------------------ probe (real server)


@pytest.mark.parametrize("endpoint", ["generate", "chat", "completions"])
def test_probe_passes_on_healthy_server(endpoint: str) -> None:
    with serve_in_thread("fusion-on", capture=True, scenarios_dir=None) as url:
        res = probe_routed_experts(url, endpoint=endpoint)  # type: ignore[arg-type]
    assert res.error is None, res.error
    assert res.ok and res.violation_count == 0
    assert res.shape is not None and res.shape.source == "/model_info"
    assert res.prompt_tokens is not None and res.completion_tokens is not None
    assert res.rows == res.prompt_tokens + res.completion_tokens - 1


def test_probe_names_token_and_layer_of_duplicated_shared_id() -> None:
    with serve_in_thread("experts-dup-shared", capture=True, scenarios_dir=None) as url:
        res = probe_routed_experts(url, endpoint="chat")
    assert not res.ok and res.error is None
    first = res.violations[0]
    assert (first.kind, first.token, first.layer) == ("shared_expert_id", 0, 1)
    assert "16" in first.detail
    # every MoE layer of every token is broken; dense layer 0 is not
    assert res.rows is not None and res.violation_count == res.rows * 3 * 2
    assert all(v.layer != 0 for v in res.violations)
    assert res.violation_kinds == {"shared_expert_id": res.rows * 3, "duplicate": res.rows * 3}
    assert "token 0, layer 1" in res.summary()


def test_probe_reports_a_missing_field() -> None:
    with serve_in_thread("healthy", capture=False, scenarios_dir=None) as url:
        res = probe_routed_experts(url)
    assert not res.ok and [v.kind for v in res.violations] == ["missing"]
    assert "--enable-return-routed-experts" in res.violations[0].detail


def test_probe_flags_override_geometry_and_infra_errors_are_errors() -> None:
    wrong = MoeShape(num_layers=4, top_k=4, num_routed_experts=8)  # ids up to 15 are too big
    with serve_in_thread("healthy", capture=True, scenarios_dir=None) as url:
        res = probe_routed_experts(url, shape=wrong)
    assert not res.ok and any(v.kind == "out_of_range" for v in res.violations)
    assert any(v.kind == "dense_nonzero" for v in res.violations) is False
    with serve_in_thread("http-500", capture=True, scenarios_dir=None) as url:
        bad = probe_routed_experts(url)
    assert bad.error is not None and "HTTP 500" in bad.error and not bad.ok


def test_load_model_config_from_file_or_directory(tmp_path: Path) -> None:
    cfg = {"num_hidden_layers": 2, "num_experts_per_tok": 2, "n_routed_experts": 4}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model_config(tmp_path) == cfg
    assert load_model_config(tmp_path / "config.json") == cfg
    assert load_model_config(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert load_model_config(tmp_path / "bad.json") is None
    shape = moe_shape_from_config(load_model_config(tmp_path))
    assert shape is not None and shape.num_routed_experts == 4


# ------------------------------------------------------------------ .npy (vLLM) and the start


def _npy(arr: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32])
def test_decode_npy_keeps_its_dtype_and_shape(dtype: type) -> None:
    from harness.server.experts import decode_routed_experts_array

    arr = _healthy(3).astype(dtype)
    got = decode_routed_experts_array(_npy(arr))
    assert got.dtype == np.dtype(dtype) and got.shape == (3, 3, 2)
    assert decode_routed_experts(_npy(arr)).tolist() == arr.ravel().tolist()


def test_decode_npy_refuses_objects_and_floats() -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="not a readable .npy"):
        decode_routed_experts(base64.b64encode(buf.getvalue()).decode())
    with pytest.raises(ValueError, match="not integers"):
        decode_routed_experts(_npy(np.zeros((2, 3, 2), dtype=np.float32)))


def test_check_response_takes_the_start_from_the_request_not_the_answer() -> None:
    from harness.server.experts import check_response

    body = {
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        "sglext": {"routed_experts": _b64(_healthy(4)), "routed_experts_start_len": 99},
        "choices": [{"index": 0}],
    }
    res = check_response("chat", body, SHAPE, start_len=3)
    assert res.ok and res.rows == 4 and res.start_len == 3
    vllm = {"usage": body["usage"], "choices": [{"routed_experts": _npy(_healthy(7))}]}
    res = check_response("completions", vllm, SHAPE)
    assert res.ok and res.field == "choices[0].routed_experts" and res.encoding == "npy"


def test_probe_finds_a_local_model_folder(tmp_path: Path) -> None:
    """A server launched on a local folder: its config.json is read from there."""
    from harness.sim import moe

    (tmp_path / "config.json").write_text(json.dumps(moe.MOE_CONFIG))
    with serve_in_thread(
        "healthy", capture=True, flavour="sglang-0.5.23", scenarios_dir=None
    ) as url:
        res = probe_routed_experts(url, endpoint="chat", model_path=str(tmp_path))
    assert res.ok, res.summary()
    assert res.shape is not None
    assert res.shape.source == f"launch command --model-path (local): {tmp_path / 'config.json'}"
    assert "geometry from launch command" in res.summary()
