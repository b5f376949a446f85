"""Standing grants: who may grant, which call a grant covers, who may revoke.

``grant_max`` in a tool's policy lets an approver approve a call *and* allow that tool in the
call's thread for up to that long (optionally only with the same arguments). The grant is
created with the decision (``Runner.decide(grant=…)``, one transaction); later calls of the
tool in the thread are recorded by the gate as approvals already approved by the grantor
(``Repository.use_grant``) and then run through the usual ``approved -> executing ->
executed`` records, so exactly-once, audit and "outcome unknown" hold for them too.

A grant is judged by the tool's policy *now*, never only by what it was when granted: it
applies only while the policy still allows grants (and no longer than today's
``grant_max`` from its creation), never to a call whose effective policy denies it or asks
more than one approval, and only while its grantor may still approve such a call (by user
id, or through the approver group recorded when the grant was made). It never applies to
another tool, thread or channel (the storage lookup is keyed on them).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.policy.policy import Policy, refusal_reason

if TYPE_CHECKING:
    from storage.models import Approval, Grant

# The durations offered on a card, up to the policy's grant_max (which is always offered).
STANDARD_DURATIONS = (
    timedelta(minutes=5),
    timedelta(minutes=15),
    timedelta(minutes=30),
    timedelta(hours=1),
    timedelta(hours=2),
    timedelta(hours=4),
    timedelta(hours=8),
    timedelta(days=1),
)


def grant_durations(grant_max: timedelta) -> list[timedelta]:
    """What a card offers: the standard durations up to ``grant_max``, and ``grant_max``."""
    offered = [d for d in STANDARD_DURATIONS if d < grant_max]
    return [*offered, grant_max]


def duration_text(duration: timedelta) -> str:
    """``1 hour 30 minutes``, ``45 seconds``."""
    seconds = int(duration.total_seconds())
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
    return " ".join(parts) or "0 seconds"


def effective_policy(
    policy: Policy, arguments: dict[str, Any], *, requester: str, channel: str
) -> Policy:
    """The policy for one call: ``Policy.resolve`` where it exists (rules on arguments)."""
    resolve = getattr(policy, "resolve", None)
    if resolve is None:
        return policy
    resolved: Policy = resolve(arguments, requester=requester, channel=channel)
    return resolved


def approved_arguments(approval: Approval) -> dict[str, Any]:
    """The arguments a decision on ``approval`` approves, the ones that run: an approver's
    edit (bot.policy.edits) replaces the proposed ones, which a grant must then never cover."""
    edited = getattr(approval, "edited_arguments", None)
    return approval.arguments if edited is None else edited


def grant_refusal(policy: Policy | None, approval: Approval) -> str | None:
    """Why no grant may come with a decision on ``approval`` under ``policy`` now, or None."""
    tool = approval.tool_name
    if approval.kind != "approval" or policy is None or policy.grant_max is None:
        return f"Standing grants are not allowed for `{tool}`: approve this call alone."
    if not (approval.channel and approval.thread_ts):
        # A grant is scoped to a Slack thread; a run from the command line has none.
        return f"This `{tool}` call is not in a Slack thread: no grant can cover later calls."
    effective = effective_policy(
        policy, approved_arguments(approval), requester=approval.requester, channel=approval.channel
    )
    if effective.approval != "required":
        return f"`{tool}` is not asked about this way any more: no grant can cover it."
    # The approval's own snapshot too: a quorum asked for is never granted by one person.
    if effective.min_approvals > 1 or approval.min_approvals > 1:
        return f"This `{tool}` call needs several approvals: one person cannot grant it."
    return None


def grant_applies(
    grant: Grant, policy: Policy, *, requester: str, scope: str, now: datetime
) -> bool:
    """Whether a grant covers a call now (``policy``: the call's effective policy)."""
    if grant.revoked_at is not None or grant.expires_at <= now:
        return False
    if policy.grant_max is None or grant.created_at + policy.grant_max <= now:
        return False  # grants turned off, or shortened, since it was made
    if grant.payload_scope is not None and grant.payload_scope != scope:
        return False
    return (
        refusal_reason(
            actor=grant.grantor,
            requester=requester,
            approvers=policy.approvers,
            allow_self_approval=policy.allow_self_approval,
            actor_groups=grant.grantor_groups or (),
        )
        is None
    )


def revoke_refusal(
    grant: Grant, actor: str, policy: Policy | None, actor_groups: Collection[str] = ()
) -> str | None:
    """Why ``actor`` may not revoke ``grant``, or None: its grantor or an approver of its
    tool (by today's policy; a policy that names nobody lets anyone decide, so revoke)."""
    if actor == grant.grantor:
        return None
    approvers = policy.approvers if policy is not None else []
    if not approvers or actor in approvers or set(actor_groups) & set(approvers):
        return None
    return "Only the person who granted it or an approver of this tool can revoke it."
