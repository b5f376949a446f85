"""The pause rows (``approvals``), who may decide them (``approval_approvers``), the votes of a
quorum (``approval_votes``) and the cards a vote left to edit again (``card_edits_due``).

``approvals`` holds one row per pause of a tool call, keyed by (run, turn, tool call id): an
approval, a question (``ask_user``), a wait for a callback, or a retry at a time (``kind``).
Its status moves only through conditional UPDATEs (:mod:`storage.sql.approvals`), so the row
count decides races. Its partial indexes hold pending rows alone: the listing, the sweeper and
the card outbox only ever look for those.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from storage.models.base import Base

CARD_OUTBOX = "status = 'pending' AND card_ts IS NULL"
PENDING = "status = 'pending'"
# The ~1 s check for retries that have come due reads only these few rows.
DUE_RETRIES = "status = 'pending' AND kind = 'retry'"

# What a pause row waits for. ``approval``: a decision; ``question``: a person's answer
# (ask_user); ``callback``: another system's POST; ``retry``: a time (RetryAt).
# ``recovery``: a person's choice after a call failed (on_error = "ask").
PAUSE_KINDS = ("approval", "question", "callback", "retry", "recovery")


class Approval(Base):
    __tablename__ = "approvals"
    __table_args__ = (
        # Per turn: providers may reuse tool call ids ("call_0") from one response to the next.
        UniqueConstraint("run_id", "turn", "tool_call_id", name="uq_approvals_run_turn_call"),
        UniqueConstraint("token_hash", name="uq_approvals_token_hash"),
        # The listing and the sweeper only ever look for pending approvals: their indexes
        # hold pending rows alone (partial), so they stay as small as what is waiting, and
        # a decision leaves them once instead of every later status change rewriting them.
        # id too: pages are ordered by (created_at, id), so the index serves the ORDER BY.
        Index(
            "ix_approvals_pending_created",
            "created_at",
            "id",
            sqlite_where=text(PENDING),
            postgresql_where=text(PENDING),
        ),
        Index(
            "ix_approvals_pending_channel",
            "team_id",
            "channel",
            "created_at",
            "id",
            sqlite_where=text(PENDING),
            postgresql_where=text(PENDING),
        ),
        # The sweeper's expiry scan (DUE_APPROVALS).
        Index(
            "ix_approvals_pending_expires",
            "expires_at",
            sqlite_where=text(PENDING),
            postgresql_where=text(PENDING),
        ),
        # The card outbox: pending approvals whose card is not posted yet (see the sweeper).
        Index(
            "ix_approvals_card_outbox",
            "created_at",
            sqlite_where=text(CARD_OUTBOX),
            postgresql_where=text(CARD_OUTBOX),
        ),
        # /approvals history: a channel's latest decisions, without reading the others'.
        Index(
            "ix_approvals_decided_channel",
            "team_id",
            "channel",
            "decided_at",
            sqlite_where=text("decided_at IS NOT NULL"),
            postgresql_where=text("decided_at IS NOT NULL"),
        ),
        Index(
            "ix_approvals_due_retries",
            "due_at",
            sqlite_where=text(DUE_RETRIES),
            postgresql_where=text(DUE_RETRIES),
        ),
        # Batch cards: the rows of one batch.
        Index(
            "ix_approvals_batch",
            "batch_id",
            sqlite_where=text("batch_id IS NOT NULL"),
            postgresql_where=text("batch_id IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    turn: Mapped[int] = mapped_column(Integer)
    tool_call_id: Mapped[str] = mapped_column(String(128))
    tool_name: Mapped[str] = mapped_column(String(255))
    arguments: Mapped[dict] = mapped_column(JSON)
    payload_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    requester: Mapped[str] = mapped_column(String(64), index=True)
    team_id: Mapped[str] = mapped_column(String(32), default="")
    channel: Mapped[str] = mapped_column(String(64), default="")
    thread_ts: Mapped[str] = mapped_column(String(64), default="")
    approvers: Mapped[list] = mapped_column(JSON, default=list)
    allow_self_approval: Mapped[bool] = mapped_column(default=False)
    on_expiry: Mapped[str] = mapped_column(String(16), default="deny")
    created_at: Mapped[datetime] = mapped_column(DateTime)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    decided_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The decider's display name ("Bo Lee (@bo)") as Slack said it at the decision, for texts
    # Slack does not render mentions in (the model's tool result, the CLI). None: unknown.
    decided_by_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    executed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    card_channel: Mapped[str | None] = mapped_column(String(64), nullable=True)
    card_ts: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Who posts the card claims it until then (a conditional UPDATE), so one card is posted;
    # a poster that died lets the claim run out and the sweeper posts it.
    card_claimed_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # Which kind of pause (PAUSE_KINDS); every kind moves through the same conditional
    # UPDATEs, run lock, resume claim, expiry and card outbox.
    kind: Mapped[str] = mapped_column(String(16), default="approval", server_default="approval")
    # sha256 hex of a callback's token: the token itself is never stored.
    token_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # When a retry is due.
    due_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # The rule on arguments that applied when the approval was requested (its label, e.g.
    # "policies.refund.rules[0]", and its condition), and why its condition could not be
    # evaluated when it could not (the call then failed closed): shown on the card.
    rule: Mapped[str | None] = mapped_column(Text, nullable=True)
    rule_when: Mapped[str | None] = mapped_column(Text, nullable=True)
    rule_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Quorum (storage.stores.votes): how many distinct approvers it needs, snapshotted from the
    # policy when requested, and who has approved so far (in order; the votes' own rows are
    # ``approval_votes``). None: no vote recorded (every approval before quorum existed).
    min_approvals: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    approved_by: Mapped[list | None] = mapped_column(JSON, nullable=True)
    # Edit, then approve (bot.policy.edits): whether approvers may edit the call (the policy's
    # ``allow_edit``, snapshotted), and the arguments an approver changed it to. ``arguments``
    # stays what the model proposed; ``payload_hash`` binds the edited ones once edited.
    allow_edit: Mapped[bool] = mapped_column(default=False, server_default=text("false"))
    edited_arguments: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    edited_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    edited_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # A call a standing grant covered: which grant, and until when that grant ran (the row's
    # ``decided_by`` is the grantor, who clicked nothing for this call: views say so).
    grant_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    grant_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # Batch cards: the calls of one model response shown on one card share this (the id of
    # the batch's first row, which carries the card); each keeps its own row and payload hash.
    batch_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # A recovery row (kind ``recovery``): which failure of the call it is about, the row
    # whose execution failed or was lost, and why (``error`` or ``unknown``).
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    recovery_of: Mapped[str | None] = mapped_column(String(40), nullable=True)
    recovery_cause: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # The model's text that came with the response asking for this call (its "why", shown on
    # the card), cut to WHY_LIMIT characters; None when the response said nothing.
    why: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The sub-agent whose run asked for this call (issue 20 section 1: "requested by agent
    # researcher for @ana"); None for the main agent's calls.
    agent: Mapped[str | None] = mapped_column(String(64), nullable=True)


class ApprovalApprover(Base):
    """Who may decide an approval, one row per user or group id (``*``: anyone).

    The same list as ``approvals.approvers``, kept as rows so "what may I approve" is an
    index lookup instead of a scan of every pending approval's JSON.
    """

    __tablename__ = "approval_approvers"

    approver: Mapped[str] = mapped_column(String(64), primary_key=True)
    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)


class ApprovalVote(Base):
    """One person's vote on an approval that needs several (``min_approvals`` > 1).

    At most one per person (the primary key): a second Approve by the same person counts
    once. A Deny ends the approval and replaces that person's earlier vote, if any.
    """

    __tablename__ = "approval_votes"

    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)
    voter: Mapped[str] = mapped_column(String(64), primary_key=True)
    vote: Mapped[str] = mapped_column(String(16))  # approve | deny
    decided_at: Mapped[datetime] = mapped_column(DateTime)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class CardEditDue(Base):
    """A card to edit again: a vote changed its approval ``since`` and the edit may have been
    lost with its replica (the sweeper edits it; any edit of the card clears this)."""

    __tablename__ = "card_edits_due"

    approval_id: Mapped[str] = mapped_column(ForeignKey("approvals.id"), primary_key=True)
    since: Mapped[datetime] = mapped_column(DateTime, index=True)


class Person(Base):
    """The display name Slack last gave for a user id ("Ana Diaz (@ana)"), for the texts that
    never ask Slack (the command line, the exports). Written whenever the bot looks a name up
    (handlers.slack.people); a missing row means the id is shown."""

    __tablename__ = "people"

    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    updated_at: Mapped[datetime] = mapped_column(DateTime)
