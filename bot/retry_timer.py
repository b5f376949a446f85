"""The ~1 s check for retries that have come due (``RetryAt``): the one timer besides the sweep.

Due retries are rows in the database (``due_at``), so nothing is held in memory: a retry that
came due while no bot ran is resumed at the first check after start-up, and replicas share
the work through the conditional UPDATE that makes a retry due and claims its run's resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from bot.runner import Runner

log = logging.getLogger(__name__)

RETRY_CHECK_SECONDS = 1.0


async def run_retry_timer(
    runner: Runner,
    resume: Callable[[str], Coroutine[Any, Any, Any]],
    spawn: Callable[[Coroutine[Any, Any, Any], str], Any],
    stop: asyncio.Event,
    interval: float = RETRY_CHECK_SECONDS,
) -> None:
    """Every ``interval`` seconds until ``stop``: claim due retries, resume each run as a
    task of its own (``spawn``), so a slow run holds up no other."""
    while not stop.is_set():
        try:
            for run_id in await runner.due_retries():
                spawn(resume(run_id), f"retry {run_id}")
        except Exception:
            log.exception("the due-retry check failed; trying again in %.0fs", interval)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
