"""The approvers' reach (issue 8) and App Home refreshes across replicas: their tables.

- ``approval_reach``: one row per approval that names approvers or has a reminder or an
  escalation, written with the approval (its policy's schedule snapshotted). Its columns
  are claimed by conditional UPDATEs: the DM copies (``dms_sent_at``), the one reminder
  (``reminded_at``) and the one escalation (``escalated_at``).
- ``approval_messages``: every DM copy of a card, so any replica edits them all.
- ``home_viewers`` / ``home_dirty``: who has opened their App Home, and whose Home must be
  published again; any replica reads them, so a change made anywhere refreshes it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base

DMS_TO_SEND = "dms_sent_at IS NULL"
REMINDERS_DUE = "reminded_at IS NULL AND remind_at IS NOT NULL"
ESCALATIONS_DUE = "escalated_at IS NULL AND escalate_at IS NOT NULL"


class ApprovalReach(Base):
    __tablename__ = "approval_reach"
    __table_args__ = (
        Index(
            "ix_approval_reach_dms",
            "approval_id",
            sqlite_where=text(DMS_TO_SEND),
            postgresql_where=text(DMS_TO_SEND),
        ),
        Index(
            "ix_approval_reach_remind",
            "remind_at",
            sqlite_where=text(REMINDERS_DUE),
            postgresql_where=text(REMINDERS_DUE),
        ),
        Index(
            "ix_approval_reach_escalate",
            "escalate_at",
            sqlite_where=text(ESCALATIONS_DUE),
            postgresql_where=text(ESCALATIONS_DUE),
        ),
    )

    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    # The DM copies: claimed (one sender at a time) until sent; an escalation re-opens them.
    dms_claimed_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    dms_sent_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # Copies Slack failed for a while are tried again at ``dms_retry_at`` (storage.stores.reach);
    # ``dms_given_up``: JSON list of recipients never tried again.
    dms_retry_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    dms_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    dms_given_up: Mapped[str | None] = mapped_column(Text, nullable=True)
    remind_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    reminded_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    escalate_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    escalated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # JSON list of user / user-group ids the escalation adds.
    escalate_to: Mapped[str] = mapped_column(Text, default="[]")


class ApprovalMessage(Base):
    """A copy of an approval's card outside its channel (``kind`` ``dm``: a DM to
    ``recipient``)."""

    __tablename__ = "approval_messages"

    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)
    recipient: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default="dm")
    channel: Mapped[str] = mapped_column(String(64))
    ts: Mapped[str] = mapped_column(String(64))
    posted_at: Mapped[datetime] = mapped_column(DateTime)


class HomeViewer(Base):
    """Someone who opened the bot's App Home: their Home is kept up to date."""

    __tablename__ = "home_viewers"

    team_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    opened_at: Mapped[datetime] = mapped_column(DateTime)


class HomeDirty(Base):
    """A Home to publish again (something it shows changed since ``since``)."""

    __tablename__ = "home_dirty"

    team_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    since: Mapped[datetime] = mapped_column(DateTime, index=True)
