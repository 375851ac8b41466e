r"""GSM8K side of the reference server: answers few-shot prompts like a model would.

The reference server's app (:mod:`harness.sim.app`) calls :func:`answer` for ``/v1/completions`` prompts and, via
:func:`prompt_from_messages`, for chat requests. The prompt is SGLang's few-shot format
(``Question: ...\nAnswer: ...`` blocks, see harness.gsm8k.data); the *last* question
is looked up in a GSM8K jsonl (``gsm8k_path``, else the harness download cache).
:func:`question_index` gives that question's index in the file, by which the server
counts requests per question (``GET /sim/stats``) and applies per-question
infrastructure faults (``gsm8k_faults``, ``harness sim --gsm8k-fault INDEX=FAULT``).

Correctness is deterministic in ``(seed, question)`` and uses no global random state:
``u = hash(seed, question)`` uniform in [0, 1) and the answer is right iff
``u < profile.gsm8k_accuracy``. With one seed, the questions a 0.81 server gets right
are a subset of those a 0.88 server gets right, as when a kernel fault costs accuracy:
the paired test then sees ~35 discordant pairs on 500 questions, all one way. A small
share of wrong answers (:data:`INVALID_SHARE`) contains no number at all (invalid).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.gsm8k.data import GSM8KDataError, Question, cache_path, load_jsonl
from harness.sim.profiles import SimProfile

__all__ = [
    "INVALID_SHARE",
    "answer",
    "find_question",
    "load_questions",
    "prompt_from_messages",
    "question_index",
    "request_prompt",
]

#: fraction of wrong answers that carry no number (SGLang's "invalid")
INVALID_SHARE = 0.1
#: fraction of answers ending "The answer is N." instead of "#### N" (strict-match misses)
PROSE_SHARE = 0.05

_INVALID_TEXT = (
    " Let me think about this step by step. The problem gives several quantities, "
    "but I am not able to work out the final amount from them.\n\n"
)


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) from a hash of ``parts`` (stable across runs)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> dict[str, Question]:
    return {q.question.strip(): q for q in load_jsonl(path)}


def load_questions(path: str | Path | None = None) -> dict[str, Question]:
    """Question text -> :class:`Question` of a GSM8K jsonl, cached by path and mtime.

    ``path`` None uses the harness download cache; a missing file gives ``{}``.
    Raises harness.gsm8k.data.GSM8KDataError for a malformed file.
    """
    p = Path(path) if path is not None else cache_path()
    if not p.exists():
        return {}
    return _load(str(p.resolve()), p.stat().st_mtime_ns)


def find_question(prompt: str) -> str | None:
    r"""The text of the last ``Question: `` in ``prompt`` (up to ``\nAnswer:``), or None."""
    start = prompt.rfind("Question: ")
    if start < 0:
        return None
    rest = prompt[start + len("Question: ") :]
    end = rest.find("\nAnswer:")
    if end < 0:
        return None
    return rest[:end].strip()


def prompt_from_messages(messages: list[dict[str, object]]) -> str:
    """Chat messages as one prompt: string contents joined by blank lines."""
    return "\n\n".join(str(m.get("content")) for m in messages if isinstance(m.get("content"), str))


def request_prompt(body: dict[str, Any]) -> str:
    """The prompt of a request body: ``prompt`` (``/v1/completions``; the first of a
    list), ``text`` (``/generate``) or the ``messages`` joined (chat); ``""`` if none."""
    prompt = body.get("prompt", body.get("text"))
    if isinstance(prompt, list):
        prompt = next((p for p in prompt if isinstance(p, str)), None)
    if isinstance(prompt, str):
        return prompt
    messages = body.get("messages")
    if isinstance(messages, list):
        return prompt_from_messages([m for m in messages if isinstance(m, dict)])
    return ""


def question_index(prompt: str, gsm8k_path: str | None = None) -> int | None:
    """The 0-based index in the GSM8K file of the question ``prompt`` asks, or None
    (not a GSM8K prompt, a question not in the file, no file or a malformed one)."""
    q = _lookup(prompt, gsm8k_path)
    return q.index if isinstance(q, Question) else None


def _lookup(prompt: str, gsm8k_path: str | None) -> Question | str | None:
    """The question ``prompt`` asks: None if it is not a GSM8K prompt, its text if the
    question is not in the file (or there is no readable file), else the Question."""
    text = find_question(prompt)
    if text is None:
        return None
    try:
        q = load_questions(gsm8k_path).get(text)
    except GSM8KDataError:
        q = None
    return q if q is not None else text


def _wrong_number(label: str, seed: int, question: str) -> str:
    n = int(label)
    options = [n + 1, n - 1, n * 2, n + 10, n // 2, n + max(1, n // 10), n * 3]
    options = [x for x in options if x != n and x >= 0] or [n + 1]
    return str(options[int(_unit("wrong", seed, question) * len(options))])


def _working(q: Question) -> str:
    return "\n".join(line for line in q.answer.splitlines() if not line.startswith("####"))


def _compose(q: Question, value: str, seed: int) -> str:
    working = _working(q)
    if value != q.label:  # the last mention of the right number becomes the wrong one
        hits = list(re.finditer(rf"(?<![\d.,]){re.escape(q.label)}(?![\d,])", working))
        if hits:
            working = working[: hits[-1].start()] + value + working[hits[-1].end() :]
    if _unit("style", seed, q.question) < PROSE_SHARE:
        return f" {working}\nThe answer is {value}.\n\n"
    return f" {working}\n#### {value}\n\n"


def answer(
    profile: SimProfile, prompt: str, *, seed: int, gsm8k_path: str | None = None
) -> str | None:
    """Answer text for a GSM8K few-shot prompt, or None if ``prompt`` is not one.

    ``gsm8k_path``: the GSM8K jsonl holding the questions (default: the harness cache).
    A question not in the file gets a confident, wrong-looking answer.
    """
    q = _lookup(prompt, gsm8k_path)
    if q is None:
        return None
    if isinstance(q, str):  # a question not in the file
        return f" I will compute the total.\n#### {int(_unit('unknown', seed, q) * 1000)}\n\n"
    if _unit("correct", seed, q.question) < profile.gsm8k_accuracy:
        return _compose(q, q.label, seed)
    if _unit("invalid", seed, q.question) < INVALID_SHARE:
        return _INVALID_TEXT
    return _compose(q, _wrong_number(q.label, seed, q.question), seed)
