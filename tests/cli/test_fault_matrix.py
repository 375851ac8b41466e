"""The fault matrix: every server fault of the reference server x {stream, no
stream} x {harness run, harness compare} -> the classification and exit code docs/misbehaving-servers.md's
table "What the harness does when the server misbehaves" documents, no traceback, and the
command returns within its deadline: (retries + 1) x --request-timeout + the backoff
waits (+ Retry-After) + a margin for a loaded machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from harness.cli import main
from harness.runfolder import RunFolder
from tests.compare.test_compare import CLOCK

TIMEOUT_S = 1.5  # --request-timeout: the total deadline of one attempt
RETRIES = 1  # --max-retries
BACKOFF_S = 0.5  # TargetConfig.backoff_s, the first wait
MARGIN_S = 20.0  # start-up, scoring, the report, a loaded machine


class Expect(NamedTuple):
    """What one fault must give: the infrastructure error's kind (``None``: the run
    recovers and ends with the model's answer), its attempts, and the exit code."""

    kind: str | None
    attempts: int
    exit_code: int


def _expect(fault: str, stream: bool) -> Expect:
    """docs/misbehaving-servers.md's table, as data."""
    infra = 3  # every run lost to the server: too many infrastructure errors
    table = {
        "http-500": Expect("http_status", 2, infra),
        "http-400": Expect("http_status", 1, infra),  # not transient: one attempt
        "flaky-500": Expect(None, 0, 0),  # retried, then answered
        "rate-limit": Expect(None, 0, 0),  # retried after Retry-After, then answered
        "slow": Expect("timeout", 2, infra),
        "endless": Expect("timeout", 2, infra),  # the total deadline, not the read timeout
        "invalid-json": Expect("invalid_body", 2, infra),
        "no-choices": Expect("invalid_body", 2, infra),
        "error-200": Expect("other", 2, infra),
        "connection-drop": Expect("connection", 2, infra),
        "cut-stream": Expect("connection" if stream else "invalid_body", 2, infra),
        "bad-utf8": Expect("invalid_body", 2, infra),
        "huge": Expect("invalid_body", 1, infra),  # over --max-response-bytes: not retried
    }
    return table[fault]


FAULTS = [
    "http-500", "http-400", "flaky-500", "rate-limit", "slow", "endless", "invalid-json",
    "no-choices", "error-200", "connection-drop", "cut-stream", "bad-utf8", "huge",
]  # fmt: skip


def _bound(expect: Expect) -> float:
    """The most a command may take: every attempt to its deadline, every wait, a margin."""
    attempts = max(expect.attempts, 2)
    waits = sum(max(BACKOFF_S * 2**i, 1.0) for i in range(attempts - 1))  # Retry-After: 1 s
    return attempts * TIMEOUT_S + waits + MARGIN_S


@pytest.mark.parametrize("command", ["run", "compare"])
@pytest.mark.parametrize("stream", [False, True], ids=["nostream", "stream"])
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix(
    fault: str,
    stream: bool,
    command: str,
    write_scenarios: Callable[..., Path],
    sim_url: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = write_scenarios(CLOCK)
    bad = sim_url(fault, scenarios_dir=scenarios)
    expect = _expect(fault, stream)
    common = [str(scenarios), "--repeats", "1", "--results", str(tmp_path), "--run-id", "m"]
    common += ["--timeout", str(TIMEOUT_S), "--max-retries", str(RETRIES), "--no-progress"]
    common += ["--stream", "on" if stream else "off"]
    common += ["--temperature", "0"]  # greedy: no sampled model failure beside the fault
    if command == "run":
        argv = ["run", "--target", bad, *common]
    else:
        good = sim_url("healthy", scenarios_dir=scenarios)
        # one round: the sequential rounds would add runs to an undecided comparison
        argv = ["compare", "--baseline", good, "--candidate", bad, "--no-sequential", *common]
    t0 = time.monotonic()
    code = main(argv)
    took = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert took < _bound(expect), f"{fault}: {took:.1f} s"
    assert code == expect.exit_code, (fault, code, err[-500:])
    side = "target" if command == "run" else "candidate"
    (rec,) = [r for r in RunFolder(tmp_path / "m").records() if r.run_key.startswith(side)]
    if expect.kind is None:
        assert rec.stop_reason == "final_answer" and rec.error is None
        assert len(rec.turns[0].retries) == 1  # the retry is in the transcript
        if fault == "rate-limit":
            assert rec.turns[0].retries[0].retry_after_s == 1.0
            assert rec.turns[0].retries[0].waited_s == 1.0
        return
    assert rec.stop_reason == "error" and rec.error is not None
    assert (rec.error.kind, rec.error.attempts) == (expect.kind, expect.attempts), rec.error
    assert len(rec.turns[0].retries) == expect.attempts - 1


def test_retry_after_is_read_and_capped() -> None:
    """RFC 9110 section 10.2.3: delay-seconds or an HTTP date; the wait is the longer of
    the backoff and the header, at most MAX_RETRY_AFTER_S."""
    from datetime import datetime, timedelta, timezone
    from email.utils import format_datetime

    from harness.client.completions import retry_after_s
    from harness.client.target import MAX_RETRY_AFTER_S, TargetConfig

    assert retry_after_s({"retry-after": "5"}) == 5.0
    assert retry_after_s({"retry-after": "-3"}) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 25 < (retry_after_s({"retry-after": when}) or 0) <= 30
    t = TargetConfig("http://h", backoff_s=0.5)
    assert t.retry_delay_s(1) == 0.5 and t.retry_delay_s(1, 0.1) == 0.5  # the backoff
    assert t.retry_delay_s(1, 7) == 7.0  # the server's, when longer
    assert t.retry_delay_s(1, 3600) == MAX_RETRY_AFTER_S == 60.0  # capped


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("case", "phrase"),
    [
        ("run-id", "(300 characters) is too long; give at most 128 characters"),
        ("repeats", "argument --repeats: '1000000000' is more than 1000 repeats"),
        ("launch", "deployments[1].launch: an empty command ('')"),
        ("import-out", "is a file, not a folder; give a folder for the scenario files"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    case: str,
    phrase: str,
    write_scenarios: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/misbehaving-servers.md's "Bad input is one line and exit 2", before anything runs."""
    scenarios = write_scenarios(CLOCK)
    target = ["--target", "http://127.0.0.1:9", "--results", str(tmp_path / "res")]
    if case == "run-id":
        argv = ["run", str(scenarios), *target, "--run-id", "r" * 300]
    elif case == "repeats":
        argv = ["run", str(scenarios), *target, "--repeats", "1000000000"]
    elif case == "launch":
        matrix = tmp_path / "m.yaml"
        matrix.write_text(
            "deployments:\n  - {label: a, sim: healthy}\n  - {label: b, launch: ''}\n"
            f"scenarios: [{scenarios}]\n"
        )
        argv = ["matrix", str(matrix), "--results", str(tmp_path / "res")]
    else:
        (tmp_path / "file").write_text("x")
        argv = ["import", str(tmp_path / "requests.jsonl"), "-o", str(tmp_path / "file" / "x")]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in out + err, (code, err[-1000:])
    line = err.strip().splitlines()[-1]  # after argparse's usage block, if any
    assert phrase in line, err
    assert not (tmp_path / "res").exists()  # nothing made
