"""The schema: every table of approval-bot as a SQLAlchemy model, one import for them all.

The tables, by aggregate (a module each, all on :class:`~storage.models.base.Base`):

- ``runs`` (:mod:`.runs`): one agent conversation per Slack thread. Holds the serialized
  ``llm`` message history (the durable form of a paused chain), its status and the lease that
  lets exactly one worker drive it at a time. ``run_answers``: the outbox of each run's last
  message in its thread (its answer, or why it stopped), written with the run's end.
- ``approvals`` (:mod:`.approvals`): one row per pause of a tool call, keyed by (run, turn,
  tool call id): an approval, a question (``ask_user``), a wait for a callback, or a retry at
  a time (``kind``). Its status moves only through conditional UPDATEs in the repository, so
  the row count decides races. ``approval_approvers`` indexes who may decide each one;
  ``approval_votes`` holds each person's vote on one that needs several approvals (quorum);
  ``card_edits_due`` the cards a vote changed; ``people`` the names of the ids they hold.
- ``audit_events`` (:mod:`.events`): append-only; every request, decision, execution and
  expiry. ``processed_events``: Slack ``event_id``s already handled, so retried deliveries
  and other replicas start nothing twice.
- ``slack_installations``, ``slack_oauth_states`` (:mod:`.installations`): the bot token of
  each workspace, and the OAuth flow's states.
- ``checkpoints`` (:mod:`.checkpoints`): the last state a long gated call stored, so a call
  whose worker died is resumed from it instead of being reported "outcome unknown".
- ``grants`` (:mod:`.grants`): standing grants: a tool allowed in one thread until a time.
- ``approval_reach``, ``approval_messages``, ``home_viewers``, ``home_dirty``
  (:mod:`.reach`): DM copies, reminders and escalations; App Homes to publish again.
- ``workflow_steps`` (:mod:`.steps`): executions of the Workflow Builder step "Request
  approval", each with its approval, and the outbox of its completion.

The models are the schema Alembic migrates (``storage/migrations``) and the types the
repository returns; the SQL itself names columns from :mod:`storage.sql.columns`, declared
there without SQLAlchemy, and a test checks that both agree. Times are stored as naive UTC
datetimes: SQLite has no time zone type and both databases then compare them the same way.
"""

from __future__ import annotations

from storage.models.api import ApiRequest, ApiToken
from storage.models.approvals import (
    CARD_OUTBOX,
    DUE_RETRIES,
    PAUSE_KINDS,
    PENDING,
    Approval,
    ApprovalApprover,
    ApprovalVote,
    CardEditDue,
    Person,
)
from storage.models.base import Base
from storage.models.checkpoints import Checkpoint
from storage.models.events import AuditEvent, ProcessedEvent
from storage.models.grants import Grant
from storage.models.installations import OAuthState, SlackInstallation
from storage.models.reach import ApprovalMessage, ApprovalReach, HomeDirty, HomeViewer
from storage.models.runs import Run, RunAnswer, RunHold
from storage.models.steps import WorkflowStep

__all__ = [
    "CARD_OUTBOX",
    "DUE_RETRIES",
    "PAUSE_KINDS",
    "PENDING",
    "ApiRequest",
    "ApiToken",
    "Approval",
    "ApprovalApprover",
    "ApprovalMessage",
    "ApprovalReach",
    "ApprovalVote",
    "AuditEvent",
    "Base",
    "CardEditDue",
    "Checkpoint",
    "Grant",
    "HomeDirty",
    "HomeViewer",
    "OAuthState",
    "Person",
    "ProcessedEvent",
    "Run",
    "RunAnswer",
    "RunHold",
    "SlackInstallation",
    "WorkflowStep",
]
