"""``approval-bot serve``: start-up and shutdown of the Slack bot.

Start-up order matters: configuration (already checked), the listening port (bound first, so
a port in use fails before anything else happens), the model (known, its key set: what
``ask`` checks; a warning when no tool is configured), the database (migrated before any request
is accepted), the runner, then Slack. The sweeper runs beside it in every replica, and so
does the ~1 s check for due retries (``bot.ops.retry_timer``); ``POST /callbacks/{token}``
(``bot.ops.callback_route``) shares the port with ``/slack/events``.

Shutdown (SIGTERM from a rolling deploy, or Ctrl-C) runs the other way round, within
``shutdown_grace`` counted from the signal: stop taking new work (close the port or the
Socket Mode connection, stop the sweeper), let work in flight finish so that a running tool's
result is recorded, cancel what is still running when the grace is up (a cancelled run is
replayed from its stored history by whoever takes it over), then release every lease this
worker holds so another replica takes those runs over at once instead of a ``run_lease``
later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from bot.api import WEBHOOK_POLL, WebhookDeliveries, add_api_routes, run_webhooks
from bot.config import Config, ConfigError
from bot.engine import Runner
from bot.llm_setup import model_problem
from bot.mcp_servers import McpServers
from bot.ops.callback_route import RedactingAccessLogger, add_callback_route
from bot.ops.endpoints import add_operational_routes, serving_operations
from bot.ops.http_logs import SERVER_LOGGER
from bot.ops.metrics import count_database_errors
from bot.ops.retry_timer import run_retry_timer
from handlers.app import build_app, build_services, build_web_app
from handlers.flows import after_expiry, resume_and_publish, run_card_outbox, run_sweeper
from handlers.flows.sweeper import CARD_POLL
from handlers.middleware import observe_request
from handlers.services import Services
from handlers.slack import RESUMING_CALLBACK, RESUMING_RETRY, SlackSettings, workspace_clients
from storage.repository import CallbackOutcome, DatabaseUnavailable, Repository

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclass
class ShutdownReport:
    """How a shutdown went: what had to be cancelled and which leases were released."""

    cancelled: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    release_failed: bool = False

    @property
    def exit_code(self) -> int:
        # Leases that could not be released still run out on their own: worth a non-zero
        # status, not a hang.
        return EXIT_FAILED if self.release_failed else EXIT_OK


@dataclass
class Bot:
    """A started bot: its services, its bolt app and its aiohttp app."""

    services: Services
    app: object
    web_app: web.Application
    sweeper: asyncio.Task[None] | None = None
    retry_timer: asyncio.Task[None] | None = None
    webhooks: asyncio.Task[None] | None = None  # the API's webhook outbox (bot.api)
    cards: asyncio.Task[None] | None = None  # the card outbox, between sweeps
    # Set when the port closes: long-polls held by /api/v1 answer at once (not after grace).
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    stop_sweeping: asyncio.Event = field(default_factory=asyncio.Event)
    report: ShutdownReport | None = None

    async def shut_down(self, grace: float, hurry: asyncio.Event | None = None) -> ShutdownReport:
        """Stop sweeping, finish work in flight within ``grace`` seconds, release leases.

        Call it once no new requests or events can arrive. ``hurry`` (a second signal) ends
        the grace early. Idempotent.
        """
        if self.report is not None:
            return self.report
        report = self.report = ShutdownReport()
        background = self.services.background
        self.stop_sweeping.set()
        # A long tool stops at its next checkpoint (stored) and resumes elsewhere, rather
        # than holding the shutdown up or being cut off by the grace.
        self.services.runner.stop_at_checkpoints("the bot is shutting down")
        if len(background):
            log.info("shutting down: waiting up to %.0fs for %d tasks", grace, len(background))
        waiting = asyncio.ensure_future(self._work_done(grace))
        hurried = asyncio.ensure_future((hurry or asyncio.Event()).wait())
        await asyncio.wait({waiting, hurried}, return_when=asyncio.FIRST_COMPLETED)
        for future in (waiting, hurried):
            future.cancel()  # stops the waiting only: the work itself is cancelled below
        await asyncio.gather(waiting, hurried, return_exceptions=True)
        if self.sweeper is not None and not self.sweeper.done():
            self.sweeper.cancel()
            report.cancelled.append("sweeper")
            await asyncio.gather(self.sweeper, return_exceptions=True)
        for timer in (self.retry_timer, self.webhooks, self.cards):
            if timer is not None and not timer.done():
                timer.cancel()
                await asyncio.gather(timer, return_exceptions=True)
        if len(background):
            report.cancelled += await background.cancel_all()
        if report.cancelled:
            log.warning(
                "stopped waiting after %s: cancelled %s; their runs are taken over from "
                "their stored history (a tool still running is reported outcome unknown)",
                "a second signal" if hurried.done() and not hurried.cancelled() else "the grace",
                ", ".join(report.cancelled),
            )
        # Only now: a drive still going would renew the lease it is about to lose.
        runner = self.services.runner
        try:
            report.released = await self.services.repo.release_leases(
                runner.worker_id, now=runner.clock()
            )
        except Exception as exc:
            report.release_failed = True
            log.error("could not release this worker's leases (they run out on their own): %s", exc)
        if report.released:
            log.info("released the leases of runs %s", ", ".join(report.released))
        return report

    async def _work_done(self, grace: float) -> None:
        """Until the sweep under way and every background task are done, or the grace is up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        if self.sweeper is not None:
            # The sweep under way finishes; the runs it spawned are then waited for too.
            await asyncio.wait({self.sweeper}, timeout=max(deadline - loop.time(), 0))
        await self.services.background.drain(deadline - loop.time())


@contextlib.asynccontextmanager
async def started_bot(
    config: Config,
    settings: SlackSettings,
    *,
    repo: Repository | None = None,
    sweep: bool = True,
) -> AsyncIterator[Bot]:
    """Everything but the listening socket; used by ``serve``, the playground and tests.

    On the way out it shuts down as ``serve`` does (``Bot.shut_down`` with the configured
    grace, unless the caller already did). A repository passed in stays open afterwards (its
    owner closes it).
    """
    owns_repo = repo is None
    if repo is None:
        repo = await Repository.open(
            config.database_url, statement_cache=config.database_statement_cache
        )
    if config.mcp_servers:  # their tools are added to this bot's copy of the list
        config = dataclasses.replace(config, tools=list(config.tools))
    runner = Runner(repo, config)
    session = aiohttp.ClientSession()
    clients = workspace_clients(repo, settings, session)
    services = build_services(repo, config, runner, clients.default, clients)
    # The executing record's fsync on the loop (no thread hop) only between requests.
    repo.fsync_on_loop_when(services.background.quiet_now)
    app = build_app(services, settings)
    count_database_errors(repo)
    app.middleware(observe_request)  # log ids and acknowledgement latency
    bot = Bot(services=services, app=app, web_app=build_web_app(app, services, settings))
    if config.metrics_port is None:
        add_operational_routes(bot.web_app, repo, bot.stop_sweeping.is_set, runner.outages)

    def spawn(coroutine: Coroutine[Any, Any, Any], name: str) -> None:
        services.background.spawn(coroutine, name=name)

    async def resume(run_id: str) -> None:  # a retry came due
        await resume_and_publish(services, run_id, RESUMING_RETRY)

    add_callback_route(
        bot.web_app,
        runner.complete_callback,
        after=lambda outcome: after_callback(services, outcome),
        spawn=spawn,
    )
    # Before the sweeper and Slack: the tools of the MCP servers that answer now are offered
    # from the first run; a server that is down is retried in the background (bot.mcp_servers).
    mcp = await McpServers.start(config.mcp_servers, runner.add_tools, policies=config.policies)
    add_api_routes(bot.web_app, services, bot.closing)  # /api/v1 (issue 20 section 2)
    if sweep:
        interval = config.sweep_interval.total_seconds()
        bot.webhooks = asyncio.create_task(
            run_webhooks(
                WebhookDeliveries(repo, session), bot.stop_sweeping, min(interval, WEBHOOK_POLL)
            )
        )
        bot.sweeper = asyncio.create_task(run_sweeper(services, interval, bot.stop_sweeping))
        bot.cards = asyncio.create_task(
            run_card_outbox(services, bot.stop_sweeping, min(interval, CARD_POLL))
        )
        bot.retry_timer = asyncio.create_task(
            run_retry_timer(
                runner.due_retries, resume, spawn, bot.stop_sweeping, outages=runner.outages
            )
        )
    try:
        yield bot
    finally:
        await bot.shut_down(config.shutdown_grace.total_seconds())
        await mcp.close()
        await session.close()
        repo.fsync_on_loop_when(None)
        if owns_repo:
            await repo.close()


async def after_callback(services: Services, outcome: CallbackOutcome) -> None:
    """A callback completed a wait (resume its run) or found it expired (move the run on
    per ``on_expiry``); its notice in the thread is edited either way."""
    if outcome.expiry is not None:
        await after_expiry(services, outcome.expiry)
        return
    assert outcome.approval is not None
    await services.publisher.cards.refresh_card(outcome.approval.id)
    if outcome.resume_claimed:
        await resume_and_publish(services, outcome.approval.run_id, RESUMING_CALLBACK)


def serve(config: Config, *, host: str, port: int, socket_mode: bool) -> int:
    try:
        settings = SlackSettings.from_env(socket_mode=socket_mode)
    except ConfigError as exc:
        print(f"approval-bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if config.metrics_port == port and not socket_mode:
        print(
            f"approval-bot: metrics_port ({port}) must differ from --port: it keeps /metrics "
            "off the public port",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sock = metrics_sock = None
    try:
        if not socket_mode:
            sock = _listen_or_say(host, port)
        if config.metrics_port is not None:
            metrics_sock = _listen_or_say(host, config.metrics_port)
    except _CannotListen:
        if sock is not None:
            sock.close()
        return EXIT_USAGE
    # What `ask` checks, before the database or Slack: a bot that started without its
    # model's key would acknowledge every mention and then fail each run.
    if problem := model_problem(config.model):
        print(f"approval-bot: {problem}", file=sys.stderr)
        for opened in (sock, metrics_sock):
            if opened is not None:
                opened.close()
        return EXIT_USAGE
    if not config.tool_refs and not config.mcp_servers:
        where = "no configuration file" if config.source == "(defaults)" else config.source
        log.warning(
            "no tools are configured (`tools` is empty; %s): the model can only answer in "
            "words, and nothing will ever wait for an approval",
            where,
        )
    if config.public_url is None:
        # Where callbacks reach this process unless public_url says otherwise.
        reachable = socket.getfqdn() if host in ("", "0.0.0.0", "::") else host
        config.public_url = f"http://{reachable}:{port}"
    with asyncio.Runner() as loop:
        try:
            report = loop.run(_serve(config, settings, sock=sock, metrics_sock=metrics_sock))
        except DatabaseUnavailable as exc:
            print(f"approval-bot: {exc}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            for opened in (sock, metrics_sock):
                if opened is not None:
                    opened.close()
        if report.cancelled:
            # A tool cut off by the grace may still be running in a thread, which the
            # interpreter would wait for at exit. Its call is recorded as started, never as
            # finished, so it is reported "outcome unknown" and never run again: let it stop
            # with the process now rather than finish unrecorded.
            _exit_now(report.exit_code)
    return report.exit_code


class _CannotListen(Exception):
    pass


def _listen_or_say(host: str, port: int) -> socket.socket:
    try:
        return bound_socket(host, port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(f"approval-bot: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        raise _CannotListen from exc


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


async def _serve(
    config: Config,
    settings: SlackSettings,
    *,
    sock: socket.socket | None,
    metrics_sock: socket.socket | None = None,
) -> ShutdownReport:
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            log.warning("second signal: not waiting for work in flight any longer")
            hurry.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal)
    grace = config.shutdown_grace.total_seconds()
    async with (
        started_bot(config, settings) as bot,
        # The metrics port stays up while work in flight finishes (/readyz says 503).
        serving_operations(
            metrics_sock, bot.services.repo, stop.is_set, bot.services.runner.outages
        ),
    ):
        # What start-up built (modules, the app, the configuration) lives as long as the
        # process: frozen, the collector's full passes (40-85 ms over ~155,000 objects,
        # every thousand or two requests) walk only what requests create.
        gc.collect()
        gc.freeze()
        if sock is None:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(bot.app, settings.app_token)  # type: ignore[arg-type]
            await handler.connect_async()
            log.info("connected to Slack in Socket Mode")
            log.info(
                "Socket Mode serves no HTTP port: POST /callbacks/{token} is not served here "
                "(tools that wait for callbacks need HTTP mode; `approval-bot waits complete`)"
            )
            await stop.wait()
            deadline = loop.time() + grace
            log.info("stopping: no new events; finishing work in flight")
            await handler.close_async()
        else:
            runner = web.AppRunner(
                bot.web_app,
                shutdown_timeout=grace,
                access_log_class=RedactingAccessLogger,
                logger=SERVER_LOGGER,  # a request aiohttp cannot parse: one line, no traceback
            )
            await runner.setup()
            site = web.SockSite(runner, sock)
            await site.start()
            log.info("listening on %s/slack/events", site.name)
            log.info("callback URLs start with %s/callbacks/", bot.services.runner.public_url)
            await stop.wait()
            deadline = loop.time() + grace
            log.info("stopping: no new requests; finishing work in flight")
            bot.closing.set()  # held long-polls answer now; their clients ask another replica
            # Closes the port at once; requests already being handled get their answers.
            await runner.cleanup()
        return await bot.shut_down(deadline - loop.time(), hurry)


def _exit_now(code: int) -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
