"""The ``runs`` table: one agent conversation per Slack thread.

Holds the serialized ``llm`` message history (the durable form of a paused chain), its status
and the lease that lets exactly one worker drive it at a time. Its statuses move only through
the conditional UPDATEs of :mod:`storage.sql.runs`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    conversation_key: Mapped[str] = mapped_column(String(255), unique=True)
    team_id: Mapped[str] = mapped_column(String(32), default="")
    channel: Mapped[str] = mapped_column(String(64), default="")
    thread_ts: Mapped[str] = mapped_column(String(64), default="")
    requester: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), index=True)
    model_id: Mapped[str] = mapped_column(String(255))
    history: Mapped[list] = mapped_column(JSON, default=list)
    # Counts requests and pauses; approvals carry the turn of the pause that asked for them.
    turn: Mapped[int] = mapped_column(Integer, default=0)
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    updated_at: Mapped[datetime] = mapped_column(DateTime)
    # The thread's "Working on it…" message, until an outcome replaces it: stored, so that
    # whoever publishes the outcome (another replica after a crash too) edits it in place.
    progress_ts: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Sub-agents (issue 20 section 1): the configured agent a child run is (None: the main
    # agent), the run that delegated to it and that run's ``delegation`` row, which the
    # child's end settles (storage.stores.delegations).
    agent: Mapped[str | None] = mapped_column(String(64), nullable=True)
    parent_run_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    parent_approval_id: Mapped[str | None] = mapped_column(String(40), nullable=True)


class RunAnswer(Base):
    """A run's last message, to post in its thread (the outbox): written with the run's end,
    deleted once Slack took it. ``progress_ts``: the progress message it replaces;
    ``chunks_posted``: how much of a long answer Slack took; ``claimed_until``: a poster's
    claim (another may post it after that)."""

    __tablename__ = "run_answers"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    turn: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    text: Mapped[str | None] = mapped_column(Text, nullable=True)
    progress_ts: Mapped[str | None] = mapped_column(String(64), nullable=True)
    chunks_posted: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, index=True)


class RunHold(Base):
    """An operator's hold on a run (issue 19, "pause and resume"): at most one per run.

    Asked for while the run works, waits on people, or is resuming; the drive stops at its
    next safe point and the run stays ``paused`` with the row present, because the resume
    claim (``CLAIM_RESUME``) does not claim a run that has one. Resume deletes the row (the
    row count decides who resumed) and claims the run in the same transaction. ``action``:
    ``pause``, or ``stop`` (the run is cancelled at its safe point instead).
    """

    __tablename__ = "run_holds"

    run_id: Mapped[str] = mapped_column(String(40), ForeignKey("runs.id"), primary_key=True)
    action: Mapped[str] = mapped_column(String(16))
    requested_by: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    requested_at: Mapped[datetime] = mapped_column(DateTime, index=True)
