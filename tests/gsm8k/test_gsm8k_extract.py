"""GSM8K answer extractors (SGLang, lm-eval strict-match / flexible-extract) and prompts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.gsm8k.data import (
    GSM8K_TEST_SHA256,
    GSM8KDataError,
    chat_messages,
    few_shot_prefix,
    load_dataset,
    load_jsonl,
    question_prompt,
)
from harness.gsm8k.extract import (
    extract_flexible,
    extract_sglang,
    extract_strict,
    lm_eval_normalize,
    score_lm_eval,
)

SHARED = Path(__file__).parents[3] / "shared/data/gsm8k/test.jsonl"
needs_shared = pytest.mark.skipif(
    not SHARED.exists(),
    reason=f"GSM8K test split not found at {SHARED} (../shared beside the clone)",
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She pays 1,234 dollars.\n#### 1,234", "1234"),  # commas removed
        ("The change is -5 degrees.", "5"),  # no sign: SGLang's \d+
        ("It costs $3.50 each", "50"),  # decimals split at the point
        ("$5", "5"),
        ("#### 18\n\nQuestion: next one has 7", "7"),  # trailing text: last integer wins
        ("3 apples and 4 pears make 7 fruits", "7"),  # several numbers
        ("I cannot tell.", None),  # none: invalid
        ("", None),
        ("The answer is 05", None),  # ast.literal_eval('05') fails in SGLang
        ("The answer is 0", "0"),
        ("#### 100.", "100"),
    ],
)
def test_sglang_extractor(text: str, expected: str | None) -> None:
    assert extract_sglang(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So 3 + 4 = 7\n#### 7", "7"),
        ("#### 1,234", "1,234"),
        ("#### -3", "-3"),
        ("#### 3.50", "3.50"),
        ("#### $5", None),  # '$' is not in the strict pattern
        ("#### 12\nlater #### 13", "12"),  # take_first
        ("The answer is 12.", None),
        ("####12", None),  # needs the space
    ],
)
def test_strict_extractor(text: str, expected: str | None) -> None:
    assert extract_strict(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 1,234.", "1,234."),
        ("It went down by -5", "-5"),
        ("It costs $3.50", "$3.50"),
        ("$5", "$5"),
        ("3 apples, 4 pears: 7 fruits in total", "7"),
        ("no number here", None),
        ("The answer is 7. Question", "7."),
    ],
)
def test_flexible_extractor(text: str, expected: str | None) -> None:
    assert extract_flexible(text) == expected


def test_lm_eval_exact_match_normalisation() -> None:
    reference = "Janet sells 9 eggs.\nShe makes $18.\n#### 1,018"
    assert lm_eval_normalize(reference) == "1018"
    assert score_lm_eval("$1,018.", reference)
    assert score_lm_eval("1018", reference)
    assert not score_lm_eval("1018.5", reference)
    assert not score_lm_eval(None, reference)


def _sglang_prompt(lines: list[dict[str, str]], k: int, i: int) -> str:
    """SGLang few_shot_gsm8k: get_few_shot_examples(lines, k) + get_one_example(lines, i, False)."""
    shots = ""
    for j in range(k):
        shots += (
            "Question: " + lines[j]["question"] + "\nAnswer:" + " " + lines[j]["answer"] + "\n\n"
        )
    return shots + "Question: " + lines[i]["question"] + "\nAnswer:"


@pytest.fixture
def tiny_jsonl(tmp_path: Path) -> Path:
    rows = [
        {"question": f"Q{i}: what is {i} + {i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"}
        for i in range(8)
    ]
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("k", [0, 1, 5])
def test_prompt_matches_sglang(tiny_jsonl: Path, k: int) -> None:
    lines = [json.loads(x) for x in tiny_jsonl.read_text().splitlines()]
    qs = load_jsonl(tiny_jsonl)
    for i in (0, 6):
        assert question_prompt(qs, k, i) == _sglang_prompt(lines, k, i)
    assert few_shot_prefix(qs, k).count("Question: ") == k


def test_chat_messages_alternate_and_end_with_question(tiny_jsonl: Path) -> None:
    qs = load_jsonl(tiny_jsonl)
    msgs = chat_messages(qs, 2, 5)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[-1]["content"] == "Question: Q5: what is 5 + 5?\nAnswer:"
    assert msgs[1]["content"].endswith("#### 0")


@needs_shared
def test_shared_file_is_the_pinned_official_split() -> None:
    assert hashlib.sha256(SHARED.read_bytes()).hexdigest() == GSM8K_TEST_SHA256
    ds = load_dataset(SHARED)
    assert ds.official and len(ds.questions) == 1319
    assert ds.questions[0].label == "18"
    prompt = question_prompt(ds.questions, 5, 5)
    assert prompt.startswith("Question: Janet\u2019s ducks lay 16 eggs per day.")
    assert prompt.count("\nAnswer:") == 6 and prompt.endswith("\nAnswer:")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"question": "q", "answer": "#### 1"}\nnot json\n', ":2: not valid JSON"),
        ('{"question": "q"}\n', "field 'answer' missing"),
        ('{"question": "q", "answer": "no number"}\n', "no final integer"),
        ("\n", "no questions"),
    ],
)
def test_bad_data_file_is_one_clear_error(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(GSM8KDataError, match=fragment) as info:
        load_jsonl(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_offline_without_cache_names_data_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    # a closed local port stands in for no network: the download fails at once
    with pytest.raises(GSM8KDataError, match="--data") as info:
        load_dataset(url="http://127.0.0.1:9/test.jsonl")
    assert "cannot download" in str(info.value)
    assert not (tmp_path / "cache/gsm8k/test.jsonl").exists()


@needs_shared
def test_cache_with_wrong_sha_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    cached = tmp_path / "gsm8k/test.jsonl"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(SHARED.read_bytes()[:-10])
    with pytest.raises(GSM8KDataError, match="sha256"):
        load_dataset(url="http://127.0.0.1:9/test.jsonl")
    cached.write_bytes(SHARED.read_bytes())
    assert load_dataset(url="http://127.0.0.1:9/test.jsonl").official
