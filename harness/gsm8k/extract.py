r"""Answer extraction for GSM8K, matching two reference implementations.

* ``sglang``: SGLang's few-shot GSM8K benchmark (``python/sglang/test/few_shot_gsm8k.py``
  and ``benchmark/gsm8k/bench_sglang.py``, ``get_answer_value``): remove commas, take the
  last run of digits (``\d+``: no sign, no decimals, so ``3.50`` reads as ``50`` and
  ``-4`` as ``4``); no digits at all is *invalid*. SGLang parses the digits with
  ``ast.literal_eval``, which rejects leading zeros (``"05"``), so those are invalid too.
  The dataset's label is the same function applied to the reference answer. This is the
  headline accuracy, comparable with the figures in SGLang's CI and pull requests.
* ``strict``: lm-evaluation-harness ``gsm8k`` task, filter ``strict-match``: regex
  ``#### (\-?[0-9\.\,]+)``, first match (``take_first``).
* ``flexible``: same task, filter ``flexible-extract``: regex
  ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, ``group_select: -1`` (last match), first non-empty group.

lm-evaluation-harness scores both filters with ``exact_match`` (``ignore_case``,
``regexes_to_ignore``: ``,`` ``\$`` ``(?s).*#### `` ``\.$``) applied to the extracted
string and to the full reference answer; :func:`lm_eval_normalize` does the same.
Model output is untrusted text: it is only matched with regexes, never evaluated.
"""

from __future__ import annotations

import re

__all__ = [
    "extract_flexible",
    "extract_sglang",
    "extract_strict",
    "lm_eval_normalize",
    "score_lm_eval",
]

_DIGITS = re.compile(r"\d+")
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = [re.compile(p) for p in (r",", r"\$", r"(?s).*#### ", r"\.$")]


def extract_sglang(text: str) -> str | None:
    """SGLang's ``get_answer_value``: the last integer after removing commas, as a
    canonical decimal string (``"1234"``), or None if invalid (no digits, leading zero)."""
    numbers = _DIGITS.findall(text.replace(",", ""))
    if not numbers:
        return None
    last = numbers[-1]
    if len(last) > 1 and last.startswith("0") and last.strip("0"):
        return None  # ast.literal_eval("05") raises SyntaxError -> INVALID
    return str(int(last))


def extract_strict(text: str) -> str | None:
    """lm-evaluation-harness strict-match: the first ``#### n`` number, or None."""
    match = _STRICT.search(text)
    return match.group(1).strip() if match else None


def extract_flexible(text: str) -> str | None:
    """lm-evaluation-harness flexible-extract: the last number-like token, or None."""
    matches = _FLEXIBLE.findall(text)
    if not matches:
        return None
    groups = [g for g in matches[-1] if g]
    return groups[0].strip() if groups else None


def lm_eval_normalize(text: str) -> str:
    """lm-evaluation-harness ``exact_match`` normalisation of the gsm8k task."""
    for pattern in _IGNORE:
        text = pattern.sub("", text)
    return text.lower()


def score_lm_eval(extracted: str | None, reference_answer: str) -> bool:
    """True if ``extracted`` exact-matches the full dataset answer after normalisation.

    ``extracted`` None (lm-eval's ``[invalid]`` fallback) is always wrong.
    """
    if extracted is None:
        return False
    return lm_eval_normalize(extracted) == lm_eval_normalize(reference_answer)
