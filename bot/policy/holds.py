"""Who may pause, resume or stop a run (issue 19, "operators pause and resume runs"), and
the sentences that refuse the others.

Pure checks, no state. Who may pause, resume or stop a run: its requester; anyone named to
decide for a configured tool (every run may call every tool, so any tool counts): its
``approvers``, ``escalate_to``, its rules' ``approvers`` and its ``recovery_by`` (who decides
its failed calls), by id or through a group; and ``admins`` (users and groups, who may also
stop any run). A tool that needs approval but names nobody gives nobody extra rights. Slack
and the CLI show the refusal as is.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from bot.policy.decisions import DecisionRefused
from bot.policy.policy import Policy

NOT_AN_OPERATOR = (
    "Only the person who asked, an approver of one of this run's tools or an admin can "
    "pause, resume or stop this run."
)


class HoldRefused(DecisionRefused):
    """A pause, resume or stop that changed nothing; ``code`` says why."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def operators(policies: Iterable[Policy], admins: Iterable[str]) -> set[str]:
    """Everyone (ids and group ids) who may pause a run besides its requester: admins and
    whoever a tool's policy names to decide (approvers, escalate_to, rule approvers,
    recovery_by)."""
    people = set(admins)
    for policy in policies:
        people.update(policy.approvers)
        people.update(policy.escalate_to)
        people.update(policy.recovery_by)
        for rule in policy.rules:
            people.update(rule.approvers or ())
    return people


def ensure_may_hold(
    actor: str,
    actor_groups: Collection[str],
    *,
    requester: str,
    allowed: Collection[str],
) -> None:
    """Raise HoldRefused unless ``actor`` is the requester or one of ``allowed``."""
    if actor == requester or actor in allowed or set(actor_groups) & set(allowed):
        return
    raise HoldRefused(NOT_AN_OPERATOR, "not_allowed")
