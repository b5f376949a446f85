"""The playground: the real bot and a Slack-compatible server on one machine, offline.

The bot is exactly what ``approval-bot serve`` runs (HTTP mode, same handlers, storage and
runner); only its Web API base URL points at our Slack-compatible server, which also serves a
Slack-like page and turns what a person does there into signed Slack requests. Data lives in
one directory (SQLite for the bot, the demo tools' pretend state), so a restart keeps it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.clock import utcnow
from bot.config import Config, config_from_dict, load_config
from bot.llm_setup import prepare_llm
from bot.serve import Bot, started_bot
from handlers.slack import SlackSettings
from playground.demo import DEMO_STATE_FILE, demo_config_dict, register_demo_model
from playground.page_home import waiting_json
from playground.people import PEOPLE
from playground.slack_server import SlackServer
from storage.repository import PendingFilter

log = logging.getLogger(__name__)

CHANNEL = "C0OPS"


@dataclass
class Playground:
    server: SlackServer
    bot: Bot
    url: str
    data_dir: Path

    async def settle(self) -> None:
        await self.bot.services.background.idle()


# The files a reset removes: the bot's database and the demo tools' pretend state (under
# the names the CLI and the demo tools look for by default, so that the CLI run in the data
# directory finds them: see cli_config_text).
DATA_FILES = (
    "approval-bot.db",
    "approval-bot.db-wal",
    "approval-bot.db-shm",
    DEMO_STATE_FILE,
    "demo-state.db",  # its name before 0.2.0
)
CLI_CONFIG = "approval-bot.toml"
CLI_CONFIG_HEADER = (
    "# Written by `approval-bot playground` at each start: the demo's configuration, for the\n"
    "# command line. Run it in this directory and it finds this file, the playground's\n"
    "# database (approval-bot.db) and the pretend services (playground-state.db):\n"
    "#   cd {data_dir} && approval-bot approvals list\n"
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def cli_config_text(data_dir: Path, config: dict[str, Any]) -> str:
    """The demo's configuration as TOML (top-level keys, then a table per policy)."""
    lines = [CLI_CONFIG_HEADER.format(data_dir=data_dir)]
    tables = {k: v for k, v in config.items() if isinstance(v, dict)}
    lines += [f"{k} = {_toml_value(v)}" for k, v in config.items() if k not in tables]
    for name, table in tables.items():
        for key, section in table.items():
            lines += ["", f"[{name}.{key}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in section.items()]
    return "\n".join(lines) + "\n"


def write_cli_config(data_dir: Path, model: str | None, config_path: str | None) -> None:
    """The demo's configuration in the data directory, for the CLI; with ``--config`` (the
    CLI takes the same file) an earlier one of ours is removed, never a file of the user's."""
    path = data_dir / CLI_CONFIG
    if config_path is None:
        path.write_text(cli_config_text(data_dir, demo_config_dict(model or "demo")))
    elif path.exists() and path.read_text().startswith(CLI_CONFIG_HEADER[:40]):
        path.unlink()


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
        # Where another system reaches the HTTP API (playground/api_request.py --url).
        log.info("the HTTP API (docs/api.md) is at http://127.0.0.1:%d/api/v1", bot_port)
        if self.auto_public_url:
            # Callback URLs (the demo's deploy pipeline) reach the bot on its own port,
            # known only now; the runner reads public_url at each drive.
            self.config.public_url = f"http://127.0.0.1:{bot_port}"
        self.stack, self.bot = stack, bot
        return bot

    async def stop(self) -> None:
        if self.stack is None or self.bot is None:
            return
        # A long tool (playground.migrations) stops at its next checkpoint rather than
        # holding the stop up; the next start carries it on from there.
        self.bot.services.runner.stop_at_checkpoints("the playground is stopping")
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
    os.environ["APPROVAL_BOT_DEMO_STATE"] = str(data_dir / DEMO_STATE_FILE)
    write_cli_config(data_dir, model, config_path)
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
    from playground.page_routes import add_page_routes
    from playground.page_workflow import manifest_functions

    # The Workflow Builder step, defined as manifest.yml declares it (the Workflow panel).
    functions, no_functions = manifest_functions()
    server.define_functions(functions)
    server.keep_messages_in(data_dir / "slack-messages.json")
    process: _BotProcess | None = None
    playground: Playground | None = None

    async def reset() -> None:
        """Start the demo over: no messages, no runs or approvals (nor workflow runs), fresh
        pretend services."""
        assert process is not None and playground is not None
        log.info("playground: resetting the demo in %s", data_dir)
        await process.stop()
        for name in DATA_FILES:
            (data_dir / name).unlink(missing_ok=True)
        playground.bot = await process.start()
        # Only now: an empty channel on the page means the new bot is listening.
        server.forget_messages()
        server.forget_function_executions()

    async def waiting() -> list[dict[str, Any]]:
        """The channel's waiting cards and who may still act on each (the page's bar)."""
        if playground is None:
            return []
        try:
            approvals, _ = await playground.bot.services.repo.list_pending(
                PendingFilter(channel=CHANNEL, kinds=("approval",)), now=utcnow(), limit=50
            )
        except Exception as exc:
            # A reset is restarting the bot (its database is closed for that moment): the
            # page polls again in a moment; no bar until then, never an error.
            log.debug("playground: waiting cards not read (%s)", exc)
            return []
        return waiting_json(approvals, PEOPLE)

    server.route_hooks.append(
        lambda app: add_page_routes(
            app,
            server,
            PEOPLE,
            CHANNEL,
            commands=(config.slash_command,),  # the command the bot answers (slash_command)
            reset=reset,
            waiting=waiting,
            workflow_unavailable=no_functions,
        )
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
