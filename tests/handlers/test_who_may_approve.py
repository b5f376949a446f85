"""A card's "Who may approve" lists who can click Approve: never the requester of the call
(an approver who asked), unless the policy lets them approve their own call alone."""

from __future__ import annotations

from datetime import datetime

from handlers.blocks.cards import approvers_text
from storage.models import Approval


def _approval(**fields: object) -> Approval:
    values = {
        "id": "apr_1",
        "requester": "U0APPROVER1",
        "approvers": ["U0APPROVER1", "U0APPROVER2"],
        "allow_self_approval": False,
        "min_approvals": 1,
        "created_at": datetime(2026, 12, 1),
        **fields,
    }
    return Approval(**values)


def test_an_approver_who_asked_is_not_listed() -> None:
    assert approvers_text(_approval()) == "<@U0APPROVER2>"


def test_the_requester_is_listed_when_they_may_approve_alone() -> None:
    shown = approvers_text(_approval(allow_self_approval=True))
    assert shown == "<@U0APPROVER1>, <@U0APPROVER2>"
    # Never towards a quorum, even with allow_self_approval.
    quorum = approvers_text(_approval(allow_self_approval=True, min_approvals=2))
    assert quorum == "<@U0APPROVER2>"


def test_a_requester_who_is_the_only_approver_is_told_plainly() -> None:
    shown = approvers_text(_approval(approvers=["U0APPROVER1"]))
    assert shown == "nobody but the requester, who may not approve their own call"
    assert approvers_text(_approval(approvers=[])) == "anyone but the requester"
