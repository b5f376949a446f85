"""Recoveries: a person's choice on a call that failed, or whose outcome is unknown.

Owns the transitions of ``approvals`` rows of kind ``recovery`` (the pause itself stores
them, :mod:`.pauses`; a Retry then runs as a due retry does, :mod:`.waits`). Each choice is
one conditional UPDATE under the run's lock, so exactly one of several concurrent clicks, on
any replica, wins; Retry, Skip and "it ran" claim the run's resume in the same transaction,
Stop run cancels the run with its other pending rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.records import DecisionOutcome
from storage.sql.recoveries import EDIT_AND_RETRY, RECOVER, RECOVERY_STATUSES
from storage.stores.events import audit
from storage.stores.rows import APPROVALS
from storage.stores.transitions import cancel_paused_run, decided_outcome, lock_run_of_approval
from storage.values import json_text, storable

WRITE = Mode.WRITE
RECOVERY_EVENTS = {
    "retry": "recovery_retry",
    "skip": "recovery_skipped",
    "resolve": "recovery_resolved",
    "stop": "recovery_stopped",
}


class RecoveryStore:
    database: Database

    async def recover(
        self,
        approval_id: str,
        *,
        choice: str,
        actor: str,
        actor_name: str | None,
        note: str | None,
        worker: str,
        lease_until: datetime,
        now: datetime,
        claim: bool = True,
    ) -> DecisionOutcome | None:
        """Settle a pending recovery row with ``choice`` (retry, skip, resolve, stop); None
        when it is not pending any more, or has expired (the caller says which)."""
        status = RECOVERY_STATUSES[choice]

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            params = {
                "id": approval_id,
                "status": status,
                "actor": actor,
                "actor_name": actor_name[:255] if actor_name else None,
                "note": note,
                "now": now,
            }
            row = tx.one(RECOVER, params)
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            run_id = approval.run_id
            audit(
                tx,
                now,
                RECOVERY_EVENTS[choice],
                run_id=run_id,
                approval_id=approval_id,
                actor=actor,
                attempt=approval.attempt,
            )
            if choice == "stop":
                who = actor_name or f"@{actor}"
                cancel_paused_run(tx, run_id, f"{who} stopped the run after the error", now)
                return DecisionOutcome(approval=approval, resume_claimed=False)
            return decided_outcome(tx, approval, claim, worker, lease_until, now)

        return await self.database.run(body, WRITE)

    async def edit_and_retry(
        self,
        approval_id: str,
        *,
        arguments: dict[str, Any],
        payload_hash: str,
        shown_hash: str,
        actor: str,
        actor_name: str | None,
        worker: str,
        lease_until: datetime,
        now: datetime,
        claim: bool = True,
    ) -> DecisionOutcome | None:
        """Edit, then retry: ``pending -> due`` with the edited arguments bound by
        ``payload_hash``, only if the row still has ``shown_hash`` (what the form showed)."""

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            params = {
                "id": approval_id,
                "edited": json_text(storable(arguments)),
                "payload_hash": payload_hash,
                "shown_hash": shown_hash,
                "actor": actor,
                "actor_name": actor_name[:255] if actor_name else None,
                "now": now,
            }
            row = tx.one(EDIT_AND_RETRY, params)
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            audit(
                tx,
                now,
                "recovery_edited",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                attempt=approval.attempt,
            )
            return decided_outcome(tx, approval, claim, worker, lease_until, now)

        return await self.database.run(body, WRITE)
