"""The bolt app: one AsyncApp with our listeners, served over HTTP (aiohttp) or Socket Mode."""

from __future__ import annotations

import logging

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

from handlers import listeners
from handlers.services import Services, SlackSettings

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"


def build_app(services: Services, settings: SlackSettings) -> AsyncApp:
    """Bolt verifies every request's signature and timestamp (5 minutes); never turned off.

    ``process_before_response``: our listeners only acknowledge, check and hand slow work to
    tracked background tasks, so bolt can answer Slack when the listener returns; that way a
    request's work is always registered (and visible to shutdown) before Slack is answered.
    """
    app = AsyncApp(
        client=services.client,
        signing_secret=settings.signing_secret or "socket-mode-has-no-signing-secret",
        process_before_response=True,
        request_verification_enabled=True,
        logger=logging.getLogger("slack_bolt"),
    )
    listeners.register(app, services)
    return app


def build_web_app(app: AsyncApp, services: Services) -> web.Application:
    """POST /slack/events for events, interactivity and commands; GET /healthz."""

    async def slack_events(request: web.Request) -> web.Response:
        bolt_response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def healthz(_request: web.Request) -> web.Response:
        try:
            await services.repo.ping()
        except Exception as exc:
            log.error("health check: database unreachable: %s", exc)
            return web.json_response({"ok": False, "database": "unreachable"}, status=503)
        return web.json_response({"ok": True})

    web_app = web.Application()
    web_app.router.add_post(EVENTS_PATH, slack_events)
    web_app.router.add_get("/healthz", healthz)
    return web_app
