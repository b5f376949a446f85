"""Executions: ``approved -> executing -> executed`` around an approved call, at most once.

Owns those transitions of ``approvals`` (``executed_at``, ``result``), ``executing ->
unknown`` when a worker died between starting a call and recording its result (it is never
run again), and cancelling an approved call that can no longer run as approved. The
``executing`` record is the one commit made durable whatever the database's setting
(``durable=True``): a power cut must not lose it after the tool ran. A call that stored a
checkpoint (``storage.stores.checkpoints``) is the exception: the drive holding its run
resumes it, and a stalled worker finishing it meanwhile does not record over that attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.errors import RunHeld, StorageError
from storage.sql.approvals import (
    BEGIN_EXECUTION,
    BEGIN_EXECUTION_FENCED,
    CANCEL_APPROVED,
    CANCEL_UNRUNNABLE,
    MARK_OUTCOME_UNKNOWN,
    RECORD_EXECUTION,
    RECORD_LATE_EXECUTION,
    RECORDED_EXECUTION,
    RENEW_LEASE_OF_APPROVAL,
    START_CLAIMED_RUN,
)
from storage.sql.checkpoints import HAS_CHECKPOINT
from storage.sql.events import audit_row, audited_params, audited_postgres
from storage.sql.executions import BEGIN_EXECUTION_ONE, RECORD_EXECUTION_RENEWING
from storage.stores.events import audit

WRITE, WRITE_ONE = Mode.WRITE, Mode.WRITE_ONE
RECORDED_AUDITED = audited_postgres(RECORD_EXECUTION)
BEGIN_AUDITED = {
    False: audited_postgres(BEGIN_EXECUTION),
    True: audited_postgres(BEGIN_EXECUTION_FENCED),
}

# PostgreSQL: the usual start and recording in one statement (storage.sql.executions) before
# the full transaction. False (tests): the full transaction alone, to compare the rows.
ONE_STATEMENT = True


class ExecutionStore:
    database: Database
    # Called inside ``begin_execution``'s transaction, after its UPDATE, before its COMMIT:
    # diagnostics and tests read the connection's commit durability from there (the
    # transaction the ``executing`` record is committed in, not a look-alike). On PostgreSQL
    # the one-statement start then runs in a transaction (a second statement would not be
    # allowed in autocommit) on the same kind of connection, whose session sets the level.
    inside_begin_execution: Callable[[Tx], None] | None = None

    async def begin_execution(
        self,
        approval_id: str,
        *,
        now: datetime,
        owner: str | None = None,
        stop_if_held: bool = False,
    ) -> bool:
        """``approved -> executing``, recorded before the tool runs: at most once.

        Only before the approval's ``expires_at``; with ``owner``, only while that lease owner
        still drives the approval's run. False when the call must not start (the caller reads
        the approval to say why).

        The one commit made durable whatever the database's setting (``durable=True``: SQLite
        ``synchronous = FULL``, PostgreSQL never an asynchronous commit): if a power cut lost
        it after the tool ran, a recovered bot would find the call ``approved`` and run it
        again. In WAL mode its fsync also makes every earlier commit durable.

        ``stop_if_held``: the call's safe point is this transaction. If an
        operator's hold is asked for on the run, nothing is written and RunHeld is raised.
        """
        params = {"id": approval_id, "now": now}
        sql = BEGIN_EXECUTION
        if owner is not None:
            params["owner"] = owner
            sql = BEGIN_EXECUTION_FENCED

        # PostgreSQL: the audit row goes with the UPDATE (audited_postgres), one round trip.
        started = audit_row(now, "execution_started", approval_id=approval_id)
        audited_sql, audited = BEGIN_AUDITED[owner is not None], audited_params(params, started)

        if ONE_STATEMENT and self.database.dialect == "postgresql":
            one_sql = BEGIN_EXECUTION_ONE[(owner is not None, stop_if_held)]
            hook = self.inside_begin_execution

            def one(tx: Tx) -> bool:
                if tx.one(one_sql, audited) is None:
                    return False
                if hook is not None:
                    hook(tx)
                return True

            # Autocommit, one round trip; with the hook (tests), the same statement in a
            # transaction on the same durable connection, so the hook reads its commit level.
            if await self.database.run(one, WRITE if hook else WRITE_ONE, durable=True):
                return True
            # Nothing was written (a hold to stop at, or the call must not start): the full
            # transaction says which, and raises RunHeld for the hold.

        def body(tx: Tx) -> bool:
            if owner is not None:
                tx.execute(START_CLAIMED_RUN, {"id": approval_id, "owner": owner})
            merged = tx.dialect == "postgresql"
            row = tx.one(audited_sql, audited) if merged else tx.one(sql, params)
            if row is None:
                return False
            if stop_if_held and row[1] is not None:
                raise RunHeld(str(row[0]), str(row[1]))  # rolls the start back (and its audit)
            if not merged:
                audit(tx, now, "execution_started", run_id=row[0], approval_id=approval_id)
            if self.inside_begin_execution is not None:
                self.inside_begin_execution(tx)
            return True

        return await self.database.run(body, WRITE, durable=True)

    async def record_execution(
        self,
        approval_id: str,
        *,
        result: str,
        failed: bool,
        now: datetime,
        owner: str | None = None,
        lease_until: datetime | None = None,
        again: bool = False,
        late: bool = False,
        on_hold: Callable[[str | None], None] | None = None,
    ) -> bool:
        """``executing -> executed`` with the tool's output (or its error).

        ``late``: recorded after the run's lease ran out (a long database outage): audited
        with ``recorded_late``, as is every recording over the taker's ``unknown``.

        ``again``: a retry after a failed attempt (a database outage), which may have
        committed without its caller hearing so; finding the same result recorded is then
        success, not an error (and not audited twice).

        Also ``unknown -> executed``: the run was taken over while the tool ran and the taker
        recorded the outcome as unknown (it never re-runs such a call). The worker that ran it
        is the only one that knows the result, so it still records it, marked as late.

        With ``owner`` and ``lease_until``, the same transaction renews that drive's lease on
        the approval's run (the check a drive makes after every gated call) and returns
        whether it still held it: False means another drive has the run (the result is
        recorded all the same). Without them, True.

        ``on_hold`` is told the run's hold (``pause``, ``stop`` or None) as the recording
        statement read it, for the drive's next safe point (``bot.gate.safe_points``).
        """
        params = {"id": approval_id, "result": result}
        # PostgreSQL: the audit row of the usual case (executing -> executed) goes with its
        # UPDATE (audited_postgres); the rarer ones below audit as SQLite does.
        recorded_detail: dict[str, Any] = {"result": result[:2000]}
        if late:
            recorded_detail["recorded_late"] = True
        recorded = audit_row(
            now,
            "execution_failed" if failed else "execution_finished",
            approval_id=approval_id,
            **recorded_detail,
        )
        lease = None
        if owner is not None and lease_until is not None:
            lease = {"id": approval_id, "owner": owner, "lease_until": lease_until}

        if ONE_STATEMENT and self.database.dialect == "postgresql":
            one_sql = RECORDED_AUDITED if lease is None else RECORD_EXECUTION_RENEWING
            one_params = audited_params({**params, **(lease or {})}, recorded)

            def one(tx: Tx) -> Sequence[Any] | None:
                return tx.one(one_sql, one_params)

            row = await self.database.run(one, WRITE_ONE)
            if row is not None:
                if on_hold is not None:
                    on_hold(None if row[1] is None else str(row[1]))
                return lease is None or bool(row[2])
            # Not ``executing``, or a checkpointed call's run no longer ours: nothing recorded
            # (a renewed lease at most, renewed again below); the full transaction decides.

        def body(tx: Tx) -> bool:
            # The run's row first, as every transaction takes them (see LOCK_RUN).
            still_ours = lease is None or tx.execute(RENEW_LEASE_OF_APPROVAL, lease) == 1
            if not still_ours and tx.one(HAS_CHECKPOINT, {"id": approval_id}) is not None:
                # A call with a checkpoint is resumed by the drive that holds the run now:
                # the call is that attempt's, whose result is the one recorded.
                return False
            after_unknown = False
            merged = tx.dialect == "postgresql"
            if merged:  # its audit row with it (audited_postgres): one round trip
                row = tx.one(RECORDED_AUDITED, audited_params(params, recorded))
            else:
                row = tx.one(RECORD_EXECUTION, params)
            if row is not None and on_hold is not None:
                on_hold(None if row[1] is None else str(row[1]))
            if row is not None and merged:
                return still_ours
            if row is None:
                row = tx.one(RECORD_LATE_EXECUTION, params)
                after_unknown = True
            if row is None and again and tx.one(RECORDED_EXECUTION, params) is not None:
                return still_ours
            if row is None:
                raise StorageError(f"approval {approval_id} was not executing")
            detail: dict[str, Any] = {"result": result[:2000]}
            if after_unknown:
                detail["after_outcome_unknown"] = True
            if late or after_unknown:
                detail["recorded_late"] = True
            audit(
                tx,
                now,
                "execution_failed" if failed else "execution_finished",
                run_id=row[0],
                approval_id=approval_id,
                **detail,
            )
            return still_ours

        return await self.database.run(body, WRITE)

    async def mark_outcome_unknown(self, approval_id: str, *, now: datetime) -> bool:
        """``executing -> unknown``: the call began but its result was never recorded."""

        def body(tx: Tx) -> bool:
            row = tx.one(MARK_OUTCOME_UNKNOWN, {"id": approval_id})
            if row is None:
                return False
            audit(tx, now, "execution_outcome_unknown", run_id=row[0], approval_id=approval_id)
            return True

        return await self.database.run(body, WRITE)

    async def cancel_approved(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """``approved -> cancelled``: what was approved is no longer what would run."""
        return await self._cancel(CANCEL_APPROVED, approval_id, reason=reason, now=now)

    async def cancel_unrunnable(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """``pending | approved -> cancelled``: the call can never run (its tool is gone)."""
        return await self._cancel(CANCEL_UNRUNNABLE, approval_id, reason=reason, now=now)

    async def _cancel(
        self, statement: str, approval_id: str, *, reason: str, now: datetime
    ) -> bool:
        params = {"id": approval_id, "reason": reason, "now": now}

        def body(tx: Tx) -> bool:
            row = tx.one(statement, params)
            if row is None:
                return False
            audit(
                tx,
                now,
                "approval_cancelled",
                run_id=row[0],
                approval_id=approval_id,
                reason=reason,
            )
            return True

        return await self.database.run(body, WRITE)
