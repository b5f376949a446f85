"""Standing grants (``grants``): a tool allowed in one thread until a time.

Owned by :mod:`storage.stores.grants`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base


class Grant(Base):
    """A standing grant: ``tool_name`` runs without a card in one thread until ``expires_at``.

    Created with the approval that grants it (in its decision's transaction), used by the gate
    (each use is an approval row already approved by ``grantor``), revoked by a conditional
    UPDATE. ``payload_scope``: None for any arguments, else the hash of the only arguments it
    allows (``storage.records.arguments_hash``). Owned by storage/stores/grants.py.
    """

    __tablename__ = "grants"
    __table_args__ = (
        Index("ix_grants_thread", "team_id", "channel", "thread_ts", "tool_name"),
        Index("ix_grants_channel_expires", "team_id", "channel", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    team_id: Mapped[str] = mapped_column(String(32), default="")
    channel: Mapped[str] = mapped_column(String(64), default="")
    thread_ts: Mapped[str] = mapped_column(String(64), default="")
    tool_name: Mapped[str] = mapped_column(String(255))
    payload_scope: Mapped[str | None] = mapped_column(String(64), nullable=True)
    grantor: Mapped[str] = mapped_column(String(64))
    # The approver groups through which the grantor could approve (checked again at each use
    # against the tool's approvers then: Slack cannot be asked from inside a run).
    grantor_groups: Mapped[list] = mapped_column(JSON, default=list)
    # The approval whose decision granted it, and its run.
    approval_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    revoked_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # Set once, when its expiry was first noticed (and audited as ``grant_expired``).
    expiry_noticed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
