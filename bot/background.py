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
        """Wait until no task is running (tasks may spawn more; wait for those too).

        Raises TimeoutError after ``timeout`` seconds, leaving the tasks running.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"{len(self._tasks)} background tasks still running")
            await asyncio.wait(list(self._tasks), timeout=remaining)

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every task; True when none is left running."""
        try:
            await self.idle(max(timeout, 0.0))
        except TimeoutError:
            return False
        return True

    async def cancel_all(self) -> list[str]:
        """Cancel what is still running and wait for it to stop; the names of those tasks.

        A cancelled run keeps what it stored: whoever takes it over replays its history. A
        tool running in a thread cannot be cancelled: its call stays ``executing``.
        """
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return [task.get_name() for task in tasks]

    async def close(self, timeout: float = 25.0) -> None:
        if not await self.drain(timeout):
            await self.cancel_all()
