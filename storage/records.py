"""What the repository takes and gives: statuses, errors and plain records of outcomes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from storage.values import storable

if TYPE_CHECKING:
    from storage.models import Approval, Run

FINISHED_RUN_STATUSES = ("completed", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("running", "resuming")


class StorageError(Exception):
    """Base of the errors the repository raises on purpose."""


class RunBusy(StorageError):
    """The conversation already has a run that is working or waiting for approvals."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"run {run.id} is {run.status}")
        self.run = run


class DuplicateEvent(StorageError):
    """A Slack event that was already handled (a retry, or another replica got it first)."""

    def __init__(self, event_id: str) -> None:
        super().__init__(f"event {event_id} was already handled")
        self.event_id = event_id


class ValueTooLong(StorageError):
    """A value longer than its column holds. PostgreSQL refuses it and SQLite would keep it:
    both refuse it, with this message, before the transaction starts."""

    def __init__(self, what: str, length: int, limit: int) -> None:
        super().__init__(f"{what} is {length} characters long; at most {limit} can be stored")


class LeaseLost(StorageError):
    """This worker no longer holds the run's lease: another worker took the run over."""


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
    # The policy's reminder and escalation, snapshotted (storage.reach).
    remind_at: datetime | None = None
    escalate_at: datetime | None = None
    escalate_to: tuple[str, ...] = ()
    # The rule on arguments that chose this approval's policy (see Approval.rule).
    rule: str | None = None
    rule_when: str | None = None
    rule_error: str | None = None
    # Distinct approvers it needs (quorum; storage.votes).
    min_approvals: int = 1
    allow_edit: bool = False
    # A pause of an edited call (a retry): ``arguments`` as proposed, these run.
    edited_arguments: dict[str, Any] | None = None


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


@dataclass
class CallbackOutcome:
    """What a POST to a callback URL did: ``completed`` (the body is the call's result),
    ``gone`` (used already, expired or cancelled: 410) or ``unknown`` (404)."""

    status: str
    approval: Approval | None = None
    resume_claimed: bool = False
    expiry: ExpiryOutcome | None = None


@dataclass
class PauseOutcome:
    """The approvals a pause created; ``resume_claimed`` when none of the run's is pending."""

    approvals: list[Approval]
    resume_claimed: bool


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
    # Quorum (storage.votes): the actor had approved already; nothing changed.
    duplicate: bool = False
    # The clicked copy showed other arguments than the approval's now (``shows_current``):
    # nothing changed.
    stale: bool = False


# What the clicked copy of a card showed, which its Approve buttons carry: the first
# FINGERPRINT_LENGTH hex digits of the payload hash it was rendered with (an edit re-binds
# the hash, so a copy shown before an edit no longer matches).
FINGERPRINT_LENGTH = 16
# The Approve buttons of the previous release carry the id alone; they showed the arguments
# as proposed, so they count only while those were never edited.
UNEDITED = ""


def fingerprint(payload_hash: str) -> str:
    return payload_hash[:FINGERPRINT_LENGTH]


def shows_current(approval: Approval, shown: str) -> bool:
    """Whether a copy that showed ``shown`` (a fingerprint, or UNEDITED) shows the approval's
    arguments as they are now."""
    if shown == UNEDITED:
        return approval.edited_arguments is None
    return len(shown) == FINGERPRINT_LENGTH and fingerprint(approval.payload_hash) == shown


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


def canonical_json(value: Any) -> str:
    return _CANONICAL_ENCODER.encode(value)


# What ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` writes,
# without building an encoder on every call.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_hash(tool_name: str, arguments: dict[str, Any], definition: dict[str, Any]) -> str:
    """Hash of exactly what would run: the tool, its arguments and the tool's definition.

    Taken over the values as stored (:mod:`storage.values`): the call that runs after the
    approval is rebuilt from the stored history, so that is what is approved. The material is
    ``canonical_json(storable({"tool": …, "arguments": …, "definition": …}))``; stored
    approvals carry hashes of it, so it never changes.
    """
    return PayloadHasher(definition)(tool_name, arguments)


class PayloadHasher:
    """:func:`payload_hash` for one tool definition, serialized once instead of per call.

    The definition holds the tool's whole input schema; walking and serializing it was most
    of a hash's cost, on every gated call (three times per approved call). The material is
    assembled from the canonical JSON of its three parts in sorted key order, which is
    byte for byte what ``canonical_json`` writes for the whole object: the same digests.
    """

    __slots__ = ("_definition",)

    def __init__(self, definition: dict[str, Any]) -> None:
        self._definition = canonical_json(storable(definition))

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        material = (
            f'{{"arguments":{canonical_json(storable(arguments))},'
            f'"definition":{self._definition},'
            f'"tool":{canonical_json(storable(tool_name))}}}'
        )
        return hashlib.sha256(material.encode()).hexdigest()
