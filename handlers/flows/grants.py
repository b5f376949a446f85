"""Standing grants after the click: approve-and-grant, revoke, and what cards show of grants.

An "Approve, and allow …" choice takes the one path of every decision
(:func:`handlers.flows.settle.settle_from_slack`): where it came from, who chose it
(approvers only, group membership confirmed with Slack), then ``bot.engine.approve_and_grant``,
which decides exactly once and creates the grant in the same transaction. A Revoke from the
``/approvals grants`` list is checked the same way (its grantor, or an approver of its tool,
from its own workspace and channel). :class:`CardGrants` is the publisher's card decoration:
the menus and the thread's live grants, read at each render.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from slack_bolt.async_app import AsyncRespond

from bot.clock import utcnow
from bot.config import Config
from bot.engine import approve_and_grant
from bot.policy import Decision, duration_text, grant_durations, grant_refusal, revoke_refusal
from handlers.blocks import Block, decorate_card, render_grants_page, shown_name
from handlers.flows.clicks import GROUPS_UNKNOWN, LOOKUP_FAILED, ClickPlace, Tell
from handlers.flows.settle import settle_from_slack
from handlers.services import Services
from handlers.slack import CardPlace, GroupLookupFailed
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, Repository, time_limit

log = logging.getLogger(__name__)

GRANT_NOT_HERE = ":no_entry: That grant does not belong to this workspace or channel."


class CardGrants:
    """What approval cards show of standing grants: the menus (when the tool's policy
    allows grants) and the thread's live grants. Read from the database and the config at
    each render, so every replica renders the same card."""

    def __init__(self, repo: Repository, config: Config) -> None:
        self.repo = repo
        self.config = config

    async def decorate(self, approval: Approval, blocks: list[Block]) -> list[Block]:
        if (approval.kind or "approval") != "approval" or not approval.thread_ts:
            return blocks
        durations: list[timedelta] = []
        policy = self.config.policies.get(approval.tool_name)
        if approval.status == "pending" and grant_refusal(policy, approval) is None:
            assert policy is not None and policy.grant_max is not None
            durations = grant_durations(policy.grant_max)
        grants = await self.repo.list_grants(
            now=utcnow(),
            team_id=approval.team_id,
            channel=approval.channel,
            thread_ts=approval.thread_ts,
        )
        return decorate_card(approval, blocks, durations=durations, grants=grants)


async def grant_from_slack(
    services: Services,
    *,
    approval_id: str,
    actor: str,
    duration: timedelta,
    same_arguments: bool,
    shown: str,
    place: ClickPlace,
    tell: Tell,
    clicked: CardPlace | None,
) -> None:
    """Approve the call and allow its tool in this thread for ``duration`` (with these same
    arguments only, ``same_arguments``), exactly as an Approve click settles it."""

    async def settle(approval: Approval, groups: set[str]) -> Decision:
        name = None  # stored with the decision, as every decision's (handlers.slack.people)
        if services.people is not None:
            name = await services.people.name_of(actor, team=approval.team_id)
        decision, _ = await approve_and_grant(
            services.runner,
            approval.id,
            actor=actor,
            actor_groups=groups,
            duration=duration,
            same_arguments=same_arguments,
            actor_name=name,
            shown=shown,
        )
        return decision

    scope = " with these same arguments" if same_arguments else ""

    def done(approval: Approval) -> str:
        return (
            f"Approved `{shown_name(approval.tool_name)}` ({approval.id}), and allowed it in "
            f"this thread{scope} for {duration_text(duration)}."
        )

    await settle_from_slack(
        services,
        approval_id=approval_id,
        actor=actor,
        place=place,
        tell=tell,
        clicked=clicked,
        settle=settle,
        done=done,
    )


async def revoke_from_slack(
    services: Services,
    grant_id: str,
    *,
    actor: str,
    place: ClickPlace,
    tell: Tell,
    respond: AsyncRespond,
) -> None:
    """Revoke a grant from the ``/approvals grants`` list: its grantor or an approver of
    its tool, from its own workspace and channel; the list is shown again (``respond``)."""
    channel = place.channel or place.list_channel
    try:
        with time_limit(services.decision_time_limit):
            grant = await services.repo.get_grant(grant_id)
            if (
                grant is None
                or (grant.team_id and place.team and grant.team_id != place.team)
                or grant.channel != channel
            ):
                await tell(GRANT_NOT_HERE)
                return
            policy = services.config.policies.get(grant.tool_name)
            approvers = policy.approvers if policy is not None else []
            groups: set[str] = set()
            if actor not in approvers and actor != grant.grantor:  # else no lookup needed
                groups = await services.groups.groups_of(actor, approvers, team=grant.team_id)
            if groups:
                groups = await services.groups.confirmed(actor, groups, team=grant.team_id)
            if refusal := revoke_refusal(grant, actor, policy, groups):
                await tell(f":no_entry: {refusal}")
                return
            revoked = await services.repo.revoke_grant(grant.id, actor=actor, now=utcnow())
            now = utcnow()
            grants = await services.repo.list_grants(
                now=now, team_id=grant.team_id or None, channel=grant.channel
            )
    except DATABASE_FAILURES as exc:
        log.error("grant %s: revocation by %s not recorded (%s)", grant_id, actor, exc)
        await tell(LOOKUP_FAILED)
        return
    except GroupLookupFailed as exc:
        log.error("grant %s: revocation by %s not checked (%s)", grant_id, actor, exc)
        await tell(GROUPS_UNKNOWN)
        return
    if revoked is None:
        notice = (
            f":information_source: That grant of `{shown_name(grant.tool_name)}` had ended already."
        )
    else:
        notice = f":lock: Revoked: `{shown_name(grant.tool_name)}` asks again in its thread."
    text, blocks = render_grants_page(grants, now=now, notice=notice)
    await respond(text=text, blocks=blocks, replace_original=True)
