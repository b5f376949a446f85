"""Operational HTTP endpoints beside Slack's: ``/metrics``, ``/readyz`` and ``/livez``.

- ``GET /livez``: 200 while the process serves HTTP at all. For a liveness probe: it does not
  touch the database, so a database outage does not get every replica restarted.
- ``GET /readyz``: 200 when the database answers within 2 s and the bot is not shutting down,
  else 503 with the reason. For a readiness probe and a load balancer's health check.
- ``GET /healthz`` (served by :mod:`handlers.app`, unchanged): 200 when the database answers.
- ``GET /metrics``: Prometheus text format (:mod:`bot.metrics`).

With ``metrics_port`` configured they are served on that port only (so the metrics need
not be public, and Socket Mode, which has no HTTP port, gets them too); without it, on the
main port beside ``/slack/events``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from bot.metrics import metrics_handler
from storage.limits import time_limit
from storage.repository import Repository

log = logging.getLogger(__name__)

READY_DATABASE_SECONDS = 2.0


def add_operational_routes(
    app: web.Application, repo: Repository, draining: Callable[[], bool]
) -> None:
    """``/metrics``, ``/readyz``, ``/livez`` on ``app``; ``/healthz`` too if it has none."""

    async def livez(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def readyz(_request: web.Request) -> web.Response:
        if draining():
            return web.json_response({"ok": False, "reason": "shutting down"}, status=503)
        try:
            with time_limit(READY_DATABASE_SECONDS):
                await repo.ping()
        except Exception as exc:
            log.error("readiness check: the database did not answer: %s", exc)
            return web.json_response(
                {"ok": False, "reason": "the database did not answer"}, status=503
            )
        return web.json_response({"ok": True})

    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler(repo))
    if not any(
        getattr(route.resource, "canonical", None) == "/healthz" for route in app.router.routes()
    ):
        app.router.add_get("/healthz", readyz)


@contextlib.asynccontextmanager
async def serving_operations(
    sock: socket.socket | None, repo: Repository, draining: Callable[[], bool]
) -> AsyncIterator[str | None]:
    """Serve the operational endpoints on ``sock`` (the ``metrics_port``) while inside;
    yields its address, or None when no port was configured."""
    if sock is None:
        yield None
        return
    app = web.Application()
    add_operational_routes(app, repo, draining)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    log.info("serving /metrics, /readyz and /livez on %s", site.name)
    try:
        yield site.name
    finally:
        await runner.cleanup()
