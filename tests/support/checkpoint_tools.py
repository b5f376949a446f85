"""Long tools that checkpoint (``bot.pauses.checkpoint``), for the engine's tests.

``PROCESSED`` records every item really processed, in order, by every attempt; ``STOP_AT``
makes a first attempt (no checkpoint yet to resume from) block before processing that item,
until ``RELEASE`` is set: the test then takes the run over as if the worker had died there.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from bot.pauses import checkpoint, last_checkpoint, progress

PROCESSED: list[int] = []
RESUMED_FROM: list[Any] = []
STOP_AT: int | None = None
REACHED = threading.Event()
RELEASE = threading.Event()
# A resumed attempt (it found a checkpoint) waits here before it goes on, when set.
HOLD_RESUMED = False
RESUMED = threading.Event()
GO_ON = threading.Event()


def reset(stop_at: int | None = None, *, hold_resumed: bool = False) -> None:
    global STOP_AT, REACHED, RELEASE, HOLD_RESUMED, RESUMED, GO_ON
    PROCESSED.clear()
    RESUMED_FROM.clear()
    STOP_AT = stop_at
    REACHED = threading.Event()
    RELEASE = threading.Event()
    HOLD_RESUMED = hold_resumed
    RESUMED = threading.Event()
    GO_ON = threading.Event()


def migrate_tenants(count: int) -> str:
    """Migrate tenants one by one (sync; checkpoints after each)."""
    state = last_checkpoint()
    RESUMED_FROM.append(state)
    start = state["next"] if state else 0
    if state is not None and HOLD_RESUMED:
        RESUMED.set()
        GO_ON.wait(30)
    for item in range(start, count + 1):
        if state is None and item == STOP_AT:  # count: after the last checkpoint
            REACHED.set()
            RELEASE.wait(30)
        if item == count:
            break
        PROCESSED.append(item)
        checkpoint({"next": item + 1})
        progress(item + 1, count, f"t{item}")
    return f"migrated {count} tenants"


async def migrate_async(count: int) -> str:
    """Migrate tenants one by one (async; checkpoints after each)."""
    state = last_checkpoint()
    RESUMED_FROM.append(state)
    start = state["next"] if state else 0
    for item in range(start, count):
        if state is None and item == STOP_AT:
            REACHED.set()
            while not RELEASE.is_set():
                await asyncio.sleep(0.01)
        PROCESSED.append(item)
        await checkpoint({"next": item + 1})
        progress(item + 1, count)
    return f"migrated {count} tenants"


def huge_checkpoint(size: int) -> str:
    """Store a checkpoint of ``size`` characters."""
    checkpoint({"blob": "x" * size})
    return "stored"


async def forgets_await(count: int) -> str:
    """An async tool that calls checkpoint() without await (a bug: nothing is stored)."""
    checkpoint({"next": count})
    return "done"
