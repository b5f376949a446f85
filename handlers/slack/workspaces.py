"""Which Web API client (which token) speaks for each workspace.

With one ``SLACK_BOT_TOKEN`` every workspace id maps to the one client, as before. With
OAuth installs each workspace has its own bot token, found in the installation store by the
``team_id`` stored on every run and approval: the background publisher, the sweeper and the
card outbox call Slack with the token of the workspace the run belongs to, never another's.
A rotating token (``token_rotation_enabled``) is refreshed here when it is about to expire
and the new one stored, for requests too (:mod:`handlers.slack.authorize` is bolt's authorize
step on this class): every refresh goes through ``rotator``, whose client has the configured
``SLACK_API_URL``, never Slack's public host.

Refreshes of one installation are single-flight. With rotation a refresh token is used once:
two refreshes of the same one (a burst of requests in the refresh window, two replicas) would
have one refused ``invalid_refresh_token``. In a process, one lock per installation; the
refresh re-reads the installation under it, so the waiters find the token their leader stored.
Across replicas, a refresh refused ``invalid_refresh_token`` means another one used the token
first: the installation is read again until its new token is stored (bounded), and meanwhile
the current token serves while it has not expired (the refresh window opens long before).
Such a refused refresh token is remembered per installation and never sent again from this
process: the other replica's new token reaches the store a moment later.

A refresh never holds up a request while the current token is still valid: it runs as a
task of its own (tracked, one per installation) and the request goes on with the current
token, so a Slack that cannot be reached, or answers slowly, delays no acknowledgement and
fails nothing (one warning; the next request in the window tries again). Only a token that
has expired waits for the refresh, at most ``EXPIRED_WAIT_SECONDS`` (inside Slack's 3 s);
if none comes, :class:`TokenUnavailable` (a SlackApiError: bolt answers the person and logs
one line). The refresh itself is never cancelled half-way: Slack may have used the refresh
token already, and its answer holds the only new one.
Owns no durable state beyond the installation store's rows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError, SlackTokenRotationError
from slack_sdk.oauth.installation_store import Bot
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

# As bolt's default (AsyncOAuthSettings.token_rotation_expiration_minutes).
ROTATION_MINUTES = 120
# Clients kept per token: one per installed workspace, plus rotated tokens until evicted.
MAX_CLIENTS = 1000
# After another replica's refresh won: how long to wait for its new token to be stored.
STORED_REFRESH_SECONDS = 5.0
# How long a request whose token has expired waits for its refresh (Slack waits 3 s).
EXPIRED_WAIT_SECONDS = 2.0
# What a refresh that could not reach Slack raises (a dropped connection, a timeout, …).
UNREACHABLE = (aiohttp.ClientError, OSError, TimeoutError, SlackClientError)


class NotInstalled(SlackApiError):
    """The workspace has no install (never installed, or uninstalled): nothing can be said
    there. A SlackApiError, so every caller's handling of a Slack refusal applies."""

    def __init__(self, team_id: str) -> None:
        response = {"ok": False, "error": "not_installed"}
        self.sentence = f"the app is not installed in workspace {team_id!r}"
        super().__init__(self.sentence, response)

    def __str__(self) -> str:
        # One line in a log (SlackApiError adds "\nThe server responded with: …").
        return self.sentence


class TokenUnavailable(SlackApiError):
    """The workspace's token has expired and no refresh got through: nothing can be said
    there until one does. A SlackApiError, as NotInstalled, so bolt answers and logs it."""

    def __init__(self, team_id: str, why: str) -> None:
        response = {"ok": False, "error": "token_expired"}
        self.sentence = (
            f"the bot token of workspace {team_id!r} has expired and could not be refreshed "
            f"({why}); the next request tries again"
        )
        super().__init__(self.sentence, response)

    def __str__(self) -> str:
        return self.sentence


class WorkspaceClients:
    """``for_team(team_id)``: the client to call Slack with for that workspace."""

    def __init__(
        self,
        default: AsyncWebClient,
        *,
        installations: AsyncInstallationStore | None = None,
        make_client: Callable[[str], AsyncWebClient] | None = None,
        rotator: AsyncTokenRotator | None = None,
        rotation_minutes: int = ROTATION_MINUTES,
    ) -> None:
        self.default = default
        self.installations = installations
        self.make_client = make_client
        self.rotator = rotator
        self.rotation_minutes = rotation_minutes
        self._clients: dict[str, AsyncWebClient] = {}
        self._refreshing: dict[tuple[str | None, str | None], asyncio.Lock] = {}
        # The refresh under way per installation, and every one not yet finished (a task
        # must be referenced until it ends; shutdown and tests wait for them: ``idle``).
        self._refresh_tasks: dict[tuple[str | None, str | None], asyncio.Task[Bot | None]] = {}
        self._tasks: set[asyncio.Task[Bot | None]] = set()
        # Per installation, a refresh token Slack refused as already used (another replica
        # won the race and is storing its new token): never spent again from this process,
        # or each request of a burst in the window would have Slack refuse it once more.
        self._spent: dict[tuple[str | None, str | None], str] = {}
        # Told of each refresh task, so that the app's background work includes it
        # (shutdown waits for it; handlers.app wires BackgroundTasks.track here).
        self.track: Callable[[asyncio.Task[Any]], None] | None = None

    @property
    def per_workspace(self) -> bool:
        return self.installations is not None

    async def for_team(self, team_id: str) -> AsyncWebClient:
        """Raises NotInstalled when the workspace has no install (OAuth mode only)."""
        if self.installations is None or self.make_client is None:
            return self.default
        bot = await self.bot_for(team_id)
        if bot is None:
            raise NotInstalled(team_id)
        token = bot.bot_token
        client = self._clients.get(token)
        if client is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._clients.clear()
            client = self._clients[token] = self.make_client(token)
        return client

    async def bot_for(
        self,
        team_id: str | None,
        enterprise_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        """The workspace's stored bot; None when it has no install.

        When its token is about to expire, a refresh starts (single-flight per installation)
        and the current token is returned while it is valid; an expired one waits for the
        refresh (bounded). Raises TokenUnavailable when the token has expired and no refresh
        got through.
        """
        assert self.installations is not None

        async def find() -> Bot | None:
            assert self.installations is not None
            return await self.installations.async_find_bot(
                enterprise_id=enterprise_id,
                team_id=team_id,
                is_enterprise_install=is_enterprise_install,
            )

        bot = await find()
        if bot is None or self.rotator is None or not self._due(bot):
            return bot
        key = (enterprise_id, team_id)
        if self._spent.get(key) == bot.bot_refresh_token and not _expired(bot):
            return bot  # another replica's new token is on its way to the store
        task = self._refresh_tasks.get(key)
        if task is None or task.done():
            task = asyncio.create_task(
                self._refresh(key, find), name=f"token refresh {team_id or enterprise_id}"
            )
            self._refresh_tasks[key] = task
            self._tasks.add(task)
            task.add_done_callback(self._finished)
            if self.track is not None:
                self.track(task)
        if not _expired(bot):
            return bot
        try:
            async with asyncio.timeout(EXPIRED_WAIT_SECONDS):
                refreshed = await asyncio.shield(task)
        except TimeoutError:
            refreshed = None
        if refreshed is not None and not _expired(refreshed):
            return refreshed
        stored = await find()
        if stored is None or not _expired(stored):
            return stored
        raise TokenUnavailable(team_id or enterprise_id or "", "no refresh got through")

    def _finished(self, task: asyncio.Task[Bot | None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("bot token not refreshed: %s", _one_line(exc))

    async def idle(self) -> None:
        """Until every refresh started has ended (shutdown, tests)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _refresh(
        self, key: tuple[str | None, str | None], find: Callable[[], Awaitable[Bot | None]]
    ) -> Bot | None:
        """One refresh of the installation, under its lock: the stored bot after it (new or,
        when it failed, the current one), None when it has no install any more. Never raises:
        a failure is one warning line, and the next request in the window tries again."""
        lock = self._refreshing.setdefault(key, asyncio.Lock())
        async with lock:
            bot = await find()  # another refresh may have stored a new token meanwhile
            if bot is None or not self._due(bot):
                return bot
            if self._spent.get(key) == bot.bot_refresh_token:
                return await self._stored_after(bot, find)
            assert self.rotator is not None and self.installations is not None
            team = bot.team_id or bot.enterprise_id
            try:
                refreshed = await self.rotator.perform_bot_token_rotation(
                    bot=bot, minutes_before_expiration=self.rotation_minutes
                )
            except SlackTokenRotationError as exc:
                if exc.api_error.response.get("error") == "invalid_refresh_token":
                    self._spent[key] = bot.bot_refresh_token or ""
                try:
                    return await self._after_lost_refresh(bot, exc, find)
                except SlackTokenRotationError:
                    log.warning(
                        "workspace %s: bot token not refreshed (%s) and expired",
                        team,
                        exc.api_error.response.get("error"),
                    )
                    return bot
            except UNREACHABLE as exc:
                log.warning(
                    "workspace %s: bot token not refreshed (Slack unreachable: %s); %s",
                    team,
                    _one_line(exc),
                    _serves_until(bot),
                )
                return bot
            if refreshed is None:
                return bot
            await self.installations.async_save_bot(refreshed)
            log.info("workspace %s: bot token refreshed", team)
            return refreshed

    async def _stored_after(self, bot: Bot, find: Callable[[], Awaitable[Bot | None]]) -> Bot:
        """After this process saw ``bot``'s refresh token refused as used: the token the
        winning replica stores, once it is there (bounded); until then the current one."""
        if not _expired(bot):
            return bot
        deadline = time.monotonic() + STORED_REFRESH_SECONDS
        while time.monotonic() < deadline:
            stored = await find()
            if stored is not None and stored.bot_refresh_token != bot.bot_refresh_token:
                return stored
            await asyncio.sleep(0.1)
        return bot

    def _due(self, bot: Bot) -> bool:
        expires = bot.bot_token_expires_at
        return (
            bool(bot.bot_refresh_token)
            and expires is not None
            and (expires <= time.time() + self.rotation_minutes * 60)
        )

    async def _after_lost_refresh(
        self, bot: Bot, exc: SlackTokenRotationError, find: Callable[[], Awaitable[Bot | None]]
    ) -> Bot:
        """A refresh Slack refused: another replica used the refresh token first (its new
        token is being stored), or the install is broken. The stored token once it changed;
        else the current one while it is still valid (no wait in an acknowledgement); once
        expired, the stored one when it comes (bounded); else the refusal."""
        error = exc.api_error.response.get("error")
        stored = await find()
        if stored is not None and stored.bot_refresh_token != bot.bot_refresh_token:
            return stored
        if not _expired(bot):
            log.warning(
                "workspace %s: bot token not refreshed (%s); %s",
                bot.team_id or bot.enterprise_id,
                error,
                _serves_until(bot),
            )
            return bot
        deadline = time.monotonic() + STORED_REFRESH_SECONDS
        while error == "invalid_refresh_token" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            stored = await find()
            if stored is not None and stored.bot_refresh_token != bot.bot_refresh_token:
                return stored
        raise exc


def _expired(bot: Bot) -> bool:
    expires = bot.bot_token_expires_at
    return expires is not None and expires <= time.time()


def _serves_until(bot: Bot) -> str:
    expires = bot.bot_token_expires_at
    if expires is None or _expired(bot):
        return "it has expired"
    return f"the current one serves until {time.strftime('%H:%M:%S', time.gmtime(expires))} UTC"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
