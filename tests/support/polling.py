"""Waiting in a test for something another task or process does: poll until it is true.

For what ``Harness.settle`` cannot wait on (work held on purpose, another process). Only a
guard against hanging: the behaviour asserted is that it happens at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


async def until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """``check()``'s first true value, polled every 50 ms; fails naming ``what`` after
    ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if value := check():
            return value
        await asyncio.sleep(0.05)
    if value := check():
        return value
    raise AssertionError(f"never happened: {what}")
