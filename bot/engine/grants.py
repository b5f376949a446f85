"""Approve, and allow: one decision that also creates a standing grant in its transaction.

Whether a grant may come with the decision (allowed by the policy, no longer than
``grant_max``, one approver enough) is :mod:`bot.policy.grants`' question; the decision goes
through ``Runner.decide``, so it is exactly once like any other, and the grant exists only if
the decision won.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.ids import new_grant_id
from bot.policy import (
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    duration_text,
    ensure_may_decide,
    grant_refusal,
    shown_id,
)
from bot.policy.grants import approved_arguments
from storage.hashes import arguments_hash
from storage.records import GrantDraft

if TYPE_CHECKING:
    from bot.engine.runner import Runner


async def approve_and_grant(
    runner: Runner,
    approval_id: str,
    *,
    actor: str,
    actor_groups: Collection[str] = (),
    duration: timedelta,
    same_arguments: bool,
    actor_name: str | None = None,
    shown: str | None = None,
) -> tuple[Decision, GrantDraft]:
    """Approve ``approval_id`` and allow its tool in its thread for ``duration``: one
    decision through ``Runner.decide`` (exactly once), the grant in its transaction.

    Raises the DecisionRefused family: not an approver, decided already, expired, or no
    grant allowed (no ``grant_max``, longer than it, several approvals needed), or
    ``shown`` (what the clicked copy showed, as ``Runner.decide``'s) is not what it is now.
    """
    approval = await runner.repo.get_approval(approval_id)
    if approval is None:
        raise ApprovalNotFound(f"There is no approval {shown_id(approval_id)}.")
    ensure_may_decide(approval, actor, actor_groups)
    policy = runner.config.policies.get(approval.tool_name)
    if refusal := grant_refusal(policy, approval):
        raise DecisionRefused(refusal, approval)
    assert policy is not None and policy.grant_max is not None
    if not timedelta(0) < duration <= policy.grant_max:
        raise DecisionRefused(
            f"A standing grant for `{approval.tool_name}` lasts at most "
            f"{duration_text(policy.grant_max)} (grant_max).",
            approval,
        )
    draft = GrantDraft(
        id=new_grant_id(),
        duration=duration,
        payload_scope=arguments_hash(approved_arguments(approval)) if same_arguments else None,
        grantor_groups=sorted(set(actor_groups) & set(approval.approvers)),
    )
    decision = await runner.decide(
        approval_id,
        actor=actor,
        approve=True,
        actor_groups=actor_groups,
        grant=draft,
        actor_name=actor_name,
        shown=shown,
    )
    return decision, draft
