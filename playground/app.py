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
    full_name: str = ""  # what users.info answers as real_name


PEOPLE = (
    Person("U0REQUESTER", "ana", "requester", "Ana Ruiz"),
    Person("U0APPROVER1", "bo", "approver", "Bo Lee"),
    Person("U0APPROVER2", "cy", "approver", "Cy Park"),
    Person("U0OUTSIDER", "dee", "outsider", "Dee Shah"),
)


@dataclass
class Playground:
    server: SlackServer
    bot: Bot
    url: str
    data_dir: Path

    async def settle(self) -> None:
        await self.bot.services.background.idle()


# The files a reset removes: the bot's database and the demo tools' pretend state.
DATA_FILES = (
    "approval-bot.db",
    "approval-bot.db-wal",
    "approval-bot.db-shm",
    "demo-state.db",
)


class _BotProcess:
    """The bot of a playground, which a reset stops and starts again on empty files."""

    def __init__(self, server: SlackServer, config: Config, settings: SlackSettings) -> None:
        self.server, self.config, self.settings = server, config, settings
        self.auto_public_url = config.public_url is None
        self.stack: contextlib.AsyncExitStack | None = None
        self.bot: Bot | None = None

    async def start(self) -> Bot:
        stack = contextlib.AsyncExitStack()
        try:
            bot = await stack.enter_async_context(started_bot(self.config, self.settings))
            runner = web.AppRunner(bot.web_app)
            await runner.setup()
            stack.push_async_callback(runner.cleanup)
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
        except BaseException:
            await stack.aclose()
            raise
        bot_port = runner.addresses[0][1]
        self.server.bot_url = f"http://127.0.0.1:{bot_port}/slack/events"
        if self.auto_public_url:
            # Callback URLs (the demo's deploy pipeline) reach the bot on its own port,
            # known only now; the runner reads public_url at each drive.
            self.config.public_url = f"http://127.0.0.1:{bot_port}"
        self.stack, self.bot = stack, bot
        return bot

    async def stop(self) -> None:
        if self.stack is None or self.bot is None:
            return
        await self.bot.services.background.idle()
        stack, self.stack = self.stack, None
        await stack.aclose()


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
        real_names={p.id: p.full_name for p in PEOPLE if p.full_name},
        channels={CHANNEL: "ops"},
    )
    from playground.page import add_page_routes

    server.keep_messages_in(data_dir / "slack-messages.json")
    process: _BotProcess | None = None
    playground: Playground | None = None

    async def reset() -> None:
        """Start the demo over: no messages, no runs or approvals, fresh pretend services."""
        assert process is not None and playground is not None
        log.info("playground: resetting the demo in %s", data_dir)
        await process.stop()
        for name in DATA_FILES:
            (data_dir / name).unlink(missing_ok=True)
        playground.bot = await process.start()
        # Only now: an empty channel on the page means the new bot is listening.
        server.forget_messages()

    server.route_hooks.append(
        lambda app: add_page_routes(app, server, PEOPLE, CHANNEL, reset=reset)
    )
    await server.start(host, port)
    settings = SlackSettings(
        bot_token=server.bot_token, signing_secret=secret, api_url=server.api_url
    )
    process = _BotProcess(server, config, settings)
    try:
        bot = await process.start()
        playground = Playground(server=server, bot=bot, url=server.base_url, data_dir=data_dir)
        yield playground
    finally:
        try:
            await process.stop()
        finally:
            await server.stop()
