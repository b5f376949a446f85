"""The agent pane's events: the pane opened, a person's message in it, Slack's Stop.

Both of Slack's experiences for agent apps arrive here (docs/slack.md, "The agent pane"):

- the Agent messaging experience (``features.agent_view``, the one Slack asks new apps to
  use): the Messages tab opened is ``app_home_opened`` with ``tab == "messages"``; what the
  person is viewing changes with ``app_context_changed``;
- the Assistant experience (``assistant_view``, to be deprecated): ``assistant_thread_started``
  and ``assistant_thread_context_changed``.

In both, the person's messages are ``message`` events of a DM (``message.im``), top-level or
in a thread. One listener takes them (bolt's ``Assistant`` middleware sees only threaded ones
and keeps the thread's context in extra Web API calls the bot does not need): the three
suggested prompts are answered from the database, anything else is a request, stored and
driven exactly as a mention's (:func:`handlers.listeners.mentions.start_request`). A reply
counts only in a thread whose root is the person's own message or a pane run's: a reply under
the bot's card copy, reminder or answer in the DM is talk about that card, not a request. Messages
of bots (our own replies), edits and other subtypes are acknowledged and ignored. These
listeners are registered before the mention's and the Home's, which would otherwise take the
same events (bolt runs the first listener that matches).
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse

from bot.clock import utcnow
from bot.engine import Request
from handlers.blocks.assistant import EMPTY_REQUEST, prompt_of
from handlers.flows.assistant import answer_prompt, greet, stop_from_slack
from handlers.listeners.mentions import mention_text, start_request
from handlers.services import Services
from storage.repository import DATABASE_FAILURES, DuplicateEvent, time_limit


async def _messages_tab(body: dict[str, Any]) -> bool:
    return (body.get("event") or {}).get("tab") == "messages"


async def _person_in_dm(body: dict[str, Any]) -> bool:
    """A person's own new message in a DM with the app (not a bot's, not an edit)."""
    event = body.get("event") or {}
    channel = event.get("channel")
    return (
        (event.get("channel_type") == "im" or (isinstance(channel, str) and channel[:1] == "D"))
        and event.get("subtype") is None
        and event.get("bot_id") is None
        and isinstance(event.get("user"), str)
        and isinstance(event.get("ts"), str)
    )


def register(app: AsyncApp, services: Services) -> None:
    @app.event("app_home_opened", matchers=[_messages_tab])
    async def on_messages_tab(body: dict[str, Any], event: dict[str, Any]) -> None:
        """The Agent experience's pane opened: its suggested prompts."""
        team, channel = body.get("team_id") or "", event.get("channel")
        if isinstance(channel, str) and channel:
            services.background.spawn(
                greet(services, team, channel, None), name=f"pane opened {channel}"
            )

    @app.event("assistant_thread_started")
    async def on_thread_started(body: dict[str, Any], event: dict[str, Any]) -> None:
        """The Assistant experience's thread opened: the greeting and its prompts."""
        thread = event["assistant_thread"]
        team = body.get("team_id") or ""
        services.background.spawn(
            greet(services, team, thread["channel_id"], thread["thread_ts"]),
            name=f"assistant thread {thread['channel_id']}/{thread['thread_ts']}",
        )

    @app.event("app_context_changed")
    @app.event("assistant_thread_context_changed")
    async def on_context_changed() -> None:
        """Where the person is looking: the bot's requests do not depend on it."""

    @app.event("agent_session_stopped")
    async def on_session_stopped(
        body: dict[str, Any], event: dict[str, Any]
    ) -> BoltResponse | None:
        """Slack's own Stop on the agent session: the run stops as with our Stop button
        (once: Slack redelivers an event it got no 2xx for in time)."""
        team = body.get("team_id") or ""
        event_id = body.get("event_id") or f"stop:{event['channel']}:{event.get('event_ts')}"
        try:
            with time_limit(services.ack_time_limit):
                fresh = await services.repo.claim_event(event_id, now=utcnow())
        except DuplicateEvent:
            return None
        except DATABASE_FAILURES:
            return BoltResponse(status=503, body="the stop could not be stored; retry")
        if not fresh:
            return None
        services.background.spawn(
            stop_from_slack(services, event, team),
            name=f"session stopped {event['channel']}/{event.get('thread_ts')}",
        )
        return None

    @app.event("message", matchers=[_person_in_dm])
    async def on_pane_message(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext
    ) -> BoltResponse | None:
        """A suggested prompt (answered), or a request (stored and driven as a mention's)."""
        event_id = body.get("event_id") or f"{event['channel']}:{event['ts']}"
        team = body.get("team_id") or context.team_id or ""
        user, channel = event["user"], event["channel"]
        text = mention_text(event.get("text") or "", context.bot_user_id)
        thread_ts = event.get("thread_ts") or event["ts"]
        if thread_ts != event["ts"] and event.get("parent_user_id") != user:
            # A reply under the bot's own message (a card copy, a reminder, a prompt's answer):
            # a pane request only in a thread a pane run started.
            try:
                with time_limit(services.ack_time_limit):
                    run = await services.repo.run_of_conversation(f"{team}:{channel}:{thread_ts}")
            except DATABASE_FAILURES:
                return BoltResponse(status=503, body="the request could not be stored; retry")
            if run is None:
                return None
        prompt = prompt_of(text)
        if prompt is not None:
            try:
                with time_limit(services.ack_time_limit):
                    fresh = await services.repo.claim_event(event_id, now=utcnow())
            except DuplicateEvent:
                return None
            except DATABASE_FAILURES:
                return BoltResponse(status=503, body="the request could not be stored; retry")
            if fresh:
                services.background.spawn(
                    answer_prompt(
                        services, prompt, team=team, user=user, channel=channel, thread_ts=thread_ts
                    ),
                    name=f"pane prompt {event_id}",
                )
            return None
        request = Request(
            text=text,
            requester=user,
            team_id=team,
            channel=channel,
            thread_ts=thread_ts,
            context=(
                f"You are in a direct message with <@{user}>, in the app's agent pane. This "
                f"conversation was started by <@{user}>."
            ),
        )
        return await start_request(services, request, event_id, hint=EMPTY_REQUEST)
