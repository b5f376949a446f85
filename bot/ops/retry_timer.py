"""The ~1 s check for retries that have come due (``RetryAt``): the one timer besides the sweep.

Due retries are rows in the database (``due_at``), so nothing is held in memory: a retry that
came due while no bot ran is resumed at the first check after start-up, and replicas share
the work through the conditional UPDATE that makes a retry due and claims its run's resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bot.ops.outage import OutageLog

log = logging.getLogger(__name__)

RETRY_CHECK_SECONDS = 1.0


async def run_retry_timer(
    due_retries: Callable[[], Awaitable[list[str]]],
    resume: Callable[[str], Coroutine[Any, Any, Any]],
    spawn: Callable[[Coroutine[Any, Any, Any], str], Any],
    stop: asyncio.Event,
    interval: float = RETRY_CHECK_SECONDS,
    outages: OutageLog | None = None,
) -> None:
    """Every ``interval`` seconds until ``stop``: claim due retries (the runner's
    ``due_retries``), resume each run as a task of its own (``spawn``), so a slow run holds
    up no other. A database outage is logged once by ``outages`` (``bot.ops.outage``)."""
    outages = outages or OutageLog()
    while not stop.is_set():
        try:
            for run_id in await due_retries():
                spawn(resume(run_id), f"retry {run_id}")
        except Exception as exc:
            if not outages.failed("due-retry check", exc):
                log.exception("the due-retry check failed; trying again in %.0fs", interval)
        else:
            outages.succeeded("due-retry check")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
