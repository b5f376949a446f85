"""The mention that starts it all: ``@approval-bot restart payments`` in a channel.

The request and the event id are stored in one transaction before Slack gets its answer, so
Slack's redeliveries (same ``event_id``, any replica) are recognised in the database and the
request is driven once (:func:`handlers.flows.drive_request`, after Slack got its 200). A thread
whose run is still going gets a "busy" answer instead of a second run; a mention with no text
gets a hint. Plain channel messages are acknowledged and ignored.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse

from bot.clock import utcnow
from bot.engine import Request, RunOutcome
from bot.ops import failpoint
from handlers.flows import drive_request
from handlers.services import Services
from storage.models import Run
from storage.repository import DATABASE_FAILURES, DuplicateEvent, RunBusy, time_limit

log = logging.getLogger(__name__)

MENTION_HINT = "Mention me with what you need, for example `@approval-bot restart payments`."


def mention_text(text: str, bot_user_id: str | None) -> str:
    """The request, without the bot's own mention."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text)
    return " ".join(text.split())


def register(app: AsyncApp, services: Services) -> None:
    @app.event("app_mention")
    async def on_mention(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> BoltResponse | None:
        """Store the request and the event id in one transaction, then acknowledge.

        Slack redelivers an event until it gets a 2xx: answering 503 when the request could
        not be stored (in time) means it comes back, and an event counts as handled exactly
        when its request is stored, so a retry is never dropped for a request that was lost.
        """
        event_id = body.get("event_id") or f"{event.get('channel')}:{event.get('ts')}"
        request = Request(
            text=mention_text(event.get("text", ""), context.bot_user_id),
            requester=event.get("user", ""),
            team_id=body.get("team_id") or context.team_id or "",
            channel=event.get("channel", ""),
            thread_ts=event.get("thread_ts") or event.get("ts", ""),
            context=(
                f"You are in Slack channel <#{event.get('channel')}>. This conversation was "
                f"started by <@{event.get('user')}>."
            ),
        )
        return await start_request(services, request, event_id, hint=MENTION_HINT)

    @app.event("message")
    async def ignore_messages() -> None:
        """Plain channel messages are not for us; acknowledge them quietly."""


async def start_request(
    services: Services, request: Request, event_id: str, *, hint: str
) -> BoltResponse | None:
    """Store a person's request with its event id in one transaction, then drive it (after
    Slack got its answer): a mention's, and the agent pane's (handlers.listeners.assistant),
    so both make the same runs under the same policies and audit. A request with no text
    gets ``hint``; a thread whose run is still going gets the busy answer."""
    run: Run | None = None
    busy: Run | None = None
    try:
        with time_limit(services.ack_time_limit):
            if not request.text:
                if await services.repo.claim_event(event_id, now=utcnow()):
                    services.background.spawn(
                        tell_how(services, request, hint), name=f"empty mention {event_id}"
                    )
                return None
            run = await services.runner.open(request, event_id=event_id)
    except DuplicateEvent:
        return None  # a retried delivery, or another replica has it
    except RunBusy as refused:
        busy = refused.run
    except DATABASE_FAILURES as exc:
        log.error("mention %s not stored (%s); answered 503 so Slack redelivers", event_id, exc)
        return BoltResponse(status=503, body="the request could not be stored; retry")
    failpoint("mention_stored")
    if busy is not None:
        outcome = RunOutcome(run_id=busy.id, status="busy", run=busy)
        services.background.spawn(services.publisher.outcome(outcome), name=f"busy {event_id}")
    elif run is not None:
        services.background.spawn(drive_request(services, run), name=f"mention {event_id}")
    return None


async def tell_how(services: Services, request: Request, hint: str) -> None:
    await services.publisher.ephemeral(
        channel=request.channel,
        user=request.requester,
        thread_ts=request.thread_ts,
        team=request.team_id,
        text=hint,
    )
