"""Background work starts after the acknowledgements being written, never before them."""

from __future__ import annotations

import asyncio
import inspect

from bot.ops import BackgroundTasks


async def test_work_spawned_while_answering_starts_after_the_answer() -> None:
    background = BackgroundTasks()
    happened: list[str] = []

    async def work() -> None:
        happened.append("work")

    with background.acknowledging():
        background.spawn(work(), name="work")
        for _ in range(5):  # the loop runs other things while the answer is being written
            await asyncio.sleep(0)
        happened.append("answered")
    await background.idle()
    assert happened == ["answered", "work"]


async def answer_until(background: BackgroundTasks, answered: asyncio.Event) -> None:
    """Another request, being answered until ``answered`` is set."""
    with background.acknowledging():
        await answered.wait()


async def test_no_work_starts_while_another_request_is_being_answered() -> None:
    background = BackgroundTasks(ack_wait_limit=60.0)
    happened: list[str] = []
    answered = asyncio.Event()

    async def work() -> None:
        happened.append("work")

    other = asyncio.create_task(answer_until(background, answered))
    await asyncio.sleep(0)
    background.spawn(work(), name="spawned outside any answer")
    for _ in range(5):
        await asyncio.sleep(0)
    happened.append("answered")
    answered.set()
    await other
    await background.idle()
    assert happened == ["answered", "work"]


async def test_no_work_starts_between_the_answers_of_a_burst() -> None:
    """Each answer of a burst is written in one go, so between two of them none is being
    written: work still waits until the answers have stopped for ``quiet`` seconds."""
    background = BackgroundTasks(ack_wait_limit=60.0, quiet=0.5)
    happened: list[str] = []

    async def work() -> None:
        happened.append("work")

    with background.acknowledging():
        background.spawn(work(), name="spawned by the first click")
    for click in range(20):
        await asyncio.sleep(0)  # the loop runs whatever is ready between two answers
        with background.acknowledging():
            happened.append(f"answered {click}")
    await background.idle()
    assert happened == [*(f"answered {click}" for click in range(20)), "work"]


async def test_a_lone_answers_work_does_not_wait_for_the_burst_quiet() -> None:
    """One click: its work starts after ``quiet``, not ``burst_quiet`` (its answer in the
    thread is not delayed for a burst that is not coming)."""
    background = BackgroundTasks(ack_wait_limit=60.0, quiet=0.001, burst_quiet=60.0)
    done = asyncio.Event()

    async def work() -> None:
        done.set()

    with background.acknowledging():
        background.spawn(work(), name="a lone click's work")
    await asyncio.wait_for(done.wait(), 10)


async def test_after_answers_close_together_work_waits_for_the_burst_quiet() -> None:
    """Two answers less than ``quiet`` apart are a burst: a gap of ``quiet`` (the
    sender paused) does not end it, so work spawned by it has not started."""
    background = BackgroundTasks(
        ack_wait_limit=60.0, quiet=0.001, burst_quiet=60.0, burst_wait_limit=60.0
    )
    started = asyncio.Event()

    async def work() -> None:
        started.set()

    with background.acknowledging():
        background.spawn(work(), name="spawned by the first click")
    with background.acknowledging():
        pass
    await asyncio.sleep(0.1)  # a hundred times ``quiet``
    assert not started.is_set()
    await background.cancel_all()


async def test_answers_further_apart_than_quiet_are_no_burst() -> None:
    """A steady stream of requests a few milliseconds apart: work still starts between them
    after ``quiet``, not after ``burst_quiet``."""
    background = BackgroundTasks(ack_wait_limit=60.0, quiet=0.001, burst_quiet=60.0)
    done = asyncio.Event()

    async def work() -> None:
        done.set()

    with background.acknowledging():
        pass
    await asyncio.sleep(0.01)
    with background.acknowledging():
        background.spawn(work(), name="spawned by a later request")
    await asyncio.wait_for(done.wait(), 10)


async def test_a_stream_of_answers_delays_work_by_the_limit_at_most() -> None:
    background = BackgroundTasks(ack_wait_limit=0.01)
    answered, done = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        done.set()

    other = asyncio.create_task(answer_until(background, answered))
    await asyncio.sleep(0)
    background.spawn(work(), name="work")
    await asyncio.wait_for(done.wait(), 10)  # while the other request is still answered
    answered.set()
    await other
    await background.idle()


async def test_work_cancelled_before_it_started_never_runs() -> None:
    background = BackgroundTasks()
    happened: list[str] = []

    async def work() -> None:
        happened.append("work")

    coroutine = work()
    with background.acknowledging():
        background.spawn(coroutine, name="work")
        assert await background.cancel_all() == ["work"]
    assert happened == [] and len(background) == 0
    # Closed, so never reported as "coroutine was never awaited".
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


async def test_quiet_now_only_between_bursts_of_answers() -> None:
    """What ``serve`` asks before fsyncing the executing record on the event loop."""
    background = BackgroundTasks(fsync_quiet=0.05)
    assert background.quiet_now()  # nothing answered yet
    with background.acknowledging():
        assert not background.quiet_now()
    assert not background.quiet_now()  # answered just now: more may follow
    await asyncio.sleep(0.06)
    assert background.quiet_now()


async def test_work_spawned_by_work_that_waited_already_starts_at_once() -> None:
    """A click answered before its dispatch: the dispatch waits for the answers, then spawns
    the decision. Under a steady stream of requests the decision waited for them again
    (``ack_wait_limit`` twice); spawned by work with ``spawns_at_once``, it starts at once,
    and what it spawns in turn waits as background work always does."""
    background = BackgroundTasks(ack_wait_limit=60.0)
    answered = asyncio.Event()
    decided, resumed = asyncio.Event(), asyncio.Event()
    other: list[asyncio.Task[None]] = []

    async def resume() -> None:
        resumed.set()

    async def decision() -> None:
        decided.set()
        background.spawn(resume(), name="resume")

    async def dispatch() -> None:
        # Another request comes in and is being answered while the dispatch runs.
        other.append(asyncio.create_task(answer_until(background, answered)))
        await asyncio.sleep(0)
        background.spawn(decision(), name="decision")

    background.spawn(dispatch(), name="dispatch", spawns_at_once=True)
    await asyncio.wait_for(decided.wait(), 10)  # before the other request's answer
    for _ in range(5):
        await asyncio.sleep(0)
    assert not resumed.is_set(), "the decision's own spawn waits for the answer"
    answered.set()
    await other[0]
    await background.idle()
    assert resumed.is_set()


async def test_requests_in_close_pairs_hold_work_only_for_the_burst_wait_limit() -> None:
    """Requests in pairs (two answers microseconds apart) every few milliseconds: each pair is
    a burst, and a wait for a burst's quiet would be renewed for ever. After
    ``burst_wait_limit`` the work needs only ``quiet`` (here the gaps between pairs), so it
    starts while the pairs go on, not at ``ack_wait_limit`` once they stop (found by the review:
    paired traffic held every resume to the limit)."""
    background = BackgroundTasks(
        ack_wait_limit=60.0, quiet=0.001, burst_quiet=0.005, burst_wait_limit=0.02
    )
    started = asyncio.Event()

    async def work() -> None:
        started.set()

    with background.acknowledging():
        background.spawn(work(), name="spawned by the first of a pair")
    with background.acknowledging():
        pass
    for _ in range(100):  # about 0.3 s of pairs, 3 ms apart
        await asyncio.sleep(0.003)
        with background.acknowledging():
            pass
        await asyncio.sleep(0)
        with background.acknowledging():
            pass
        if started.is_set():
            break
    assert started.is_set(), "the work waited until the pairs stopped"
    await background.idle()
