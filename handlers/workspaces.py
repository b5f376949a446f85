"""Which Web API client (which token) speaks for each workspace.

With one ``SLACK_BOT_TOKEN`` every workspace id maps to the one client, as before. With
OAuth installs each workspace has its own bot token, found in the installation store by the
``team_id`` stored on every run and approval: the background publisher, the sweeper and the
card outbox call Slack with the token of the workspace the run belongs to, never another's.
A rotating token (``token_rotation_enabled``) is refreshed here when it is about to expire
and the new one stored, as bolt's own authorize does for requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

# As bolt's default (AsyncOAuthSettings.token_rotation_expiration_minutes).
ROTATION_MINUTES = 120
# Clients kept per token: one per installed workspace, plus rotated tokens until evicted.
MAX_CLIENTS = 1000


class NotInstalled(SlackApiError):
    """The workspace has no install (never installed, or uninstalled): nothing can be said
    there. A SlackApiError, so every caller's handling of a Slack refusal applies."""

    def __init__(self, team_id: str) -> None:
        response = {"ok": False, "error": "not_installed"}
        super().__init__(f"the app is not installed in workspace {team_id!r}", response)  # type: ignore[arg-type]


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

    @property
    def per_workspace(self) -> bool:
        return self.installations is not None

    async def for_team(self, team_id: str) -> AsyncWebClient:
        """Raises NotInstalled when the workspace has no install (OAuth mode only)."""
        if self.installations is None or self.make_client is None:
            return self.default
        bot = await self.installations.async_find_bot(enterprise_id=None, team_id=team_id)
        if bot is None:
            raise NotInstalled(team_id)
        if self.rotator is not None and bot.bot_refresh_token:
            refreshed = await self.rotator.perform_bot_token_rotation(
                bot=bot, minutes_before_expiration=self.rotation_minutes
            )
            if refreshed is not None:
                await self.installations.async_save_bot(refreshed)
                bot = refreshed
        token = bot.bot_token
        client = self._clients.get(token)
        if client is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._clients.clear()
            client = self._clients[token] = self.make_client(token)
        return client
