"""Uninstalls: ``app_uninstalled`` and ``tokens_revoked`` (of the bot token), in OAuth mode.

The install is forgotten and the workspace's paused runs are cancelled with their pending
approvals, so nothing waits for a decision that can no longer be made; the model reads why
if the thread carries on.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.clock import utcnow
from handlers.services import Services

log = logging.getLogger(__name__)

UNINSTALLED = "the app was uninstalled from this workspace"


def register(app: AsyncApp, services: Services) -> None:
    """``app_uninstalled`` and ``tokens_revoked`` (of the bot token): forget the install and
    cancel the workspace's paused runs and their pending approvals, so nothing waits for a
    decision that can no longer be made; the model reads why if the thread carries on."""

    async def uninstall(body: dict[str, Any]) -> None:
        team_id = body.get("team_id")
        if not isinstance(team_id, str) or not team_id:
            return
        enterprise_id = body.get("enterprise_id")
        cancelled = await services.repo.uninstall_workspace(
            enterprise_id=enterprise_id if isinstance(enterprise_id, str) else None,
            team_id=team_id,
            reason=UNINSTALLED,
            now=utcnow(),
        )
        log.warning(
            "workspace %s uninstalled the app: install removed, %d paused runs cancelled",
            team_id,
            len(cancelled),
        )

    @app.event("app_uninstalled")
    async def on_app_uninstalled(body: dict[str, Any]) -> None:
        await uninstall(body)

    @app.event("tokens_revoked")
    async def on_tokens_revoked(body: dict[str, Any], event: dict[str, Any]) -> None:
        tokens = event.get("tokens")
        # Only the bot's token matters: a user revoking their own token changes nothing.
        if isinstance(tokens, dict) and tokens.get("bot"):
            await uninstall(body)
