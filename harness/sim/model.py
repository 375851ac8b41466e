"""The reference server's "model": it plays a scenario from the scenario file itself.

Recognition: a request's conversation is matched to a scenario by its system
message and first user message (exact text; the first user message alone when
that is unambiguous). A scenario whose opening already holds tool calls and
results (one ``harness import`` wrote from a mid-loop request) is matched by its
whole opening instead, the longest one that starts the conversation, and its
position is counted from the end of that opening. The scenarios are indexed when the app is created and
re-read when a scenario file changes (see ``SimState.scenarios`` in ``app.py``).

Position (stateless per request): the segment is the number of user messages
beyond the scenario's opening (0 = the opening, ``i`` = follow-up ``i``); the
position inside the segment is the number of assistant messages with tool_calls
since the last user message. The model emits step ``position`` of the segment's
plan, or the final answer once the plan is done. A step is one assistant message:
an expected call plus the ``parallel: true`` calls after it. Tool results are not
needed to choose (scenarios encode a corrected call after an error), so the same
conversation always gets the same reply.

Plan: greedy requests (temperature absent or 0) make every non-optional expected
call, in order, then answer with ``final_answer.example`` (else a sentence holding
every ``contains`` string). Sampled requests (temperature > 0) add noise drawn
from the conversation's nonce: each optional call made with probability
``profile.noise_optional_rate``, adjacent steps swapped (``order: free`` only)
with ``noise_reorder_rate``, and a failed run with ``noise_failure_rate`` (one
needless repeat of the last step, or an empty final answer) per user turn, or, for a
BFCL task, spread over its user turns (about ``noise_failure_rate`` per task).

Nonce: 8 hex digits identifying a run, carried in the tool_call ids the server
hands out (``call_<nonce><16 hex>``) so later turns find it again. Greedy requests
derive it from (server seed, conversation) alone, as greedy decoding ignores the seed
(every repeat is the same run, faults included); seeded sampled requests from (server
seed, request seed, temperature, conversation); unseeded sampled requests draw it from
the server's seeded RNG.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.scenario.model import (
    SCENARIO_SUFFIXES,
    Expectation,
    ExpectedCall,
    FinalAnswerExpectation,
    Scenario,
    ScenarioError,
    load_scenario,
)
from harness.scenario.suites import suite_of_spec, unregistered_message, unregistered_spec
from harness.sim.tokens import text_of

if TYPE_CHECKING:
    from harness.sim.profiles import SimProfile

__all__ = [
    "Conversation",
    "Decision",
    "Plan",
    "PlannedCall",
    "RequestOptions",
    "ScenarioIndex",
    "call_id",
    "decide",
    "final_answer_text",
    "make_plan",
]

UNKNOWN_ANSWER = "Thank you for your message. I have nothing to look up for this one, so I will answer directly: I am happy to help if you can tell me more."
AFTER_SCRIPT_ANSWER = "You're welcome. Is there anything else I can help with?"
_ID_RE = re.compile(r"^call_([0-9a-f]{8})[0-9a-f]{16}$")


@dataclass(frozen=True)
class PlannedCall:
    """A call the model decided to make (arguments as a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Decision:
    """What the model says this turn, before message-level faults."""

    calls: list[PlannedCall] = field(default_factory=list)
    content: str | None = None
    reasoning: str | None = None


@dataclass
class Conversation:
    """What the model reads off a request's ``messages``.

    Raises (from :meth:`parse`): ``ValueError`` naming the bad message.
    """

    system: str
    first_user: str
    user_count: int
    turn: int  # assistant messages so far = 0-based turn index
    position: int  # assistant tool-call messages since the last user message
    prior_ids: list[str]
    all_user_text: str
    #: sha256 of the messages up to each user or tool message (ScenarioIndex.match)
    prefixes: tuple[str, ...] = ()
    user_texts: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, messages: Any) -> Conversation:
        """The conversation state of an OpenAI ``messages`` list; ValueError when it is not a non-
        empty list of messages."""
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty list")
        system, turn, position = "", 0, 0
        users: list[str] = []
        ids: list[str] = []
        running, prefixes = hashlib.sha256(), []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or "role" not in msg:
                raise ValueError(f"messages[{i}] must be an object with a 'role'")
            role, text = msg["role"], text_of(msg.get("content"))
            running.update(_fingerprint(msg, text))
            if role in ("user", "tool"):
                prefixes.append(running.copy().hexdigest())
            if role in ("system", "developer") and not system and not users:
                system = text
            elif role == "user":
                users.append(text)
                position = 0
            elif role == "assistant":
                turn += 1
                calls = msg.get("tool_calls") or []
                position += 1 if calls else 0
                ids += [c.get("id", "") for c in calls if isinstance(c, dict)]
        first = users[0] if users else ""
        joined = "\n\n".join(users)
        return cls(system, first, len(users), turn, position, ids, joined, tuple(prefixes), users)

    def key(self) -> str:
        """sha256 (hex) of the opening: system and first user message."""
        return hashlib.sha256(f"{self.system}\x1f{self.first_user}".encode()).hexdigest()

    def recovered_nonce(self) -> str | None:
        """The nonce carried by an earlier tool_call id of ours, if any."""
        for cid in self.prior_ids:
            m = _ID_RE.match(cid)
            if m:
                return m.group(1)
        return None


def _fingerprint(msg: dict[str, Any], text: str) -> bytes:
    """What identifies a message in an opening: role, text, tool calls, tool_call_id."""
    calls = [
        [
            c.get("id"),
            (c.get("function") or {}).get("name"),
            (c.get("function") or {}).get("arguments"),
        ]
        for c in msg.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    blob = json.dumps([msg["role"], text, calls, msg.get("tool_call_id")], sort_keys=True)
    return blob.encode() + b"\x1e"


@dataclass
class RequestOptions:
    """The request fields the model honours."""

    tools: list[str]  # names of the tools offered
    tool_choice: Any = None  # None | "auto" | "none" | "required" | {"function": {"name"}}
    parallel_tool_calls: bool = True
    temperature: float | None = None
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        """Whether the request samples greedily (no or zero temperature)."""
        return not self.temperature


def call_id(nonce: str, turn: int, index: int) -> str:
    """A tool_call id unique within the run: ``call_<nonce><16 hex>``."""
    return f"call_{nonce}" + hashlib.sha256(f"{nonce}:{turn}:{index}".encode()).hexdigest()[:16]


class ScenarioIndex:
    """Scenarios by opening (system, first user message)."""

    def __init__(self, scenarios: list[Scenario]) -> None:
        self.scenarios = scenarios
        self._by_key: dict[tuple[str, str], list[Scenario]] = {}
        self._by_user: dict[str, list[Scenario]] = {}
        self._by_opening: dict[str, Scenario] = {}  # openings that start mid-conversation
        for sc in scenarios:
            conv = Conversation.parse([m.wire() for m in sc.messages])
            if any(m.role == "tool" or m.tool_calls for m in sc.messages) and conv.prefixes:
                self._by_opening.setdefault(conv.prefixes[-1], sc)
                continue  # found by its whole opening only
            self._by_key.setdefault((conv.system, conv.first_user), []).append(sc)
            self._by_user.setdefault(conv.first_user, []).append(sc)

    @classmethod
    def from_dir(cls, directory: str | Path | None) -> ScenarioIndex:
        """Index every valid scenario file under ``directory`` (recursively).

        A missing directory gives an empty index; an invalid file is skipped with
        a one-line warning on stderr (the server must start while files are edited).
        ``<suite>:<spec>`` (``bfcl:multi_turn_base``) indexes that registered suite's
        tasks (:mod:`harness.scenario.suites`).

        Raises:
            ScenarioError: ``<name>:<spec>`` that is not a path, with no suite ``name``
                registered (the registered ones and the fix named).
        """
        found: list[Scenario] = []
        suite = suite_of_spec(str(directory or ""))
        if suite is not None:
            return cls(suite.load(str(directory)))
        name = unregistered_spec(str(directory or ""))
        if name is not None and not Path(str(directory)).exists():
            raise ScenarioError(str(directory), "", unregistered_message(name))
        root = Path(directory) if directory is not None else None
        if root is None or not root.is_dir():
            return cls([])
        for path in sorted(p for p in root.rglob("*") if p.suffix in SCENARIO_SUFFIXES):
            try:
                found.append(load_scenario(path))
            except ScenarioError as exc:
                print(f"harness sim: skipping scenario: {exc}", file=sys.stderr)
        return cls(found)

    def __len__(self) -> int:
        return len(self.scenarios)

    @staticmethod
    def fingerprint(directory: str | Path | None) -> tuple[tuple[str, int, int], ...]:
        """(path, mtime_ns, size) of every scenario file: changes when a file does."""
        root = Path(directory) if directory is not None else None
        if root is None or not root.is_dir():
            return ()
        out = []
        for p in sorted(p for p in root.rglob("*") if p.suffix in SCENARIO_SUFFIXES):
            with contextlib.suppress(OSError):
                st = p.stat()
                out.append((str(p), st.st_mtime_ns, st.st_size))
        return tuple(out)

    def match(self, conv: Conversation) -> Scenario | None:
        """The scenario this conversation plays, or ``None``: the one whose opening
        (with its tool calls and results, as ``harness import`` writes them) is the
        longest prefix of the conversation, else by system and first user message.

        Scenarios sharing an opening (two BFCL tasks do) are told apart by the
        follow-ups seen so far; until they differ, the first is played.
        """
        for prefix in reversed(conv.prefixes):
            found = self._by_opening.get(prefix)
            if found is not None:
                return found
        hits = self._by_key.get((conv.system, conv.first_user))
        if hits:
            return _by_followups(hits, conv.user_texts)
        candidates = self._by_user.get(conv.first_user, [])
        return candidates[0] if len(candidates) == 1 else None


def _by_followups(candidates: list[Scenario], users: list[str]) -> Scenario:
    """The first candidate whose follow-ups begin with the conversation's later user texts."""
    for sc in candidates:
        later = users[opening_users(sc) :]
        if [f.user for f in sc.followups[: len(later)]] == later:
            return sc
    return candidates[0]


def opening_users(sc: Scenario) -> int:
    """Number of user messages in the scenario's opening."""
    return sum(1 for m in sc.messages if m.role == "user")


def beyond_opening(sc: Scenario, conv: Conversation) -> Conversation:
    """``conv`` with its position counted from the end of the scenario's opening, for an
    opening that already holds tool calls (mid-conversation, as imported)."""
    if conv.user_count != opening_users(sc):
        return conv
    opening = Conversation.parse([m.wire() for m in sc.messages]).position
    return dataclasses.replace(conv, position=max(0, conv.position - opening))


# ------------------------------------------------------------------- planning


@dataclass
class Plan:
    """The steps of one segment and the run's noise failure, if any."""

    steps: list[list[ExpectedCall]]
    failure: Literal["repeat", "no_answer"] | None = None


def make_plan(
    seg: Expectation,
    *,
    rng: random.Random | None,
    profile: SimProfile,
    parallel: bool,
    reorder: bool = True,
    failure_rate: float | None = None,
) -> Plan:
    """Steps for a segment; ``rng`` is ``None`` for greedy (no noise). ``reorder``: adjacent
    steps of an ``order: free`` segment may be swapped (not when the calls depend on each
    other, as BFCL's do). ``failure_rate``: the chance of a noise failure in this segment
    (default ``profile.noise_failure_rate``)."""
    keep = [
        c
        for c in seg.calls
        if not c.optional or (rng is not None and rng.random() < profile.noise_optional_rate)
    ]
    steps: list[list[ExpectedCall]] = []
    for c in keep:
        if c.parallel and steps and parallel:
            steps[-1].append(c)
        else:
            steps.append([c])
    plan = Plan(steps)
    if rng is None:
        return plan
    if (
        reorder
        and seg.order == "free"
        and len(steps) >= 2
        and rng.random() < profile.noise_reorder_rate
    ):
        i = rng.randrange(len(steps) - 1)
        steps[i], steps[i + 1] = steps[i + 1], steps[i]
    rate = profile.noise_failure_rate if failure_rate is None else failure_rate
    if rng.random() < rate:
        plan.failure = "repeat" if steps and rng.random() < 0.5 else "no_answer"
        if plan.failure == "repeat":
            steps.append(list(steps[-1]))
    return plan


def final_answer_text(fa: FinalAnswerExpectation) -> str:
    """The reference final answer (:meth:`FinalAnswerExpectation.reference_text`)."""
    return fa.reference_text()


def _as_calls(step: list[ExpectedCall]) -> list[PlannedCall]:
    return [PlannedCall(c.tool, dict(c.arguments)) for c in step]


def _forced_call(sc: Scenario, plan: Plan, name: str | None, offered: list[str]) -> PlannedCall:
    """The call to make when ``tool_choice`` forces one and the plan has none."""
    known = [c for seg in sc.segments() for c in seg.calls]
    for c in [*(c for step in plan.steps for c in step), *known]:
        if name is None or c.tool == name:
            return PlannedCall(c.tool, dict(c.arguments))
    return PlannedCall(name or offered[0], {})


def _honour_tool_choice(
    calls: list[PlannedCall], sc: Scenario, plan: Plan, req: RequestOptions
) -> list[PlannedCall]:
    choice = req.tool_choice
    calls = [c for c in calls if c.name in req.tools]
    if not req.tools or choice == "none":
        return []
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        named = [c for c in calls if c.name == name]
        if name in req.tools:
            return named or [_forced_call(sc, plan, name, req.tools)]
    if choice == "required" and not calls:
        return [_forced_call(sc, plan, None, req.tools)]
    return calls


def decide(
    sc: Scenario | None, conv: Conversation, req: RequestOptions, plan: Plan | None, *, loop: bool
) -> Decision:
    """This turn's decision: the plan's next step, else the final answer.

    ``loop`` (the repeat-loop fault) replaces the final answer by the segment's
    steps again, cycling. ``plan`` is ``None`` when the conversation is past the
    scenario's last follow-up or matches no scenario.
    """
    if sc is None or plan is None:
        text = UNKNOWN_ANSWER if sc is None else AFTER_SCRIPT_ANSWER
        return Decision(content=text, reasoning="No tool is needed; I will reply directly.")
    calls: list[PlannedCall] = []
    if conv.position < len(plan.steps):
        calls = _as_calls(plan.steps[conv.position])
    elif loop and plan.steps:
        calls = _as_calls(plan.steps[conv.position % len(plan.steps)])
    calls = _honour_tool_choice(calls, sc, plan, req)
    if calls:
        names = ", ".join(c.name for c in calls)
        return Decision(calls=calls, reasoning=f"To answer this I need to call {names} next.")
    segment = max(0, min(conv.user_count - opening_users(sc), len(sc.followups)))
    text = (
        ""
        if plan.failure == "no_answer"
        else final_answer_text(sc.segments()[segment].final_answer)
    )
    return Decision(content=text, reasoning="I have the tool results I need; now I answer.")


def segment_of(sc: Scenario, conv: Conversation) -> int | None:
    """Segment index of the conversation (0 = opening), ``None`` past the last follow-up."""
    seg = max(0, conv.user_count - opening_users(sc))
    return seg if seg <= len(sc.followups) else None


def nonce_for(
    conv: Conversation, req: RequestOptions, *, server_seed: int, rng: random.Random
) -> str:
    """The run's nonce: recovered from our ids, derived (greedy/seeded) or drawn."""
    found = conv.recovered_nonce()
    if found is not None:
        return found
    if req.greedy:  # greedy decoding ignores the seed: every repeat is the same run
        return hashlib.sha256(f"{server_seed}:greedy:{conv.key()}".encode()).hexdigest()[:8]
    if req.seed is not None:
        blob = f"{server_seed}:{req.seed}:{req.temperature}:{conv.key()}"
        return hashlib.sha256(blob.encode()).hexdigest()[:8]
    return f"{rng.getrandbits(32):08x}"


def plan_for(
    sc: Scenario, conv: Conversation, req: RequestOptions, nonce: str, profile: SimProfile
) -> Plan | None:
    """The plan of the conversation's current segment (``None`` past the script)."""
    seg = segment_of(sc, conv)
    if seg is None:
        return None
    rng = None if req.greedy else random.Random(f"{nonce}:{seg}")
    # BFCL's ground-truth calls depend on each other (`cd` then `ls`): never swapped; and
    # a task's noise failure is spread over its turns, so a task fails about as often as
    # a one-turn scenario (``noise_failure_rate`` per run, not per user turn)
    segments = sc.segments()
    stateful = sc.task is not None  # a suite's task (BFCL's): calls depend on each other
    return make_plan(
        segments[seg],
        rng=rng,
        profile=profile,
        parallel=req.parallel_tool_calls,
        reorder=not stateful,
        failure_rate=profile.noise_failure_rate / len(segments) if stateful else None,
    )
