"""The direct path's greenlets: a transaction body runs in one, reused from body to body.

Owns no rows. Why: a body is a synchronous function (:class:`~storage.drivers.protocol.Tx`)
whose statements are awaited, so it runs in a greenlet, as SQLAlchemy's ``greenlet_spawn``
runs one. That makes a new greenlet per call, and a greenlet's creation and first switch
cost about 9 µs, more than the rest of a one-statement transaction's Python (measured here:
12 µs a transaction through ``greenlet_spawn``, 3.5 µs with a reused greenlet; 8
transactions a pause -> decide -> resume cycle). :func:`run_body` keeps the greenlets that
finished a body and runs the next body in one of them.

Everything else is ``greenlet_spawn``'s: the body sees the caller's context variables, each
awaitable it hands out (``sqlalchemy.util.await_only``) is awaited by the caller, and what
that await raises (a cancellation included) is raised inside the body at that point. The
greenlets belong to the thread that made them (greenlets cannot switch across threads), so
the idle ones are kept per thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from greenlet import GreenletExit, getcurrent, greenlet  # type: ignore[import-untyped]

T = TypeVar("T")


class _BodyGreenlet(greenlet):
    # sqlalchemy.util.await_only awaits only from a greenlet that says it may.
    __sqlalchemy_greenlet_provider__ = True


class _Finished:
    """What a body greenlet hands back when its body returned or raised."""

    __slots__ = ("error", "result")

    def __init__(self, result: Any, error: BaseException | None) -> None:
        self.result = result
        self.error = error


def _serve(body: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A body greenlet's life: run a body, hand back how it finished, wait for the next."""
    while True:
        try:
            finished = _Finished(body(*args), None)
        except GreenletExit:
            raise  # the greenlet is being discarded (garbage collected mid-body): let it end
        except BaseException as exc:  # handed to the caller, who raises it
            finished = _Finished(None, exc)
        body = args = None  # type: ignore[assignment]  # hold nothing while idle
        body, args = getcurrent().parent.switch(finished)


class _Idle(threading.local):
    def __init__(self) -> None:
        self.greenlets: list[_BodyGreenlet] = []


_idle = _Idle()


async def run_body(body: Callable[..., T], *args: Any) -> T:
    """``body(*args)`` in a greenlet, its awaitables awaited here (``greenlet_spawn``'s
    contract), the greenlet kept for the next body once this one has finished."""
    idle = _idle.greenlets
    current = getcurrent()
    if idle:
        runner = idle.pop()
        runner.parent = current
    else:
        runner = _BodyGreenlet(_serve, current)
    runner.gr_context = current.gr_context
    step = runner.switch(body, args)
    while not isinstance(step, _Finished):
        if runner.dead:  # ended by GreenletExit, handed back as its value
            raise step
        try:
            value = await step
        except BaseException as exc:  # raised in the body where it awaited
            step = runner.throw(exc)
        else:
            step = runner.switch(value)
    runner.gr_context = None  # keep no caller's context alive while idle
    # The idle greenlet's frame still holds this _Finished (what it switched back with) until
    # its next body: emptied, it keeps neither the result nor the error (whose traceback holds
    # the body's frames, its Tx and connection) alive meanwhile.
    result, error = step.result, step.error
    step.result = step.error = None
    idle.append(runner)
    if error is not None:
        try:
            raise error
        finally:
            del error  # this frame's reference too (a traceback cycle otherwise)
    return result
