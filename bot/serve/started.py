"""A started bot: the services, the bolt and aiohttp apps, the loops beside them, and shutdown.

``started_bot`` wires everything but the listening socket, so ``serve`` (``bot.serve.process``),
the playground and the tests start the same bot. Nothing here is state of its own: the
repository holds every run, approval and lease; the tasks started here (the sweeper, the card
and webhook outboxes, the retry timer) only poll it.

Shutdown (``Bot.shut_down``, within ``shutdown_grace``): stop sweeping, let work in flight
finish so that a running tool's result is recorded, cancel what is still running when the
grace is up (a cancelled run is replayed from its stored history by whoever takes it over),
then release every lease this worker holds so another replica takes those runs over at once
instead of a ``run_lease`` later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from bot.api import WEBHOOK_POLL, WebhookDeliveries, add_api_routes, run_webhooks
from bot.config import Config
from bot.engine import Runner
from bot.mcp_servers import McpServers
from bot.ops.callback_route import add_callback_route
from bot.ops.endpoints import add_operational_routes
from bot.ops.metrics import count_database_errors
from bot.ops.retry_timer import run_retry_timer
from handlers.app import build_app, build_services, build_web_app
from handlers.flows import (
    after_expiry,
    after_the_decision,
    resume_and_publish,
    run_card_outbox,
    run_sweeper,
)
from handlers.flows.sweeper import CARD_POLL
from handlers.middleware import observe_request
from handlers.services import Services
from handlers.slack import RESUMING_CALLBACK, RESUMING_RETRY, SlackSettings, workspace_clients
from storage.repository import CallbackOutcome, Repository

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
    edit = services.publisher.cards.refresh_card(outcome.approval.id)
    await after_the_decision(f"approval {outcome.approval.id}", ("the card's edit", edit))
    if outcome.resume_claimed:
        await resume_and_publish(services, outcome.approval.run_id, RESUMING_CALLBACK)
