"""Approval policy: which tools need a human, who may decide, and what expiry does.

The approvers list is snapshotted onto each approval when it is requested, so a decision is
judged by the rules that were shown on its card, not by a config edited afterwards.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta

ON_EXPIRY_CHOICES = ("deny", "cancel")


@dataclass(frozen=True)
class Policy:
    approval: str = "required"
    approvers: list[str] = field(default_factory=list)
    allow_self_approval: bool = False
    ttl: timedelta = timedelta(minutes=30)
    on_expiry: str = "deny"
    # Standing grants (bot/grants.py): the longest an approver may allow this tool in a
    # thread without asking again; None: no grants.
    grant_max: timedelta | None = None
    # The approvers' reach (handlers.reach): one reminder to those who have not acted, and
    # one escalation that adds ``escalate_to`` to the approvers.
    remind_after: timedelta | None = None
    escalate_after: timedelta | None = None
    escalate_to: list[str] = field(default_factory=list)


def refusal_reason(
    *,
    actor: str,
    requester: str,
    approvers: Collection[str],
    allow_self_approval: bool,
    actor_groups: Collection[str] = (),
) -> str | None:
    """Why ``actor`` may not decide, or None when they may.

    ``approvers`` holds Slack user ids and user-group ids (``S…``); ``actor_groups`` are the
    groups the actor belongs to, resolved by the caller (Slack knows them, we don't).
    An empty list means anyone but the requester.
    """
    if actor == requester and not allow_self_approval:
        return "self_approval"
    if approvers and actor not in approvers and not set(actor_groups) & set(approvers):
        return "not_an_approver"
    return None
