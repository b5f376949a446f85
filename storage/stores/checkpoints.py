"""Checkpoints: the last state a long gated call stored, and resuming the call from it.

Owns ``checkpoints`` (one row per call, keyed by its approval) and the ``executing ->
executing`` resume of a call whose worker died after it stored one (audited
``execution_resumed``). A save is the one durable commit of a checkpoint (``durable=True``,
as the ``executing`` record): the tool goes on with side effects once it returns. A save
renews the run's lease in the same transaction and is refused (False) once another drive
holds the run, so a worker that lost its run stores nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.records import StoredCheckpoint
from storage.sql.checkpoints import (
    COUNT_RESUME,
    GET_CHECKPOINT,
    INSERT_CHECKPOINT,
    RENEW_LEASE_FOR_CHECKPOINT,
    RESUME_CHECKPOINTED,
    UPDATE_CHECKPOINT,
)
from storage.stores.events import audit

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


class CheckpointStore:
    database: Database

    async def save_checkpoint(
        self,
        approval_id: str,
        *,
        state: str,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> bool:
        """Store ``state`` (JSON text) as the call's last checkpoint, durably, and renew the
        run's lease until ``lease_until``; False (nothing stored) when ``owner`` no longer
        holds the run or the call is no longer executing."""
        return await self.database.run(
            _save(approval_id, state, owner, lease_until, now), WRITE, durable=True
        )

    async def get_checkpoint(self, approval_id: str) -> StoredCheckpoint | None:
        def body(tx: Tx) -> StoredCheckpoint | None:
            row = tx.one(GET_CHECKPOINT, {"id": approval_id})
            if row is None:
                return None
            return StoredCheckpoint(state=str(row[0]), saves=int(row[1]), resumes=int(row[2]))

        return await self.database.run(body, READ_ONE)

    async def resume_checkpointed(
        self, approval_id: str, *, owner: str, now: datetime
    ) -> StoredCheckpoint | None:
        """Resume a call found ``executing`` from its checkpoint: the state to resume from,
        or None (no checkpoint, the call moved on, or ``owner`` does not hold the run)."""

        def body(tx: Tx) -> StoredCheckpoint | None:
            row = tx.one(RESUME_CHECKPOINTED, {"id": approval_id, "owner": owner, "now": now})
            if row is None:
                return None
            tx.execute(COUNT_RESUME, {"id": approval_id})
            stored = tx.one(GET_CHECKPOINT, {"id": approval_id})
            assert stored is not None
            checkpoint = StoredCheckpoint(
                state=str(stored[0]), saves=int(stored[1]), resumes=int(stored[2])
            )
            audit(
                tx,
                now,
                "execution_resumed",
                run_id=row[0],
                approval_id=approval_id,
                checkpoints_saved=checkpoint.saves,
                attempt=checkpoint.resumes + 1,
            )
            return checkpoint

        return await self.database.run(body, WRITE)


def _save(
    approval_id: str, state: str, owner: str, lease_until: datetime, now: datetime
) -> Callable[[Tx], bool]:
    params = {"id": approval_id, "state": state, "owner": owner, "now": now}

    def body(tx: Tx) -> bool:
        fence = {"id": approval_id, "owner": owner, "lease_until": lease_until, "now": now}
        if tx.execute(RENEW_LEASE_FOR_CHECKPOINT, fence) != 1:
            return False
        if tx.execute(UPDATE_CHECKPOINT, params) == 0:
            tx.execute(INSERT_CHECKPOINT, params)
        return True

    return body
