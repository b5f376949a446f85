"""Tools that hold until the test lets them go, to stop a drive in the middle of a call."""

from __future__ import annotations

import asyncio

from tests.support import ops_tools


class Hold:
    """``started`` is set when the tool begins (``again`` when a second call begins); the
    tool returns once ``release`` is set."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.again = asyncio.Event()
        self.release = asyncio.Event()

    async def wait(self) -> None:
        (self.again if self.started.is_set() else self.started).set()
        await self.release.wait()


# Replaced by a fresh pair for every test (asyncio events belong to one event loop).
HOLD = Hold()
STATUS_HOLD = Hold()


async def held_restart(service: str) -> str:
    """Restart a service, slowly."""
    await HOLD.wait()
    ops_tools.EXECUTED.append(("held_restart", {"service": service}))
    return f"restarted {service} (slowly)"


async def held_status(service: str) -> str:
    """Read the status of a service, slowly."""
    await STATUS_HOLD.wait()
    ops_tools.EXECUTED.append(("held_status", {"service": service}))
    return f"{service} is healthy (slowly)"
