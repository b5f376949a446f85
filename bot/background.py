"""Tracked background work: resumes and runs started after Slack got its acknowledgement.

Nothing here is state: every task's inputs are already in the database before it is spawned,
so a crash loses only work that the lease and the sweeper pick up again. Tracking the tasks
lets shutdown wait for them, lets tests wait until the bot is idle, and makes sure a failure
is logged with its context instead of vanishing with an unreferenced task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    async def idle(self, timeout: float = 30.0) -> None:
        """Wait until no task is running (tasks may spawn more; wait for those too)."""
        async with asyncio.timeout(timeout):
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self, timeout: float = 10.0) -> None:
        try:
            await self.idle(timeout)
        except TimeoutError:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
