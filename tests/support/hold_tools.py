"""A tool for the operators' pause tests: each step records itself and, if a test set
``ON_STEP``, awaits it while the call executes (to pause the run mid-call)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tests.support import ops_tools

ON_STEP: Callable[[int], Awaitable[None]] | None = None


async def step(n: int) -> str:
    """Do step n of a job."""
    ops_tools.EXECUTED.append(("step", {"n": n}))
    if ON_STEP is not None:
        await ON_STEP(n)
    return f"step {n} done"
