"""Calls a standing grant covers: recorded as approvals the grantor already approved.

Whether a grant still covers a call is the policy's question (:mod:`bot.policy.grants`: judged
by the tool's policy now, not when it was granted); the approval it stands in for is recorded
here (``Repository.use_grant``) and then runs through the usual ``approved -> executing ->
executed`` records, so exactly-once, audit and "outcome unknown" hold for it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.ids import new_approval_id
from bot.policy import Policy
from bot.policy.grants import effective_policy, grant_applies
from storage.hashes import PayloadHasher, arguments_hash
from storage.models import Approval
from storage.records import ApprovalDraft
from storage.values import storable

if TYPE_CHECKING:
    import llm

    from bot.gate.turn import TurnContext


async def granted_approval(
    turn: TurnContext,
    hasher: PayloadHasher,
    tool_name: str,
    tool_call: llm.ToolCall,
    policy: Policy,
) -> Approval | None:
    """The approval recorded for this call under a standing grant of its thread, or None
    (no grant covers it: the gate asks as usual). Expired grants it meets are audited."""
    candidates = await turn.repo.grant_candidates(turn.run_id, tool_name)
    if not candidates:
        return None
    now = turn.clock()
    expired = [g.id for g in candidates if g.expires_at <= now and g.expiry_noticed_at is None]
    if expired:
        await turn.repo.notice_expired_grants(now=now, grant_ids=expired)
    arguments = dict(tool_call.arguments)
    effective = effective_policy(
        policy, storable(arguments), requester=turn.requester, channel=candidates[0].channel
    )
    if effective.approval != "required" or getattr(effective, "min_approvals", 1) > 1:
        return None  # denied, or asks for more than one person: no grant stands in
    if effective.rule_error is not None:
        return None  # a rule that could not be evaluated fails closed: a person looks at it
    scope = arguments_hash(arguments)
    for grant in candidates:
        if not grant_applies(grant, effective, requester=turn.requester, scope=scope, now=now):
            continue
        draft = ApprovalDraft(
            id=new_approval_id(),
            tool_call_id=tool_call.tool_call_id or "",
            tool_name=tool_name,
            arguments=arguments,
            payload_hash=hasher(tool_name, arguments),
            approvers=list(effective.approvers),
            allow_self_approval=effective.allow_self_approval,
            on_expiry=effective.on_expiry,
            expires_at=now + effective.ttl,
            rule=effective.rule,
            rule_when=effective.rule_when,
            rule_error=effective.rule_error,
        )
        approval = await turn.repo.use_grant(
            grant.id,
            run_id=turn.run_id,
            owner=turn.owner or "",
            turn=turn.turn_number + 1,  # with this drive's other rows (see call_context)
            draft=draft,
            scope=scope,
            now=now,
        )
        if approval is not None:
            return approval
    return None
