"""GSM8K few-shot accuracy, one server or two paired (SGLang-compatible)."""
