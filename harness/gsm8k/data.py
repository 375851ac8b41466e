r"""GSM8K test split: loading, download with a sha256 check, few-shot prompts.

Data comes from ``--data PATH`` (jsonl, one ``{"question": ..., "answer": ...}`` per
line) or is downloaded once from the official grade-school-math repository
(:data:`GSM8K_URL`, the file SGLang's benchmark downloads) into
``$HARNESS_CACHE/gsm8k/test.jsonl`` (default ``~/.cache/harness/gsm8k/``) and checked
against :data:`GSM8K_TEST_SHA256`.

Prompts follow SGLang's ``few_shot_gsm8k.py``: ``"Question: " + q + "\nAnswer:"``, the
first ``k`` test items with their answers (``" " + answer``) each followed by a blank
line, then the question. Quirk kept for comparability: SGLang's shots are the first
``k`` *test* questions and those are asked and scored too; ``exclude_shots`` drops
them from scoring.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from harness.errors import GSM8KDataError
from harness.gsm8k.extract import extract_sglang

__all__ = [
    "GSM8K_STOP",
    "GSM8K_TEST_SHA256",
    "GSM8K_URL",
    "GSM8KDataError",
    "GSM8KDataset",
    "Question",
    "cache_path",
    "chat_messages",
    "few_shot_prefix",
    "load_dataset",
    "load_jsonl",
    "question_prompt",
]

GSM8K_URL = (
    "https://raw.githubusercontent.com/openai/grade-school-math/master/"
    "grade_school_math/data/test.jsonl"
)
#: sha256 of the official test.jsonl (1319 questions)
GSM8K_TEST_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
#: SGLang few_shot_gsm8k stop strings
GSM8K_STOP = ["Question", "Assistant:", "<|separator|>"]


@dataclass(frozen=True)
class Question:
    """One GSM8K question: its 0-based index in the file, text, full answer and label."""

    index: int
    question: str
    answer: str  # the dataset's full answer text (working + "#### n")
    label: str  # SGLang's label: last integer of ``answer``


@dataclass(frozen=True)
class GSM8KDataset:
    """The questions of a GSM8K jsonl file, where they came from and the file's sha256."""

    questions: list[Question]
    source: str  # path or URL
    sha256: str

    @property
    def official(self) -> bool:
        """Whether the file is the official GSM8K test split (its sha256 matches)."""
        return self.sha256 == GSM8K_TEST_SHA256


def cache_path() -> Path:
    """``$HARNESS_CACHE/gsm8k/test.jsonl`` (default ``~/.cache/harness``)."""
    root = os.environ.get("HARNESS_CACHE") or str(Path.home() / ".cache" / "harness")
    return Path(root) / "gsm8k" / "test.jsonl"


def _parse_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise GSM8KDataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise GSM8KDataError(f"{path}:{lineno}: expected an object with question and answer")
    for field in ("question", "answer"):
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise GSM8KDataError(f"{path}:{lineno}: field '{field}' missing or not a string")
    return row


def load_jsonl(path: str | Path) -> list[Question]:
    """Questions of a GSM8K jsonl file. Raises GSM8KDataError naming file, line, field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GSM8KDataError(f"{p}: cannot read GSM8K data ({exc.strerror}); fix --data") from None
    out: list[Question] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = _parse_line(p, lineno, line)
        label = extract_sglang(row["answer"])
        if label is None:
            raise GSM8KDataError(f"{p}:{lineno}: field 'answer' has no final integer")
        out.append(Question(len(out), row["question"], row["answer"], label))
    if not out:
        raise GSM8KDataError(f"{p}: no questions; pass a GSM8K jsonl with --data")
    return out


def _download(dest: Path, url: str) -> None:
    try:
        resp = httpx.get(url, follow_redirects=True, timeout=60.0)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise GSM8KDataError(
            f"cannot download the GSM8K test split from {url} ({exc}) and no cache at "
            f"{dest}; pass --data PATH to a local test.jsonl"
        ) from None
    digest = hashlib.sha256(resp.content).hexdigest()
    if digest != GSM8K_TEST_SHA256:
        raise GSM8KDataError(
            f"downloaded {url} has sha256 {digest}, expected {GSM8K_TEST_SHA256}; "
            "pass --data PATH to a trusted copy"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.write_bytes(resp.content)
    tmp.replace(dest)


def load_dataset(data: str | Path | None = None, *, url: str = GSM8K_URL) -> GSM8KDataset:
    """The GSM8K test split from ``data``, else the cache, else a download.

    Raises GSM8KDataError (file unreadable/malformed, offline without a cache, or a
    cached/downloaded file whose sha256 differs from :data:`GSM8K_TEST_SHA256`).
    """
    if data is not None:
        path, source = Path(data), str(data)
    else:
        path, source = cache_path(), url
        if not path.exists():
            _download(path, url)
    raw = path.read_bytes() if path.exists() else b""
    digest = hashlib.sha256(raw).hexdigest()
    if data is None and digest != GSM8K_TEST_SHA256:
        raise GSM8KDataError(
            f"{path}: cached GSM8K file has sha256 {digest}, expected {GSM8K_TEST_SHA256}; "
            "delete it to download again, or pass --data PATH"
        )
    return GSM8KDataset(load_jsonl(path), source, digest)


def _example(q: Question, include_answer: bool) -> str:
    text = "Question: " + q.question + "\nAnswer:"
    return text + " " + q.answer if include_answer else text


def few_shot_prefix(questions: list[Question], k: int) -> str:
    """SGLang's ``get_few_shot_examples``: the first ``k`` items with answers."""
    return "".join(_example(q, True) + "\n\n" for q in questions[:k])


def question_prompt(questions: list[Question], k: int, index: int) -> str:
    """The full completions prompt for question ``index`` (SGLang's format)."""
    return few_shot_prefix(questions, k) + _example(questions[index], False)


def chat_messages(questions: list[Question], k: int, index: int) -> list[dict[str, str]]:
    r"""The same few shots as chat turns, for ``--api chat``.

    Each shot is a user turn ``"Question: q\nAnswer:"`` and an assistant turn with the
    dataset answer; the last user turn is the question. The text a model sees is
    SGLang's few-shot text split at the turn boundaries.
    """
    msgs: list[dict[str, str]] = []
    for q in questions[:k]:
        msgs.append({"role": "user", "content": _example(q, False)})
        msgs.append({"role": "assistant", "content": q.answer})
    msgs.append({"role": "user", "content": _example(questions[index], False)})
    return msgs
