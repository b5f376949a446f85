"""Tracked background work: resumes and runs started after Slack got its acknowledgement.

Nothing here is state: every task's inputs are already in the database before it is spawned,
so a crash loses only work that the lease and the sweeper pick up again. Tracking the tasks
lets shutdown wait for them, lets tests wait until the bot is idle, and makes sure a failure
is logged with its context instead of vanishing with an unreferenced task.

Acknowledgements first. Slack waits for each request's answer (3 seconds at most, and a
person is looking at the button); background work only has to be done soon. All of it
shares one event loop, which runs whatever is ready in turn: a burst of clicks whose
decisions, card edits and resumes started as each click was answered would have every later
click wait behind that work. So a task spawned while a request is being answered
(:meth:`BackgroundTasks.acknowledging`) starts only once that request's answer is written,
and no task starts while any answer is being prepared, nor until ``quiet`` (1 ms) has
passed since the last one was written: a click is usually answered in one step of the event
loop, so "none being answered" is true between any two clicks of a burst, while a millisecond
without an answer after a lone one means no burst is under way. Once two answers come less
than ``quiet`` apart (a burst), work waits for ``burst_quiet`` (5 ms) without one: on a busy
machine a burst's sender is paused for a few milliseconds now and then, and work that started
in such a gap held up the rest of the burst's answers (bench/slack_latency.py: burst p99
closer to a bare server's in 15 of 18 shape-sittings without the limit below, in 3 of 6 with
it; docs/benchmarks.md). An answer written ``quiet``
or more after the one before it ends the burst again. A task waits for a burst's quiet only
during the first ``burst_wait_limit`` (20 ms) of its wait, then for ``quiet`` again: requests
arriving in close pairs a few milliseconds apart, as a busy workspace's can, would otherwise
renew the burst for ever. A click whose answer is not within 1 ms of another's starts its work
after 1 ms, and a steady stream of requests a few milliseconds apart is no burst. Background
work waits at most ``ack_wait_limit`` seconds for all that (a stream of requests less than a
millisecond apart delays it by that much, never for ever). The task is created, and so
tracked (shutdown waits for it), at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

# Background work waits this long at most for acknowledgements in flight to be answered.
ACK_WAIT_LIMIT = 0.5
# ... and until no answer has been written for this long (the burst is over).
QUIET = 0.001
# ... or for this long after two answers written less than QUIET apart (a burst),
BURST_QUIET = 0.005
# ... but for a burst's quiet only this long: then QUIET again. Requests in close pairs a few
# ms apart (a busy workspace) would otherwise hold work to ACK_WAIT_LIMIT.
BURST_WAIT_LIMIT = 0.02
# A durable commit fsyncs on the loop only when no answer was written for this long: the
# resumes that start right after a burst (QUIET) still fsync on the writer thread, in case
# the burst goes on (quiet_now).
FSYNC_QUIET = 0.05

# The answer of the request being handled in this context, once written.
_ANSWER: ContextVar[asyncio.Future[None] | None] = ContextVar("approval_bot_answer", default=None)
# True in background work spawned with ``spawns_at_once``: its own spawns start without
# waiting for the answers again.
_WAITED: ContextVar[bool] = ContextVar("approval_bot_waited", default=False)


class BackgroundTasks:
    def __init__(
        self,
        *,
        ack_wait_limit: float = ACK_WAIT_LIMIT,
        quiet: float = QUIET,
        burst_quiet: float = BURST_QUIET,
        burst_wait_limit: float = BURST_WAIT_LIMIT,
        fsync_quiet: float = FSYNC_QUIET,
    ) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._answers: set[asyncio.Future[None]] = set()
        self._no_answers = asyncio.Event()  # set while no request is being answered
        self._no_answers.set()
        self._last_answered = float("-inf")  # loop time
        self._quiet_needed = quiet  # after the last answer: quiet, or burst_quiet in a burst
        self.ack_wait_limit = ack_wait_limit
        self.quiet = quiet
        self.burst_quiet = burst_quiet
        self.burst_wait_limit = burst_wait_limit
        self.fsync_quiet = fsync_quiet

    @contextlib.contextmanager
    def acknowledging(self) -> Iterator[None]:
        """Around answering one request: write the answer inside the block.

        Work spawned inside starts after the block (the answer written); other work waits
        while the block runs.
        """
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._answers.add(answer)
        self._no_answers.clear()
        token = _ANSWER.set(answer)
        try:
            yield
        finally:
            _ANSWER.reset(token)
            self._answers.discard(answer)
            if not self._answers:
                self._no_answers.set()
            now = asyncio.get_running_loop().time()
            in_burst = now - self._last_answered < self.quiet
            self._quiet_needed = self.burst_quiet if in_burst else self.quiet
            self._last_answered = now
            answer.set_result(None)

    def quiet_now(self) -> bool:
        """No request is being answered, and none was for ``fsync_quiet`` seconds: no burst
        is under way, so a short wait on the loop (a durable commit's fsync) delays no answer
        that is already due (``Repository.fsync_on_loop_when``)."""
        if self._answers:
            return False
        return asyncio.get_running_loop().time() - self._last_answered >= self.fsync_quiet

    def spawn(
        self, coroutine: Coroutine[Any, Any, Any], *, name: str, spawns_at_once: bool = False
    ) -> asyncio.Task[Any]:
        """Start ``coroutine`` once the answers are written (see the module's docstring).

        ``spawns_at_once``: what this work spawns in turn starts without waiting again. A
        click answered before its dispatch (``handlers.app``) spawns the dispatch, which
        spawns the decision: under a steady stream of requests each waited up to
        ``ack_wait_limit``, twice the wait of a click dispatched before its answer."""
        task = asyncio.create_task(
            self._after_answers(coroutine, _ANSWER.get(), spawns_at_once), name=name
        )
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        # Cancelled before it started, the work never runs: closed, not left unawaited.
        task.add_done_callback(lambda _task: coroutine.close())
        return task

    def track(self, task: asyncio.Task[Any]) -> None:
        """Count a task started elsewhere as background work (``idle`` and shutdown wait for
        it) without delaying its start: a token refresh a request may have to wait for."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_answers(
        self,
        coroutine: Coroutine[Any, Any, Any],
        own_answer: asyncio.Future[None] | None,
        spawns_at_once: bool,
    ) -> Any:
        # Spawned by work that waited already (its task's context, copied into this one's).
        if not _WAITED.get():
            if own_answer is not None:
                await asyncio.shield(own_answer)
            await self._answers_written()
        # This task's own context, copied into the tasks it spawns: only its direct ones
        # start at once (theirs wait again, as work spawned by background work always has).
        _WAITED.set(spawns_at_once)
        return await coroutine

    async def _answers_written(self) -> None:
        """Until no request is being answered and none was for ``quiet`` seconds
        (``burst_quiet`` after a burst, for the first ``burst_wait_limit`` seconds of the
        wait), or ``ack_wait_limit`` has passed."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.ack_wait_limit
        bursts_end = started + self.burst_wait_limit
        while (now := loop.time()) < deadline:
            if self._answers:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline - now):
                        await self._no_answers.wait()
                continue
            needed = self._quiet_needed if now < bursts_end else self.quiet
            quiet_for = now - self._last_answered
            if quiet_for >= needed:
                return
            wake = min(needed - quiet_for, deadline - now)
            if needed > self.quiet:
                wake = min(wake, bursts_end - now)  # then only ``quiet`` is needed
            await asyncio.sleep(wake)

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
