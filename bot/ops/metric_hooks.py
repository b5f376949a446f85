"""Where the code reports to :mod:`bot.ops.metrics`: decorators and calls that cost nothing, and
import nothing, in a process that serves no metrics (a CLI command). They record only when
``bot.ops.metrics`` has been imported, which ``serve`` (and the playground) do at start."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _metrics() -> ModuleType | None:
    return sys.modules.get("bot.ops.metrics")


def counts_decisions(function: F) -> F:
    """For ``Runner.decide``: a decision that won, or an expiry found at click time."""

    @functools.wraps(function)
    async def wrapper(self: Any, approval_id: str, *args: Any, **kwargs: Any) -> Any:
        try:
            decision = await function(self, approval_id, *args, **kwargs)
        except Exception as exc:
            expiry = getattr(exc, "expiry", None)
            metrics = _metrics()
            if expiry is not None and metrics is not None:
                metrics.record_expiry(expiry)
            raise
        metrics = _metrics()
        if metrics is not None:
            metrics.record_decision(decision, approve=bool(kwargs.get("approve")))
        return decision

    return wrapper  # type: ignore[return-value]


def counts_expiries(function: F) -> F:
    """For ``Runner.expire_due``: each approval it expired."""

    @functools.wraps(function)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        outcomes = await function(*args, **kwargs)
        metrics = _metrics()
        if metrics is not None:
            for expiry in outcomes:
                metrics.record_expiry(expiry)
        return outcomes

    return wrapper  # type: ignore[return-value]


def times_resumes(function: F) -> F:
    """For ``Runner.resume``: from the decision to the end of the resumed drive."""

    @functools.wraps(function)
    async def wrapper(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        metrics = _metrics()
        decided = metrics.resume_started(run_id) if metrics is not None else None
        outcome = await function(self, run_id, *args, **kwargs)
        if metrics is not None and decided is not None:
            metrics.RESUME_SECONDS.observe(time.monotonic() - decided)
        return outcome

    return wrapper  # type: ignore[return-value]


def counts_drives(function: F) -> F:
    """For ``Runner._drive``: how each drive ended."""

    @functools.wraps(function)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        outcome = await function(*args, **kwargs)
        metrics = _metrics()
        if metrics is not None:
            metrics.DRIVES.labels(getattr(outcome, "status", "unknown")).inc()
        return outcome

    return wrapper  # type: ignore[return-value]


def times_sweeps(function: F) -> F:
    """For ``sweep_once``: a sweep that raised, or returned False (one of its outboxes
    failed and the rest went on), is a failed sweep."""

    @functools.wraps(function)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            result = await function(*args, **kwargs)
        except BaseException:
            metrics = _metrics()
            if metrics is not None:
                metrics.SWEEPS.labels("failed").inc()
            raise
        metrics = _metrics()
        if metrics is not None:
            metrics.SWEEPS.labels("failed" if result is False else "ok").inc()
            metrics.SWEEP_SECONDS.observe(time.monotonic() - started)
        return result

    return wrapper  # type: ignore[return-value]


def observe_ack(kind: str, seconds: float) -> None:
    metrics = _metrics()
    if metrics is not None:
        metrics.ACK_SECONDS.labels(kind).observe(seconds)


def slack_call_failed(method: str, error: str) -> None:
    metrics = _metrics()
    if metrics is not None:
        metrics.SLACK_API_ERRORS.labels(method, error).inc()


def slack_rate_limited(method: str) -> None:
    metrics = _metrics()
    if metrics is not None:
        metrics.SLACK_RATE_LIMITED.labels(method).inc()
