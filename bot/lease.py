"""Keeping a drive's lease while it runs, so that no other replica takes the run over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from bot.gate import TurnContext
from storage.repository import LeaseLost, Repository

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews a drive's lease every ``interval`` seconds (a third of ``run_lease``) until
    stopped; on LeaseLost it marks the turn, and the gate stops the drive at its next call.

    A timer rather than a task that sleeps: almost every drive ends long before its first
    renewal (a drive takes about a millisecond, a lease lasts minutes), and a task per drive
    costs its creation, its cancellation and loop iterations for both. The renewal task is
    created only when the timer fires, in the drive's context, as the sleeping task was.
    """

    def __init__(
        self,
        repo: Repository,
        run_id: str,
        owner: str,
        *,
        interval: float,
        lease_until: Callable[[], datetime],
        turn: TurnContext,
    ) -> None:
        self._repo = repo
        self._run_id = run_id
        self._owner = owner
        self._interval = interval
        self._lease_until = lease_until
        self._turn = turn
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(interval, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            await self._repo.renew_lease(self._run_id, self._owner, self._lease_until())
        except LeaseLost:
            log.error("run %s: lease lost; another drive has taken it over", self._run_id)
            self._turn.lease_lost = True  # the gate stops this drive at its next tool call
            return
        except Exception:
            log.exception("run %s: could not renew the lease", self._run_id)
        if not self._stopped:
            self._timer = self._loop.call_later(self._interval, self._due)

    async def stop(self) -> None:
        """No renewal after this returns (one under way is cancelled and awaited)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
