"""A target from the shared options: one mapping of option names to ``TargetConfig`` fields."""

from __future__ import annotations

import argparse
import dataclasses

from harness.client.target import OPTION_FIELDS, TargetConfig, target_from_options
from harness.options import OPTIONS


def test_every_field_is_read_from_a_shared_option() -> None:
    fields = {f.name for f in dataclasses.fields(TargetConfig)}
    assert set(OPTION_FIELDS) <= set(OPTIONS)
    assert set(OPTION_FIELDS.values()) <= fields


def test_options_given_missing_and_overridden() -> None:
    args = argparse.Namespace(
        model="m", api_key_env="KEY", request_timeout=7.0, max_retries=1, max_response_bytes=99
    )
    t = target_from_options("http://h:1", label="fused", side="candidate", options=args)
    assert t == TargetConfig(
        "http://h:1", model="m", label="fused", side="candidate", api_key_env="KEY",
        timeout_s=7.0, max_retries=1, max_response_bytes=99,
    )  # fmt: skip
    few = argparse.Namespace(model="m", request_timeout=7.0)  # a command without the others
    assert target_from_options("http://h:1", label="x", options=few) == TargetConfig(
        "http://h:1", model="m", label="x", timeout_s=7.0
    )
    own = target_from_options("http://h:1", label="x", options=args, model=None, timeout_s=600)
    assert (own.model, own.timeout_s, own.max_retries) == (None, 600, 1)
    assert target_from_options("http://h:1", label="x") == TargetConfig("http://h:1", label="x")
