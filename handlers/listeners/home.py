"""``app_home_opened``: the person opened the bot's Home tab; it is remembered and published.

The Home itself (what it lists, how it is refreshed across replicas, the pacing of
``views.publish``) is :class:`handlers.slack.HomeTabs`; its buttons are the /approvals list's
own, handled by the same listeners. Publishing is slow work: it goes to a tracked background
task, after Slack got its answer.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp

from handlers.services import Services


def register(app: AsyncApp, services: Services) -> None:
    """``services.home`` must be set (:func:`handlers.app.build_app` sets it first)."""
    home = services.home
    assert home is not None, "the App Home is built before its listener is registered"

    @app.event("app_home_opened")
    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return  # the Messages tab
        team, user = body.get("team_id") or "", event.get("user")
        if not isinstance(user, str) or not user:
            return
        services.background.spawn(home.opened(team, user), name=f"home {team}/{user}")
