"""Quorum: approvals that need ``min_approvals`` distinct people (the votes live in
storage.stores.votes). Who may vote, how a duplicate vote is refused, and how progress is said.

The requester never counts towards a quorum, even with ``allow_self_approval`` (which only
lets them decide a call that needs one approval); an allowed Deny still ends the approval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.policy.decisions import DecisionRefused, NotAllowed

if TYPE_CHECKING:
    from storage.models import Approval


class AlreadyApproved(DecisionRefused):
    """The person had approved already: their second Approve counts once, changes nothing."""

    code = "already_approved"


def needs_quorum(approval: Approval) -> bool:
    return (approval.min_approvals or 1) > 1


def approvals_so_far(approval: Approval) -> list[str]:
    return list(approval.approved_by or [])


def progress(approval: Approval) -> str:
    """``1 of 2 approvals`` (for an approval that needs several)."""
    return f"{len(approvals_so_far(approval))} of {approval.min_approvals} approvals"


def ensure_may_vote(approval: Approval, actor: str, *, approve: bool) -> None:
    """Raise NotAllowed when ``actor`` is the requester approving a call that needs several
    approvers (after :func:`bot.policy.decisions.ensure_may_decide`, which judges everyone else)."""
    if approve and needs_quorum(approval) and actor == approval.requester:
        raise NotAllowed(
            f"You asked for this call, so it needs {approval.min_approvals} approvals from "
            "other people; yours does not count.",
            approval,
            "self_approval",
        )


def already_approved(approval: Approval) -> AlreadyApproved:
    return AlreadyApproved(f"You already approved; {progress(approval)}.", approval)
