"""The real bot (bolt app, handlers, runner, storage) served on loopback, and our
Slack-compatible server in front of it: tests act as people and read what Slack would show."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp

from bot.config import Config
from bot.serve import Bot, started_bot
from handlers.slack import SlackSettings
from playground.slack_server import BotReply, Message, SlackServer
from storage.repository import Repository

SECRET = "test-signing-secret"
CHANNEL = "C0OPS"


@dataclass
class Harness:
    server: SlackServer
    bot: Bot
    repo: Repository

    async def settle(self) -> None:
        """Wait until the bot has finished everything it started after acknowledging."""
        await self.bot.services.background.idle()

    async def mention(self, user: str, text: str, **kwargs: Any) -> BotReply:
        reply = await self.server.mention(user, CHANNEL, f"<@U0BOT> {text}", **kwargs)
        await self.settle()
        return reply

    def thread_of(self, reply: BotReply) -> list[Message]:
        assert reply.message is not None
        return self.server.thread(CHANNEL, reply.message.thread_ts or reply.message.ts)

    def cards(self) -> list[Message]:
        """The cards in channels (DM copies are :meth:`dm_cards`)."""
        dms = set(self.server.dm_channels.values())
        return [
            m
            for m in self.server.messages
            if m.channel not in dms
            and any(b.get("block_id") == "approval_summary" for b in m.blocks)
        ]

    def dm_cards(self, user: str | None = None) -> list[Message]:
        """The DM copies of cards (to ``user``, or to anyone)."""
        dms = (
            set(self.server.dm_channels.values())
            if user is None
            else {self.server.dm_channels.get(user)}
        )
        return [
            m
            for m in self.server.messages
            if m.channel in dms and any(b.get("block_id") == "approval_summary" for b in m.blocks)
        ]

    def card_for(self, approval_id: str) -> Message:
        matches = [m for m in self.cards() if approval_id in str(m.blocks)]
        assert len(matches) == 1, f"expected one card for {approval_id}, got {len(matches)}"
        return matches[0]

    def ephemeral_texts(self, user: str) -> list[str]:
        return [m.text for m in self.server.ephemerals_for(user)]

    def break_click_dispatch(self) -> None:
        """From now on every click's dispatch fails, as a listener's bug would (a middleware
        that raises), after the early answer an Approve click gets (``handlers.app``)."""

        async def broken(body: dict[str, Any], next: Any) -> Any:
            if body.get("type") == "block_actions":
                raise RuntimeError("a listener's bug")
            return await next()

        app = self.bot.app
        assert isinstance(app, AsyncApp)
        app.middleware(broken)


def has_buttons(message: Message) -> bool:
    return any(
        True
        for _ in message.buttons()
        if _[1].get("action_id") in ("approval_approve", "approval_deny")
    )


@contextlib.asynccontextmanager
async def running_bot(
    config: Config,
    repo: Repository,
    *,
    sweep: bool = False,
    server: SlackServer | None = None,
    **server_options: Any,
) -> AsyncIterator[Harness]:
    """``sweep``: run the bot's background loops (the sweeper, the due-retry check) too.
    ``server``: a Slack that outlives this bot (a restart keeps its messages); else a new
    one, stopped with the bot."""
    own_server = server is None
    if server is None:
        server = SlackServer(signing_secret=SECRET, **server_options)
        await server.start()
    settings = SlackSettings(
        bot_token=server.bot_token,
        signing_secret=SECRET,
        app_token=server.app_token,
        api_url=server.api_url,
    )
    async with started_bot(config, settings, repo=repo, sweep=sweep) as bot:
        runner = web.AppRunner(bot.web_app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        server.bot_url = f"http://127.0.0.1:{port}/slack/events"
        try:
            yield Harness(server=server, bot=bot, repo=repo)
            await bot.services.background.idle()
            # Every Web API method the bot called exists in Slack (as our server knows it).
            assert server.unknown_calls == [], [c.method for c in server.unknown_calls]
        finally:
            await bot.services.background.idle()
            await runner.cleanup()
            if own_server:
                await server.stop()
