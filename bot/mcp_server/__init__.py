"""The bot's own MCP server (issue 20 section 3): ``approval-bot mcp``.

Claude Code, Cursor or any MCP client gets two tools, ``request_approval`` and
``ask_human``, that ask a person in Slack and wait for the answer. They are the HTTP API's
requests (:mod:`bot.engine.requests`: the same checks, rows, cards and views, for the same
API tokens), asked over MCP instead of ``/api/v1``; the server writes to the database a
running ``approval-bot serve`` uses, whose card outbox posts the card and whose click handling
settles it. It imports only the core and storage (and the API's token hashing), never Slack:
the entry layer (:mod:`bot.cli.mcp`) starts it on stdio or streamable HTTP.
"""

from bot.mcp_server.server import ApiTokenVerifier, build_server, http_token, stdio_token
from bot.mcp_server.tools import Asking, token_by_bearer

__all__ = [
    "ApiTokenVerifier",
    "Asking",
    "build_server",
    "http_token",
    "stdio_token",
    "token_by_bearer",
]
