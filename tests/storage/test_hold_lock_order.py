"""Operators' holds and the drive's safe point take the run's lock first, as every transaction
of a run does (storage.sql.runs LOCK_RUN): a transaction that locks a hold's row and then
waits for the run's row deadlocks with one that holds the run's lock and waits for the hold.
"""

from __future__ import annotations

import asyncio

import pytest

from storage.sql.runs import LOCK_RUN
from tests.conftest import Database
from tests.storage.test_one_statement_executions import (
    NOW,
    _connect,
    _waiting_for_a_lock,
    approved_call,
)
from tests.support.statements import begin_hold

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


async def test_a_stop_at_the_safe_point_and_a_second_stop_do_not_deadlock(
    database: Database,
) -> None:
    """The drive stops at its safe point under a Stop (stop_held_run) while a second Stop is
    asked for (another replica, the CLI): request_hold takes the run's lock, then writes the
    hold's row; stop_held_run must take them in the same order. It deleted the hold's row
    first and then waited for the run's row: each waited for the other, and PostgreSQL ended
    the drive's safe point with a deadlock error. Made deterministic: a third transaction
    holds the run's lock until both wait, the second Stop first in line."""
    repo = await database.open()
    call = await approved_call(repo, "9.0")
    stop = await repo.request_hold(call.run_id, action="stop", actor="U0OP", reason=None, now=NOW)
    assert stop.result == "requested"
    locker, probe = await _connect(database), await _connect(database)
    try:
        held = locker.transaction()
        await held.start()
        await locker.execute(LOCK_RUN.replace(":run_id", "$1"), call.run_id)
        again = asyncio.create_task(
            repo.request_hold(call.run_id, action="stop", actor="U0OP2", reason=None, now=NOW)
        )
        await _waiting_for_a_lock(probe, locker)
        stopped = asyncio.create_task(
            repo.stop_held_run(call.run_id, worker=call.owner, history=[], now=NOW)
        )
        await _waiting_for_a_lock(probe, locker, at_least=2)  # until both wait
        await held.commit()
        outcomes = await asyncio.gather(again, stopped, return_exceptions=True)
    finally:
        await locker.close()
        await probe.close()
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    run = await repo.get_run(call.run_id)
    assert run is not None and run.status == "cancelled"
    assert await repo.hold_of(call.run_id) is None


async def test_a_stop_committed_while_the_recording_waits_for_the_run_is_read(
    database: Database,
) -> None:
    """The recording of a gated call's result also reads the run's hold for the drive's next
    safe point (before the model call: TurnContext.hold_epoch, bot.gate.recording). A Stop
    asked for (request_hold: the run's lock, then the hold) while the recording waits for
    the run's lock is committed before the recording is: the read it hands on must see it,
    as the full transaction's (its statement after the lock takes a new snapshot) does. The
    one statement's snapshot predates the Stop: it said "no hold", and the drive made one
    more model call (and could end the run completed) under a Stop asked before it."""
    repo = await database.open()
    call = await approved_call(repo, "8.0")
    assert await call.begin(stop_if_held=True)
    operator, probe = await _connect(database), await _connect(database)
    read: list[str | None] = []
    try:
        hold_tx = await begin_hold(operator, call.run_id, "stop", NOW)
        task = asyncio.create_task(call.record(on_hold=read.append))
        await _waiting_for_a_lock(probe, operator)
        await hold_tx.commit()
        assert await task  # still the run's drive: recorded, the lease renewed
    finally:
        await operator.close()
        await probe.close()
    assert read in ([], ["stop"])  # no read (the safe point reads itself), or the Stop
    [approval] = await repo.approvals_for_run(call.run_id)
    assert approval.status == "executed"
