"""The human gate over HTTP (``api_tokens``, ``api_requests``): who may create approvals and
questions through ``/api/v1``, what each created, and the outbox of its webhook.

A token is stored by its SHA-256 only (the token itself is printed once, at creation); its
webhook secret is stored as given, since it signs every delivery. An API request's row is
written in the transaction that creates its approval (and the run row it hangs on, status
``step`` as a Workflow Builder step's: nothing resumes it). Its idempotency key is the run's
conversation key (``api:<token>:<key>``): a second request with the same key inserts nothing.
The webhook is an outbox derived from the approval: a row with a ``webhook_url`` whose
approval is no longer pending, not delivered and not given up, is due; a deliverer claims it
with a conditional UPDATE (``claimed_until``, which is also a failed attempt's backoff).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base

UNDELIVERED = "webhook_url IS NOT NULL AND delivered_at IS NULL AND gave_up_at IS NULL"


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64))  # hex SHA-256 of the token
    webhook_secret: Mapped[str] = mapped_column(Text)  # signs deliveries; never logged
    channels: Mapped[str] = mapped_column(Text)  # JSON list of channel ids it may post to
    team_id: Mapped[str] = mapped_column(String(32), default="", server_default="")
    requester: Mapped[str] = mapped_column(String(64))  # who the cards say asked
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class ApiRequest(Base):
    __tablename__ = "api_requests"
    __table_args__ = (
        UniqueConstraint("token_id", "idempotency_key", name="uq_api_requests_idempotency"),
        Index(
            "ix_api_requests_undelivered",
            "created_at",
            sqlite_where=text(UNDELIVERED),
            postgresql_where=text(UNDELIVERED),
        ),
    )

    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)
    token_id: Mapped[str] = mapped_column(ForeignKey("api_tokens.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    body_hash: Mapped[str] = mapped_column(String(64))  # the request's body, to refuse a reuse
    webhook_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    delivery_id: Mapped[str] = mapped_column(String(40))  # stable across retries
    created_at: Mapped[datetime] = mapped_column(DateTime)
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    first_attempt_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    gave_up_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(255), nullable=True)
