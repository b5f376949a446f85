"""What every listener needs (built once per process) and the Slack settings from the env."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.background import BackgroundTasks
from bot.config import Config, ConfigError
from bot.runner import Runner
from handlers.instrument import InstrumentedWebClient, RateLimitCounter
from handlers.publish import SLACK_FAILURES, Publisher
from handlers.workspaces import WorkspaceClients
from storage.repository import Repository

if TYPE_CHECKING:
    from handlers.home import HomeTabs
    from handlers.people import PeopleNames
    from handlers.reach import Reach

log = logging.getLogger(__name__)

SLACK_API_DEFAULT = "https://slack.com/api/"
GROUP_CACHE_SECONDS = 300.0
# A group Slack answered an error about (deleted, a missing scope): nobody is in it, for this
# long only. Not caching at all would cost a Tier 2 call per click and per /approvals (in
# the 3-second ack path, and soon rate limited) while the group is broken; caching it like a
# real answer would refuse its members for 5 minutes after the group or scope is fixed.
GROUP_ERROR_CACHE_SECONDS = 30.0
# One membership question (all its groups, the client's retries included) gets this long:
# /approvals and the Deny button ask in the acknowledgement path, which Slack cuts at 3 s.
GROUP_LOOKUP_SECONDS = 1.5
# Slack gives up on an acknowledgement after 3 s: the database work before it gets at most
# this, then the request is answered with an error status (Slack redelivers) or "try again".
ACK_TIME_LIMIT = 2.0
# A click's decision runs after the acknowledgement; the clicker is told to try again if
# the database has not recorded it by then.
DECISION_TIME_LIMIT = 5.0


@dataclass(frozen=True)
class SlackSettings:
    bot_token: str
    signing_secret: str
    app_token: str | None = None
    api_url: str = SLACK_API_DEFAULT
    # OAuth installs (all three set): a token per workspace, from the installation store.
    client_id: str | None = None
    client_secret: str | None = None
    state_secret: str | None = None

    @property
    def oauth(self) -> bool:
        """Installed in several workspaces through OAuth, rather than one SLACK_BOT_TOKEN."""
        return bool(self.client_id and self.client_secret and self.state_secret)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        socket_mode: bool = False,
        web_api_only: bool = False,
    ) -> SlackSettings:
        """``web_api_only``: for calling Slack (the CLI), not for receiving its requests."""
        env = os.environ if environ is None else environ
        receives = not (socket_mode or web_api_only)
        oauth_names = ("SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET", "SLACK_STATE_SECRET")
        oauth_given = [name for name in oauth_names if env.get(name)]
        # OAuth installs replace the one bot token (the CLI's calls too).
        oauth = len(oauth_given) == len(oauth_names)
        missing = [
            name
            for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET")
            if not env.get(name)
            and (receives or name == "SLACK_BOT_TOKEN")
            and not (oauth and name == "SLACK_BOT_TOKEN")
        ]
        if oauth_given and not oauth and not env.get("SLACK_BOT_TOKEN"):
            # Half an OAuth setup and no bot token: say what would complete either.
            missing += [name for name in oauth_names if not env.get(name)]
        if socket_mode and not env.get("SLACK_APP_TOKEN"):
            missing.append("SLACK_APP_TOKEN")
        if missing:
            raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
        api_url = env.get("SLACK_API_URL") or SLACK_API_DEFAULT
        return cls(
            bot_token="" if oauth else env["SLACK_BOT_TOKEN"],
            signing_secret=env.get("SLACK_SIGNING_SECRET", ""),
            app_token=env.get("SLACK_APP_TOKEN") or None,
            api_url=api_url if api_url.endswith("/") else api_url + "/",
            client_id=env.get("SLACK_CLIENT_ID") if oauth else None,
            client_secret=env.get("SLACK_CLIENT_SECRET") if oauth else None,
            state_secret=env.get("SLACK_STATE_SECRET") if oauth else None,
        )

    def web_client(
        self, session: aiohttp.ClientSession | None = None, *, token: str | None = None
    ) -> AsyncWebClient:
        """A client that honours Retry-After on 429s and retries dropped connections.

        Pass a long-lived ``session``: without one slack_sdk opens a new connection (and
        resolves the host again) for every call.
        """
        return InstrumentedWebClient(
            # No token at all (not ""), in OAuth mode: bolt then finds none to warn about.
            token=(self.bot_token if token is None else token) or None,
            base_url=self.api_url,
            session=session,
            retry_handlers=[
                RateLimitCounter(),  # first: counts every 429, retried or not
                AsyncRateLimitErrorRetryHandler(max_retry_count=3),
                AsyncConnectionErrorRetryHandler(max_retry_count=2),
            ],
        )


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
            members = frozenset(response.get("users", []))
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


@dataclass
class Services:
    repo: Repository
    config: Config
    runner: Runner
    client: AsyncWebClient
    publisher: Publisher
    groups: UserGroups
    background: BackgroundTasks
    clients: WorkspaceClients
    home: HomeTabs | None = None  # the App Home, once the bolt app registers it
    reach: Reach | None = None  # DM copies, reminders, escalations (handlers.reach)
    people: PeopleNames | None = None  # display names (users.info), cached
    ack_time_limit: float = ACK_TIME_LIMIT
    decision_time_limit: float = DECISION_TIME_LIMIT

    @classmethod
    def create(
        cls,
        repo: Repository,
        config: Config,
        runner: Runner,
        client: AsyncWebClient,
        clients: WorkspaceClients | None = None,
    ) -> Services:
        """``clients``: a token per workspace (OAuth installs); else ``client`` for all."""
        from handlers.grant_listeners import CardGrants
        from handlers.people import PeopleNames

        clients = clients or WorkspaceClients(client)
        publisher = Publisher(client, repo, clients)
        publisher.decorate_card = CardGrants(repo, config).decorate  # standing grants
        return cls(
            repo=repo,
            config=config,
            runner=runner,
            client=client,
            publisher=publisher,
            groups=UserGroups(client, clients=clients),
            background=BackgroundTasks(),
            clients=clients,
            people=PeopleNames(client, clients=clients),
        )

    def group_approvers(self) -> set[str]:
        """Every user-group id that any policy names."""
        return {a for p in self.config.policies.values() for a in p.approvers if a.startswith("S")}
