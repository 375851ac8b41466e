"""Tool schemas are checked without the network and in bounded time:
a ``$ref`` that is not local is refused at load and never fetched; a ``pattern`` is
matched by RE2, so a backtracking pattern cannot block the event loop."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.errors import ScenarioError
from harness.scenario.model import Tool, load_scenario
from harness.scenario.tools import simulate
from harness.scoring.trigger import calls_valid
from harness.transcript import ResponseRecord, ToolCallRecord


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server serving a JSON Schema; the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            asked.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", asked
    finally:
        srv.shutdown()
        srv.server_close()


def _scenario(props: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "refs",
        "description": "A tool with a schema.",
        "messages": [{"role": "user", "content": "Look it up."}],
        "tools": [
            {
                "name": "lookup",
                "parameters": {"type": "object", "properties": props},
                "simulator": {"result": "ok"},
            }
        ],
        "expect": {"calls": [{"tool": "lookup", "arguments": args}]},
    }


def test_a_url_ref_is_refused_at_load_in_one_line_and_never_fetched(
    schema_host: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = schema_host
    p = tmp_path / "refs.yaml"
    p.write_text(yaml.safe_dump(_scenario({"q": {"$ref": f"{url}/q.json"}}, {"q": "x"})))
    assert main(["list", str(p)]) == 2
    out, err = capsys.readouterr()
    assert err.strip().startswith(f"error: {p}: tools[0].parameters.properties.q.$ref: ")
    assert "never fetched" in err and "#/$defs/" in err and len(err.strip().splitlines()) == 1
    assert asked == []  # nothing was retrieved


def test_a_local_ref_still_resolves(tmp_path: Path) -> None:
    props = {"n": {"$ref": "#/$defs/count"}}
    data = _scenario(props, {"n": 3})
    data["tools"][0]["parameters"]["$defs"] = {"count": {"type": "integer"}}
    p = tmp_path / "local.yaml"
    p.write_text(yaml.safe_dump(data))
    tool = load_scenario(p).tools[0]
    assert not simulate(tool, '{"n": 3}', 0).error
    assert "not of type 'integer'" in simulate(tool, '{"n": "3"}', 0).content


def test_a_recorded_request_with_a_url_ref_is_not_fetched_when_scored(
    schema_host: tuple[str, list[str]],
) -> None:
    url, asked = schema_host
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"q": {"$ref": f"{url}/q"}}},
            },
        }
    ]
    resp = ResponseRecord(
        finish_reason="tool_calls",
        tool_calls=[ToolCallRecord(id="c", name="f", arguments='{"q": "x"}')],
    )
    assert calls_valid(resp, tools) is False  # cannot be checked: not valid, and not fetched
    assert asked == []


def test_a_backtracking_pattern_is_checked_in_linear_time() -> None:
    tool = Tool.model_validate(
        {
            "name": "echo",
            "parameters": {
                "type": "object",
                "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}},
                "patternProperties": {"^(b+)+$": {"type": "string"}},
            },
            "simulator": {"result": "ok"},
        }
    )
    # Python's re: ~4 s at 26 characters, doubling with each one (holding the GIL)
    bad = json.dumps({"s": "a" * 26 + "!"})
    key = json.dumps({"b" * 26 + "!": "x", "s": "aaa"})
    start = time.monotonic()
    outcome = simulate(tool, bad, 0)
    assert outcome.error and "does not match" in outcome.content
    assert not simulate(tool, key, 0).error
    assert time.monotonic() - start < 0.5


def test_a_pattern_re2_cannot_run_is_the_scenarios_problem_at_load(tmp_path: Path) -> None:
    props = {"s": {"type": "string", "pattern": "^(?!x)(a+)+$"}}
    p = tmp_path / "look.yaml"
    p.write_text(yaml.safe_dump(_scenario(props, {"s": "aa"})))
    with pytest.raises(ScenarioError) as exc:
        load_scenario(p)
    assert exc.value.field == "tools[0].parameters.properties.s.pattern"
    assert "lookaround" in exc.value.reason


def test_a_pattern_re2_cannot_run_from_an_old_recording_is_not_the_models_failure() -> None:
    from harness.scenario.schemas import validator

    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?!x)a"}}}
    assert validator(schema).is_valid({"s": "xyz"})  # not checkable in linear time: skipped
