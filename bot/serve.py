"""``approval-bot serve``: start-up and shutdown of the Slack bot.

Start-up order matters: configuration (already checked), the listening port (bound first, so
a port in use fails before anything else happens), the database (migrated before any request
is accepted), the runner, then Slack. The sweeper runs beside it in every replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from bot.config import Config, ConfigError
from bot.runner import Runner
from handlers.app import build_app, build_web_app
from handlers.services import Services, SlackSettings
from handlers.sweeper import run_sweeper
from storage.repository import DatabaseUnavailable, Repository

log = logging.getLogger(__name__)


@dataclass
class Bot:
    """A started bot: its services, its bolt app and its aiohttp app."""

    services: Services
    app: object
    web_app: web.Application


@contextlib.asynccontextmanager
async def started_bot(
    config: Config,
    settings: SlackSettings,
    *,
    repo: Repository | None = None,
    sweep: bool = True,
) -> AsyncIterator[Bot]:
    """Everything but the listening socket; used by ``serve``, the playground and tests.

    A repository passed in stays open afterwards (its owner closes it).
    """
    owns_repo = repo is None
    if repo is None:
        repo = await Repository.open(config.database_url)
    runner = Runner(repo, config)
    session = aiohttp.ClientSession()
    services = Services.create(repo, config, runner, settings.web_client(session))
    app = build_app(services, settings)
    sweeper = (
        asyncio.create_task(run_sweeper(services, config.sweep_interval.total_seconds()))
        if sweep
        else None
    )
    try:
        yield Bot(services=services, app=app, web_app=build_web_app(app, services, settings))
    finally:
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        await services.background.close()
        await session.close()
        if owns_repo:
            await repo.close()


def serve(config: Config, *, host: str, port: int, socket_mode: bool) -> int:
    try:
        settings = SlackSettings.from_env(socket_mode=socket_mode)
    except ConfigError as exc:
        print(f"approval-bot: {exc}", file=sys.stderr)
        return 2
    sock = None
    if not socket_mode:
        try:
            sock = bound_socket(host, port)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            print(f"approval-bot: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
            return 2
    try:
        asyncio.run(_serve(config, settings, sock=sock))
    except DatabaseUnavailable as exc:
        print(f"approval-bot: {exc}", file=sys.stderr)
        return 2
    finally:
        if sock is not None:
            sock.close()
    return 0


def bound_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (not yet listening): a port in use fails here, first."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


async def _serve(config: Config, settings: SlackSettings, *, sock: socket.socket | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with started_bot(config, settings) as bot:
        if sock is None:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(bot.app, settings.app_token)  # type: ignore[arg-type]
            await handler.connect_async()
            log.info("connected to Slack in Socket Mode")
            await stop.wait()
            await handler.close_async()
            return
        runner = web.AppRunner(bot.web_app)
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()
        log.info("listening on %s/slack/events", site.name)
        await stop.wait()
        await runner.cleanup()
