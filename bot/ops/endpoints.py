"""Operational HTTP endpoints beside Slack's: ``/metrics``, ``/readyz`` and ``/livez``.

- ``GET /livez``: 200 while the process serves HTTP at all. For a liveness probe: it does not
  touch the database, so a database outage does not get every replica restarted.
- ``GET /readyz``: 200 when the database can be *written* within 2 s (a write that changes
  nothing, committed: ``Repository.probe_write``) and the bot is not shutting down, else 503
  with a one-line reason. Ready means it can do its work: a database that answers reads but
  cannot be written (a read-only file or server, a full disk) is not ready. For a readiness
  probe and a load balancer's health check. A failing check is logged once per outage
  (:mod:`bot.ops.outage`), not at every probe.
- ``GET /healthz`` (served by :mod:`handlers.app`, unchanged): 200 when the database answers.
- ``GET /metrics``: Prometheus text format (:mod:`bot.ops.metrics`).

With ``metrics_port`` configured they are served on that port only (so the metrics need
not be public, and Socket Mode, which has no HTTP port, gets them too); without it, on the
main port beside ``/slack/events``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from aiohttp import web

from bot.clock import utcnow
from bot.ops.http_logs import SERVER_LOGGER
from bot.ops.metrics import metrics_handler
from bot.ops.outage import OutageLog
from storage.limits import DatabaseBusy, time_limit
from storage.repository import Repository

log = logging.getLogger(__name__)

READY_DATABASE_SECONDS = 2.0
READINESS = "readiness check"


def add_operational_routes(
    app: web.Application,
    repo: Repository,
    draining: Callable[[], bool],
    outages: OutageLog | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """``/metrics``, ``/readyz``, ``/livez`` on ``app``; ``/healthz`` too if it has none."""
    outages = outages or OutageLog()

    async def livez(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(_request: web.Request) -> web.Response:
        if draining():
            return web.json_response({"ok": False, "reason": "shutting down"}, status=503)
        try:
            with time_limit(READY_DATABASE_SECONDS):
                await repo.probe_write(clock())
        except Exception as exc:
            if not outages.failed(READINESS, exc):
                log.error("readiness check: the database write failed: %s", exc)
            return web.json_response({"ok": False, "reason": not_ready(exc)}, status=503)
        outages.succeeded(READINESS)
        return web.json_response({"ok": True})

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler(repo))
    if not any(
        getattr(route.resource, "canonical", None) == "/healthz" for route in app.router.routes()
    ):
        app.router.add_get("/healthz", readyz)


def not_ready(exc: BaseException) -> str:
    """The one-line reason /readyz gives (the error's kind, not its text: a connection error
    names hosts and ports, which a health endpoint need not tell)."""
    if isinstance(exc, DatabaseBusy):
        return f"the database could not be written within {READY_DATABASE_SECONDS:.0f} s"
    return f"the database cannot be written ({type(exc).__name__})"


@contextlib.asynccontextmanager
async def serving_operations(
    sock: socket.socket | None,
    repo: Repository,
    draining: Callable[[], bool],
    outages: OutageLog | None = None,
) -> AsyncIterator[str | None]:
    """Serve the operational endpoints on ``sock`` (the ``metrics_port``) while inside;
    yields its address, or None when no port was configured."""
    if sock is None:
        yield None
        return
    app = web.Application()
    add_operational_routes(app, repo, draining, outages)
    runner = web.AppRunner(app, access_log=None, logger=SERVER_LOGGER)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    log.info("serving /metrics, /readyz and /livez on %s", site.name)
    try:
        yield site.name
    finally:
        await runner.cleanup()
