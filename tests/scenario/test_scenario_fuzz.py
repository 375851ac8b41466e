"""Loader hardening: deep nesting, recursive and expanding YAML aliases,
duplicate keys, numeric bounds, and a fuzz of 240 mutated scenario files through
``harness list``: each exits 2 with one line naming the file, or loads; never a
traceback, a hang or unbounded memory."""

from __future__ import annotations

import copy
import json
import random
import re
import resource
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.errors import ScenarioError
from harness.scenario.model import load_scenario
from harness.scenario.parse import MAX_DEPTH, MAX_FILE_BYTES
from tests.compare.test_compare import ENTROPY

N_FILES = 240
PER_FILE_S = 10.0  # generous: a loaded 2-core machine
MAX_RSS_GROWTH_KB = 600_000  # the whole fuzz, kilobytes of peak resident memory


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _one_line(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["list", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, (path.name, code, out[-300:])
    assert "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1 and str(path) in err, err[:500]
    return err


def test_deep_nesting_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text(_yaml(ENTROPY) + "extra_body: {x: " + "[" * 5000 + "]" * 5000 + "}\n")
    deep_json = tmp_path / "deep.json"
    deep_json.write_text(json.dumps(ENTROPY)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for path in (deep_yaml, deep_json):
        assert "nested deeper than 64 levels" in _one_line(path, capsys)
    ok = tmp_path / "ok.yaml"  # just inside the limit: loads
    ok.write_text(_yaml({**ENTROPY, "extra_body": {"x": _nest(MAX_DEPTH - 2)}}))
    assert load_scenario(ok).extra_body["x"] == _nest(MAX_DEPTH - 2)


def _nest(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_recursive_and_expanding_aliases_are_refused_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = tmp_path / "rec.yaml"
    rec.write_text(_yaml(ENTROPY) + "extra_body: &a {x: *a}\n")
    assert "recursive anchor" in _one_line(rec, capsys)
    laughs = "extra_body:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for i in range(1, 9):
        prev, name = chr(96 + i), chr(97 + i)
        laughs += f"  {name}: &{name} [{', '.join(['*' + prev] * 9)}]\n"
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(_yaml(ENTROPY) + laughs)
    assert "aliases expand to more than" in _one_line(bomb, capsys)
    fine = tmp_path / "fine.yaml"  # an ordinary alias still loads
    fine.write_text(_yaml(ENTROPY) + "extra_body: {a: &v [1, 2], b: *v}\n")
    assert load_scenario(fine).extra_body == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max_turns: 3\nmax_turns: 4\n", "key 'max_turns' is given twice"),
        ("max_turns: 1000000000\n", "max_turns: Input should be less than or equal to 100"),
        ("repeats: 0\n", "repeats: Input should be greater than or equal to 1"),
        ("sampling: {temperature: -1}\n", "sampling.temperature"),
        ("targets: [colapse]\n", "'colapse' is not a failure kind"),
    ],
)
def test_duplicates_bounds_and_kinds_are_load_errors(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {k: v for k, v in ENTROPY.items() if k not in ("max_turns", "repeats", "targets")}
    path = tmp_path / "x.yaml"
    path.write_text(_yaml(base) + text)
    assert expected in _one_line(path, capsys)
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps(ENTROPY)[:-1] + ', "id": "again"}')
    with pytest.raises(ScenarioError, match="key 'id' is given twice"):
        load_scenario(dup)


# ------------------------------------------------------------------ the fuzz


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``data`` (keys and indices)."""
    out = [prefix]
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else []
    )
    for k, v in items:
        out += _paths(v, (*prefix, k))
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return data


def _junk(rng: random.Random) -> Any:
    return rng.choice([
        None, True, 0, -1, 10**30, 1.5, float("inf"), "", "x" * rng.randint(1, 3000),
        [], [1, "a", None], {}, {"unknown_key": 1}, "\u202e\ud7ff\ufeff", {"type": "arrray"},
    ])  # fmt: skip


def _mutate_data(rng: random.Random) -> Any:
    data: Any = copy.deepcopy(ENTROPY)
    how = rng.randrange(6)
    paths = _paths(data)[1:]
    target = rng.choice(paths)
    if how == 0:  # a value of another type
        return _set(data, target, _junk(rng))
    if how == 1:  # a key missing
        parent = rng.choice([p for p in _paths(data) if isinstance(_get(data, p), dict)])
        node = _get(data, parent)
        if node:
            node.pop(rng.choice(list(node)))
        return data
    if how == 2:  # an unknown key
        parent = rng.choice([p for p in _paths(data) if isinstance(_get(data, p), dict)])
        _get(data, parent)[rng.choice(["typo", "descripton", "x" * 50, "1"])] = _junk(rng)
        return data
    if how == 3:  # nesting
        return _set(data, target, _nest(rng.choice([2, 30, 63, 65, 200, 2000])))
    if how == 4:  # sizes
        return _set(data, target, "y" * rng.choice([10, 100_000, 1_000_000]))
    return rng.choice([[data], "just text", 42, None, [], data])  # the top level


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        data = data[k]
    return data


def _mutate_text(rng: random.Random, text: str) -> bytes:
    how = rng.randrange(7)
    raw = text.encode()
    if how == 0:  # cut
        return raw[: rng.randrange(len(raw))]
    if how == 1:  # flipped bytes
        out = bytearray(raw)
        for _ in range(rng.randint(1, 20)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if how == 2:  # other encodings
        return rng.choice([text.encode("utf-16"), ("\u00e9" + text).encode("latin-1"),
                           b"\xef\xbb\xbf" + raw, raw + b"\xff\xfe"])  # fmt: skip
    if how == 3:  # aliases: recursive, expanding, ordinary
        n = rng.randint(2, 12)
        bomb = "  a0: &a0 [" + ", ".join(["lol"] * n) + "]\n"
        bomb += "".join(
            f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * n)}]\n"
            for i in range(1, rng.randint(2, 9))
        )
        return (text + rng.choice(["extra_body: &r {x: *r}\n", "extra_body:\n" + bomb])).encode()
    if how == 4:  # a duplicate key
        return (text + "id: again\n").encode()
    if how == 5:  # YAML tags and oddities
        return (text + rng.choice(["x: !!python/object:os.system ls\n", "? [a]\n: 1\n",
                                   "<<: *nope\n", "%YAML 9.9\n---\n", "---\na: 1\n"])).encode()  # fmt: skip
    return raw * rng.randint(2, 3)  # concatenated documents


def _fuzz_file(rng: random.Random, folder: Path, i: int) -> Path:
    as_json = rng.random() < 0.3
    data = _mutate_data(rng) if rng.random() < 0.6 else copy.deepcopy(ENTROPY)
    try:
        text = json.dumps(data) if as_json else _yaml(data)
    except (ValueError, RecursionError):  # too deep to dump: written out as text
        deep = "[" * 2000 + "]" * 2000
        text = json.dumps(ENTROPY)[:-1] + f', "extra_body": {{"x": {deep}}}}}'
        text = text if as_json else _yaml(ENTROPY) + f"extra_body: {{x: {deep}}}\n"
    raw = text.encode() if rng.random() < 0.4 else _mutate_text(rng, text)
    path = folder / f"f{i:03d}.{'json' if as_json else 'yaml'}"
    if rng.random() < 0.02:  # a few over the size limit
        raw += b"#" * MAX_FILE_BYTES
    path.write_bytes(raw)
    return path


def test_fuzzed_scenario_files_load_or_give_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(18)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes = {0: 0, 2: 0}
    for i in range(N_FILES):
        path = _fuzz_file(rng, tmp_path, i)
        t0 = time.monotonic()
        code = main(["list", str(path)])
        took = time.monotonic() - t0
        out, err = capsys.readouterr()
        assert took < PER_FILE_S, (path.name, took)
        assert "Traceback" not in out + err, path.name
        assert code in outcomes, (path.name, code, err[-500:])
        outcomes[code] += 1
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), (path.name, err[:300])
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    assert growth < MAX_RSS_GROWTH_KB, growth
    assert outcomes[0] > 10 and outcomes[2] > 100, outcomes  # both outcomes exercised


# ----------------------------------------------------------------------------- harness import

N_LINES = 120

REQUEST: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You compute entropies."},
        {"role": "user", "content": "Entropy of [0.5, 0.25, 0.25] in bits?"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "entropy", "description": "Shannon entropy.",
        "parameters": {"type": "object", "properties": {
            "values": {"type": "array", "items": {"type": "number"}}, "base": {"type": "number"}},
            "required": ["values"]}}}],
}  # fmt: skip


def _fuzz_line(rng: random.Random) -> bytes:
    """One recorded request, mutated: nested deep, grown huge, cut, flipped, re-encoded."""
    data: Any = copy.deepcopy(REQUEST)
    how = rng.randrange(8)
    if how == 0:  # nesting inside the content, an extra field or the tool schema
        value = _nest(rng.choice([2, 30, 62, 66, 200, 900]))
        where = rng.choice(["content", "extra", "schema"])
        if where == "content":
            data["messages"][1]["content"] = value
        elif where == "extra":
            data["response_format"] = {"x": value}
        else:
            data["tools"][0]["function"]["parameters"]["properties"]["base"]["default"] = value
    elif how == 1:  # sizes, around the scenario file's 4 MiB
        data["messages"][1]["content"] = "y" * rng.choice([10, 100_000, 3_000_000, 4_500_000])
    elif how == 2:  # an envelope
        data = rng.choice([{"request": data}, {"body": data}, {"proxy_server_request": data}])
    if how == 3:  # deeper than json's recursion limit
        return b"[" * 100_000 + b"]" * 100_000
    text = json.dumps(data)
    if how in (4, 5, 6):
        return _mutate_text(rng, text).replace(b"\n", b" ")
    return text.encode()


def test_fuzzed_import_lines_are_imported_or_refused_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``harness import`` of mutated request lines: each line is imported or refused in one
    line (exit 0 or 1, no traceback), and every file written loads (``harness list`` of
    the folder exits 0: one oversized scenario no longer refuses the whole folder)."""
    rng = random.Random(32)
    src, out = tmp_path / "requests.jsonl", tmp_path / "imported"
    src.write_bytes(b"\n".join(_fuzz_line(rng) for _ in range(N_LINES)) + b"\n")
    t0 = time.monotonic()
    code = main(["import", str(src), "-o", str(out)])
    stdout, err = capsys.readouterr()
    assert time.monotonic() - t0 < N_LINES * 2, "import took too long"
    assert "Traceback" not in stdout + err and code in (0, 1), (code, err[-2000:])
    refused = int(re.search(r"(\d+) lines? failed", stdout).group(1))  # type: ignore[union-attr]
    assert 10 < refused < N_LINES, stdout
    shown = [ln for ln in err.splitlines() if ln.startswith(f"{src}:")]
    assert len(shown) == min(refused, 20) + (refused > 20)  # the first 20, then a count
    assert main(["list", str(out)]) == 0, capsys.readouterr().err[-2000:]
