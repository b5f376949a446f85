"""What the repository takes and gives: statuses, plain records, and payload hashes (its errors:
:mod:`storage.errors`).

Owns no state. Everything here is plain Python (no SQLAlchemy import; the models appear in
annotations only), so the layers above import what they hand the repository and what they get
back (drafts, outcomes, errors, the hashes that bind an approval to what runs) from here
without loading the database layer; :mod:`storage.repository` re-exports the common ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.models import Approval, AuditEvent, Run

FINISHED_RUN_STATUSES = ("completed", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("running", "resuming")


@dataclass(frozen=True)
class ChildRun:
    """A sub-agent's run that a ``delegation`` row waits on (issue 20 section 1), inserted in
    the transaction that stores its parent's pause: ``running`` under ``lease_owner`` until
    ``lease_until``, so a crash before anyone drives it leaves it to the sweeper's take-over.
    ``history``: the agent's system prompt and the task, as ``runs.history`` keeps them."""

    run_id: str
    agent: str
    model_id: str
    history: list[dict[str, Any]]
    lease_owner: str = ""


@dataclass(frozen=True)
class ApprovalDraft:
    """A call that pauses the run (an approval, by default, or another ``kind`` of pause);
    written together with the paused history.

    ``adopt``: the row was stored already (a callback armed by ``callback_url()`` while the
    tool ran); the pause takes it over instead of inserting one.
    """

    id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    payload_hash: str
    approvers: list[str]
    allow_self_approval: bool
    on_expiry: str
    expires_at: datetime
    kind: str = "approval"
    # A callback's description ("deploy of shop"), a retry's reason.
    reason: str | None = None
    due_at: datetime | None = None
    token_hash: str | None = None
    adopt: bool = False
    # The policy's reminder and escalation, snapshotted (storage.stores.reach).
    remind_at: datetime | None = None
    escalate_at: datetime | None = None
    escalate_to: tuple[str, ...] = ()
    # The rule on arguments that chose this approval's policy (see Approval.rule).
    rule: str | None = None
    rule_when: str | None = None
    rule_error: str | None = None
    # Distinct approvers it needs (quorum; storage.stores.votes).
    min_approvals: int = 1
    allow_edit: bool = False
    # A pause of an edited call (a retry): ``arguments`` as proposed, these run.
    edited_arguments: dict[str, Any] | None = None
    # Batch cards: the rows of one response shown on one card (see Approval.batch_id).
    batch_id: str | None = None
    # A recovery row's (kind ``recovery``): see Approval.attempt.
    attempt: int | None = None
    recovery_of: str | None = None
    recovery_cause: str | None = None
    # The model's text that came with the call (Approval.why).
    why: str | None = None
    # A ``delegation`` row's child run, inserted with the pause (storage.stores.pauses).
    child: ChildRun | None = None


@dataclass(frozen=True)
class StoredCheckpoint:
    """A long call's last checkpoint: its state (JSON text), how many times it was saved and
    how many times the call was resumed from it."""

    state: str
    saves: int
    resumes: int


@dataclass(frozen=True)
class ArmedCallback:
    """A callback token stored while its tool still runs, before the pause is."""

    id: str
    run_id: str
    turn: int
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    token_hash: str
    expires_at: datetime


@dataclass(frozen=True)
class GrantDraft:
    """A grant asked for with a decision: how long, and for which arguments (None: any)."""

    id: str
    duration: timedelta
    payload_scope: str | None = None
    grantor_groups: Sequence[str] = ()


@dataclass(frozen=True)
class EditRequest:
    """An approver's edit: the arguments to run instead, their payload hash, and (when the
    edited call needs other approvers) the stricter approver list, which keeps it pending."""

    arguments: dict[str, Any]
    payload_hash: str
    stricter_approvers: list[str] | None = None
    why_stricter: str | None = None
    # The rule on arguments that chose the stricter policy (bot.policy.rules), shown on the card.
    rule: str | None = None
    rule_when: str | None = None
    rule_error: str | None = None
    min_approvals: int = 1
    # What the editor saw (storage.hashes.shows_current): a fingerprint of the arguments
    # the form showed, UNEDITED for a form of the previous release, None for no check.
    shown: str | None = None


@dataclass
class CallbackOutcome:
    """What a POST to a callback URL did: ``completed`` (the body is the call's result),
    ``repeated`` (that body was the result already: a retry, 202), ``gone`` (used already
    with another body, expired or cancelled: 410) or ``unknown`` (404)."""

    status: str
    approval: Approval | None = None
    resume_claimed: bool = False
    expiry: ExpiryOutcome | None = None


@dataclass(frozen=True)
class AnswerToPost:
    """A run's last message a poster claimed (the answer outbox, :mod:`storage.stores.answers`):
    ``status`` is the run's end (completed, failed, cancelled) and ``text`` its answer or
    error; ``progress_ts`` the message it replaces; ``chunks_posted`` of it Slack took."""

    run_id: str
    turn: int
    status: str
    text: str | None
    progress_ts: str | None
    chunks_posted: int
    attempts: int
    team_id: str
    channel: str
    thread_ts: str


@dataclass(frozen=True)
class StepToComplete:
    """A Workflow Builder step a completer claimed (:mod:`storage.stores.steps`): its
    execution, its approval as it stands, and the execution's token (None once forgotten)."""

    function_execution_id: str
    run_id: str
    team_id: str
    token: str | None
    attempts: int
    approval: Any

    def __repr__(self) -> str:  # the token never reaches a log line
        return f"StepToComplete({self.function_execution_id!r}, approval={self.approval.id!r})"


@dataclass(frozen=True)
class StepStarted:
    """A step's approval: ``created`` False when the execution was already stored (Slack
    redelivered ``function_executed``) and nothing was written."""

    approval_id: str
    run_id: str
    created: bool


@dataclass
class PauseOutcome:
    """The approvals a pause created; ``resume_claimed`` when none of the run's is pending."""

    approvals: list[Approval]
    resume_claimed: bool
    # Sub-agents' runs the pause started (``delegation`` rows): the caller drives them.
    children: list[Run] = field(default_factory=list)


@dataclass
class ExpiryOutcome:
    """What expiring one approval did to its run."""

    approval: Approval
    resume_claimed: bool = False
    run_cancelled: bool = False


@dataclass
class DecisionOutcome:
    """The result of a decision that won its race.

    With ``resume_claimed``: the run as the claim left it (``resuming``, its lease held by the
    claim's ``worker``), read in the claim's transaction, so the resumed drive starts from it
    with no write of its own.
    """

    approval: Approval
    resume_claimed: bool
    run: Run | None = None
    # Quorum (storage.stores.votes): the actor had approved already; nothing changed.
    duplicate: bool = False
    # The clicked copy showed other arguments than the approval's now (``shows_current``):
    # nothing changed.
    stale: bool = False
    # With the claim, when the decided approval is the only one of its run's turn (PostgreSQL's
    # one-statement decision): every approval the resumed drive must answer, as decided here,
    # so it need not read them again (bot.engine.drive). None: the drive reads them.
    turn_approvals: list[Approval] | None = None


@dataclass(frozen=True)
class ReachState:
    """An approval's escalation as its card shows it; for a sender of its DM copies, the
    failed attempts so far and who will get no copy."""

    escalate_at: datetime | None
    escalated_at: datetime | None
    escalate_to: list[str]
    dms_attempts: int = 0
    dms_given_up: tuple[str, ...] = ()


@dataclass(frozen=True)
class CopyPlace:
    recipient: str
    channel: str
    ts: str


@dataclass(frozen=True)
class Escalation:
    approval: Approval
    added: list[str]


@dataclass(frozen=True)
class ExportedEvent:
    """One audit event as exported: who, when, what, and where (its run's team and channel)."""

    event: AuditEvent
    team_id: str
    channel: str


@dataclass(frozen=True)
class StoredInstallation:
    """slack_sdk's ``Bot.to_dict()`` and ``Installation.to_dict()``, as JSON text."""

    bot: str
    installation: str


@dataclass
class LiveCounts:
    pending_by_tool: dict[str, int]
    runs_by_status: dict[str, int]
    # The earliest expires_at of a pending approval already past it (the sweeper's lag).
    oldest_overdue: datetime | None
    # Runs an operator holds paused (run_holds; issue 19 §2).
    held_runs: int = 0


@dataclass
class BatchOutcome:
    """What a decision on a batch card did, in one transaction.

    ``approvals``: every row of the batch after it; ``decided``: the ids this decision
    settled (approved, denied, or voted on); ``kept``: the ids it did not touch because they
    were settled (or expired) already, or ``actor`` had voted on them; ``stale``: the card
    showed another set, nothing changed.
    """

    approvals: list[Approval]
    decided: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    voted: list[str] = field(default_factory=list)
    stale: bool = False
    resume_claimed: bool = False
    run: Run | None = None


@dataclass
class PendingFilter:
    """Which pending approvals to list; every field narrows the list."""

    team_id: str | None = None
    channel: str | None = None
    requester: str | None = None
    approver: str | None = None
    approver_groups: Sequence[str] = field(default_factory=tuple)
    exclude_requester: str | None = None
    # With ``approver``: approvals that name nobody (anyone may decide) are kept only when
    # they belong to this channel, so they never show outside it (a private channel's).
    anyone_channel: str | None = None
    # Only these kinds of pause (approval, question, callback, retry); None: every kind.
    kinds: Sequence[str] | None = None
    # A batch (one card for many calls, ``Approval.batch_id``) as one item: its first row
    # still pending stands for it (Slack's lists; the CLI lists every call).
    one_per_batch: bool = False


@dataclass(frozen=True)
class StoredToken:
    """An API token as stored: never the token itself, only what it may do."""

    id: str
    name: str
    channels: tuple[str, ...]
    team_id: str
    requester: str
    webhook_secret: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def usable(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


@dataclass(frozen=True)
class ApiStarted:
    """What a ``POST /api/v1/…`` stored: ``created`` False when the idempotency key was used
    before (nothing written); ``body_hash`` is then the first request's, to compare."""

    approval_id: str
    created: bool
    body_hash: str


@dataclass(frozen=True)
class ApiRequestRow:
    """An API request's own row: its token, its webhook and the webhook's delivery state."""

    approval_id: str
    token_id: str
    idempotency_key: str | None
    webhook_url: str | None
    delivery_id: str
    created_at: datetime
    attempts: int
    delivered_at: datetime | None
    gave_up_at: datetime | None
    last_error: str | None
    claimed_until: datetime | None
