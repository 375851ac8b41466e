"""Opt-in checks as test items: GSM8K accuracy (marker ``gsm8k``) and boot (marker ``boot``).

They are not files, so the plugin adds them to the session's items itself
(``pytest_collection_modifyitems``, before ``-m``/``-k`` deselection) and only when
asked for, so a plain run never pays for them:

- ``harness::gsm8k`` with ``--harness-gsm8k``, a ``--harness-gsm8k-*`` threshold, or ``-m gsm8k``: GSM8K few-shot
  accuracy of ``--harness-target`` (:func:`harness.gsm8k.run.run_gsm8k`), or paired against
  ``--harness-baseline`` (:func:`harness.gsm8k.run.compare_gsm8k`, McNemar's exact test; a
  recorded baseline gives its recorded answers, ``harness record --gsm8k N``, which must
  share ``--harness-gsm8k-questions``, ``--harness-gsm8k-shots`` and the data, else a one-line failure).
  Fails when accuracy < ``--harness-gsm8k-min-accuracy``; with a baseline, when the accuracy
  drop exceeds ``--harness-gsm8k-max-drop``, or (with no ``--harness-gsm8k-max-drop``) when the paired
  verdict is ``REGRESSION``.
- ``harness::boot`` with ``--harness-boot``, ``--harness-boot-cmd CMD`` or ``-m boot``: ``--harness-boot-cmd CMD`` (launch, health, log, fusion, optional
  routed-experts probe, stop: :func:`harness.server.boot.boot`) or ``--harness-boot`` (the same checks
  on the running ``--harness-target``: :func:`harness.server.boot.check_running`). Fails when any
  check is ``FAIL``; the evidence lists every check with the log lines that decided it.

``-m gsm8k`` / ``-m boot`` select exactly these (and ask for them); ``-m "not gsm8k"``
drops them.
Results land in the session's run folder (``gsm8k.jsonl``, ``gsm8k.json``,
``server.log``, ``boot.json``) beside the scenarios' transcripts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pytest

from harness.errors import HarnessError
from harness.pytest_plugin.session import NO_TARGET, HarnessState, ItemResult, state_key

__all__ = ["BootItem", "CheckFailure", "GSM8KItem", "make_check_items"]


#: questions that may error (after retries) before a side is an infrastructure error, as
#: ``harness gsm8k``'s default ``max_error_rate``
_MAX_ERRORS = 0.1


class CheckFailure(HarnessError, AssertionError):
    """A GSM8K or boot check failed: ``str`` is the whole evidence text."""


class _CheckItem(pytest.Item):
    check = ""

    @property
    def state(self) -> HarnessState:
        return self.config.stash[state_key()]

    def _finish(self, reasons: list[str], evidence: list[str], verdict: str | None) -> None:
        """Record the outcome; raise :class:`CheckFailure` (reasons, then evidence) if any."""
        outcome = "failed" if reasons else "passed"
        headline = "; ".join(reasons) or "passed"
        self.state.results.append(ItemResult(self.nodeid, outcome, headline, verdict))
        if reasons:
            raise CheckFailure("\n".join([*reasons, *evidence]))

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | Any:
        if isinstance(excinfo.value, CheckFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"harness {self.check} check"


class GSM8KItem(_CheckItem):
    """GSM8K accuracy of the target, absolute and (with a baseline) paired."""

    check = "gsm8k"

    def runtest(self) -> None:
        """Run GSM8K on the target (paired with the baseline when one is set) and judge it; skipped
        without a target, failed when the data or a recording is missing."""
        from harness.errors import RecordingError
        from harness.gsm8k.data import GSM8KDataError

        state, s = self.state, self.state.settings
        target = state.target()
        if target is None:
            pytest.skip(NO_TARGET)
        folder = state.run_dir()
        opts: dict[str, Any] = dict(
            data=s.gsm8k_data, num_questions=s.gsm8k_questions, num_shots=s.gsm8k_shots,
            results=folder.parent, run_id=folder.name, progress=False,
        )  # fmt: skip
        try:
            summary = self._run(state, opts)
        except GSM8KDataError as exc:
            pytest.fail(
                f"gsm8k: {exc} (give the data with --harness-gsm8k-data PATH)", pytrace=False
            )
        except RecordingError as exc:  # a recorded baseline without these GSM8K answers
            pytest.fail(f"gsm8k: {exc}", pytrace=False)
        self._judge(summary)

    def _run(self, state: HarnessState, opts: dict[str, Any]) -> Any:
        from harness.gsm8k.run import compare_gsm8k, run_gsm8k

        target, base = state.target(), state.baseline()
        assert target is not None  # runtest skipped the item without one
        if base is None:
            return run_gsm8k(target, **opts)
        return compare_gsm8k(base, target, **opts)

    def _judge(self, summary: Any) -> None:
        """Fail on infrastructure errors, the accuracy floor, or the paired comparison."""
        s = self.state.settings
        cand = summary.sides[-1]
        lines = [
            f"{x.label}: accuracy {x.accuracy:.3f} [{x.accuracy_interval.low:.3f}, "
            f"{x.accuracy_interval.high:.3f}] on {x.n} questions ({x.n_errors} errors, "
            f"{x.invalid} invalid)"
            for x in summary.sides
        ]
        self.user_properties += [("gsm8k_accuracy", round(cand.accuracy, 4))]
        self.user_properties += [("verdict", summary.verdict)]
        if any(x.n == 0 or x.n_errors > _MAX_ERRORS * (x.n + x.n_errors) for x in summary.sides):
            msg = "infrastructure error (not a model failure): gsm8k: " + "; ".join(lines)
            pytest.fail(msg, pytrace=False)
        reasons = []
        if s.gsm8k_min_accuracy is not None and cand.accuracy < s.gsm8k_min_accuracy:
            reasons.append(
                f"accuracy {cand.accuracy:.3f} < --harness-gsm8k-min-accuracy {s.gsm8k_min_accuracy:g}"
            )
        if summary.paired is not None:
            reasons += _paired_reasons(summary.paired, s.gsm8k_max_drop)
            lines += _paired_lines(summary.paired)
        self._finish(reasons, lines, summary.verdict)


def _paired_reasons(paired: Any, max_drop: float | None) -> list[str]:
    """With ``max_drop``: the drop must not exceed it; else the verdict must not be REGRESSION."""
    drop = -paired.accuracy_diff
    if max_drop is not None:
        return (
            [f"accuracy dropped {drop:.3f} > --harness-gsm8k-max-drop {max_drop:g}"]
            if drop > max_drop
            else []
        )
    return (
        ["paired verdict REGRESSION against the baseline"] if paired.verdict == "REGRESSION" else []
    )


def _paired_lines(paired: Any) -> list[str]:
    """The paired comparison and a few discordant questions."""
    lines = [
        f"paired: {paired.verdict}, difference {paired.accuracy_diff:+.3f} "
        f"[{paired.diff_interval.low:+.3f}, {paired.diff_interval.high:+.3f}], "
        f"McNemar p={paired.mcnemar_p:.3g} (baseline-only right {paired.b}, "
        f"candidate-only right {paired.c}); {paired.reason}"
    ]
    return lines + [
        f"  question {d.index}: expected {d.reference}, baseline {d.baseline_answer}, "
        f"candidate {d.candidate_answer}"
        for d in paired.discordant[:3]
    ]


class BootItem(_CheckItem):
    """Boot checks: launch ``--harness-boot-cmd``, or check the running ``--harness-target``."""

    check = "boot"

    def runtest(self) -> None:
        """Launch ``--harness-boot-cmd``, or check the running ``--harness-target``, and fail on a check that
        fails."""
        from harness.errors import LaunchError
        from harness.server.boot import boot, check_running

        state, s = self.state, self.state.settings
        probe: Literal["routed-experts"] | None = "routed-experts" if s.boot_probe else None
        if s.boot_cmd:
            try:
                report = boot(
                    s.boot_cmd, timeout_s=s.boot_timeout, probe=probe, run_dir=state.run_dir()
                )
            except LaunchError as exc:  # its port already answers: nothing was launched
                self._finish([f"boot launch: {exc}"], [], "FAIL")
                return
        else:
            target = state.target()
            if target is None:
                pytest.skip(NO_TARGET)
            report = check_running(
                target.base_url, log_path=s.boot_log, probe=probe, run_dir=state.run_dir()
            )
        self.user_properties.append(("boot_verdict", report.verdict))
        lines = [f"checks ({report.log_path or 'no log'}):"]
        for check in report.checks:
            lines.append(f"  {check.verdict:<4} {check.name}: {check.detail}")
            lines += [f"         {ev}" for ev in check.evidence[-8:]]
        failed = [f"boot {c.name}: {c.detail}" for c in report.checks if c.verdict == "FAIL"]
        self._finish(failed, lines, report.verdict)


def selected_by_markexpr(config: pytest.Config, marker: str) -> bool:
    """``-m`` names ``marker`` (and not as ``not marker``): ``-m gsm8k`` asks for the check."""
    expr = str(config.getoption("markexpr", "") or "")
    return bool(re.search(rf"\b{marker}\b", expr)) and not re.search(rf"\bnot\s+{marker}\b", expr)


def wanted_checks(config: pytest.Config) -> list[str]:
    """Which opt-in checks this session asks for: ``gsm8k`` and/or ``boot`` (or none)."""
    s = config.stash[state_key()].settings
    out = []
    gsm8k_opts = s.gsm8k or s.gsm8k_min_accuracy is not None or s.gsm8k_max_drop is not None
    if gsm8k_opts or selected_by_markexpr(config, "gsm8k"):
        out.append("gsm8k")
    if s.boot or s.boot_cmd or selected_by_markexpr(config, "boot"):
        out.append("boot")
    return out


def make_check_items(session: pytest.Session) -> list[pytest.Item]:
    """The opt-in check items the session asks for (:func:`wanted_checks`; none by default)."""
    wanted = wanted_checks(session.config)
    items: list[pytest.Item] = []
    if "gsm8k" in wanted:
        items.append(GSM8KItem.from_parent(session, name="gsm8k", nodeid="harness::gsm8k"))
    if "boot" in wanted:
        items.append(BootItem.from_parent(session, name="boot", nodeid="harness::boot"))
    for item in items:
        item.add_marker(item.name)
        item.add_marker("harness")
    return items
