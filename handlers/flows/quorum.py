"""Quorum voters still allowed: before a vote is recorded, each earlier Approve is checked
against the approval's approvers as they stand now (a user group asked through Slack, as the
click's own check does), so a person removed from the group since their vote no longer counts.

Runs after the acknowledgement, before the vote's transaction; that transaction discards the
votes named here (storage.stores.votes) and counts the rest it sees: a vote recorded after
this check was checked by its own click, just as freshly.
"""

from __future__ import annotations

from bot.policy import needs_quorum, refusal_reason
from handlers.services import Services
from handlers.slack import GroupLookupFailed
from storage.models import Approval

# Slack could not say whether earlier voters are still in their approver groups.
VOTERS_UNKNOWN = (
    ":warning: I couldn't check with Slack whether the earlier approvers are still approvers; "
    "nothing was recorded. Please try again."
)


class VotersUnknown(GroupLookupFailed):
    """An earlier voter's groups could not be looked up: nothing may be decided on them."""


async def voters_no_longer_allowed(
    services: Services, approval: Approval, actor: str, actor_groups: set[str]
) -> set[str]:
    """Earlier Approve voters of ``approval`` (not ``actor``) who may not approve it now.

    Raises VotersUnknown when Slack cannot say: the vote is then not recorded at all, so an
    approval never runs on a membership nobody could check.
    """
    if (
        not needs_quorum(approval)
        or actor == approval.requester
        or _refused(approval, actor, actor_groups)
    ):
        return set()  # the runner refuses this click anyway: asking Slack would be wasted
    removed = set()
    for voter in await services.repo.approve_voters(approval.id):
        if voter in (actor, approval.requester) or voter in approval.approvers:
            continue  # the actor is checked by the click; the requester never counts
        try:
            groups = await services.groups.groups_of(
                voter, approval.approvers, team=approval.team_id
            )
            if groups:  # a cached yes: ask Slack again, as a click's own check does
                groups = await services.groups.confirmed(voter, groups, team=approval.team_id)
        except GroupLookupFailed as exc:
            raise VotersUnknown(f"could not check {voter}'s groups: {exc}") from exc
        if _refused(approval, voter, groups):
            removed.add(voter)
    return removed


def _refused(approval: Approval, person: str, groups: set[str]) -> bool:
    return (
        refusal_reason(
            actor=person,
            requester=approval.requester,
            approvers=approval.approvers,
            allow_self_approval=approval.allow_self_approval,
            actor_groups=groups,
        )
        is not None
    )
