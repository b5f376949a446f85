"""Text for an operator's terminal: control characters shown, never obeyed.

The CLI prints what models, tools and users wrote (answers, errors, arguments, reasons,
questions). Printed raw, an escape sequence in it (``\\x1b[2J`` clears the screen, others
retitle the window, rewrite earlier lines or write to the clipboard) reached the operator's
terminal and acted there. Every C0 and C1 control character and DEL except newline and tab
is printed as a visible ``\\xNN`` escape instead, and every bidirectional control (U+202A to
U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C), which reorders the text after it so it
reads other than it is, as ``\\uNNNN`` (:func:`bot.ops.logs.terminal_safe`, which text logs
use too). ``--json`` output needs nothing: ``json.dumps`` escapes them all by default
(``ensure_ascii``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from bot.ops.logs import terminal_safe

__all__ = ["TerminalSafeStream", "terminal_safe", "terminal_safe_output"]


class TerminalSafeStream:
    """A text stream that writes ``terminal_safe`` text to the stream it wraps."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_safe(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ...
        return getattr(self.stream, name)


@contextlib.contextmanager
def terminal_safe_output() -> Iterator[None]:
    """Make everything the command prints to stdout and stderr terminal-safe, one place
    for every command rather than a call at each of its prints."""
    saved = sys.stdout, sys.stderr
    sys.stdout = TerminalSafeStream(sys.stdout)
    sys.stderr = TerminalSafeStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
