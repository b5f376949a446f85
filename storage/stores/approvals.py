"""Reading approvals: one by id, a run's (by turn or all), and the pending lists.

Reads the ``approvals`` rows (all kinds of pause) that :mod:`.pauses` writes and the
decision, execution and card stores move on; owns no transition of its own. The pending list's
statements are :func:`storage.sql.approvals.pending_list_sql`, which the read-only commands'
path runs too.
"""

from __future__ import annotations

from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.models import Approval
from storage.records import PendingFilter
from storage.sql.approvals import (
    APPROVAL_BY_ID,
    APPROVALS_FOR_RUN,
    APPROVALS_FOR_TURN,
    pending_list_sql,
)
from storage.stores.rows import APPROVALS

READ, READ_ONE = Mode.READ, Mode.READ_ONE


class ApprovalStore:
    database: Database

    async def get_approval(self, approval_id: str) -> Approval | None:
        def body(tx: Tx) -> Approval | None:
            row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
            return None if row is None else APPROVALS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def approvals_for_turn(self, run_id: str, turn: int) -> list[Approval]:
        """The approvals requested by a run's pause number ``turn``."""

        def body(tx: Tx) -> list[Approval]:
            rows = tx.all(APPROVALS_FOR_TURN, {"run_id": run_id, "turn": turn})
            return [APPROVALS.load(tx, row) for row in rows]

        return await self.database.run(body, READ_ONE)

    async def approvals_for_run(self, run_id: str) -> list[Approval]:
        def body(tx: Tx) -> list[Approval]:
            return [
                APPROVALS.load(tx, row) for row in tx.all(APPROVALS_FOR_RUN, {"run_id": run_id})
            ]

        return await self.database.run(body, READ_ONE)

    async def list_pending(
        self,
        where: PendingFilter,
        *,
        now: datetime,
        limit: int = 20,
        offset: int = 0,
        count_limit: int | None = None,
    ) -> tuple[list[Approval], int]:
        """Pending, unexpired approvals, newest first, with the total count for paging.

        ``approver`` keeps approvals that name the user (or one of their groups) or that
        name nobody (anyone but the requester may decide those; with ``anyone_channel``,
        only those of that channel). ``count_limit`` stops
        counting there (a total above it means "more than that"): counting every match is
        the one part of a page whose cost grows with the table.
        """
        count_sql, count_params, page_sql, params = pending_list_sql(
            where, now=now, limit=limit, offset=offset, count_limit=count_limit
        )

        def body(tx: Tx) -> tuple[list[Approval], int]:
            total = tx.one(count_sql, count_params)
            rows = tx.all(page_sql, params)
            return [APPROVALS.load(tx, row) for row in rows], int(total[0] if total else 0)

        return await self.database.run(body, READ, inline=False)
