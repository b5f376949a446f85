"""/approvals lists: one page of what waits for a person, and the list edited in place after
a decision made from it.

A page is read in the acknowledgement path (:func:`approvals_page`): who may decide what comes
from the person's groups (a Slack lookup, cached), and the count stops a page's worth past the
one shown rather than counting a huge backlog.

A list is an ephemeral message: Slack gives the app no handle on it (no ts for chat.update)
except the response URL of an interaction on it, and the payload of such a click does not even
carry the list's blocks. So a decision made from a list (Approve, Deny and its reason form, or a
click found already decided or expired) re-renders that list from the database: its view and
page come from the block_id of the clicked item's buttons
(:func:`handlers.blocks.values.list_block_id`), and the decided item stays in its place with
its outcome instead of its buttons. Other lists showing the same approval (older ones, other
people's) are not reachable; a click on one is answered "Already approved by @bo" and
refreshes that list.

Owns no durable state; a refresh that fails (response URL expired or used up) is logged only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.clock import utcnow
from handlers.blocks import held_run_blocks, listed_at, render_approvals_page
from handlers.services import Services
from handlers.slack import GroupLookupFailed
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, PendingFilter

log = logging.getLogger(__name__)
# A list refreshed after a click: the database, a user group Slack could not list, or the
# response URL failing leaves the list as it was (the click has decided already).
REFRESH_FAILURES: tuple[type[BaseException], ...] = (*DATABASE_FAILURES, GroupLookupFailed, OSError)

PAGE_SIZE = 10
# Slack's limit of blocks in one message.
MAX_BLOCKS = 50
COUNT_AHEAD = 990
LIST_FAILED = ":warning: I couldn't read the approvals just now. Please try again."
# Refreshes the list a click came from, given the approval the click settled (or found settled).
RefreshList = Callable[[str], Awaitable[None]]


async def approvals_page(
    services: Services,
    command: dict[str, Any],
    view: str,
    page: int,
    *,
    settled: Approval | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """One page of a user's /approvals ``view``; ``settled``: an approval just decided from
    it, kept in its place with its outcome."""
    user, team, channel = command["user_id"], command.get("team_id", ""), command["channel_id"]
    if view == "mine":
        where = PendingFilter(team_id=team, requester=user, one_per_batch=True)
    elif view == "all":
        where = PendingFilter(team_id=team, channel=channel, one_per_batch=True)
    else:
        groups = await services.groups.groups_of(user, services.group_approvers(), team=team)
        # Approvals that name nobody are listed only in their own channel: listed anywhere,
        # a private channel's would be seen (and decided) by the whole workspace.
        where = PendingFilter(
            team_id=team,
            approver=user,
            approver_groups=sorted(groups),
            exclude_requester=user,
            anyone_channel=channel,
            one_per_batch=True,
        )
    now = utcnow()
    # Count a page's worth past this one and a bit more, not all of a huge backlog.
    count_limit = (page + 1) * PAGE_SIZE + COUNT_AHEAD
    approvals, total = await services.repo.list_pending(
        where, now=now, limit=PAGE_SIZE, offset=page * PAGE_SIZE, count_limit=count_limit
    )
    # A batch is one item (its count, the batch card's buttons): all its rows.
    batches = {
        a.batch_id: await services.repo.batch_rows(a.batch_id) for a in approvals if a.batch_id
    }
    domain = command.get("team_domain") or "app"
    permalinks = {
        a.id: card_permalink(domain, a.card_channel, a.card_ts, a.thread_ts)
        for a in approvals
        if a.card_channel and a.card_ts
    }
    text, blocks = render_approvals_page(
        approvals,
        view=view,
        page=page,
        total=total,
        count_limit=count_limit,
        page_size=PAGE_SIZE,
        now=now,
        permalinks=permalinks,
        settled=settled,
        batches=batches,
    )
    if page == 0:
        # Runs an operator paused (issue 19 §2): this channel's, and the user's own.
        held = [
            (run, hold)
            for run, hold in await services.repo.list_runs(status="held", limit=100)
            if run.team_id == team and (run.channel == channel or run.requester == user)
        ]
        extra = held_run_blocks(held)
        if extra and len(blocks) + len(extra) <= MAX_BLOCKS:
            blocks[-1:-1] = extra  # above the help line
    return text, blocks


def card_permalink(domain: str, channel: str, ts: str, thread_ts: str | None) -> str:
    """Slack's permalink shape, built locally: no API call per item in the ack path."""
    link = f"https://{domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
    if thread_ts and thread_ts != ts:
        link += f"?thread_ts={thread_ts}&cid={channel}"
    return link


def list_refresher(
    services: Services,
    *,
    block_id: Any,
    response_url: Any,
    user: str,
    team: str,
    domain: str,
    channel: str,
) -> RefreshList | None:
    """How to refresh the list a click came from; None when it did not come from one."""
    where = listed_at(block_id)
    if where is None or not isinstance(response_url, str) or not response_url or not channel:
        return None
    view, page = where
    command = {"user_id": user, "team_id": team, "team_domain": domain, "channel_id": channel}

    async def refresh(approval_id: str) -> None:
        try:
            settled = await services.repo.get_approval(approval_id)
            text, blocks = await approvals_page(services, command, view, page, settled=settled)
            answer = await AsyncWebhookClient(response_url, session=services.client.session).send(
                text=text, blocks=blocks, replace_original=True
            )
        except REFRESH_FAILURES as exc:
            log.warning("approval %s: its /approvals list not refreshed (%s)", approval_id, exc)
            return
        if answer.status_code != 200:
            log.warning(
                "approval %s: its /approvals list not refreshed (HTTP %s: %.200s)",
                approval_id,
                answer.status_code,
                answer.body,
            )

    return refresh
