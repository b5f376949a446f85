"""Leases: which drive may move a run, until when, and taking over a run whose drive stopped.

Owns the ``runs`` columns ``lease_owner`` (a worker id plus a token per drive) and
``lease_expires_at``. A run is driven only by the drive holding its lease; a crashed worker's
lease runs out and :meth:`LeaseStore.take_over_run` hands the run to another. A decision's
resume claim gives the lease to the drive that resumes the run (:mod:`.transitions`);
:meth:`LeaseStore.start_resumed_run` is the claimant's start when it claimed as a worker.
The sweeper's safety net is here too: paused runs that nothing will resume.
"""

from __future__ import annotations

from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.errors import LeaseLost
from storage.models import Run
from storage.sql.runs import (
    RELEASE_LEASES,
    RENEW_LEASE,
    STALE_RUNS,
    START_RESUMED_RUN,
    STRANDED_RUNS,
    TAKE_OVER_RUN,
)
from storage.stores.events import audit
from storage.stores.rows import RUNS
from storage.stores.transitions import claim_resume, lock_run

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


class LeaseStore:
    database: Database

    async def renew_lease(self, run_id: str, worker: str, lease_until: datetime) -> None:
        def body(tx: Tx) -> None:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until}
            if tx.execute(RENEW_LEASE, params) != 1:
                raise LeaseLost(run_id)

        await self.database.run(body, WRITE)

    async def release_leases(self, worker: str, *, now: datetime) -> list[str]:
        """End every lease ``worker`` holds (a graceful shutdown); the runs it released.

        ``worker`` is the runner's worker id: its resume claims carry it as is, its drives as
        ``worker/token``. Call it only once the worker has stopped driving runs: a drive still
        going would renew the lease it lost (or find it taken over).
        """
        prefix = f"{worker}/"
        params = {"worker": worker, "prefix": prefix, "prefix_length": len(prefix), "now": now}

        def body(tx: Tx) -> list[str]:
            released = [row[0] for row in tx.all(RELEASE_LEASES, params)]
            for run_id in released:
                audit(tx, now, "lease_released", run_id=run_id, worker=worker)
            return released

        return await self.database.run(body, WRITE)

    async def start_resumed_run(
        self,
        run_id: str,
        *,
        worker: str,
        lease_until: datetime,
        now: datetime,
        owner: str | None = None,
    ) -> Run:
        """``resuming -> running`` for the worker that claimed the resume (as ``worker``, or
        for one of its drives, ``worker/…``).

        ``owner`` (default ``worker``) then holds the lease: one drive, not the whole worker,
        so a second drive of the same run in the same process is fenced off. Not needed after
        a decision this worker claimed with a drive's owner (see ``decide``): that drive holds
        the lease already.
        """
        params = {
            "id": run_id,
            "worker": worker,
            "prefix": f"{worker}/",
            "prefix_length": len(worker) + 1,
            "owner": owner or worker,
            "lease_until": lease_until,
            "now": now,
        }

        def body(tx: Tx) -> Run:
            row = tx.one(START_RESUMED_RUN, params)
            if row is None:
                raise LeaseLost(run_id)
            # No audit: the claim that left the run ``resuming`` recorded its resume.
            return RUNS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def stale_runs(self, now: datetime, limit: int = 100) -> list[str]:
        """Runs whose worker stopped renewing its lease (it crashed or lost the database)."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(STALE_RUNS, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def take_over_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> Run | None:
        """Take a run whose lease ran out; None when it is not stale (any more)."""

        def body(tx: Tx) -> Run | None:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
            row = tx.one(TAKE_OVER_RUN, params)
            if row is None:
                return None
            audit(tx, now, "run_taken_over", run_id=run_id, worker=worker)
            return RUNS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def stranded_runs(self, limit: int = 100) -> list[str]:
        """Paused runs with no approval pending whose resume nobody claimed."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(STRANDED_RUNS, {"limit": limit})]

        return await self.database.run(body, READ_ONE, inline=False)

    async def claim_stranded_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> bool:
        """Claim the resume of a paused run with nothing pending; False if someone else did,
        or it is not paused (any more), or an approval is pending after all."""

        def body(tx: Tx) -> bool:
            lock_run(tx, run_id)
            if not claim_resume(tx, run_id, worker, lease_until, now):
                return False
            audit(tx, now, "stranded_resume_claimed", run_id=run_id, worker=worker)
            return True

        return await self.database.run(body, WRITE)
