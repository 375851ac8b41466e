"""Tool-call markup: the delimiters of each supported tool-call parser format, one table.

A server's tool-call parser cuts a call out of the model's text by its format's
delimiters; where the parser misses one (a closing tag it did not expect, a special
token the detokenizer kept), the delimiter is left in ``content`` or inside an argument
value. :data:`CALL_MARKUP` lists each format's delimiters as its parsers define them,
each row cited to the parser's source file in vLLM (``vllm/tool_parsers/``, formerly
``vllm/entrypoints/openai/tool_parsers/``) and SGLang (``python/sglang/srt/function_call/``);
:data:`TEMPLATE_TOKENS` the chat-template tokens that are no call's delimiters but must
not reach text either. :data:`MARKUP_PATTERNS` matches any of them, and
:func:`harness.scoring.leaks.markup_tokens` reads them (with any ``<|name|>``-shaped
token) in content (``markup_in_content``) and in argument values (``markup_in_arguments``).
Pure data; the page ``docs/wire-protocol.md`` shows the table (generated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CALL_MARKUP", "MARKUP_PATTERNS", "TEMPLATE_TOKENS", "CallMarkup", "call_markup"]


@dataclass(frozen=True)
class CallMarkup:
    """One parser format: ``name`` (the ``--tool-call-parser`` family), ``delimiters``
    (as the parsers define them; an opening tag with an attribute as its prefix,
    ``<function=``), the parsers' source files (``vllm``, ``sglang``), and ``left_over``:
    what a parser that misses the call's end leaves at the end of a value (the reference
    server's ``markup_in_arguments`` fault for this format)."""

    name: str
    delimiters: tuple[str, ...]
    vllm: str
    sglang: str
    left_over: str


#: every supported parser format's delimiters (see the module docstring)
CALL_MARKUP: tuple[CallMarkup, ...] = (
    CallMarkup(
        "hermes", ("<tool_call>", "</tool_call>"),
        "vllm/tool_parsers/hermes_tool_parser.py",
        "python/sglang/srt/function_call/hermes_detector.py", "</tool_call>",
    ),
    CallMarkup(
        "qwen3_xml",
        ("<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=",
         "</parameter>"),
        "vllm/tool_parsers/qwen3coder_tool_parser.py, qwen3xml_tool_parser.py",
        "python/sglang/srt/function_call/qwen3_coder_detector.py",
        "\n</parameter>\n</function>",
    ),
    CallMarkup(
        "glm45",
        ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
         "</arg_value>"),
        "vllm/tool_parsers/glm4_moe_tool_parser.py, glm47_moe_tool_parser.py (GLM-4.5/4.6, 4.7)",
        "python/sglang/srt/function_call/glm4_moe_detector.py, glm47_moe_detector.py",
        "</arg_value>",
    ),
    CallMarkup(
        "minimax_m2",
        ("<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=", "</invoke>",
         "<parameter name=", "</parameter>"),
        "vllm/tool_parsers/minimax_m2_tool_parser.py",
        "python/sglang/srt/function_call/minimax_m2.py", "</parameter>\n</invoke>",
    ),
    CallMarkup(
        "kimi_k2",
        ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
        "vllm/tool_parsers/kimi_k2_tool_parser.py",
        "python/sglang/srt/function_call/kimik2_detector.py", "<|tool_call_end|>",
    ),
    CallMarkup(
        "deepseek_v3",
        ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
         "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"),
        "vllm/tool_parsers/deepseekv3_tool_parser.py, deepseekv31_tool_parser.py (V3, V3.1)",
        "python/sglang/srt/function_call/deepseekv3_detector.py, deepseekv31_detector.py",
        "<｜tool▁call▁end｜>",
    ),
    CallMarkup(
        "gpt_oss",
        ("<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>", "<|end|>",
         "<|return|>"),
        "vllm/tool_parsers/openai_tool_parser.py (the harmony format)",
        "python/sglang/srt/function_call/gpt_oss_detector.py", "<|call|>",
    ),
    CallMarkup(
        "mistral", ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
        "vllm/tool_parsers/mistral_tool_parser.py",
        "python/sglang/srt/function_call/mistral_detector.py", "[ARGS]",
    ),
    CallMarkup(
        "llama3_json",
        ("<|python_tag|>", "<|eom_id|>", "<|eot_id|>", "<|start_header_id|>",
         "<|end_header_id|>"),
        "vllm/tool_parsers/llama_tool_parser.py",
        "python/sglang/srt/function_call/llama32_detector.py", "<|eom_id|>",
    ),
)  # fmt: skip

#: chat-template tokens that delimit no call but must not reach text (ChatML, as the
#: hermes and Qwen templates wrap turns; the end of text)
TEMPLATE_TOKENS: tuple[str, ...] = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def call_markup(name: str) -> CallMarkup:
    """The row of :data:`CALL_MARKUP` called ``name``.

    Raises:
        ValueError: no such format; the message lists them.
    """
    for row in CALL_MARKUP:
        if row.name == name:
            return row
    known = ", ".join(r.name for r in CALL_MARKUP)
    raise ValueError(f"unknown call markup format {name!r}; known: {known}")


def _pattern() -> re.Pattern[str]:
    tokens = {t for row in CALL_MARKUP for t in row.delimiters} | set(TEMPLATE_TOKENS)
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=lambda t: (-len(t), t))))


#: any delimiter of :data:`CALL_MARKUP` or token of :data:`TEMPLATE_TOKENS` (longest first)
MARKUP_PATTERNS = _pattern()
