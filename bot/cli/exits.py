"""The command line's exit statuses, which scripts rely on, and its one error style.

0: done. 1: a decision or lookup was refused (not found, not allowed, decided already).
2: a usage, configuration or database problem. 130: stopped by Ctrl-C, as shells report it.
Every error is one line on stderr, ``approval-bot: <what>: <why>`` (:func:`complain`): what
was refused or wrong (an id, a flag, a file) and why, in words.
"""

import sys

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # what shells report for a command stopped by Ctrl-C


ECHO_LIMIT = 80  # what a refusal echoes of a value someone typed (an id, a date, a port)


def shown(text: str, limit: int = ECHO_LIMIT) -> str:
    """A value someone gave, as an error echoes it: cut to ``limit`` characters and "…"
    (``runs pause`` of a 100,000-character id printed it back whole)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def complain(what: str, why: str) -> None:
    """``approval-bot: <what>: <why>`` on stderr: the one shape of every error it prints."""
    print(f"approval-bot: {shown(what)}: {why}", file=sys.stderr)
