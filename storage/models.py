"""SQLAlchemy table definitions.

The tables:

- ``runs``: one agent conversation per Slack thread. Holds the serialized ``llm`` message
  history (the durable form of a paused chain), its status and the lease that lets exactly one
  worker drive it at a time.
- ``approvals``: one row per pause of a tool call, keyed by (run, turn, tool call id): an
  approval, a question (``ask_user``), a wait for a callback, or a retry at a time (``kind``).
  Its status moves only through conditional UPDATEs in the repository, so the row count
  decides races.
  ``approval_approvers`` indexes who may decide each one; ``approval_votes`` holds each
  person's vote on one that needs several approvals (quorum).
- ``audit_events``: append-only; every request, decision, execution and expiry.
- ``processed_events``: Slack ``event_id``s already handled, so retried deliveries and other
  replicas start nothing twice.
- ``grants``: standing grants (storage/grants.py): a tool allowed in one thread until a time.

Times are stored as naive UTC datetimes: SQLite has no time zone type and both databases then
compare them the same way.
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
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


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


CARD_OUTBOX = "status = 'pending' AND card_ts IS NULL"
PENDING = "status = 'pending'"
# The ~1 s check for retries that have come due reads only these few rows.
DUE_RETRIES = "status = 'pending' AND kind = 'retry'"

# What a pause row waits for. ``approval``: a decision; ``question``: a person's answer
# (ask_user); ``callback``: another system's POST; ``retry``: a time (RetryAt).
PAUSE_KINDS = ("approval", "question", "callback", "retry")


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
    # Quorum (storage.votes): how many distinct approvers it needs, snapshotted from the
    # policy when requested, and who has approved so far (in order; the votes' own rows are
    # ``approval_votes``). None: no vote recorded (every approval before quorum existed).
    min_approvals: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    approved_by: Mapped[list | None] = mapped_column(JSON, nullable=True)
    # Edit, then approve (bot.edits): whether approvers may edit the call (the policy's
    # ``allow_edit``, snapshotted), and the arguments an approver changed it to. ``arguments``
    # stays what the model proposed; ``payload_hash`` binds the edited ones once edited.
    allow_edit: Mapped[bool] = mapped_column(default=False, server_default=text("false"))
    edited_arguments: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    edited_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    edited_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


ANYONE = "*"


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


class Grant(Base):
    """A standing grant: ``tool_name`` runs without a card in one thread until ``expires_at``.

    Created with the approval that grants it (in its decision's transaction), used by the gate
    (each use is an approval row already approved by ``grantor``), revoked by a conditional
    UPDATE. ``payload_scope``: None for any arguments, else the hash of the only arguments it
    allows (``storage.grants.arguments_hash``). Owned by storage/grants.py.
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


# The reach tables (DM copies, reminders, escalations, App Home refreshes) live in their own
# module; imported here so that Base.metadata (Alembic, the schema check) knows them.
from storage import reach_models as _reach_models  # noqa: E402,F401
