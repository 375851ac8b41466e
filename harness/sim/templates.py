r"""Chat templates the reference server renders conversations with (its ``/tokenize`` with
``messages`` and its chat logprobs), as a real server renders the model's own template.

Each is a Jinja template run in a sandbox, as Hugging Face ``transformers``
(``apply_chat_template``) and the servers run a model's ``chat_template``; each keeps the
structure and special tokens of the model family's published template (roles, turn
delimiters, tool-call markup), shortened to what the harness's conversations use:

- ``chatml``: ChatML with Hermes/Qwen ``<tool_call>{json}</tool_call>`` (SmolLM2, Qwen2.5).
- ``llama3``: Llama 3.1's ``<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>``,
  tool calls as ``{"name", "parameters"}`` JSON, tool results in the ``ipython`` role.
- ``deepseek-v3``: DeepSeek-V3's ``<｜User｜>``/``<｜Assistant｜>`` turns and
  ``<｜tool▁calls▁begin｜>...`` markup.
- ``minimax-m2``: MiniMax-M2's ``]~b]role`` turns ended by ``[e~[`` and
  ``<minimax:tool_call><invoke name=...>`` markup.
"""

from __future__ import annotations

import json
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["NOT_JINJA", "TEMPLATES", "check_template", "render"]

_CHATML = """{%- for m in messages -%}
<|im_start|>{{ m.role }}
{{ m.content if m.content is string else '' }}
{%- for c in m.tool_calls or [] %}
<tool_call>
{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}
</tool_call>
{%- endfor %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""

_LLAMA3 = """<|begin_of_text|>
{%- for m in messages -%}
<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>

{% if m.tool_calls -%}
{%- for c in m.tool_calls -%}
{{ {'name': c.function.name, 'parameters': c.function.arguments | fromjson} | tojson }}
{%- endfor -%}
{%- else -%}
{{ m.content if m.content is string else '' }}
{%- endif %}<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif -%}"""

_DEEPSEEK_V3 = """<｜begin▁of▁sentence｜>
{%- for m in messages if m.role == 'system' %}{{ m.content }}{% endfor -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<｜User｜>{{ m.content }}
{%- elif m.role == 'assistant' -%}<｜Assistant｜>{{ m.content if m.content is string else '' }}
{%- if m.tool_calls -%}<｜tool▁calls▁begin｜>
{%- for c in m.tool_calls -%}
<｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ c.function.name }}
```json
{{ c.function.arguments }}
```<｜tool▁call▁end｜>
{%- endfor -%}<｜tool▁calls▁end｜>
{%- endif -%}<｜end▁of▁sentence｜>
{%- elif m.role == 'tool' -%}<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<｜Assistant｜>{% endif -%}"""

_MINIMAX_M2 = """{%- for m in messages -%}
]~b]{{ {'assistant': 'ai'}.get(m.role, m.role) }}
{% if m.role == 'tool' %}<response>{{ m.content }}</response>
{%- else %}{{ m.content if m.content is string else '' }}{% endif %}
{%- if m.tool_calls %}
<minimax:tool_call>
{%- for c in m.tool_calls %}
<invoke name="{{ c.function.name }}">
{%- for k, v in (c.function.arguments | fromjson).items() %}
<parameter name="{{ k }}">{{ v if v is string else v | tojson }}</parameter>
{%- endfor %}
</invoke>
{%- endfor %}
</minimax:tool_call>
{%- endif %}[e~[
{% endfor -%}
{%- if add_generation_prompt %}]~b]ai
{% endif -%}"""

#: template name -> Jinja source
TEMPLATES: dict[str, str] = {
    "chatml": _CHATML,
    "llama3": _LLAMA3,
    "deepseek-v3": _DEEPSEEK_V3,
    "minimax-m2": _MINIMAX_M2,
    # DeepSeek-V3.2's format, which SGLang renders with a Python chat encoding, not Jinja
    # (sglang==0.5.23 sglang/srt/entrypoints/openai/chat_encoding.py): the same text here
    "deepseek-v3.2": _DEEPSEEK_V3,
}
#: templates a server renders with a chat encoding rather than Jinja: SGLang 0.5.23's
#: /tokenize refuses add_generation_prompt for them
NOT_JINJA = frozenset({"deepseek-v3.2"})


def _fromjson(text: Any) -> Any:
    if not isinstance(text, str):
        return text if isinstance(text, dict) else {}
    try:
        out = json.loads(text)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


_ENV = ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False)
_ENV.filters["fromjson"] = _fromjson
_ENV.filters["tojson"] = lambda v: json.dumps(v, ensure_ascii=False)
_COMPILED = {name: _ENV.from_string(src) for name, src in TEMPLATES.items()}


def check_template(name: str) -> str:
    """``name`` if it is a template of :data:`TEMPLATES`.

    Raises:
        KeyError: an unknown name (the message lists the templates).
    """
    if name not in TEMPLATES:
        raise KeyError(f"unknown chat template {name!r}; one of: {', '.join(TEMPLATES)}")
    return name


def render(name: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool) -> str:
    """``messages`` (OpenAI chat messages) as the text of template ``name``.

    Raises:
        KeyError: an unknown template.
    """
    return _COMPILED[check_template(name)].render(
        messages=messages, add_generation_prompt=add_generation_prompt
    )
