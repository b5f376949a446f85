"""The audit trail (``audit_events``) and the Slack events already handled (``processed_events``).

``audit_events`` is append-only: every request, decision, execution and expiry.
``processed_events`` holds the Slack ``event_id``s already handled, so retried deliveries and
other replicas start nothing twice.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base


class AuditEvent(Base):
    __tablename__ = "audit_events"
    __table_args__ = (
        # Half of a run's events (started, paused, resumed, completed) name no approval: they
        # stay out of this index, so writing them touches one index page fewer. Looking up an
        # approval's trail (approval_id = …) still uses it, on both databases.
        Index(
            "ix_audit_events_approval",
            "approval_id",
            sqlite_where=text("approval_id IS NOT NULL"),
            postgresql_where=text("approval_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime)
    run_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    approval_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    event: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str | None] = mapped_column(String(64), nullable=True)
    detail: Mapped[dict] = mapped_column(JSON, default=dict)


class ProcessedEvent(Base):
    __tablename__ = "processed_events"

    event_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    received_at: Mapped[datetime] = mapped_column(DateTime, index=True)
