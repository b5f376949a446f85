"""People's names from Slack (``users.info``), for the texts Slack does not render.

Slack renders ``<@U…>`` in messages, cards and ephemeral answers, so those name nobody
themselves. A tool result the model reads, and the command line, show text as is: for them a
decision carries the decider's display name, looked up here when the decision is made and
stored with it (``approvals.decided_by_name``), so the model reads "Denied by Bo Lee (@bo)"
after a restart too and the engine never calls Slack.

Owns no durable state of its own: a per-process cache of names, with a time to live; each name
Slack gives is handed to ``remember`` (the ``people`` table, for the command line and the
exports). A lookup that
fails (rate limited, the ``users:read`` scope missing, Slack out of reach, too slow) gives
None, and the caller falls back to the user id: a name never holds up or fails a decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from handlers.slack.failures import SLACK_FAILURES
from handlers.slack.workspaces import WorkspaceClients

log = logging.getLogger(__name__)

NAME_CACHE_SECONDS = 3600.0
# A failed lookup is not asked again for this long (a missing scope fails every time).
NAME_ERROR_CACHE_SECONDS = 60.0
# A decision waits at most this long for a name before it is stored without one.
NAME_LOOKUP_SECONDS = 1.0
# Slack caps display and real names at 80 characters; a longer one is cut.
NAME_MAX_CHARS = 80


def display_name(user: dict[str, Any]) -> str | None:
    """ "Bo Lee (@bo)" from a ``users.info`` user object: the real name and the handle people
    see (the profile's display name, else the account name); one of them alone if the other
    is missing or the same."""
    profile = user.get("profile") or {}
    real = _one_line(profile.get("real_name") or user.get("real_name"))
    handle = _one_line(profile.get("display_name") or user.get("name"))
    if real and handle and real != handle:
        return f"{real} (@{handle})"
    if real:
        return real
    return f"@{handle}" if handle else None


def _one_line(text: object) -> str:
    """A name as plain text on one line: anyone picks their own, and the model reads it in a
    tool result as is, so a newline (a forged "Approved by …" line), a control character or a
    direction override becomes a space, and the length is bounded."""
    if not isinstance(text, str):
        return ""
    kept = "".join(_plain(c) for c in text)
    return " ".join(kept.split())[:NAME_MAX_CHARS].strip()


def _plain(char: str) -> str:
    category = unicodedata.category(char)
    if category in ("Cc", "Zl", "Zp"):  # controls (newline, ESC), line separators
        return " "
    if category == "Cf" and char != "\u200d":  # format (bidi overrides); ZWJ joins emoji
        return ""
    return char


@dataclass
class PeopleNames:
    """Display names by (workspace, user id), cached for ``NAME_CACHE_SECONDS``."""

    client: AsyncWebClient
    clients: WorkspaceClients | None = None
    clock: Callable[[], float] = time.monotonic
    lookup_time_limit: float = NAME_LOOKUP_SECONDS
    # Told of each name Slack gave (user id, name): stored (``people``) for the command line
    # and the exports, which never ask Slack. A failure to store it is logged, never raised.
    remember: Callable[[str, str], Awaitable[None]] | None = None
    # (workspace, user) -> (until, name or None)
    _cache: dict[tuple[str, str], tuple[float, str | None]] = field(default_factory=dict)

    async def name_of(self, user: str, *, team: str = "") -> str | None:
        """The user's display name, or None when Slack cannot say now (use the id)."""
        if not user:
            return None
        key = (team, user)
        cached = self._cache.get(key)
        if cached and self.clock() < cached[0]:
            return cached[1]
        name, ttl = None, NAME_ERROR_CACHE_SECONDS
        try:
            async with asyncio.timeout(self.lookup_time_limit):
                client = self.client if self.clients is None else await self.clients.for_team(team)
                response = await client.users_info(user=user)
            name, ttl = display_name(response.get("user") or {}), NAME_CACHE_SECONDS
        except SlackApiError as exc:
            log.warning("users.info %s: Slack answered %s", user, exc.response.get("error"))
        except (TimeoutError, *SLACK_FAILURES) as exc:
            log.warning("users.info %s: no answer (%s)", user, type(exc).__name__)
        except Exception as exc:  # a name is never worth failing a decision for
            log.warning("users.info %s: %s", user, exc)
        known = cached[1] if cached else None
        self._cache[key] = (self.clock() + ttl, name)
        if name is not None and name != known and self.remember is not None:
            try:
                await self.remember(user, name)
            except Exception as exc:  # a name is never worth failing a decision for
                log.warning("could not store the name of %s: %s", user, exc)
        return name
