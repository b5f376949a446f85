"""``/approvals`` and its pages: what waits for you, your requests, this channel's, its
grants and history, and help. The command's name is ``slash_command`` in the configuration
(default ``/approvals``); the listener answers that name only.

Answered in the acknowledgement (ephemeral, only the person who asked sees it), so the
database reads are bounded (``ack_time_limit``) and a slow or failed one answers "try again"
rather than nothing. The Newer / Older buttons carry the view and page; any other value (a
tampered one included) gets the first page.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from bot.clock import utcnow
from handlers.blocks import (
    HELP_TEXT,
    HISTORY_SIZE,
    PAGE,
    escape,
    render_grants_page,
    render_history,
)
from handlers.flows import LIST_FAILED, approvals_page
from handlers.listeners.interactions import json_object
from handlers.services import Services
from handlers.slack import GroupLookupFailed
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

# Pages past this are not from our buttons (a list that long is paged by nobody): such a
# value, like any other tampered one, gets the first page, and never reaches the database,
# whose integers a crafted page number (10**30) would overflow.
MAX_PAGE = 1000
GROUPS_UNLISTED = (
    ":warning: I couldn't reach Slack to check your user groups, so I can't tell what you may "
    "approve just now. Please try again."
)
VIEWS = {"": "approve", "list": "approve", "mine": "mine", "all": "all"}


def help_text(name: str) -> str:
    """The help, naming the command as this deployment calls it (``slash_command``)."""
    return HELP_TEXT.replace("/approvals", name)


def register(app: AsyncApp, services: Services) -> None:
    name = services.config.slash_command

    @app.command(name)
    async def on_approvals(ack: AsyncAck, command: dict[str, Any]) -> None:
        word = (command.get("text") or "").strip().lower()
        if word == "help":
            await ack(text=help_text(name), response_type="ephemeral")
            return
        if word == "grants":
            await grants_command(ack, command, services)
            return
        if word == "history":
            await ack(**await history_answer(services, command))
            return
        if word not in VIEWS:
            await ack(
                text=f"I don't know `{name} {escape(word)}`.\n\n{help_text(name)}",
                response_type="ephemeral",
            )
            return
        try:
            with time_limit(services.ack_time_limit):
                text, page_blocks = await approvals_page(services, command, VIEWS[word], 0)
        except DATABASE_FAILURES as exc:
            log.error("/approvals %s for %s: not listed (%s)", word, command["user_id"], exc)
            await ack(text=LIST_FAILED, response_type="ephemeral")
            return
        except GroupLookupFailed as exc:
            log.error("/approvals %s for %s: not listed (%s)", word, command["user_id"], exc)
            await ack(text=GROUPS_UNLISTED, response_type="ephemeral")
            return
        await ack(text=text, blocks=page_blocks, response_type="ephemeral")

    @app.action(PAGE)
    async def on_page(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        wanted = json_object(action.get("value"))
        command = {
            "team_id": (body.get("team") or {}).get("id", ""),
            "team_domain": (body.get("team") or {}).get("domain", ""),
            "user_id": body["user"]["id"],
            "channel_id": (body.get("channel") or {}).get("id")
            or (body.get("container") or {}).get("channel_id", ""),
        }
        view = str(wanted["view"]) if wanted.get("view") in VIEWS.values() else "approve"
        page = wanted.get("page")
        if not isinstance(page, int) or isinstance(page, bool) or not 0 <= page <= MAX_PAGE:
            page = 0
        try:
            with time_limit(services.ack_time_limit):
                text, page_blocks = await approvals_page(services, command, view, page)
        except DATABASE_FAILURES as exc:
            log.error("/approvals page for %s: not listed (%s)", command["user_id"], exc)
            await respond(text=LIST_FAILED, response_type="ephemeral", replace_original=False)
            return
        except GroupLookupFailed as exc:
            log.error("/approvals page for %s: not listed (%s)", command["user_id"], exc)
            await respond(text=GROUPS_UNLISTED, response_type="ephemeral", replace_original=False)
            return
        await respond(text=text, blocks=page_blocks, replace_original=True)


async def history_answer(services: Services, command: dict[str, Any]) -> dict[str, Any]:
    """``/approvals history``: the acknowledgement's ephemeral answer."""
    channel = command.get("channel_id", "")
    try:
        with time_limit(services.ack_time_limit):
            decided = await services.repo.channel_decisions(
                team_id=command.get("team_id", ""), channel=channel, limit=HISTORY_SIZE
            )
    except DATABASE_FAILURES as exc:
        log.error("/approvals history for %s: not listed (%s)", command.get("user_id"), exc)
        return {"text": LIST_FAILED, "response_type": "ephemeral"}
    text, history_blocks = render_history(decided, channel)
    return {"text": text, "blocks": history_blocks, "response_type": "ephemeral"}


async def grants_command(ack: AsyncAck, command: dict[str, Any], services: Services) -> None:
    """``/approvals grants``: this channel's live grants, with Revoke buttons."""
    now = utcnow()
    try:
        with time_limit(services.ack_time_limit):
            grants = await services.repo.list_grants(
                now=now, team_id=command.get("team_id") or None, channel=command["channel_id"]
            )
    except DATABASE_FAILURES as exc:
        log.error("/approvals grants for %s: not listed (%s)", command["user_id"], exc)
        await ack(text=LIST_FAILED, response_type="ephemeral")
        return
    text, blocks = render_grants_page(grants, now=now)
    await ack(text=text, blocks=blocks, response_type="ephemeral")
