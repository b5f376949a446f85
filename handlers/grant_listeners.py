"""Slack listeners for standing grants: the card's "Approve, and allow …" menus, Revoke
buttons and ``/approvals grants``; and the card decoration that shows both on cards.

An "Approve, and allow" choice takes the one path of every decision
(``handlers.decisions``): where it came from, who chose it (approvers only, group membership
confirmed with Slack), then ``bot.grants.approve_and_grant``, which decides exactly once and
creates the grant in the same transaction.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from bot.clock import utcnow
from bot.config import Config
from bot.decisions import Decision
from bot.grants import (
    approve_and_grant,
    duration_text,
    grant_durations,
    grant_refusal,
    revoke_refusal,
)
from handlers import grant_blocks
from handlers.blocks import Block, escape
from handlers.decisions import (
    GROUPS_UNKNOWN,
    LIST_FAILED,
    LOOKUP_FAILED,
    _settle_from_slack,
)
from handlers.interactions import click_place, clicked_card, teller
from handlers.services import GroupLookupFailed, Services
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, Repository, time_limit

log = logging.getLogger(__name__)

NOT_A_CHOICE = ":no_entry: That is not one of the durations this card offers."
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
        return grant_blocks.decorate_card(approval, blocks, durations=durations, grants=grants)


def register(app: AsyncApp, services: Services) -> None:
    async def on_grant(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        tell = teller(respond, services, body)
        option = action.get("selected_option")
        parsed = grant_blocks.parse_grant_value(
            option.get("value") if isinstance(option, dict) else None
        )
        if parsed is None:
            await tell(NOT_A_CHOICE)
            return
        approval_id, duration, shown = parsed
        actor = body["user"]["id"]
        same_arguments = action.get("action_id") == grant_blocks.GRANT_SAME

        async def settle(approval: Approval, groups: set[str]) -> Decision:
            name = None  # stored with the decision, as every decision's (handlers.people)
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
                f"Approved `{escape(approval.tool_name)}` ({approval.id}), and allowed it in "
                f"this thread{scope} for {duration_text(duration)}."
            )

        services.background.spawn(
            _settle_from_slack(
                services,
                approval_id=approval_id,
                actor=actor,
                place=click_place(body),
                tell=tell,
                clicked=clicked_card(body),
                settle=settle,
                done=done,
            ),
            name=f"grant {approval_id}",
        )

    app.action(grant_blocks.GRANT)(on_grant)
    app.action(grant_blocks.GRANT_SAME)(on_grant)

    @app.action(grant_blocks.REVOKE)
    async def on_revoke(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        services.background.spawn(
            revoke_from_slack(services, body, str(action.get("value") or ""), respond),
            name=f"revoke {action.get('value')}",
        )


async def revoke_from_slack(
    services: Services, body: dict[str, Any], grant_id: str, respond: AsyncRespond
) -> None:
    """Revoke a grant from the ``/approvals grants`` list: its grantor or an approver of
    its tool, from its own workspace and channel; the list is shown again."""
    tell = teller(respond, services, body)
    actor = body["user"]["id"]
    place = click_place(body)
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
            f":information_source: That grant of `{escape(grant.tool_name)}` had ended already."
        )
    else:
        notice = f":lock: Revoked: `{escape(grant.tool_name)}` asks again in its thread."
    text, blocks = grant_blocks.render_grants_page(grants, now=now, notice=notice)
    await respond(text=text, blocks=blocks, replace_original=True)


async def grants_command(ack: AsyncAck, command: dict[str, Any], services: Services) -> None:
    """``/approvals grants``: this channel's live grants, with Revoke buttons."""
    now = utcnow()
    try:
        with time_limit(services.ack_time_limit):
            grants = await services.repo.list_grants(
                now=now, team_id=command.get("team_id") or None, channel=command["channel_id"]
            )
    except DATABASE_FAILURES as exc:
        log.error("/approvals grants for %s: not listed (%s)", command["user_id"], exc)
        await ack(text=LIST_FAILED, response_type="ephemeral")
        return
    text, blocks = grant_blocks.render_grants_page(grants, now=now)
    await ack(text=text, blocks=blocks, response_type="ephemeral")
