"""Multi-workspace installs: slack_sdk's installation and state store interfaces on our own
tables (:mod:`storage.stores.installations`), and bolt's OAuth flow (``GET /slack/install``,
``GET /slack/oauth_redirect``) with token rotation.

Why our own stores rather than slack_sdk's ``AsyncSQLAlchemyInstallationStore``: the
repository drives SQLite through its own driver (:mod:`storage.drivers.sqlite`), not an async
engine, and every table belongs to our Alembic migrations. The stores below implement
slack_sdk's ``AsyncInstallationStore`` / ``AsyncOAuthStateStore``, so bolt's authorize, its
token rotation and its OAuth flow use them unchanged.

Bot tokens only (``installation_store_bot_only``): the app never acts as a user. An
Enterprise Grid org-wide install is stored under the org (no team) and found for any of its
workspaces; the manifest turns ``org_deploy_enabled`` on (custom workflow steps need an
org-ready app), so workspace installs and org-wide installs are
offered. When a workspace uninstalls the app: :mod:`handlers.listeners.uninstall`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from datetime import datetime, timedelta
from logging import Logger
from typing import Any

import aiohttp
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator

from bot.clock import utcnow
from handlers.slack.settings import SlackSettings
from handlers.slack.workspaces import ROTATION_MINUTES, WorkspaceClients
from storage.repository import Repository

log = logging.getLogger(__name__)

# The bot scopes the install asks for: manifest.yml's.
BOT_SCOPES = ["app_mentions:read", "chat:write", "commands", "im:write", "usergroups:read"]
STATE_LIFETIME = timedelta(minutes=10)


def _to_json(values: dict[str, Any]) -> str:
    """slack_sdk's to_dict() holds datetimes; its constructors take epoch seconds back
    (whole seconds for token expiries: a float there is refused)."""

    def epoch(name: str, value: datetime) -> float | int:
        seconds = value.timestamp()
        return int(seconds) if name.endswith("expires_at") else seconds

    return json.dumps({k: epoch(k, v) if isinstance(v, datetime) else v for k, v in values.items()})


def _bot_from(text: str) -> Bot:
    return Bot(**json.loads(text))


def _installation_from(text: str) -> Installation:
    return Installation(**json.loads(text))


class DatabaseInstallationStore(AsyncInstallationStore):
    """slack_sdk's installation store interface on ``slack_installations``."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    @property
    def logger(self) -> Logger:
        return log

    async def async_save(self, installation: Installation) -> None:
        bot = installation.to_bot() if installation.bot_token else None
        await self.repo.save_installation(
            enterprise_id=installation.enterprise_id,
            team_id=None if installation.is_enterprise_install else installation.team_id,
            bot=_to_json(bot.to_dict()) if bot is not None else "{}",
            installation=_to_json(installation.to_dict()),
            now=utcnow(),
        )

    async def async_save_bot(self, bot: Bot) -> None:
        """A rotated token replaces the stored one (refresh token included)."""
        await self.repo.save_bot(
            enterprise_id=bot.enterprise_id,
            team_id=None if bot.is_enterprise_install else bot.team_id,
            bot=_to_json(bot.to_dict()),
            now=utcnow(),
        )

    async def _find(
        self, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None
    ) -> Any:
        if not is_enterprise_install:
            found = await self.repo.find_installation(enterprise_id=enterprise_id, team_id=team_id)
            if found is not None or not enterprise_id:
                return found
        # An org-wide install answers for every workspace of its org.
        return await self.repo.find_installation(enterprise_id=enterprise_id, team_id=None)

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        found = await self._find(enterprise_id, team_id, is_enterprise_install)
        if found is None or found.bot == "{}":
            return None
        return _bot_from(found.bot)

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        found = await self._find(enterprise_id, team_id, is_enterprise_install)
        return None if found is None else _installation_from(found.installation)

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.repo.delete_installation(enterprise_id=enterprise_id, team_id=team_id)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        await self.repo.delete_installation(enterprise_id=enterprise_id, team_id=team_id)

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.repo.delete_installation(enterprise_id=enterprise_id, team_id=team_id)


class DatabaseStateStore(AsyncOAuthStateStore):
    """OAuth states on ``slack_oauth_states``, each valid once for ``STATE_LIFETIME``.

    A state is a random nonce and its HMAC under ``SLACK_STATE_SECRET``: a forged or
    mangled one is refused without touching the database, and a stolen database row alone
    does not make a valid state.
    """

    def __init__(self, repo: Repository, secret: str) -> None:
        self.repo = repo
        self.secret = secret.encode()

    @property
    def logger(self) -> Logger:
        return log

    def _mac(self, nonce: str) -> str:
        material = nonce.encode("utf-8", "surrogateescape")
        return hmac.new(self.secret, material, hashlib.sha256).hexdigest()[:32]

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        nonce = secrets.token_urlsafe(24)
        state = f"{nonce}.{self._mac(nonce)}"
        now = utcnow()
        await self.repo.issue_oauth_state(state, expires_at=now + STATE_LIFETIME, now=now)
        return state

    async def async_consume(self, state: str) -> bool:
        nonce, _, mac = state.partition(".")
        # As bytes: compare_digest raises on str with non-ASCII characters (a crafted state).
        given = mac.encode("utf-8", "surrogateescape")
        if (
            not nonce
            or len(state) > 128
            or not hmac.compare_digest(given, self._mac(nonce).encode())
        ):
            return False
        return await self.repo.consume_oauth_state(state, now=utcnow())


def workspace_clients(
    repo: Repository, settings: SlackSettings, session: aiohttp.ClientSession | None = None
) -> WorkspaceClients:
    """Each workspace's client: its stored bot token (OAuth), or the one token for all."""
    default = settings.web_client(session)
    if not settings.oauth:
        return WorkspaceClients(default)
    assert settings.client_id and settings.client_secret
    return WorkspaceClients(
        default,
        installations=DatabaseInstallationStore(repo),
        make_client=lambda token: settings.web_client(session, token=token),
        rotator=AsyncTokenRotator(
            client_id=settings.client_id, client_secret=settings.client_secret, client=default
        ),
        rotation_minutes=ROTATION_MINUTES,
    )


def oauth_settings(
    repo: Repository, clients: WorkspaceClients, settings: SlackSettings
) -> AsyncOAuthSettings:
    """Bolt's OAuth flow on our stores: ``/slack/install`` redirects to Slack's authorize
    page with a fresh state; ``/slack/oauth_redirect`` exchanges the code and stores the
    install. Tokens that rotate are refreshed ``ROTATION_MINUTES`` before they expire."""
    assert clients.installations is not None and settings.state_secret
    return AsyncOAuthSettings(
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        scopes=BOT_SCOPES,
        installation_store=clients.installations,
        installation_store_bot_only=True,
        state_store=DatabaseStateStore(repo, settings.state_secret),
        install_page_rendering_enabled=False,
        token_rotation_expiration_minutes=ROTATION_MINUTES,
        logger=logging.getLogger("slack_bolt.oauth"),
    )
