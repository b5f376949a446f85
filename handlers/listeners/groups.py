"""User-group changes Slack tells us about: the cached members of that group are forgotten.

``subteam_members_changed`` and ``subteam_updated`` reach one replica only, so this only makes
the next lookup on that replica ask Slack again; a cached "yes" that would decide an approval
is confirmed with Slack anyway (:class:`handlers.slack.UserGroups`).
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from handlers.services import Services


def register(app: AsyncApp, services: Services) -> None:
    @app.event("subteam_members_changed")
    async def on_group_members_changed(event: dict[str, Any]) -> None:
        services.groups.forget(event.get("subteam_id", ""))

    @app.event("subteam_updated")
    async def on_group_updated(event: dict[str, Any]) -> None:
        services.groups.forget((event.get("subteam") or {}).get("id", ""))
