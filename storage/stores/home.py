"""App Homes: what a person's Home shows beyond the pending lists (recent decisions near them,
a channel's history), and which Homes to publish again.

Owns ``home_viewers`` (who has opened their Home: it is kept up to date) and ``home_dirty``
(whose Home shows something that changed since). Any replica reads and claims them, one
replica winning each Home (a conditional DELETE), so a change made anywhere refreshes it.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.models import Approval
from storage.sql.home import (
    APPROVED_BY,
    CHANNEL_DECISIONS,
    CLAIM_HOMES,
    DIRTY_HOMES,
    HOME_VIEWERS,
    MARK_HOME,
    RECENT_DECISIONS,
    SAW_HOME,
)
from storage.stores.rows import APPROVALS

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE


class HomeStore:
    database: Database

    async def recent_decisions(self, *, team_id: str, user: str, limit: int) -> list[Approval]:
        """The latest decided approvals in the workspace's channels ``user`` works in."""
        params = {"team_id": team_id, "user": user, "limit": limit}

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, row) for row in tx.all(RECENT_DECISIONS, params)]

        return await self.database.run(body, READ_ONE, inline=False)

    async def approved_by(
        self, *, team_id: str, user: str, since: datetime, limit: int
    ) -> list[Approval]:
        """The calls ``user`` approved since ``since`` (their grants' too), newest first."""
        params = {"team_id": team_id, "user": user, "since": since, "limit": limit}

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, row) for row in tx.all(APPROVED_BY, params)]

        return await self.database.run(body, READ_ONE)

    async def channel_decisions(self, *, team_id: str, channel: str, limit: int) -> list[Approval]:
        """The latest settled approvals of one channel, newest first (``/approvals history``)."""
        params = {"team_id": team_id, "channel": channel, "limit": limit}

        def body(tx: Tx) -> list[Approval]:
            return [APPROVALS.load(tx, row) for row in tx.all(CHANNEL_DECISIONS, params)]

        return await self.database.run(body, READ_ONE)

    async def saw_home(self, team_id: str, user_id: str, *, now: datetime) -> None:
        def body(tx: Tx) -> None:
            tx.execute(SAW_HOME, {"team_id": team_id, "user_id": user_id, "now": now})

        await self.database.run(body, WRITE_ONE)

    async def home_viewers(self, team_id: str) -> set[str]:
        def body(tx: Tx) -> set[str]:
            return {row[0] for row in tx.all(HOME_VIEWERS, {"team_id": team_id})}

        return await self.database.run(body, READ_ONE)

    async def mark_homes(self, team_id: str, users: Collection[str], *, now: datetime) -> None:
        """These people's Homes show something that changed: publish them again."""
        rows = [{"team_id": team_id, "user_id": u, "now": now} for u in sorted(users)]

        def body(tx: Tx) -> None:
            tx.executemany(MARK_HOME, rows)

        if rows:
            await self.database.run(body, WRITE)

    async def claim_home(self, team_id: str, user_id: str, *, before: datetime) -> bool:
        """Take one Home to publish (marked before ``before``): one replica wins it."""
        params = {"team_id": team_id, "user_id": user_id, "before": before}

        def body(tx: Tx) -> bool:
            return tx.one(CLAIM_HOMES, params) is not None

        return await self.database.run(body, WRITE_ONE)

    async def dirty_homes(self, *, before: datetime, limit: int = 100) -> list[tuple[str, str]]:
        def body(tx: Tx) -> list[tuple[str, str]]:
            return [
                (row[0], row[1]) for row in tx.all(DIRTY_HOMES, {"before": before, "limit": limit})
            ]

        return await self.database.run(body, READ_ONE)
