"""The direct pool under a storm of transactions on real PostgreSQL, a third of them
cancelled or timed out at random points (waiting for a slot, connecting, mid-statement):
afterwards every slot is free again and the pool still runs ``size`` transactions at once."""

from __future__ import annotations

import asyncio
import random

import pytest

from storage.drivers.pg_direct import run_direct
from storage.drivers.postgres import prepared
from storage.repository import Tx
from tests.conftest import Database


def sleepy(tx: Tx) -> int:
    row = tx.one("SELECT 1 FROM pg_sleep(:s)", {"s": random.choice([0.0, 0.001, 0.005])})
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_cancellations_in_a_storm_leak_no_slot(database: Database) -> None:
    repo = await database.open()
    pool = repo.database._direct  # type: ignore[attr-defined]
    assert pool is not None
    size = pool._size
    rng = random.Random(7)

    async def one() -> int:
        return await run_direct(pool, sleepy, prepared, begin="BEGIN")

    for _ in range(15):
        tasks = [asyncio.create_task(one()) for _ in range(size * 4)]
        await asyncio.sleep(rng.choice([0, 0.0005, 0.002]))
        for task in rng.sample(tasks, len(tasks) // 3):
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(r == 1 or isinstance(r, asyncio.CancelledError) for r in results), results
        assert pool._slots._free == size
        assert not [w for w in pool._slots._waiters if not w.done()]
    # Still every slot usable at once.
    got = await asyncio.gather(*[one() for _ in range(size * 2)])
    assert got == [1] * (size * 2)
