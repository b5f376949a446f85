"""The direct pool's connection slots (storage.drivers.pg_pool._Slots): at most ``size``
holders, waiters served in order, and no slot lost to a waiter that gave up (a timeout)."""

from __future__ import annotations

import asyncio

import pytest

from storage.drivers.pg_pool import _Slots


async def test_free_slots_are_taken_at_once_and_waiters_served_in_order() -> None:
    slots = _Slots(2)
    assert slots.take_now() and slots.take_now()
    assert not slots.take_now()
    served: list[str] = []

    async def wait(name: str) -> None:
        await slots.take()
        served.append(name)

    first = asyncio.create_task(wait("first"))
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0)
    slots.give()
    await first
    assert served == ["first"]
    assert not slots.take_now()  # still two holders
    slots.give()
    await second
    assert served == ["first", "second"]
    slots.give()
    slots.give()
    assert slots.take_now() and slots.take_now() and not slots.take_now()


async def test_a_waiter_that_timed_out_loses_no_slot() -> None:
    slots = _Slots(1)
    assert slots.take_now()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await slots.take()
    slots.give()  # the waiter that gave up is skipped: the slot is free again
    assert slots.take_now()
    assert not slots.take_now()


async def test_a_waiter_cancelled_as_it_was_handed_a_slot_passes_it_on() -> None:
    slots = _Slots(1)
    assert slots.take_now()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.give()  # handed to the first waiter, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await second  # the slot went on to the second waiter
    assert not slots.take_now()
    slots.give()
    assert slots.take_now()
