"""The direct path's body greenlets (storage.drivers.pg_greenlets) keep ``greenlet_spawn``'s
contract while one greenlet runs body after body: results and errors come back, what an await
raises is raised in the body where it awaited (a cancellation too), the body sees the caller's
context variables, and a greenlet that finished a body runs the next one."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import weakref

import pytest
from greenlet import getcurrent
from sqlalchemy.util import await_only

from storage.drivers.pg_greenlets import run_body

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


async def value(result: object) -> object:
    await asyncio.sleep(0)
    return result


async def fail() -> None:
    await asyncio.sleep(0)
    raise LookupError("from the await")


def twice(first: object, second: object) -> tuple[object, object, object]:
    return await_only(value(first)), await_only(value(second)), getcurrent()


async def test_a_body_awaits_and_returns_and_its_greenlet_runs_the_next_body() -> None:
    a, b, first = await run_body(twice, 1, "two")
    assert (a, b) == (1, "two")
    c, d, second = await run_body(twice, None, [3])
    assert (c, d) == (None, [3])
    assert second is first  # reused, not a new greenlet per body


async def test_what_an_await_raises_is_raised_in_the_body_and_then_to_the_caller() -> None:
    caught: list[str] = []

    def body() -> str:
        try:
            await_only(fail())
        except LookupError as exc:
            caught.append(str(exc))
        raise ValueError("from the body")

    with pytest.raises(ValueError, match="from the body"):
        await run_body(body)
    assert caught == ["from the await"]
    assert (await run_body(twice, 1, 2))[:2] == (1, 2)  # its greenlet is still sound


async def test_a_cancelled_caller_cancels_the_body_where_it_awaits() -> None:
    started = asyncio.Event()
    unwound: list[str] = []

    async def wait_forever() -> None:
        started.set()
        await asyncio.Event().wait()

    def body() -> None:
        try:
            await_only(wait_forever())
        finally:
            unwound.append("finally")

    task = asyncio.create_task(run_body(body))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert unwound == ["finally"]
    assert (await run_body(twice, "a", "b"))[:2] == ("a", "b")


async def test_the_body_sees_its_callers_context_variables() -> None:
    async def as_caller(name: str) -> str:
        WHO.set(name)
        return await run_body(WHO.get)

    assert await asyncio.gather(as_caller("one"), as_caller("two")) == ["one", "two"]
    assert await run_body(WHO.get) == "nobody"


async def test_bodies_in_flight_together_each_have_a_greenlet() -> None:
    first, second = await asyncio.gather(run_body(twice, 1, 2), run_body(twice, 3, 4))
    assert first[:2] == (1, 2) and second[:2] == (3, 4)
    assert first[2] is not second[2]


class _Held:
    """Something a body returns or raises, to see whether anything keeps it alive."""


def _returns_held() -> _Held:
    await_only(value(None))
    return _Held()


def _raises_held() -> None:
    await_only(value(None))
    raise LookupError(_Held())


async def test_an_idle_greenlet_keeps_neither_the_last_result_nor_the_last_error() -> None:
    """An idle greenlet holds nothing of its last body: not its result (rows), nor its error,
    whose traceback holds the body's frames and so its Tx and connection. Kept, they lived
    until that greenlet ran another body, one per greenlet, for as long as the process."""
    held = await run_body(_returns_held)
    returned = weakref.ref(held)
    del held
    gc.collect()
    assert returned() is None, "the last result is kept by the idle greenlet"
    with pytest.raises(LookupError) as caught:
        await run_body(_raises_held)
    raised = weakref.ref(caught.value.args[0])
    del caught
    gc.collect()
    assert raised() is None, "the last error is kept by the idle greenlet"
