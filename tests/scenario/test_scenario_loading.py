"""Scenario files: one-line errors naming file, field and reason; starter files load;
``targets:`` checked against the failure kinds (``harness list --kinds``, ``harness schema``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from harness.cli import main
from harness.kinds import FailureKind, is_failure_kind
from harness.scenario.model import ScenarioError, load_scenario, load_scenarios

REPO = Path(__file__).resolve().parents[2]

GOOD = {
    "id": "mini",
    "description": "Entropy of a small vector.",
    "messages": [{"role": "user", "content": "Entropy of [0.5, 0.5]?"}],
    "tools": [
        {"name": "clock", "parameters": {"type": "object", "properties": {}}},
        {
            "name": "entropy",
            "parameters": {
                "type": "object",
                "properties": {"values": {"type": "array", "items": {"type": "number"}}},
                "required": ["values"],
            },
            "simulator": {"builtin": "entropy"},
        },
    ],
    "expect": {"calls": [{"tool": "entropy", "arguments": {"values": [0.5, 0.5]}}]},
}


def write(tmp_path: Path, data: object, name: str = "x.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if name.endswith(".yaml") else json.dumps(data))
    return p


def error_of(path: Path) -> str:
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_bad_json_schema_type_names_file_field_and_reason(tmp_path: Path) -> None:
    data = json.loads(json.dumps(GOOD))
    data["tools"][1]["parameters"]["properties"]["values"]["type"] = "arrray"
    p = write(tmp_path, data)
    assert error_of(p) == (
        f"{p}: tools[1].parameters.properties.values.type: 'arrray' is not a JSON Schema type"
    )


def test_unknown_key_is_rejected_with_its_path(tmp_path: Path) -> None:
    data = json.loads(json.dumps(GOOD))
    data["expect"]["calls"][0]["argumnets"] = {}
    p = write(tmp_path, data)
    assert error_of(p) == (
        f"{p}: expect.calls[0].argumnets: unknown key; did you mean 'arguments'? "
        "(`harness schema` prints the format)"
    )


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.yaml"
    p.write_text("id: x\ndescription: [unclosed\nmessages: []\n")
    msg = error_of(p)
    assert msg.startswith(f"{p}: line ")
    assert "not valid YAML" in msg


def test_expected_call_must_name_a_declared_tool(tmp_path: Path) -> None:
    data = json.loads(json.dumps(GOOD))
    data["expect"]["calls"][0]["tool"] = "entropyy"
    msg = error_of(write(tmp_path, data))
    assert "expect" in msg and "'entropyy'" in msg


def test_duplicate_ids_name_both_files(tmp_path: Path) -> None:
    a = write(tmp_path, GOOD, "a.yaml")
    b = write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(ScenarioError) as exc:
        load_scenarios([tmp_path])
    assert str(exc.value) == f"{b}: id: 'mini' is already used by {a}"


def test_json_files_are_accepted_and_equal_to_yaml(tmp_path: Path) -> None:
    y = load_scenario(write(tmp_path, GOOD, "s.yaml"))
    j = load_scenario(write(tmp_path / ".." / tmp_path.name, GOOD, "s.json"))
    assert j.content_hash() == y.content_hash()
    assert j.tool("entropy") is not None


def test_starter_scenarios_load_and_cover_the_issue() -> None:
    scs = {s.id: s for s in load_scenarios([REPO / "scenarios"])}
    assert {
        "sensor_entropy_pipeline",
        "entropy_followups",
        "no_params_tool",
        "numeric_string_ids",
    } <= set(scs)
    for sc in scs.values():
        assert sc.targets, f"{sc.id} names no failure kind"
    assert all(scs[k].max_turns == 12 for k in ("sensor_entropy_pipeline", "entropy_followups"))
    pipeline = scs["sensor_entropy_pipeline"]
    assert [c.tool for c in pipeline.expect.calls] == [
        "get_sensor_readings",
        "normalize",
        "compute_entropy",
    ]
    follow = scs["entropy_followups"]
    assert follow.expect.calls[0].arguments == {"values": [0.5, 0.25, 0.25], "base": 2}
    assert len(follow.followups) >= 2
    assert scs["no_params_tool"].tools[0].parameters.get("properties") == {}
    ids = [c.arguments["order_id"] for c in scs["numeric_string_ids"].expect.calls]
    assert ids == ["123_456", "007"]


def test_cli_bad_scenario_is_one_line_exit_2_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(GOOD))
    data["tools"][1]["parameters"]["properties"]["values"]["type"] = "arrray"
    p = write(tmp_path, data)
    code = main(["run", "--target", "http://127.0.0.1:9", "--results", str(tmp_path), str(p)])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == (
        f"error: {p}: tools[1].parameters.properties.values.type: 'arrray' is not a JSON Schema type"
    )
    assert "Traceback" not in err + out
    assert not any(tmp_path.glob("run-*"))  # nothing run, no run folder


def test_cli_list_shows_ids_targets_and_tools(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["list", str(REPO / "scenarios" / "numeric_string_ids.yaml")]) == 0
    out = capsys.readouterr().out
    assert "numeric_string_ids" in out and "lookup_order" in out and "string_as_scalar" in out


BAD_CASES = [
    # (change to a good scenario, field, reason fragment)
    (lambda d: d["expect"]["calls"][0].update(match={"values": {"regex": "([a-z"}}),
     "expect.calls[0].match.values", "invalid regex"),
    (lambda d: d["tools"][1]["parameters"]["properties"].update(tag={"type": "string", "pattern": "([a-z"}),
     "tools[1].parameters.properties.tag.pattern", "invalid regex"),
    (lambda d: d["tools"][1].update(simulator={"builtin": "nosuch"}),
     "tools[1].simulator", "unknown builtin 'nosuch'"),
    (lambda d: d["tools"][1].update(simulator={"sequence": []}),
     "tools[1].simulator.sequence", "at least 1 item"),
    (lambda d: d["expect"]["calls"][0].update(tool="entropi"),
     "expect.calls[0].tool", "did you mean 'entropy'?"),
    (lambda d: d["expect"]["calls"][0]["arguments"].update(values="[0.5]"),
     "expect.calls[0].arguments.values", "reference arguments break the schema of tool 'entropy'"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "field", "reason"), BAD_CASES)
def test_bad_scenarios_get_one_line_naming_field_and_reason(
    tmp_path: Path, change: Any, field: str, reason: str
) -> None:
    data = json.loads(json.dumps(GOOD))
    change(data)
    msg = error_of(write(tmp_path, data))
    assert "\n" not in msg
    assert f": {field}: " in msg and reason in msg, msg


def test_non_utf8_file_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "n.yaml"
    p.write_bytes(b'id: x\ndescription: t\nmessages:\n  - {role: user, content: "caf\xe9"}\n')
    assert error_of(p) == f"{p}: byte 61: not UTF-8; save the file as UTF-8"


# ------------------------------------------------------------------ targets: failure kinds


def test_unknown_target_names_file_field_and_the_closest_kind(tmp_path: Path) -> None:
    p = write(tmp_path, {**GOOD, "targets": ["collapse", "colapse"]})
    assert error_of(p) == (
        f"{p}: targets[1]: 'colapse' is not a failure kind (did you mean 'collapse'?); "
        "`harness list --kinds` lists them"
    )


def test_unknown_target_far_from_every_kind_still_names_the_fix(tmp_path: Path) -> None:
    p = write(tmp_path, {**GOOD, "targets": ["repeat_loop", "zzz"]})
    assert error_of(p) == (
        f"{p}: targets[1]: 'zzz' is not a failure kind; `harness list --kinds` lists them"
    )


def test_cli_list_with_an_unknown_target_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = write(tmp_path, {**GOOD, "targets": ["malformed_jsn"]})
    assert main(["list", str(p)]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == (
        f"error: {p}: targets[0]: 'malformed_jsn' is not a failure kind "
        "(did you mean 'malformed_json'?); `harness list --kinds` lists them"
    )
    assert "Traceback" not in out + err and "mini" not in out


def test_every_failure_kind_is_a_valid_target(tmp_path: Path) -> None:
    names = [k.value for k in FailureKind]
    sc = load_scenario(write(tmp_path, {**GOOD, "targets": names}))
    assert sc.targets == names


def test_shipped_scenarios_target_only_failure_kinds() -> None:
    """Both libraries load (unknown targets would be a load error) and target known kinds."""
    for folder in (REPO / "scenarios", REPO / "e2e" / "scenarios"):
        for sc in load_scenarios([folder]):
            assert sc.targets and all(is_failure_kind(t) for t in sc.targets), sc.id


def test_schema_offers_the_kinds_for_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    items = schema["properties"]["targets"]["items"]
    assert items["enum"] == [k.value for k in FailureKind]
    # an editor validating with the schema accepts a kind and flags a typo
    check = jsonschema.Draft202012Validator(schema)
    assert not list(check.iter_errors({**GOOD, "targets": ["collapse"]}))
    errors = list(check.iter_errors({**GOOD, "targets": ["colapse"]}))
    assert [list(e.absolute_path) for e in errors] == [["targets", 0]]


def test_cli_list_kinds_prints_the_vocabulary(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["list", "--kinds"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{len(FailureKind)} failure kinds" in lines[0]
    for kind in FailureKind:
        row = next(line for line in lines if f" {kind.value} " in line)
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells == [kind.value, kind.family.value, kind.label, kind.description]


def test_cli_list_kinds_takes_no_scenario_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--kinds", str(REPO / "scenarios")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --kinds lists the vocabulary; give it no scenario files"
    )
