"""``approval-bot mcp``: the bot's own MCP server (:mod:`bot.mcp_server`), for Claude Code,
Cursor or any MCP client that should ask a person in Slack before a risky step.

On stdio (the default) the client starts this process and speaks MCP on its stdin and
stdout; it acts for one API token, given as ``--token`` or, better (command lines are
visible to other users), in ``APPROVAL_BOT_TOKEN``, checked before the server starts. With
``--http PORT`` it serves streamable HTTP at ``http://HOST:PORT/mcp`` and every client sends
its own token as ``Authorization: Bearer <token>``. ``--channel`` is where a call that names
no channel posts (by default the token's channel, when it has only one); a token may post
only to its own channels, as over ``/api/v1``.

It needs the database of a running ``approval-bot serve`` (the same ``DATABASE_URL`` or
``--config``): this process stores the requests and reads their outcome, and the server
posts the cards (its card outbox, within about a second) and records the clicks.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

from bot.cli.exits import EXIT_USAGE
from bot.ids import SLACK_CHANNEL_ID

if TYPE_CHECKING:
    from bot.config import Config

TOKEN_ENV = "APPROVAL_BOT_TOKEN"
CHANNEL = SLACK_CHANNEL_ID


def _channel(value: str) -> str:
    if not CHANNEL.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Slack channel id (C…)")
    return value


def add_mcp_command(commands: Any, tcp_port: Any) -> None:
    """The ``mcp`` parser (bot.cli.parser calls this)."""
    mcp = commands.add_parser(
        "mcp",
        help="serve the bot's MCP server (request_approval, ask_human): stdio, or --http PORT",
    )
    mcp.add_argument(
        "--http", type=tcp_port, default=None, metavar="PORT", help="serve streamable HTTP"
    )
    mcp.add_argument("--host", default="127.0.0.1", help="with --http (default 127.0.0.1)")
    mcp.add_argument("--token", default=None, help=f"stdio: the API token (default: ${TOKEN_ENV})")
    mcp.add_argument(
        "--channel",
        type=_channel,
        default=None,
        help="where a call that names no channel posts (default: the token's only channel)",
    )


def mcp(config: Config, args: argparse.Namespace) -> int:
    bearer: str | None = None
    if args.http is None:
        bearer = args.token or os.environ.get(TOKEN_ENV) or None
        if bearer is None:
            return _usage(
                f"stdio needs an API token: --token or {TOKEN_ENV} "
                "(approval-bot api-tokens create NAME --channels C1)"
            )
    elif args.token:
        return _usage(
            "--token is for stdio; over --http each client sends Authorization: Bearer <token>"
        )
    from storage.urls import DatabaseUnavailable

    try:
        return asyncio.run(_serve(config, args, bearer))
    except DatabaseUnavailable as exc:
        return _usage(str(exc))


async def _serve(config: Config, args: argparse.Namespace, bearer: str | None) -> int:
    from bot.mcp_server import Asking, build_server, http_token, stdio_token, token_by_bearer
    from bot.mcp_server.server import http_url
    from storage.repository import Repository

    repo = await Repository.open(
        config.database_url, statement_cache=config.database_statement_cache
    )
    try:
        asking = Asking(repo, config, default_channel=args.channel)
        if bearer is not None:
            stored = await token_by_bearer(repo, bearer)
            if stored is None:
                return _usage("the API token is unknown, revoked or expired")
            if args.channel and args.channel not in stored.channels:
                return _usage(
                    f"--channel {args.channel} is not one of the token's channels: "
                    + ", ".join(stored.channels)
                )
            await build_server(asking, stdio_token(repo, bearer)).run_stdio_async()
            return 0
        server = build_server(asking, http_token(repo), http=(args.host, args.http))
        print(
            f"approval-bot: MCP over streamable HTTP at {http_url(args.host, args.http)}/mcp "
            "(Authorization: Bearer <API token>)",
            file=sys.stderr,
        )
        await server.run_streamable_http_async(host=args.host, port=args.http)
        return 0
    finally:
        await repo.close()


def _usage(message: str) -> int:
    print(f"approval-bot: mcp: {message}", file=sys.stderr)
    return EXIT_USAGE
