"""Slack installs (``slack_installations``) and OAuth states (``slack_oauth_states``).

Written and read by :mod:`storage.stores.installations`; storage knows no Slack types, only
the JSON text slack_sdk's objects turn into.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base


class SlackInstallation(Base):
    """One workspace's (or one Enterprise Grid org's) install of the app: its bot token.

    Written by the OAuth flow (``handlers.oauth``) and read on every request and every
    background Slack call of that workspace. ``bot`` and ``installation`` hold slack_sdk's
    ``Bot.to_dict()`` / ``Installation.to_dict()`` as JSON text: storage knows no Slack types.
    ``workspace`` is ``<enterprise_id or ->:<team_id or ->``, one row per install.
    """

    __tablename__ = "slack_installations"

    workspace: Mapped[str] = mapped_column(String(80), primary_key=True)
    enterprise_id: Mapped[str] = mapped_column(String(32), default="")
    team_id: Mapped[str] = mapped_column(String(32), default="", index=True)
    bot: Mapped[str] = mapped_column(Text)
    installation: Mapped[str] = mapped_column(Text)
    installed_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class OAuthState(Base):
    """An OAuth ``state`` issued by ``/slack/install``, consumed once by the redirect."""

    __tablename__ = "slack_oauth_states"

    state: Mapped[str] = mapped_column(String(128), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)
