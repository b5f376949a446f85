"""The playground: the real bot and a Slack-compatible server on one machine, offline.

The bot is exactly what ``approval-bot serve`` runs (HTTP mode, same handlers, storage and
runner); only its Web API base URL points at our Slack-compatible server, which also serves a
Slack-like page and turns what a person does there into signed Slack requests. Data lives in
one directory (SQLite for the bot, the demo tools' pretend state), so a restart keeps it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bot.config import Config, config_from_dict, load_config
from bot.llm_setup import prepare_llm
from bot.serve import Bot, started_bot
from handlers.services import SlackSettings
from playground.demo import demo_config_dict, register_demo_model
from playground.slack_server import SlackServer

log = logging.getLogger(__name__)

CHANNEL = "C0OPS"


@dataclass(frozen=True)
class Person:
    id: str
    name: str
    role: str


PEOPLE = (
    Person("U0REQUESTER", "ana", "requester"),
    Person("U0APPROVER1", "bo", "approver"),
    Person("U0APPROVER2", "cy", "approver"),
    Person("U0OUTSIDER", "dee", "outsider"),
)


@dataclass
class Playground:
    server: SlackServer
    bot: Bot
    url: str
    data_dir: Path

    async def settle(self) -> None:
        await self.bot.services.background.idle()


def playground_config(
    data_dir: Path, *, model: str | None = None, config_path: str | None = None
) -> Config:
    """The demo configuration, or the user's own file; the database always in ``data_dir``."""
    if config_path:
        config = load_config(config_path)
        if model:
            config.model = model
    else:
        config = config_from_dict(demo_config_dict(model or "demo"))
    config.database_url = f"sqlite+aiosqlite:///{data_dir / 'approval-bot.db'}"
    return config


@contextlib.asynccontextmanager
async def running_playground(
    *,
    data_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    model: str | None = None,
    config_path: str | None = None,
) -> AsyncIterator[Playground]:
    data_dir.mkdir(parents=True, exist_ok=True)
    # The demo tools read their pretend state from here (one playground per process).
    os.environ["APPROVAL_BOT_DEMO_STATE"] = str(data_dir / "demo-state.db")
    prepare_llm(data_dir / "llm")
    register_demo_model()
    config = playground_config(data_dir, model=model, config_path=config_path)
    secret = secrets.token_hex(16)
    server = SlackServer(
        signing_secret=secret,
        users={p.id: p.name for p in PEOPLE},
        channels={CHANNEL: "ops"},
    )
    from playground.page import add_page_routes

    server.keep_messages_in(data_dir / "slack-messages.json")
    server.route_hooks.append(lambda app: add_page_routes(app, server, PEOPLE, CHANNEL))
    await server.start(host, port)
    settings = SlackSettings(
        bot_token=server.bot_token, signing_secret=secret, api_url=server.api_url
    )
    async with started_bot(config, settings) as bot:
        runner = web.AppRunner(bot.web_app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        bot_port = runner.addresses[0][1]
        server.bot_url = f"http://127.0.0.1:{bot_port}/slack/events"
        if config.public_url is None:
            # Callback URLs (the demo's deploy pipeline) reach the bot on its own port,
            # known only now; the runner reads public_url at each drive.
            config.public_url = f"http://127.0.0.1:{bot_port}"
        try:
            yield Playground(server=server, bot=bot, url=server.base_url, data_dir=data_dir)
        finally:
            await bot.services.background.idle()
            await runner.cleanup()
            await server.stop()
