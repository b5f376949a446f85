"""Who the playground's "switch to …" bar may name: whoever can still approve the waiting
card, by the bot's own rules (bot.policy)."""

from __future__ import annotations

from datetime import datetime

from playground.page_home import waiting_json, who_may_act
from playground.people import PEOPLE
from storage.models import Approval

ANA, BO, CY, DEE = "U0REQUESTER", "U0APPROVER1", "U0APPROVER2", "U0OUTSIDER"


def _approval(**fields: object) -> Approval:
    values = {
        "id": "apr_1",
        "kind": "approval",
        "tool_name": "rotate_credentials",
        "requester": ANA,
        "approvers": [BO, CY],
        "allow_self_approval": False,
        "min_approvals": 1,
        "approved_by": None,
        "card_ts": "1.000001",
        "created_at": datetime(2026, 12, 1),
        **fields,
    }
    return Approval(**values)


def test_in_a_quorum_only_an_approver_who_has_not_voted_may_act() -> None:
    assert who_may_act(_approval(min_approvals=2), PEOPLE) == [BO, CY]
    assert who_may_act(_approval(min_approvals=2, approved_by=[BO]), PEOPLE) == [CY]


def test_an_approver_who_asked_leaves_the_other_approver() -> None:
    assert who_may_act(_approval(requester=BO), PEOPLE) == [CY]
    # With self-approval allowed, the requester may decide a call that needs one approval.
    assert who_may_act(_approval(requester=BO, allow_self_approval=True), PEOPLE) == [BO, CY]


def test_a_call_naming_nobody_is_anyones_but_the_requesters() -> None:
    assert who_may_act(_approval(approvers=[]), PEOPLE) == [BO, CY, DEE]


def test_the_page_gets_each_waiting_card_with_who_may_act() -> None:
    [card] = waiting_json([_approval(min_approvals=2, approved_by=[BO])], PEOPLE)
    assert card == {
        "ts": "1.000001",
        "tool": "rotate_credentials",
        "requester": ANA,
        "approved_by": [BO],
        "may_act": [CY],
    }
    assert waiting_json([_approval(card_ts=None), _approval(kind="question")], PEOPLE) == []
