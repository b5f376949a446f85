"""The page's agent pane: the app's Messages tab, where the person also talks to the agent.

In Slack's Agent messaging experience (what manifest.yml declares) the agent pane is the
app's Messages tab: opening it is ``app_home_opened`` with ``tab: "messages"``
(``POST /playground/pane/open``), and what the person types there is a DM message, Slack's
``message.im`` (``POST /playground/pane/message``); both go to the bot as Slack sends them
(:mod:`playground.slack_server.assistant`). What the pane shows besides the messages comes
from what the bot set on our Slack server: the suggested prompts of the person's DM and the
status of its latest thread ("approval-bot is working on …"). Owns no state.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from playground.page import ChannelPage, PageError, _escape_typed, _ok

Json = dict[str, Any]


class PaneRoutes:
    """The pane's state (for the page's poll) and its two actions."""

    def __init__(self, page: ChannelPage) -> None:
        self.page = page

    def state(self, user: str) -> Json:
        """The prompts the bot set for ``user``'s DM, and its threads' current statuses."""
        server = self.page.server
        dm = server.dm_channels.get(user)
        if dm is None:
            return {"prompts": None, "statuses": []}
        prompts = server.suggested_prompts.get((dm, None))
        statuses = [
            {"thread_ts": ts, "status": f"{server.bot_name} {status}"}
            for (channel, ts), status in server.thread_status.items()
            if channel == dm
        ]
        return {"prompts": prompts, "statuses": statuses}

    async def post_open(self, request: web.Request) -> web.Response:
        """The person opens the Messages tab: its prompts come back from the bot."""
        body = await self.page._body(request)
        user = self.page._person(body.get("user"))
        reply = await self.page._drive(self.page.server.open_messages_tab(user), "Messages tab")
        return _ok("opened", reply)

    async def post_message(self, request: web.Request) -> web.Response:
        """The person writes in the pane (a request, or a suggested prompt clicked)."""
        body = await self.page._body(request)
        user = self.page._person(body.get("user"))
        text = str(body.get("text") or "").strip()
        if not text:
            raise PageError(400, "write something first")
        reply = await self.page._drive(
            self.page.server.pane_message(user, _escape_typed(text)), "message"
        )
        return _ok("sent", reply, ts=reply.message.ts if reply.message else None)
