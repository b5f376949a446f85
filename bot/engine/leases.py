"""Leases: which worker drives a run, until when, and keeping that lease while it runs.

Only the drive holding a run's lease drives it. The lease owner is this worker's id plus a
token per drive (:meth:`Leases.new_owner`), so two drives of one run in one process fence
each other too; every claim and every write that moves a run names its owner. Nothing here
is durable state of its own: the lease lives on the run's row (``storage.stores.runs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ulid import ULID

from bot.gate import TurnContext
from bot.ops.outage import OutageLog
from storage.repository import LeaseLost, Repository

log = logging.getLogger(__name__)

# A renewal that failed (the database is away) is tried again this soon, doubling.
RETRY_FIRST = 0.2
RETRY_MAX = 5.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{str(ULID())[-6:]}"


@dataclass
class Leases:
    """This worker's identity, its clock and the length of the leases it takes (``run_lease``).

    The one place the runner's parts read the time from (``Runner.clock`` is this clock).
    """

    worker_id: str
    clock: Callable[[], datetime]
    run_lease: timedelta

    def until(self, now: datetime | None = None) -> datetime:
        """The deadline of a lease taken or renewed now; ``now``: the clock as the caller
        just read it (each read of the clock costs about 5 600 instructions)."""
        return (self.clock() if now is None else now) + self.run_lease

    def new_owner(self) -> str:
        """The lease owner of one drive: this worker, and which of its drives (40 random
        bits, as the ULID suffix this once was, without building a ULID)."""
        return f"{self.worker_id}/{secrets.token_hex(5)}"


class LeaseKeeper:
    """Renews a drive's lease every ``interval`` seconds (a third of ``run_lease``) until
    stopped; on LeaseLost it marks the turn, and the gate stops the drive at its next call.
    A renewal the database refused (an outage) is tried again sooner, from 0.2 s doubling to
    5 s, and logged once per outage (``bot.ops.outage``); each renewal that gets through
    moves ``turn.lease_expires_at``, which a result waiting to be recorded waits until.

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
        outages: OutageLog | None = None,
    ) -> None:
        self._repo = repo
        self._run_id = run_id
        self._owner = owner
        self._interval = interval
        self._lease_until = lease_until
        self._turn = turn
        self._outages = outages or OutageLog()
        self._source = f"renewing the lease of run {run_id}"
        self._retry = RETRY_FIRST
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(interval, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._task = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        interval = self._interval
        until = self._lease_until()
        try:
            await self._repo.renew_lease(self._run_id, self._owner, until)
        except LeaseLost:
            log.error("run %s: lease lost; another drive has taken it over", self._run_id)
            self._turn.lease_lost = True  # the gate stops this drive at its next tool call
            return
        except Exception as exc:
            if not self._outages.failed(self._source, exc):
                log.exception("run %s: could not renew the lease", self._run_id)
            # Sooner than the next renewal: the lease is running out meanwhile.
            interval = min(self._retry, interval)
            self._retry = min(self._retry * 2, RETRY_MAX)
        else:
            self._outages.succeeded(self._source)
            self._retry = RETRY_FIRST
            self._turn.lease_expires_at = until
        if not self._stopped:
            self._timer = self._loop.call_later(interval, self._due)

    async def stop(self) -> None:
        """No renewal after this returns (one under way is cancelled and awaited)."""
        self._stopped = True
        self._outages.forget(self._source)
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
