"""``harness import`` redacts key-shaped text in every field it copies:
tool parameter schemas (``default``, ``description``, ...), ``stop`` and
``response_format`` as message text is, each counted in the report line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.scenario.model import load_scenarios

KEY = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4"


def test_keys_in_schemas_stop_and_response_format_are_redacted_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = {
        "type": "object",
        "properties": {
            "token": {"type": "string", "default": KEY, "description": f"use {KEY} if unsure"},
        },
    }
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Look it up."}],
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": params}}],
        "stop": ["</done>", KEY],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": {"type": "object", "default": {"k": KEY}}},
        },
    }
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps(body) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["import", str(src), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    written = "".join(p.read_text(encoding="utf-8") for p in out.iterdir())
    assert KEY not in written and KEY not in printed
    assert "4 secrets redacted" in printed
    for where in (
        "tools[0].parameters.properties.token.default",
        "tools[0].parameters.properties.token.description",
        "extra_body.stop[1]",
        "extra_body.response_format.json_schema.schema.default.k",
    ):
        assert f"r.jsonl:1: {where}: looked like a secret (api key (sk-...)): redacted" in printed
    (sc,) = load_scenarios([out])
    assert sc.extra_body["stop"] == ["</done>", "[REDACTED]"]
    assert sc.tools[0].parameters["properties"]["token"]["default"] == "[REDACTED]"
