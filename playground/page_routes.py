"""The playground page's routes on the Slack server's aiohttp app: the page, its state, the
actions a visitor takes, its static files; a failure becomes a JSON error the page shows.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from playground.page import COMMANDS, STATIC_DIR, ChannelPage, PageError
from playground.page_home import HomeRoutes, Waiting
from playground.page_pane import PaneRoutes
from playground.page_workflow import WorkflowRoutes
from playground.people import Person
from playground.slack_server import SlackServer

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _guarded(handler: Handler) -> Handler:
    """PageErrors (and surprises) become JSON errors the page can show."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except PageError as exc:
            return web.json_response({"ok": False, "error": exc.message}, status=exc.status)
        except web.HTTPException:
            raise
        except Exception as exc:
            log.exception("playground page: %s %s failed", request.method, request.path)
            return web.json_response(
                {"ok": False, "error": f"the playground failed: {type(exc).__name__}: {exc}"},
                status=500,
            )

    return guarded


def add_page_routes(
    app: web.Application,
    server: SlackServer,
    people: Sequence[Person],
    channel: str,
    *,
    commands: Sequence[str] = COMMANDS,
    reset: Callable[[], Awaitable[None]] | None = None,
    waiting: Waiting | None = None,
    workflow_unavailable: str | None = None,
) -> None:
    """Serve the channel page, its state and its actions on ``app`` (the Slack server's);
    ``reset`` starts the demo over (the page's "Reset demo"); ``waiting`` lists the waiting
    cards with who may still act on each (the "switch to …" bar); ``workflow_unavailable``
    says why the server has no "Request approval" step defined (the Workflow panel)."""
    page = ChannelPage(server, people, channel, commands, reset)
    pane = PaneRoutes(page)
    workflow = WorkflowRoutes(page, workflow_unavailable)
    home = HomeRoutes(page, waiting, pane, workflow)
    app.router.add_get("/", _guarded(page.index))
    app.router.add_get("/playground/state", _guarded(home.get_state))
    app.router.add_post("/playground/home/open", _guarded(home.post_open))
    app.router.add_post("/playground/home/click", _guarded(home.post_click))
    app.router.add_post("/playground/pane/open", _guarded(pane.post_open))
    app.router.add_post("/playground/pane/message", _guarded(pane.post_message))
    app.router.add_post("/playground/workflow/run", _guarded(workflow.post_run))
    app.router.add_post("/playground/message", _guarded(page.post_message))
    app.router.add_post("/playground/click", _guarded(page.post_click))
    app.router.add_post("/playground/select", _guarded(page.post_select))
    app.router.add_post("/playground/submit", _guarded(page.post_submit))
    app.router.add_post("/playground/close", _guarded(page.post_close))
    app.router.add_post("/playground/reset", _guarded(page.post_reset))
    app.router.add_static("/playground/static/", STATIC_DIR, name="playground-static")
