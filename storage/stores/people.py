"""People's names (``people``): the display name Slack last gave for a user id.

The bot writes a name whenever it looks one up (handlers.slack.people: a decider, a
requester, an editor); the command line and the exports, which never ask Slack, read them
to say "asked by Ana Diaz (@ana)" rather than print an id. A name is a courtesy, never a
fact a decision depends on: ids stay what every record keys on.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.sql.people import REMEMBER_NAME, names_sql

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE
# How many ids one read names at most (each is a statement parameter).
NAMES_PER_READ = 500


class PeopleStore:
    database: Database

    async def remember_name(self, user_id: str, name: str, *, now: datetime) -> None:
        def body(tx: Tx) -> None:
            tx.execute(REMEMBER_NAME, {"user_id": user_id, "name": name[:255], "now": now})

        await self.database.run(body, WRITE_ONE)

    async def names_of(self, user_ids: Collection[str]) -> dict[str, str]:
        """The known names of ``user_ids`` (ids with no name are left out)."""
        wanted = sorted({u for u in user_ids if u})[:NAMES_PER_READ]
        if not wanted:
            return {}
        sql, params = names_sql(wanted)

        def body(tx: Tx) -> dict[str, str]:
            return {str(row[0]): str(row[1]) for row in tx.all(sql, params)}

        return await self.database.run(body, READ_ONE)
