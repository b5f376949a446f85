"""Text for an operator's terminal: control characters shown, never obeyed.

The CLI prints what models, tools and users wrote (answers, errors, arguments, reasons,
questions). Printed raw, an escape sequence in it (``\\x1b[2J`` clears the screen, others
retitle the window, rewrite earlier lines or write to the clipboard) reached the operator's
terminal and acted there. Every C0 and C1 control character and DEL except newline and tab
is printed as a visible ``\\xNN`` escape instead. ``--json`` output needs nothing: JSON
escapes C0 characters and ``json.dumps`` escapes C1 ones too by default (``ensure_ascii``).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with each control character but newline and tab as ``\\xNN``."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


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
    sys.stdout = TerminalSafeStream(sys.stdout)  # type: ignore[assignment]
    sys.stderr = TerminalSafeStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
