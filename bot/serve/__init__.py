"""``approval-bot serve``: the process (``process``) and the bot it starts (``started``).

The playground and the tests start the same bot as ``serve`` does, without its sockets and
signals: ``started_bot``.
"""

from bot.serve.process import bound_socket, serve
from bot.serve.started import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Bot, ShutdownReport, started_bot

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Bot",
    "ShutdownReport",
    "bound_socket",
    "serve",
    "started_bot",
]
