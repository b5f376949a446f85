"""Workflow Builder steps (``workflow_steps``): one row per execution of the app's
``request_approval`` custom step, and the outbox of its completion.

Slack runs the step by sending ``function_executed``; the step ends only when the app calls
``functions.completeSuccess`` (or ``completeError``) for that ``function_execution_id``. The
row is written in the transaction that creates the step's approval (and the run row it hangs
on), keyed by the execution id, so a redelivered event finds it and creates nothing twice.
The completion is an outbox derived from the approval: a row whose approval is no longer
pending and whose ``completed_at`` is empty is due. A completer claims it with a conditional
UPDATE (``claimed_until``), so replicas never call Slack for it at the same time; Slack's
answer is recorded by setting ``completed_at``, and the execution's token is forgotten then.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base

# The completion outbox: steps Slack has not been told the outcome of yet.
UNCOMPLETED = "completed_at IS NULL"


class WorkflowStep(Base):
    __tablename__ = "workflow_steps"
    __table_args__ = (
        UniqueConstraint("approval_id", name="uq_workflow_steps_approval_id"),
        Index(
            "ix_workflow_steps_uncompleted",
            "created_at",
            sqlite_where=text(UNCOMPLETED),
            postgresql_where=text(UNCOMPLETED),
        ),
    )

    function_execution_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    team_id: Mapped[str] = mapped_column(String(32), default="")
    workflow_execution_id: Mapped[str] = mapped_column(String(64), default="")
    # The execution's own bot token (the event's ``bot_access_token``), which completes it;
    # never logged, and forgotten (NULL) once the step is completed.
    token: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    # The outbox: who is completing it until when (or a failed call's backoff), how often it
    # was tried, and how it ended: ``success``, ``error`` (completeError), ``gone`` (Slack had
    # no running execution: completed already, or ended by Slack), ``refused`` (Slack refused
    # the completion for good, e.g. outputs it would not take).
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    completed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    completion: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # What Slack answered last (an error code such as ``internal_error``), for operators.
    last_error: Mapped[str | None] = mapped_column(String(255), nullable=True)
