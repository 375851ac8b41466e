"""``harness import``: recorded requests become scenarios (harness.scenario.importer/golden).

The acceptance test makes a corpus of more than 200 requests from the reference server's
own traffic (tests/traffic.py), adds a malformed line, a duplicate and an API key in a
system prompt, imports it with a golden run against the healthy server, and compares
healthy vs fused-regression (REGRESSION) and healthy vs itself (NO CHANGE) on the
imported set; the imported files are collected by ``pytest DIR --harness-target URL``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.scenario.importer import import_lines, redact_text, unwrap
from harness.scenario.model import load_scenarios, scenario_from_data
from harness.scenario.tools import simulate
from harness.sim.server import serve_in_thread
from tests.sim_driver import entropy_scenario
from tests.traffic import REPO, sim_traffic

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def body(**over: Any) -> dict[str, Any]:
    """A request mid-loop: one call made, its result recorded, a trailing assistant turn."""
    b: dict[str, Any] = {
        "model": "m",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "You answer about the weather."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
                    },
                ],
            },  # fmt: skip
            {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain"}]},
            {"role": "assistant", "content": "Paris is sunny; Rome has rain."},
        ],
        "tools": [WEATHER_TOOL],
    }
    b.update(over)
    return b


def _lines(*objs: Any) -> Iterator[tuple[int, str]]:
    for n, o in enumerate(objs, 1):
        yield n, o if isinstance(o, str) else json.dumps(o)


def test_a_request_becomes_a_scenario_with_recorded_answers() -> None:
    report = import_lines(_lines(body()), "r.jsonl")
    assert not report.problems
    (parsed,) = report.scenarios.values()
    sc = scenario_from_data(parsed.data)
    assert [m.role for m in sc.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert sc.messages[2].tool_calls and sc.messages[2].tool_calls[1].function.arguments == (
        '{"city":"Rome"}'
    )
    tool = sc.tool("get_weather")
    assert tool is not None
    assert simulate(tool, '{"city": "Paris"}', 0).content == "sunny, 21 C"
    assert simulate(tool, '{"city": "Rome"}', 0).content == "rain"
    other = simulate(tool, '{"city": "Oslo"}', 0)
    assert other.error and "no recorded result" in other.content
    assert sc.sampling.temperature == 0 and sc.sampling.max_tokens is None
    assert sc.expect.calls == [] and not sc.expect.final_answer.required


def test_a_request_without_a_temperature_leaves_the_command_s_temperature() -> None:
    """An unset temperature is not written as null (not sent): --temperature applies."""
    from harness.runner import SamplingPolicy, _sampling

    plain = body()
    plain.pop("temperature", None)
    (parsed,) = import_lines(_lines(plain), "r.jsonl").scenarios.values()
    sc = scenario_from_data(parsed.data)
    assert "temperature" not in sc.sampling.model_fields_set
    assert _sampling(sc, 0, "candidate", SamplingPolicy(0.7, 1))["temperature"] == 0.7
    (given,) = import_lines(_lines(body(temperature=0.3)), "r.jsonl").scenarios.values()
    assert scenario_from_data(given.data).sampling.temperature == 0.3


def test_envelopes_of_k2vv_and_litellm_give_the_same_scenario() -> None:
    b = body()
    lines = _lines(
        b,
        {"data_index": 1, "request": b, "response": {}, "finish_reason": "stop"},  # K2VV results
        {"url": "http://proxy/chat/completions", "method": "POST",  # LiteLLM
         "headers": {"authorization": "Bearer " + KEY, "x-trace": "1"}, "body": b},
        {"request_id": "r1", "proxy_server_request": json.dumps({"body": b})},  # a spend-log row
    )  # fmt: skip
    report = import_lines(lines, "r.jsonl")
    assert not report.problems
    assert len(report.scenarios) == 1
    assert [(d[0], d[1]) for d in report.duplicates] == [(2, 1), (3, 1), (4, 1)]
    assert [(r.line, r.where) for r in report.redactions] == [(3, "headers.authorization")]
    assert unwrap({"request": b})[0] is b


def test_secrets_are_redacted_and_reported() -> None:
    msgs = body()["messages"]
    msgs[0]["content"] = f"Use api_key={KEY} for the backend. Also AKIAABCDEFGHIJKLMNOP."
    tool = json.loads(json.dumps(WEATHER_TOOL))
    tool["function"]["description"] += " token: " + "ghp_" + "x" * 36
    report = import_lines(_lines(body(messages=msgs, tools=[tool])), "r.jsonl")
    (parsed,) = report.scenarios.values()
    text = json.dumps(parsed.data)
    assert KEY not in text and "AKIAABCDEFGHIJKLMNOP" not in text
    assert "[REDACTED]" in parsed.data["messages"][0]["content"]
    assert {r.where for r in report.redactions} == {"messages[0].content", "tools[0].description"}
    assert "ghp_" not in text
    assert redact_text("nothing secret here, token count 12")[1] == []


def test_bad_lines_are_reported_with_their_numbers_and_the_rest_imported() -> None:
    no_user = body(messages=[{"role": "system", "content": "x"}])
    bad_role = body(messages=[{"role": "function", "content": "x"}])
    image = body(
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]
    )
    bad_schema = body(
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "arrray"}}}]
    )
    lines = _lines(body(), "{not json", [1, 2], no_user, bad_role, image, bad_schema, {"x": 1})
    report = import_lines(lines, "r.jsonl")
    assert len(report.scenarios) == 1
    shown = [str(p) for p in report.problems]
    assert [p.line for p in report.problems] == [2, 3, 4, 5, 6, 7, 8]
    assert shown[0].startswith("r.jsonl:2: not valid JSON")
    assert shown[2] == "r.jsonl:4: messages: no user or tool message to start from"
    assert shown[3].startswith("r.jsonl:5: messages[0].role: 'function' is not supported")
    assert shown[4].startswith("r.jsonl:6: messages[0].content[0]: a 'image_url' part")
    assert shown[5].startswith("r.jsonl:7: tools[0].parameters.type: 'arrray'")
    assert "not a chat-completions request" in shown[6]


def test_ids_are_stable_and_ignore_transport_fields() -> None:
    a = import_lines(_lines(body(stream=True, model="x")), "a.jsonl")
    b = import_lines(_lines(body(stream=False, model="y")), "b.jsonl")
    c = import_lines(_lines(body(temperature=0.5)), "c.jsonl")
    assert list(a.scenarios) == list(b.scenarios) != list(c.scenarios)
    (rid,) = a.scenarios
    assert rid.startswith("imported-") and len(rid) == len("imported-") + 12


def test_an_opening_ends_at_the_last_user_or_tool_message() -> None:
    report = import_lines(_lines(body()), "r.jsonl")
    (parsed,) = report.scenarios.values()
    assert parsed.data["messages"][-1]["role"] == "tool"  # the trailing answer dropped


def test_a_tool_message_must_answer_an_earlier_call() -> None:
    msgs = body()["messages"][:2] + [{"role": "tool", "tool_call_id": "zz", "content": "x"}]
    report = import_lines(_lines(body(messages=msgs)), "r.jsonl")
    assert "answers no earlier tool call" in str(report.problems[0])


# ------------------------------------------------------------------ golden runs


GOLDEN_LIBRARY: dict[str, Any] = {
    "id": "golden_weather",
    "description": "two calls, the second in parallel, then an answer",
    "messages": [
        {"role": "system", "content": "Golden test system."},
        {"role": "user", "content": "Golden test: weather in Paris and Rome?"},
    ],
    "tools": [{**WEATHER_TOOL["function"], "simulator": {"result": "ok"}}],
    "expect": {
        "calls": [
            {"tool": "get_weather", "arguments": {"city": "Paris"}},
            {"tool": "get_weather", "arguments": {"city": "Rome"}, "parallel": True},
        ],
        "final_answer": {"contains": ["sunny"]},
    },
}


@pytest.fixture
def golden_url(tmp_path: Path, sim_url: Callable[..., str]) -> str:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "g.yaml").write_text(yaml.safe_dump(GOLDEN_LIBRARY), encoding="utf-8")
    return sim_url("healthy", scenarios_dir=lib)


@pytest.mark.parametrize(
    ("policy", "first"),
    [
        ("exact", {"tool": "get_weather", "arguments": {"city": "Paris"}}),
        ("schema-only", {"tool": "get_weather", "arguments": {"city": "Paris"},
                         "match": {"city": {"type": "string"}}}),
        ("tool-name-only", {"tool": "get_weather"}),
    ],
)  # fmt: skip
def test_golden_run_gives_the_expectation_under_each_policy(
    tmp_path: Path, golden_url: str, policy: str, first: dict[str, Any]
) -> None:
    opening = {"model": "m", "messages": GOLDEN_LIBRARY["messages"], "tools": [WEATHER_TOOL]}
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps(opening) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["import", str(src), "-o", str(out), "--golden", golden_url, "--match", policy])
    assert rc == 0
    (sc,) = load_scenarios([out])
    calls = [c.model_dump(exclude_defaults=True) for c in sc.expect.calls]
    assert calls[0] == first
    assert calls[1]["parallel"] is True and calls[1]["tool"] == "get_weather"
    assert sc.expect.final_answer.required
    assert "golden-tool_calls" in sc.tags


def test_golden_server_down_exits_3(tmp_path: Path) -> None:
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps(body()) + "\n", encoding="utf-8")
    rc = main(["import", str(src), "-o", str(tmp_path / "o"), "--golden", "http://127.0.0.1:9"])
    assert rc == 3


def test_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["import", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o")])
    assert rc == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


# ------------------------------------------------------------------ acceptance


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[str, str]]:
    """Healthy and fused-regression reference servers playing the scenario library."""
    lib = REPO / "scenarios"
    with (
        serve_in_thread("healthy", scenarios_dir=lib, seed=0) as healthy,
        serve_in_thread("fused-regression", scenarios_dir=lib, seed=1) as fused,
    ):
        yield healthy, fused


def _corpus(path: Path, bodies: list[dict[str, Any]]) -> tuple[int, int]:
    """Write the corpus with a malformed line, a duplicate and a key; their line numbers."""
    keyed = json.loads(json.dumps(bodies[3]))
    keyed["messages"][0]["content"] += f" Backend key: {KEY}"
    lines = [json.dumps(b) for b in bodies[:3]] + [json.dumps(keyed)]
    lines += [json.dumps({"body": b}) for b in bodies[4:40]]  # LiteLLM's envelope too
    lines += ['{"messages": [{"role": "user", "content": "cut short'] + [
        json.dumps(b) for b in bodies[40:]
    ]
    lines.append(json.dumps({"request": bodies[10]}))  # a duplicate, in K2VV's envelope
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 41, len(lines)


@pytest.mark.timeout(900)  # two compares over 200 imported scenarios: 4 min beside another worker
def test_import_of_sim_traffic_then_compare_and_pytest(
    tmp_path: Path, sims: tuple[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    healthy, fused = sims
    bodies = sim_traffic(healthy, tmp_path / "traffic")
    assert len(bodies) >= 200
    assert {bool(b.get("stream")) for b in bodies} == {True, False}
    assert {any(m["role"] == "tool" for m in b["messages"]) for b in bodies} == {True, False}
    src, out = tmp_path / "requests.jsonl", tmp_path / "imported"
    bad_line, last = _corpus(src, bodies)
    capfd.readouterr()

    rc = main(["import", str(src), "-o", str(out), "--golden", healthy])
    captured = capfd.readouterr()
    assert rc == 1  # one line failed, the others were written
    assert f"{src}:{bad_line}: not valid JSON" in captured.err
    assert f"{src}:{last}: the same request as line 11" in captured.out
    assert f"{src}:4: messages[0].content: looked like a secret" in captured.out
    files = sorted(out.glob("*.yaml"))
    assert len(files) == len(bodies)  # every valid line, the duplicate merged
    scenarios = load_scenarios([out])
    assert len(scenarios) == len(bodies)
    assert all(KEY not in f.read_text(encoding="utf-8") for f in files)
    assert any("[REDACTED]" in f.read_text(encoding="utf-8") for f in files)

    common = ["--repeats", "1", "--results", str(tmp_path / "res"), "--no-progress", str(out)]
    assert main(["compare", "--baseline", healthy, "--candidate", fused, *common]) == 1
    assert " REGRESSION " in capfd.readouterr().out
    assert main(["compare", "--aa", "--baseline", healthy, *common]) == 0
    assert " NO CHANGE " in capfd.readouterr().out

    picked = tmp_path / "some" / "cases"  # not a folder named scenarios/
    picked.mkdir(parents=True)
    for f in files[:4]:
        picked.joinpath(f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(picked),
         "--harness-target", healthy, "--harness-repeats", "1",
         f"--harness-results={tmp_path / 'pytest-res'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "4 passed" in proc.stdout


def test_a_golden_call_that_breaks_the_schema_is_expected_by_name_only(
    tmp_path: Path, sim_url: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "g.yaml").write_text(yaml.safe_dump(entropy_scenario()), encoding="utf-8")
    golden = sim_url("container-as-string", scenarios_dir=lib)  # a golden server gone wrong
    sc = entropy_scenario()
    opening = {"messages": sc["messages"], "tools": [{"type": "function", "function": t}
                                                     for t in sc["tools"]]}  # fmt: skip
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps(opening) + "\n", encoding="utf-8")
    rc = main(["import", str(src), "-o", str(tmp_path / "o"), "--golden", golden])
    assert rc == 1
    assert f"{src}:1: golden call 0 entropy: reference arguments break the schema" in (
        capsys.readouterr().err
    )
    (imported,) = load_scenarios([tmp_path / "o"])
    assert [(c.tool, c.arguments) for c in imported.expect.calls] == [("entropy", {})]


def test_output_must_be_a_folder_and_a_bom_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "r.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + json.dumps(body()).encode() + b"\r\n\r\n")
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    assert main(["import", str(src), "-o", str(not_dir)]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["import", str(src), "-o", str(tmp_path / "o")]) == 0
    (sc,) = load_scenarios([tmp_path / "o"])
    assert sc.description.startswith("Imported from r.jsonl line 1:")


def test_the_reference_server_plays_an_imported_mid_conversation_scenario(
    tmp_path: Path, sim_url: Callable[..., str]
) -> None:
    """Two sequential calls; imported after the first, the golden run expects the second,
    and a server started on the imported folder alone plays it from there."""
    lib = tmp_path / "lib"
    lib.mkdir()
    two_steps = json.loads(json.dumps(GOLDEN_LIBRARY))
    two_steps["expect"]["calls"][1]["parallel"] = False
    (lib / "g.yaml").write_text(yaml.safe_dump(two_steps), encoding="utf-8")
    golden = sim_url("healthy", scenarios_dir=lib)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        *GOLDEN_LIBRARY["messages"],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    src, out = tmp_path / "r.jsonl", tmp_path / "imported"
    src.write_text(json.dumps({"messages": messages, "tools": [WEATHER_TOOL]}) + "\n")
    assert main(["import", str(src), "-o", str(out), "--golden", golden]) == 0
    (sc,) = load_scenarios([out])
    assert [(c.tool, c.arguments) for c in sc.expect.calls] == [("get_weather", {"city": "Rome"})]
    player = sim_url("healthy", scenarios_dir=out)  # the imported file, nothing else
    res = tmp_path / "res"
    assert main(["run", "--target", player, "--repeats", "2", "--results", str(res),
                 "--run-id", "r", "--no-progress", str(out)]) == 0  # fmt: skip


# ----------------------------------------------------------------------------- hostile input


def _import(src: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["import", str(src), "-o", str(out)])
    stdout, err = capsys.readouterr()
    assert "Traceback" not in stdout + err
    return code, stdout, err


def test_a_deep_a_huge_and_a_non_utf8_line_are_refused_and_the_rest_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = body(messages=[{"role": "user", "content": "x" * 5_000_000}])
    src = tmp_path / "r.jsonl"
    with src.open("wb") as fh:
        fh.write(b"[" * 100_000 + b"]" * 100_000 + b"\n")  # RecursionError in json
        fh.write(json.dumps(huge).encode() + b"\n")  # a file `list` would refuse
        fh.write(b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')  # Latin-1
        fh.write(json.dumps({"body": body(messages=[{"role": "user", "content": "deep"}],
                                          extra_field=_nested(80))}).encode() + b"\n")  # fmt: skip
        fh.write(json.dumps(body()).encode() + b"\n")
    out = tmp_path / "o"
    code, stdout, err = _import(src, out, capsys)
    assert code == 1
    assert err.splitlines() == [
        f"{src}:1: nested deeper than 64 levels (the cap of a scenario file)",
        f"{src}:2: as a scenario file: larger than 4,194,304 bytes; split the file",
        f"{src}:3: not UTF-8 (byte 46 of the line); save it as UTF-8",
        f"{src}:4: nested deeper than 64 levels (the cap of a scenario file)",
    ]
    assert stdout.startswith(f"imported 1 of 5 lines into {out}/: 1 scenarios")
    assert "4 lines failed" in stdout
    assert main(["list", str(out)]) == 0  # the folder loads: every file written is readable
    assert len(load_scenarios([out])) == 1


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def test_a_request_deep_inside_the_limit_imports_and_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep_tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "object", "default": _nested(50)}}}}}  # fmt: skip
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps(body(tools=[WEATHER_TOOL, deep_tool])) + "\n")
    code, _, err = _import(src, tmp_path / "o", capsys)
    assert code == 0, err
    assert load_scenarios([tmp_path / "o"])


def test_dev_zero_is_read_to_a_cap_in_one_line(tmp_path: Path) -> None:
    """``/dev/zero`` (one endless line) is refused after at most twice the line cap, within
    a bounded memory (1 GB of address space), in one line."""
    import resource

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "harness", "import", "/dev/zero", "-o", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, cwd=REPO, preexec_fn=cap_memory,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "/dev/zero:1: longer than 16,777,216 bytes and no end of line within 16,777,216 bytes "
        "more: the rest of the file is not read; is it a JSONL file?"
    ]


def test_a_long_line_is_refused_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.scenario import importer

    monkeypatch.setattr(importer, "MAX_LINE_BYTES", 1000)
    src = tmp_path / "r.jsonl"
    src.write_bytes(b"x" * 1500 + b"\n" + json.dumps(body()).encode() + b"\n")
    report = import_lines(importer.read_lines(src), "r.jsonl")
    assert [str(p) for p in report.problems] == [
        "r.jsonl:1: longer than 1,000 bytes (the cap of a line); not read"
    ]
    assert len(report.scenarios) == 1 and report.lines == 2


def test_many_refused_lines_show_the_first_and_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "r.jsonl"
    src.write_text("{not json\n" * 25 + json.dumps(body()) + "\n")
    code, stdout, err = _import(src, tmp_path / "o", capsys)
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 21 and lines[0].startswith(f"{src}:1: not valid JSON")
    assert lines[-1] == f"{src}: 5 more lines refused (the first 20 shown)"
    assert "25 lines failed" in stdout


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("{file}/x", "error: {file}/x: {file} is a file, not a folder; give a folder for the "
                     "scenario files"),
        ("/proc/nope", "error: /proc/nope: cannot write the scenario files"),
    ],
)  # fmt: skip
def test_an_output_folder_that_cannot_be_made_is_one_line(
    out: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if out.startswith("/proc") and not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps(body()) + "\n")
    file = tmp_path / "file"
    file.write_text("x")
    code, _, err = _import(src, Path(out.format(file=file)), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(expected.format(file=file))
