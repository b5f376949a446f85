"""The App Home tab: what waits for you, your requests, recent decisions near you.

``app_home_opened`` (:mod:`handlers.listeners.home`) publishes the person's Home
(``views.publish``); the view is :func:`handlers.blocks.home_view`. Its buttons are the
/approvals list's own (same action ids, same decision path); a Home click has no channel
and no response URL, so what a list would answer ephemerally shows at the top of the Home.

The Home is refreshed when something changes for the person (a card posted or edited for
an approval they asked for, may decide, or decided), for people who ever opened their Home.
Both are durable (``home_viewers``, ``home_dirty`` in :mod:`storage.stores.reach`), so a change made
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

from bot.clock import utcnow
from bot.config import Config
from bot.ops import BackgroundTasks
from handlers.blocks import held_run_blocks, home_view
from handlers.slack.failures import SLACK_FAILURES
from handlers.slack.groups import GroupLookupFailed, UserGroups, approver_groups
from handlers.slack.workspaces import WorkspaceClients
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, PendingFilter, Repository

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

    def __init__(
        self,
        *,
        repo: Repository,
        config: Config,
        groups: UserGroups,
        clients: WorkspaceClients,
        background: BackgroundTasks,
    ) -> None:
        self.repo = repo
        self.config = config
        self.groups = groups
        self.clients = clients
        self.background = background
        self._scheduled: set[tuple[str, str]] = set()
        self._next_publish: dict[str, float] = {}
        self._pacing: dict[str, asyncio.Lock] = {}
        self._notices: dict[tuple[str, str], tuple[float, str]] = {}  # -> (until, text)

    async def opened(self, team: str, user: str) -> None:
        """``user`` opened their Home: remember it (every replica refreshes it from now
        on) and publish it."""
        self._notices.pop((team, user), None)  # read: opening the Home starts afresh
        try:
            await self.repo.saw_home(team, user, now=utcnow())
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
        self.background.spawn(self._mark(approval), name=f"home marks {approval.id}")

    async def _mark(self, approval: Approval) -> None:
        team = approval.team_id
        try:
            viewers = await self.repo.home_viewers(team)
            concerned = {approval.requester, approval.decided_by, *approval.approvers}
            if any(a.startswith("S") for a in approval.approvers):
                concerned |= viewers  # group members: who they are would cost a lookup each
            users = concerned & viewers
            await self.repo.mark_homes(team, users, now=utcnow())
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
        self.background.spawn(self._refresh(team, user), name=f"home {team}/{user}")

    async def _refresh(self, team: str, user: str) -> None:
        await asyncio.sleep(DEBOUNCE)
        self._scheduled.discard((team, user))
        await self._publish_marked(team, user, before=utcnow())

    async def _publish_marked(self, team: str, user: str, *, before: datetime) -> None:
        """Publish a marked Home if this replica wins its mark (another may have)."""
        try:
            if not await self.repo.claim_home(team, user, before=before):
                return
        except DATABASE_FAILURES as exc:
            log.error("home of %s: not refreshed (%s)", user, exc)
            return
        await self.publish(team, user)

    async def publish_dirty(self) -> None:
        """The sweeper's part: publish the Homes marked long ago and left (their replica
        died before it published them)."""
        before = utcnow() - STALE_MARK
        for team, user in await self.repo.dirty_homes(before=before):
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
            view = await self.render(team, user, notice=notice)
        except DATABASE_FAILURES as exc:
            log.error("home of %s: not rendered (%s)", user, exc)
            return
        await self._paced(team)
        try:
            client = await self.clients.for_team(team)
            await client.views_publish(user_id=user, view=view)
        except SLACK_FAILURES as exc:
            log.error("home of %s: not published: %s", user, exc)

    async def render(self, team: str, user: str, *, notice: str | None = None) -> dict[str, Any]:
        """``user``'s Home as it stands: what waits for them, their requests, recent
        decisions (raises what the database raises)."""
        now = utcnow()
        warning = None
        try:
            groups = await self.groups.groups_of(user, approver_groups(self.config), team=team)
        except GroupLookupFailed:
            groups, warning = set(), ":warning: I couldn't check your user groups just now."
        waiting, waiting_total = await self.repo.list_pending(
            PendingFilter(
                team_id=team,
                approver=user,
                approver_groups=sorted(groups),
                exclude_requester=user,
                anyone_channel=NO_CHANNEL,
                one_per_batch=True,
            ),
            now=now,
            limit=LISTED,
        )
        mine, mine_total = await self.repo.list_pending(
            PendingFilter(team_id=team, requester=user, one_per_batch=True), now=now, limit=LISTED
        )
        decided = await self.repo.recent_decisions(team_id=team, user=user, limit=LISTED)
        # A batch waiting is one item with its count (handlers.blocks.batches).
        batches = {
            a.batch_id: await self.repo.batch_rows(a.batch_id) for a in waiting if a.batch_id
        }
        # Runs an operator paused (issue 19 §2) that the user asked for or paused.
        held = [
            (run, hold)
            for run, hold in await self.repo.list_runs(status="held", limit=100)
            if run.team_id == team
            and user in (run.requester, hold.requested_by if hold is not None else None)
        ]
        view = home_view(
            batches=batches,
            now=now,
            waiting=waiting,
            waiting_total=waiting_total,
            mine=mine,
            mine_total=mine_total,
            decided=decided,
            notice=notice,
            warning=warning,
        )
        view["blocks"].extend(held_run_blocks(held))
        return view

    def teller(self, team: str, user: str) -> Any:
        """What a list answers ephemerally, shown at the top of the Home instead."""

        async def tell(text: str) -> None:
            await self.publish(team, user, notice=text)

        return tell
