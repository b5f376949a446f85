"""Tools for the pause state machine (tests/bot/test_pause_state_machine.py): ``guarded``
needs approval, ``plain`` does not; both hand each start to ``ON_START``, which the machine
sets to record the start and to make this attempt return, raise, or hang (a drive that dies
mid-call). Async, so that a hanging call is cancelled with its drive, as SIGKILL would end it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

ON_START: Callable[[str, int], Awaitable[None]] | None = None


async def guarded(n: int) -> str:
    """Change thing n (needs approval)."""
    if ON_START is not None:
        await ON_START("guarded", n)
    return f"guarded {n} done"


async def plain(n: int) -> str:
    """Read thing n (needs no approval)."""
    if ON_START is not None:
        await ON_START("plain", n)
    return f"plain {n} done"
