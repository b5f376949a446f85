"""What a Slack call can fail with, and which failures are worth trying again.

Every caller of Slack's Web API catches :data:`SLACK_FAILURES`: a refusal, or Slack out of
reach (refused connection, timeout) after the client's retries. Either is logged and never
undoes database state, nor stops the caller from resuming the run it claimed. Callers that
keep an outbox (the DM copies, the quorum card edits) ask :func:`transient` whether to try a
failed call again later or give it up.
"""

from __future__ import annotations

import asyncio

import aiohttp
from slack_sdk.errors import SlackApiError

# What a Slack call can fail with: a refusal, or Slack out of reach (refused connection,
# timeout) after the client's retries. Either is logged and never undoes database state,
# nor stops the caller from resuming the run it claimed.
SLACK_FAILURES = (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError)


def transient(exc: BaseException) -> bool:
    """A Slack failure worth trying again later: rate limited, Slack's 5xx, a network error or
    a timeout; not an error Slack will give again (user_not_found, message_not_found, ...)."""
    if not isinstance(exc, SlackApiError):
        return True
    status = getattr(exc.response, "status_code", 200)
    error = exc.response.get("error") if exc.response is not None else None
    return status == 429 or status >= 500 or error in TRANSIENT_ERRORS


# Slack will not post in this channel until someone acts (invites the bot, unarchives it).
CHANNEL_REFUSALS = frozenset({"not_in_channel", "channel_not_found", "is_archived"})


def slack_error(exc: BaseException) -> str:
    """Slack's error code (``not_in_channel``), or the exception's type for a network one."""
    if isinstance(exc, SlackApiError) and exc.response is not None:
        return str(exc.response.get("error") or "slack_error")
    return type(exc).__name__


TRANSIENT_ERRORS = {
    "ratelimited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
}
