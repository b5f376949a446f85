"""Approval policy: which tools need a human, who may decide, and what expiry does.

The approvers list is snapshotted onto each approval when it is requested, so a decision is
judged by the rules that were shown on its card, not by a config edited afterwards.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from bot.policy.rules import Rule, choose

ON_EXPIRY_CHOICES = ("deny", "cancel")
# "required": a person decides; "never": the call just runs; "deny": refused, nobody asked.
APPROVAL_CHOICES = ("required", "never", "deny")


@dataclass(frozen=True)
class Policy:
    approval: str = "required"
    approvers: list[str] = field(default_factory=list)
    allow_self_approval: bool = False
    ttl: timedelta = timedelta(minutes=30)
    on_expiry: str = "deny"
    # Rules on arguments (bot.policy.rules), tried in order by ``resolve``.
    rules: tuple[Rule, ...] = ()
    # What the model reads when the call is refused by ``approval = "deny"``.
    message: str | None = None
    # The rule that applied to this call ("policies.refund.rules[0]"), its condition, and
    # why it could not be evaluated when it could not (the call then fails closed).
    rule: str | None = None
    rule_when: str | None = None
    rule_error: str | None = None
    # Standing grants (bot/policy/grants.py): the longest an approver may allow this tool in a
    # thread without asking again; None: no grants.
    grant_max: timedelta | None = None
    # The approvers' reach (handlers.slack.reach): one reminder to those who have not acted, and
    # one escalation that adds ``escalate_to`` to the approvers.
    remind_after: timedelta | None = None
    escalate_after: timedelta | None = None
    escalate_to: list[str] = field(default_factory=list)
    # Keys of the other issue-8 features (quorum, edit).
    min_approvals: int = 1
    allow_edit: bool = False
    # Recovery by a person (bot.policy.recovery): "fail" or "ask", who decides, how often,
    # for how long (None: the tool's ttl).
    on_error: str = "fail"
    recovery_by: list[str] = field(default_factory=list)
    max_recoveries: int = 3
    recovery_ttl: timedelta | None = None

    def resolve(self, arguments: dict[str, Any], *, requester: str, channel: str) -> Policy:
        """The policy of one call: the first rule whose condition holds overrides the tool's
        keys (``rule`` names it); none: the tool's own. A rule whose condition cannot be
        evaluated fails closed: approval by the tool's approvers (the reason on the card),
        or refused when the tool's own approval is "deny"."""
        if not self.rules:
            return self
        choice = choose(self.rules, arguments, requester=requester, channel=channel)
        if choice.rule is None:
            return self
        label, when = choice.rule.label, choice.rule.when.source
        if choice.error is not None:
            strictest = "deny" if self.approval == "deny" else "required"
            return replace(
                self, approval=strictest, rule=label, rule_when=when, rule_error=choice.error
            )
        return replace(self, **choice.rule.overrides(), rule=label, rule_when=when)


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
