"""The ``approval-bot`` command line, by concern.

``parser`` (commands, flags, global options), ``app`` (``main``: configuration, database,
Ctrl-C), one module per group of commands (``database``, ``approvals``, ``runs``, ``ask``),
``output`` (how they print) and ``common`` (what they share). ``main`` imports a command's
module only when it runs, so a command starts without loading what others need.
"""

from bot.cli.app import main
from bot.cli.parser import build_parser

__all__ = ["build_parser", "main"]
