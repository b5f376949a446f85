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
        for _ in range(200):  # until both wait
            waiting = await probe.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if waiting >= 2:
                break
            await asyncio.sleep(0.01)
        await held.commit()
        outcomes = await asyncio.gather(again, stopped, return_exceptions=True)
    finally:
        await locker.close()
        await probe.close()
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    run = await repo.get_run(call.run_id)
    assert run is not None and run.status == "cancelled"
    assert await repo.hold_of(call.run_id) is None
