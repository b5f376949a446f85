"""Who is in the Slack user groups that policies name as approvers (``usergroups.users.list``).

A Tier 2 method, asked in the acknowledgement path (/approvals, the Deny button), so its answers
are cached per process and each question is bounded in time; see :class:`UserGroups` for why a
cached "yes" is confirmed with Slack before it decides anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Config
from handlers.slack.failures import SLACK_FAILURES
from handlers.slack.workspaces import WorkspaceClients

log = logging.getLogger(__name__)

GROUP_CACHE_SECONDS = 300.0
# A group Slack answered an error about (deleted, a missing scope): nobody is in it, for this
# long only. Not caching at all would cost a Tier 2 call per click and per /approvals (in
# the 3-second ack path, and soon rate limited) while the group is broken; caching it like a
# real answer would refuse its members for 5 minutes after the group or scope is fixed.
GROUP_ERROR_CACHE_SECONDS = 30.0
# One membership question (all its groups, the client's retries included) gets this long:
# /approvals and the Deny button ask in the acknowledgement path, which Slack cuts at 3 s.
GROUP_LOOKUP_SECONDS = 1.5


class GroupLookupFailed(Exception):
    """Slack could not be asked who is in a group (out of reach, or rate limited): the
    answer is unknown, so nothing is decided on it and nothing is cached."""


@dataclass
class UserGroups:
    """Members of Slack user groups named as approvers, cached (a Tier 2 method).

    The cache is per process. Slack's ``subteam_members_changed`` and ``subteam_updated``
    events empty a group's entry (:meth:`forget`), but each event reaches one replica only,
    so a cached "yes" that is about to decide an approval is confirmed with Slack first
    (:meth:`confirmed`): a member removed from a group can never approve from a stale cache.
    """

    client: AsyncWebClient
    clock: Callable[[], float] = time.monotonic
    lookup_time_limit: float = GROUP_LOOKUP_SECONDS
    # Each workspace's groups are asked with its own token.
    clients: WorkspaceClients | None = None
    # (workspace, group) -> (until, members)
    _cache: dict[tuple[str, str], tuple[float, frozenset[str]]] = field(default_factory=dict)

    async def groups_of(
        self, user: str, candidates: Collection[str], *, fresh: bool = False, team: str = ""
    ) -> set[str]:
        """The groups among ``candidates`` that ``user`` is in; ``fresh`` asks Slack.

        Raises GroupLookupFailed when Slack cannot say within ``GROUP_LOOKUP_SECONDS``.
        """
        groups = set()
        try:
            async with asyncio.timeout(self.lookup_time_limit):
                for group in candidates:
                    if group.startswith("S") and user in await self.members(
                        group, fresh=fresh, team=team
                    ):
                        groups.add(group)
        except TimeoutError as exc:
            raise GroupLookupFailed("Slack did not answer a user group lookup in time") from exc
        return groups

    async def confirmed(self, user: str, groups: Collection[str], *, team: str = "") -> set[str]:
        """The groups (found in the cache) that Slack still says ``user`` is in."""
        return await self.groups_of(user, groups, fresh=True, team=team)

    def forget(self, group: str) -> None:
        """Slack says the group changed: the next question asks Slack again."""
        for key in [key for key in self._cache if key[1] == group]:
            del self._cache[key]

    async def members(self, group: str, *, fresh: bool = False, team: str = "") -> frozenset[str]:
        """Raises GroupLookupFailed when Slack cannot answer now."""
        key = (team, group)
        cached = self._cache.get(key)
        if not fresh and cached and self.clock() < cached[0]:
            return cached[1]
        ttl = GROUP_CACHE_SECONDS
        try:
            client = self.client if self.clients is None else await self.clients.for_team(team)
            response = await client.usergroups_users_list(usergroup=group)
            members: frozenset[str] = frozenset(response.get("users", []))
        except SlackApiError as exc:
            if exc.response.get("error") == "ratelimited":
                raise GroupLookupFailed(f"Slack rate limited the lookup of {group}") from exc
            # Unknown or unreadable group: nobody is in it for now (the refusal tells the
            # clicker they are not an approver).
            log.error("user group %s: Slack answered %s", group, exc.response.get("error"))
            members, ttl = frozenset(), GROUP_ERROR_CACHE_SECONDS
        except SLACK_FAILURES as exc:
            raise GroupLookupFailed(f"Slack could not be reached to look up {group}") from exc
        self._cache[key] = (self.clock() + ttl, members)
        return members


def approver_groups(config: Config) -> set[str]:
    """Every user-group id that any policy names."""
    return {a for p in config.policies.values() for a in p.approvers if a.startswith("S")}
