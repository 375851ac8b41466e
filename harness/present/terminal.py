"""Text from a model or a server, made safe to print on a terminal.

A model's output can hold terminal escape sequences (``ESC ] 0 ; title BEL`` sets the
window title, ``ESC [ 2 J`` clears the screen, ``ESC [ 31 m`` colours what follows) and
other control characters (``CR`` overwrites a line). :func:`printable` removes them: the
command line prints every model text through it (``console._print``) and the pytest
plugin its failure text (:class:`harness.pytest_plugin.judge.Judgement`). Newlines and
tabs are kept; nothing else is changed.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# ECMA-48: OSC/DCS/SOS/PM/APC strings (to BEL or ST), CSI sequences, two-byte escapes,
# then any other C0 control but TAB and LF, DEL and the C1 controls (0x9b is an 8-bit CSI)
_CONTROL = re.compile(
    r"\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def printable(text: str) -> str:
    r"""``text`` without terminal escape sequences and control characters (but ``\n``,
    ``\t``): ``"a\x1b]0;owned\x07b\x1b[2Jc"`` -> ``"abc"``."""
    return _CONTROL.sub("", text)
