"""``summary.json`` for the report, one run at a time: every run's head, few whole scores.

A summary holds one :class:`~harness.summary.RunScore` per run (86 MB of JSON for
10,000 runs, several times that as objects), but the report renders only a bounded
number of runs. :func:`read_lean` decodes the runs array element by element
(``json.JSONDecoder.raw_decode``) and keeps of each run a :class:`RunHead` (what the
compact run lists and the choice of runs need) and its position in the file; only the
first run with drift of each (side, scenario), whose trace the report shows, is kept
whole. :func:`read_whole` decodes the whole scores of the runs chosen for rendering.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.summary import Aggregate, RunScore, ScenarioComparison, Summary
from harness.transcript import InfraError

__all__ = ["LeanSummary", "RunHead", "read_lean", "read_whole"]

_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


@dataclass(frozen=True, slots=True)
class RunHead:
    """What the report keeps of a run it does not render (from ``RunScore``)."""

    run_key: str
    scenario_id: str
    side: str
    passed: bool
    infra_error: InfraError | None


@dataclass
class LeanSummary:
    """``summary``: the summary whose ``runs`` are only the whole scores kept; ``heads``:
    run_key -> :class:`RunHead` of every run; ``spans``: run_key -> the run's (start,
    end) in the file's text with non-ASCII characters escaped, for :func:`read_whole`."""

    summary: Summary
    heads: dict[str, RunHead]
    spans: dict[str, tuple[int, int]]


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _expect(text: str, pos: int, chars: str) -> str:
    if pos >= len(text) or text[pos] not in chars:
        raise json.JSONDecodeError(f"expected one of {chars!r}", text, pos)
    return text[pos]


def _array(text: str, pos: int) -> Any:
    """``(start, end, element)`` of each element of the array opening at ``pos``; the
    last item yielded is ``(-1, end, None)``, ``end`` after the closing bracket."""
    pos = _skip(text, pos + 1)
    if text[pos : pos + 1] == "]":
        yield -1, pos + 1, None
        return
    while True:
        start = pos
        item, pos = _DECODER.raw_decode(text, pos)
        yield start, pos, item
        pos = _skip(text, pos)
        if _expect(text, pos, ",]") == "]":
            yield -1, pos + 1, None
            return
        pos = _skip(text, pos + 1)


def _members(text: str) -> Any:
    """``(key, position of the value)`` of each member of the top-level object; the
    caller decodes the value and sends back the position after it."""
    pos = _skip(text, 0)
    _expect(text, pos, "{")
    pos = _skip(text, pos + 1)
    if text[pos : pos + 1] == "}":
        return
    while True:
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        _expect(text, pos, ":")
        pos = yield key, _skip(text, pos + 1)
        pos = _skip(text, pos)
        if _expect(text, pos, ",}") == "}":
            return
        pos = _skip(text, pos + 1)


#: top-level lists of summary.json validated element by element (no tree of dicts)
_LISTS: dict[str, type[BaseModel]] = {"aggregates": Aggregate, "comparisons": ScenarioComparison}


def read_lean(path: Path) -> LeanSummary:
    """Read ``path`` (summary.json) keeping run heads and the first drifted run per
    (side, scenario) whole.

    Raises:
        json.JSONDecodeError: not JSON. pydantic.ValidationError: not a summary.
    """
    text = _ascii_text(path)
    top: dict[str, Any] = {}
    lean = LeanSummary(Summary(run_id=""), {}, {})
    whole: list[RunScore] = []
    drifted: set[tuple[str, str]] = set()
    members = _members(text)
    step = next(members, None)
    while step is not None:
        key, pos = step
        if key in ("runs", *_LISTS) and text[pos : pos + 1] == "[":
            items: list[Any] = []
            for at, end, item in _array(text, pos):
                if item is None:
                    pos = end
                    break
                if key != "runs":
                    items.append(_LISTS[key].model_validate(item))
                    continue
                score = RunScore.model_validate(item)
                lean.heads[score.run_key] = RunHead(
                    score.run_key, score.scenario_id, score.side, score.passed, score.infra_error
                )
                lean.spans[score.run_key] = (at, end)
                if score.drift and (score.side, score.scenario_id) not in drifted:
                    drifted.add((score.side, score.scenario_id))
                    whole.append(score)
            top[key] = items if key != "runs" else []
        else:
            top[key], pos = _DECODER.raw_decode(text, pos)
        step = _send(members, pos)
    lean.summary = Summary.model_validate(top)
    lean.summary.runs = whole
    return lean


def _send(members: Any, pos: int) -> Any:
    try:
        return members.send(pos)
    except StopIteration:
        return None


def read_whole(path: Path, spans: list[tuple[int, int]]) -> list[RunScore]:
    """The whole :class:`RunScore` of the runs at ``spans`` (from :func:`read_lean`),
    reading the file again line by line (only the pieces at ``spans`` are kept)."""
    want = sorted(spans)
    out: list[RunScore] = []
    piece: list[bytes] = []
    i = pos = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if i >= len(want):
                break
            line = _ascii(raw)
            end = pos + len(line)
            while i < len(want) and want[i][0] < end:
                a, b = want[i]
                piece.append(line[max(a, pos) - pos : min(b, end) - pos])
                if b > end:
                    break
                out.append(RunScore.model_validate_json(b"".join(piece)))
                piece, i = [], i + 1
            pos = end
    return out


def _json_escape(err: UnicodeError) -> tuple[str, int]:
    """Codec error handler: characters as JSON ``\\uXXXX`` escapes (surrogate pairs)."""
    assert isinstance(err, UnicodeEncodeError)
    out = []
    for c in err.object[err.start : err.end]:
        o = ord(c)
        if o >= 0x10000:
            o -= 0x10000
            out.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}")
        else:
            out.append(f"\\u{o:04x}")
    return "".join(out), err.end


codecs.register_error("harness-json-escape", _json_escape)


def _ascii(line: bytes) -> bytes:
    """A line of JSON with non-ASCII characters escaped (they occur only in strings)."""
    if line.isascii():
        return line
    return line.decode("utf-8").encode("ascii", "harness-json-escape")


def _ascii_text(path: Path) -> str:
    """The JSON text of ``path``, ASCII (one byte per character in memory)."""
    buf = bytearray()
    with open(path, "rb") as fh:
        for line in fh:
            buf += _ascii(line)
    return buf.decode("ascii")
