"""A corpus of chat-completions requests made from the reference server's own traffic.

:func:`sim_traffic` runs the scenario library (seeded, so each repeat's conversations
differ in their seed and tool_call ids) against a healthy reference server with
``harness run --stream both`` and reads back every request body it sent, from the
transcripts (``RunRecord.request_messages`` plus the recorded request fields): the
opening turns (no tool results) and the later ones (with tool results), streamed and not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from harness.cli import main
from harness.runfolder import RunFolder

REPO = Path(__file__).resolve().parents[1]


def seeded_library(folder: Path, seed: int = 7) -> Path:
    """The repository's scenarios with ``sampling.seed`` set (so repeats differ)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted((REPO / "scenarios").glob("*.yaml")):
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
        data.setdefault("sampling", {})["seed"] = seed
        (folder / f.name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return folder


def _key(body: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in body.items() if not k.startswith("stream")}, sort_keys=True)


def sim_traffic(url: str, work: Path, *, repeats: int = 5) -> list[dict[str, Any]]:
    """Distinct request bodies the server at ``url`` received (streamed ones kept in turn
    with non-streamed ones, so both kinds remain after de-duplication)."""
    library = seeded_library(work / "library")
    rc = main([
        "run", "--target", url, "--stream", "both", "--repeats", str(repeats),
        "--results", str(work / "results"), "--run-id", "traffic", "--no-progress", str(library),
    ])  # fmt: skip
    assert rc == 0
    bodies: dict[str, dict[str, Any]] = {}
    for record in RunFolder(work / "results" / "traffic").records():
        for turn in record.turns:
            body = {
                **turn.request_params,
                "messages": record.request_messages(turn.index),
                "tools": record.tools,
            }
            key = _key(body)
            if key not in bodies or (len(bodies) % 2 and body.get("stream")):
                bodies[key] = body
    return list(bodies.values())


def main_cli(argv: list[str]) -> int:
    """``python -m tests.traffic OUT_DIR``: write ``OUT_DIR/requests.jsonl`` from a healthy
    reference server's traffic (the corpus of tests/scenario/test_import.py)."""
    import sys

    from harness.sim.server import serve_in_thread

    if len(argv) != 1:
        print("usage: python -m tests.traffic OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    with serve_in_thread("healthy", scenarios_dir=REPO / "scenarios", seed=0) as url:
        bodies = sim_traffic(url, out / "work")
    path = out / "requests.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies), encoding="utf-8")
    print(f"{path}: {len(bodies)} requests")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main_cli(sys.argv[1:]))
