"""The App Home tab: what waits for you, your requests, recent decisions near you.

``app_home_opened`` publishes the person's Home (``views.publish``). Its buttons are the
/approvals list's own (same action ids, same decision path); a Home click has no channel
and no response URL, so what a list would answer ephemerally shows at the top of the Home.

The Home is refreshed when something changes for the person (a card posted or edited for
an approval they asked for, may decide, or decided), for people who ever opened their Home.
Both are durable (``home_viewers``, ``home_dirty`` in :mod:`storage.reach`), so a change made
by one replica refreshes a Home opened through another: the replica that made the change
marks the Homes it touches and publishes them after ``DEBOUNCE`` seconds (so a burst of
changes publishes once), claiming each first so only one replica publishes it; every
replica's sweeper publishes the marks left longer than ``STALE_MARK`` (their replica died).
Publishes are paced per workspace (``PUBLISH_INTERVAL``: views.publish is Tier 4, about 100
a minute).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from slack_bolt.async_app import AsyncApp

from bot.clock import utcnow
from handlers import blocks
from handlers.edit_blocks import current_arguments
from handlers.publish import SLACK_FAILURES
from handlers.services import GroupLookupFailed, Services
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, PendingFilter

log = logging.getLogger(__name__)

DEBOUNCE = 1.0  # seconds a refresh waits for more changes
# A Home marked this long ago and still not published: its replica died; any sweep does it.
STALE_MARK = timedelta(seconds=10)
PUBLISH_INTERVAL = 0.6  # seconds between two publishes in one workspace (Tier 4)
# A click's answer stays at the top of the Home this long, through refreshes.
NOTICE_SECONDS = 60.0
LISTED = 10  # items per section; the rest are counted and left to /approvals
# Home views are cut at 100 blocks; three lists of LISTED stay well within.
NO_CHANNEL = ""  # "anyone may decide" approvals never show outside their own channel


class HomeTabs:
    """Publishes Homes; refreshes those of people who opened theirs (a durable list)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._scheduled: set[tuple[str, str]] = set()
        self._next_publish: dict[str, float] = {}
        self._pacing: dict[str, asyncio.Lock] = {}
        self._notices: dict[tuple[str, str], tuple[float, str]] = {}  # -> (until, text)

    async def opened(self, team: str, user: str) -> None:
        """``user`` opened their Home: remember it (every replica refreshes it from now
        on) and publish it."""
        self._notices.pop((team, user), None)  # read: opening the Home starts afresh
        try:
            await self.services.repo.saw_home(team, user, now=utcnow())
        except DATABASE_FAILURES as exc:
            log.error("home of %s: not remembered (%s)", user, exc)
        await self.publish(team, user)

    def _notice(self, team: str, user: str, new: str | None) -> str | None:
        key = (team, user)
        if new is not None:
            self._notices[key] = (time.monotonic() + NOTICE_SECONDS, new)
        until, text = self._notices.get(key, (0.0, ""))
        if until <= time.monotonic():
            self._notices.pop(key, None)
            return None
        return text

    def changed(self, approval: Approval) -> None:
        """An approval changed: refresh the Homes it shows on (debounced)."""
        self.services.background.spawn(self._mark(approval), name=f"home marks {approval.id}")

    async def _mark(self, approval: Approval) -> None:
        team = approval.team_id
        try:
            viewers = await self.services.repo.home_viewers(team)
            concerned = {approval.requester, approval.decided_by, *approval.approvers}
            if any(a.startswith("S") for a in approval.approvers):
                concerned |= viewers  # group members: who they are would cost a lookup each
            users = concerned & viewers
            await self.services.repo.mark_homes(team, users, now=utcnow())
        except DATABASE_FAILURES as exc:
            log.error("approval %s: Homes not marked for a refresh (%s)", approval.id, exc)
            return
        for user in users:
            self.schedule(team, user)

    def schedule(self, team: str, user: str) -> None:
        key = (team, user)
        if key in self._scheduled:
            return  # a refresh is already on its way and will read the latest state
        self._scheduled.add(key)
        self.services.background.spawn(self._refresh(team, user), name=f"home {team}/{user}")

    async def _refresh(self, team: str, user: str) -> None:
        await asyncio.sleep(DEBOUNCE)
        self._scheduled.discard((team, user))
        await self._publish_marked(team, user, before=utcnow())

    async def _publish_marked(self, team: str, user: str, *, before: datetime) -> None:
        """Publish a marked Home if this replica wins its mark (another may have)."""
        try:
            if not await self.services.repo.claim_home(team, user, before=before):
                return
        except DATABASE_FAILURES as exc:
            log.error("home of %s: not refreshed (%s)", user, exc)
            return
        await self.publish(team, user)

    async def publish_dirty(self) -> None:
        """The sweeper's part: publish the Homes marked long ago and left (their replica
        died before it published them)."""
        before = utcnow() - STALE_MARK
        for team, user in await self.services.repo.dirty_homes(before=before):
            await self._publish_marked(team, user, before=before)

    async def _paced(self, team: str) -> None:
        lock = self._pacing.setdefault(team, asyncio.Lock())
        async with lock:
            wait = self._next_publish.get(team, 0.0) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._next_publish[team] = time.monotonic() + PUBLISH_INTERVAL

    async def publish(self, team: str, user: str, *, notice: str | None = None) -> None:
        """Render and publish ``user``'s Home; failures are logged, never raised."""
        notice = self._notice(team, user, notice)
        try:
            view = await render_home(self.services, team, user, notice=notice)
        except DATABASE_FAILURES as exc:
            log.error("home of %s: not rendered (%s)", user, exc)
            return
        await self._paced(team)
        try:
            client = await self.services.clients.for_team(team)
            await client.views_publish(user_id=user, view=view)
        except SLACK_FAILURES as exc:
            log.error("home of %s: not published: %s", user, exc)

    def teller(self, team: str, user: str) -> Any:
        """What a list answers ephemerally, shown at the top of the Home instead."""

        async def tell(text: str) -> None:
            await self.publish(team, user, notice=text)

        return tell


async def render_home(
    services: Services, team: str, user: str, *, notice: str | None = None
) -> dict[str, Any]:
    now = utcnow()
    warning = None
    try:
        groups = await services.groups.groups_of(user, services.group_approvers(), team=team)
    except GroupLookupFailed:
        groups, warning = set(), ":warning: I couldn't check your user groups just now."
    waiting, waiting_total = await services.repo.list_pending(
        PendingFilter(
            team_id=team,
            approver=user,
            approver_groups=sorted(groups),
            exclude_requester=user,
            anyone_channel=NO_CHANNEL,
        ),
        now=now,
        limit=LISTED,
    )
    mine, mine_total = await services.repo.list_pending(
        PendingFilter(team_id=team, requester=user), now=now, limit=LISTED
    )
    decided = await services.repo.recent_decisions(team_id=team, user=user, limit=LISTED)

    view: list[dict[str, Any]] = []
    for line in (notice, warning):
        if line:
            view.append(_context(line))
    view.append(_header("Waiting for you"))
    if not waiting:
        view.append(_context("Nothing is waiting for your decision. :tada:"))
    for approval in waiting:
        view.extend(blocks.list_item(approval, now, None))
    view.extend(_more(waiting_total, len(waiting), "`/approvals`"))
    view.append(_header("Your requests"))
    if not mine:
        view.append(_context("None of your requests are waiting for a decision."))
    for approval in mine:
        view.append(_section(_request_line(approval)))
    view.extend(_more(mine_total, len(mine), "`/approvals mine`"))
    view.append(_header("Recent decisions in your channels"))
    if not decided:
        view.append(_context("No decisions yet."))
    for approval in decided:
        view.append(_section(_decision_line(approval)))
    return {"type": "home", "blocks": view}


def _summary(approval: Approval) -> str:
    shown, _ = blocks.truncated(
        ", ".join(
            f"{blocks.shown_json(k)[1:-1]}={blocks.shown_json(v)}"
            for k, v in current_arguments(approval).items()  # an edit's, once edited
        ),
        blocks.LIST_ARGUMENTS_LIMIT,
    )
    return f"`{blocks.escape(approval.tool_name)}` `{blocks.escape(shown)}`"


def _request_line(approval: Approval) -> str:
    return (
        f"{_summary(approval)} in <#{approval.channel}>\n"
        f"waiting for {blocks.approvers_text(approval, 1000)}"
        f" · expires {blocks.slack_date(approval.expires_at)}"
    )


def _decision_line(approval: Approval) -> str:
    return (
        f"{_summary(approval)} in <#{approval.channel}>, asked by "
        f"{blocks.mention(approval.requester)}\n{blocks.outcome_text(approval)}"
    )


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[: blocks.SECTION_LIMIT]}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _more(total: int, shown: int, where: str) -> list[dict[str, Any]]:
    return [_context(f"… and {total - shown} more: see {where}")] if total > shown else []


def register(app: AsyncApp, services: Services) -> HomeTabs:
    home = HomeTabs(services)
    services.home = home
    services.publisher.on_change = home.changed

    @app.event("app_home_opened")
    async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return  # the Messages tab
        team, user = body.get("team_id") or "", event.get("user")
        if not isinstance(user, str) or not user:
            return
        services.background.spawn(home.opened(team, user), name=f"home {team}/{user}")

    return home
