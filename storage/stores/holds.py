"""Operators' holds on runs: ask for a pause (or a stop), take it at the drive's safe point,
release it with Resume, and end holds older than ``pause_ttl``.

Owns the ``run_holds`` rows (one per held run; see :class:`storage.models.RunHold`). Every
transaction takes the run's lock first (:func:`.transitions.lock_run`), like every other that
can move a paused run, and each change is one conditional statement whose row count says who
won: two Resumes on two replicas release the hold once, and only that release claims the
run's resume (``paused -> resuming``), so the run continues once. Audited with who and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.errors import LeaseLost
from storage.models import Run, RunHold
from storage.records import FINISHED_RUN_STATUSES
from storage.sql.delegations import ORPHANED_CHILDREN, UNFINISHED_CHILDREN
from storage.sql.holds import (
    COUNT_HELD,
    DELETE_HOLD,
    HELD_BEFORE,
    HOLD_ACTION,
    HOLD_OF_RUN,
    HOLD_RUN,
    INSERT_HOLD,
    UPGRADE_HOLD_TO_STOP,
    run_list_sql,
)
from storage.sql.runs import FINISH_RUN_WITH_HISTORY, RUN_BY_ID
from storage.stores.events import audit
from storage.stores.rows import HOLDS, RUNS
from storage.stores.transitions import (
    cancel_paused_run,
    cancel_unfinished_approvals,
    claim_resume,
    lock_run,
    settle_parent,
)
from storage.values import json_text

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


@dataclass(frozen=True)
class HoldOutcome:
    """What asking for a hold did: ``requested`` (the drive stops at its next safe point),
    ``held`` (the run was waiting already: it is held now), ``already`` (a hold was asked for
    before), ``cancelled`` (a Stop on a waiting run ended it), ``finished`` or ``missing``."""

    result: str
    run: Run | None = None
    hold: RunHold | None = None
    # A sub-agent's run cancelled by a Stop: its parent, whose resume the Stop's caller
    # claimed (bot.engine.holds), for the caller to resume.
    parent_resume: str | None = None
    # The runs it delegated to that the hold reached (bot.engine.holds): those a Stop
    # cancelled now are told in their threads as the run is.
    children: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReleaseOutcome:
    """What a Resume did: ``released`` is False when the run was not held (nothing changed);
    ``claimed`` is the run as its resume claim read it when this release claimed it (the
    caller drives it), None when it still waits on people or is still working."""

    released: bool
    run: Run | None = None
    claimed: Run | None = None
    hold: RunHold | None = None


class HoldStore:
    database: Database

    async def request_hold(
        self, run_id: str, *, action: str, actor: str, reason: str | None, now: datetime
    ) -> HoldOutcome:
        """Ask for ``action`` (``pause`` or ``stop``) on a run not finished yet."""
        if action not in ("pause", "stop"):
            raise ValueError(f"not a hold action: {action}")

        def body(tx: Tx) -> HoldOutcome:
            lock_run(tx, run_id)
            row = tx.one(RUN_BY_ID, {"id": run_id})
            if row is None:
                return HoldOutcome("missing")
            run = RUNS.load(tx, row)
            if run.status in FINISHED_RUN_STATUSES:
                return HoldOutcome("finished", run)
            if action == "stop" and run.status == "paused":
                # Waiting (on people, or held): nothing runs, so it ends now.
                why = f"stopped by {actor}" + (f": {reason}" if reason else "")
                tx.execute(DELETE_HOLD, {"run_id": run_id})
                cancel_paused_run(tx, run_id, why, now)
                audit(tx, now, "run_stop_requested", run_id=run_id, actor=actor, reason=reason)
                return HoldOutcome("cancelled", run)
            params = {
                "run_id": run_id,
                "action": action,
                "requested_by": actor,
                "reason": reason,
                "requested_at": now,
            }
            if tx.execute(INSERT_HOLD, params) != 1 and (
                action != "stop" or tx.execute(UPGRADE_HOLD_TO_STOP, params) != 1
            ):
                held = tx.one(HOLD_OF_RUN, {"run_id": run_id})
                return HoldOutcome("already", run, HOLDS.load(tx, held) if held else None)
            audit(tx, now, f"run_{action}_requested", run_id=run_id, actor=actor, reason=reason)
            hold_row = tx.one(HOLD_OF_RUN, {"run_id": run_id})
            assert hold_row is not None
            hold = HOLDS.load(tx, hold_row)
            if run.status == "paused":
                # Waiting on people: no drive to stop. Decisions still count; the hold only
                # keeps the resume from being claimed.
                audit(tx, now, "run_held", run_id=run_id, actor=actor, waiting=True)
                return HoldOutcome("held", run, hold)
            return HoldOutcome("requested", run, hold)

        return await self.database.run(body, WRITE)

    async def hold_action(self, run_id: str) -> str | None:
        """The hold asked for on a run (``pause``, ``stop``), or None: the safe point's read."""

        def body(tx: Tx) -> str | None:
            row = tx.one(HOLD_ACTION, {"run_id": run_id})
            return None if row is None else str(row[0])

        return await self.database.run(body, READ_ONE)

    async def hold_of(self, run_id: str) -> RunHold | None:
        def body(tx: Tx) -> RunHold | None:
            row = tx.one(HOLD_OF_RUN, {"run_id": run_id})
            return None if row is None else HOLDS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def hold_run(
        self,
        run_id: str,
        *,
        worker: str,
        history: list[dict[str, Any]],
        claimer: str,
        lease_until: datetime,
        now: datetime,
    ) -> bool:
        """The drive's safe point: store the history and release the lease; the run is
        ``paused`` and held. Raises LeaseLost if this drive no longer holds the run.

        A hold released (Resume) between the safe point's read and this write leaves nothing
        to wait for: the run's resume is claimed (as ``claimer``) in the same transaction, and
        True returned, for the caller to resume it at once."""
        params = {"id": run_id, "worker": worker, "history": json_text(history), "now": now}

        def body(tx: Tx) -> bool:
            if tx.execute(HOLD_RUN, params) != 1:  # the run's lock, first (see LOCK_RUN)
                raise LeaseLost(run_id)
            if tx.one(HOLD_OF_RUN, {"run_id": run_id}) is not None:
                audit(tx, now, "run_held", run_id=run_id)
                return False
            return claim_resume(tx, run_id, claimer, lease_until, now)

        return await self.database.run(body, WRITE)

    async def stop_held_run(
        self,
        run_id: str,
        *,
        worker: str,
        history: list[dict[str, Any]],
        now: datetime,
    ) -> str:
        """The drive's safe point under a Stop: the run ends ``cancelled`` (its unfinished
        approvals with it) and the hold is gone. Returns the run's error text."""

        def body(tx: Tx) -> str:
            # The run's lock before the hold's row, as request_hold takes them: the other
            # order deadlocks with a Stop asked for meanwhile (it holds the run's lock and
            # waits for the hold's row this deleted).
            lock_run(tx, run_id)
            held = tx.one(DELETE_HOLD, {"run_id": run_id})
            who = HOLDS.load(tx, held) if held is not None else None
            error = "Stopped" + (f" by {who.requested_by}" if who else "")
            if who is not None and who.reason:
                error += f": {who.reason}"
            params = {
                "id": run_id,
                "worker": worker,
                "status": "cancelled",
                "answer": None,
                "error": error,
                "now": now,
                "history": json_text(history),
            }
            if tx.execute(FINISH_RUN_WITH_HISTORY, params) != 1:
                raise LeaseLost(run_id)
            audit(tx, now, "run_cancelled", run_id=run_id, reason=error)
            cancel_unfinished_approvals(tx, run_id, f"the run was cancelled: {error}", now)
            # A child's end is its parent's result; the sweeper claims the parent's resume.
            settle_parent(tx, run_id, "cancelled", answer=None, error=error, now=now)
            return error

        return await self.database.run(body, WRITE)

    async def hold_children(
        self, run_id: str, *, action: str, actor: str, reason: str | None, now: datetime
    ) -> list[str]:
        """Sub-agents (issue 20 section 1): pause or stop every unfinished run ``run_id``
        delegated to, and theirs, each in a transaction of its own (a child's row is never
        locked after its parent's in one transaction). The runs a hold reached."""
        reached = []
        for child_id in await self._unfinished_children(run_id):
            outcome = await self.request_hold(
                child_id, action=action, actor=actor, reason=reason, now=now
            )
            if outcome.result in ("held", "requested", "cancelled", "already"):
                reached.append(child_id)
            reached += await self.hold_children(
                child_id, action=action, actor=actor, reason=reason, now=now
            )
        return reached

    async def stop_orphans(self, *, now: datetime, limit: int = 50) -> list[str]:
        """Stop the sub-agents' runs whose parent ended without them (the sweeper): a waiting
        one is cancelled now, a working one at its next safe point. The runs cancelled now."""

        def orphans(tx: Tx) -> list[tuple[str, str]]:
            return [(str(r[0]), str(r[1])) for r in tx.all(ORPHANED_CHILDREN, {"limit": limit})]

        cancelled = []
        for child_id, parent_id in await self.database.run(orphans, READ_ONE):
            reason = f"its parent run {parent_id} ended"
            outcome = await self.request_hold(
                child_id, action="stop", actor="parent-ended", reason=reason, now=now
            )
            if outcome.result == "cancelled":
                cancelled.append(child_id)
        return cancelled

    async def release_children(self, run_id: str, *, actor: str, now: datetime) -> list[str]:
        """Resume the children a parent's pause held (:meth:`hold_children`): their holds
        released, their resumes claimed with a lease that has run out already, so the
        sweeper of any replica carries each on. The runs released."""
        released = []
        for child_id in await self._unfinished_children(run_id):
            outcome = await self.release_hold(
                child_id, actor=actor, worker="parent-resumed", lease_until=now, now=now
            )
            if outcome.released:
                released.append(child_id)
            released += await self.release_children(child_id, actor=actor, now=now)
        return released

    async def _unfinished_children(self, run_id: str) -> list[str]:
        def body(tx: Tx) -> list[str]:
            return [str(row[0]) for row in tx.all(UNFINISHED_CHILDREN, {"id": run_id})]

        return await self.database.run(body, READ_ONE)

    async def release_hold(
        self, run_id: str, *, actor: str, worker: str, lease_until: datetime, now: datetime
    ) -> ReleaseOutcome:
        """Resume: release the hold and, when nothing of the run is pending, claim its resume
        (as ``worker``) in the same transaction. One caller releases it."""

        def body(tx: Tx) -> ReleaseOutcome:
            lock_run(tx, run_id)
            row = tx.one(RUN_BY_ID, {"id": run_id})
            run = None if row is None else RUNS.load(tx, row)
            held = tx.one(DELETE_HOLD, {"run_id": run_id})
            if held is None:
                return ReleaseOutcome(False, run)
            hold = HOLDS.load(tx, held)
            audit(tx, now, "run_resume_requested", run_id=run_id, actor=actor)
            if not claim_resume(tx, run_id, worker, lease_until, now):
                return ReleaseOutcome(True, run, None, hold)
            claimed = tx.one(RUN_BY_ID, {"id": run_id})
            assert claimed is not None
            return ReleaseOutcome(True, run, RUNS.load(tx, claimed), hold)

        return await self.database.run(body, WRITE)

    async def list_runs(
        self, *, status: str | None = None, limit: int = 100
    ) -> list[tuple[Run, RunHold | None]]:
        """Runs newest first, each with its hold; ``status="held"``: paused with a hold."""
        sql, params = run_list_sql(status, limit)
        width = len(RUNS.names)

        def body(tx: Tx) -> list[tuple[Run, RunHold | None]]:
            return [
                (RUNS.load(tx, row[:width]), HOLDS.load(tx, row[width:]) if row[width] else None)
                for row in tx.all(sql, params)
            ]

        return await self.database.run(body, READ_ONE, inline=False)

    async def held_count(self) -> int:
        def body(tx: Tx) -> int:
            row = tx.one(COUNT_HELD, {})
            return int(row[0]) if row else 0

        return await self.database.run(body, READ_ONE, inline=False)

    async def expire_holds(self, *, before: datetime, now: datetime, limit: int = 50) -> list[str]:
        """Cancel runs held since before ``before`` (``pause_ttl``); the ones cancelled."""

        def ids(tx: Tx) -> list[str]:
            return [str(r[0]) for r in tx.all(HELD_BEFORE, {"before": before, "limit": limit})]

        cancelled = []
        for run_id in await self.database.run(ids, READ_ONE, inline=False):

            def body(tx: Tx, run_id: str = run_id) -> bool:
                lock_run(tx, run_id)
                held = tx.one(HOLD_OF_RUN, {"run_id": run_id})
                if held is None or HOLDS.load(tx, held).requested_at >= before:
                    return False
                tx.execute(DELETE_HOLD, {"run_id": run_id})
                reason = "paused longer than pause_ttl"
                if not cancel_paused_run(tx, run_id, reason, now):
                    raise _NotPaused()
                audit(tx, now, "run_hold_expired", run_id=run_id)
                return True

            try:
                if await self.database.run(body, WRITE):
                    cancelled.append(run_id)
            except _NotPaused:
                continue
        return cancelled


class _NotPaused(Exception):
    """The held run was resumed meanwhile: roll the expiry back."""
