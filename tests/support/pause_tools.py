"""Tools that pause for another system or a time, recording each real run in ops_tools.EXECUTED.

``PIPELINE`` plays the other system: every callback URL handed out lands there, and
``ON_URL`` (set by a test) is called with it before the tool raises, to call back early.
``RETRY_AT`` says when ``rate_limited`` asks to be retried, for its first ``FAILURES`` runs.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from bot.pauses import RetryAt, WaitForCallback, callback_url
from tests.support import ops_tools

PIPELINE: list[str] = []
ON_URL: list[Callable[[str], None]] = []
RETRY_IN: list[timedelta] = [timedelta(minutes=5)]
FAILURES: list[int] = [1]


def reset() -> None:
    PIPELINE.clear()
    ON_URL.clear()
    RETRY_IN[:] = [timedelta(minutes=5)]
    FAILURES[:] = [1]


def _hand_out(url: str) -> None:
    PIPELINE.append(url)
    log = os.environ.get("APPROVAL_BOT_TEST_PIPELINE_LOG")
    if log:  # another process (a fault test) reads the URL from here
        with open(log, "a", encoding="utf-8") as file:
            file.write(url + "\n")
            file.flush()
            os.fsync(file.fileno())
    for hook in ON_URL:
        hook(url)


def start_deploy(service: str) -> str:
    """Start a deploy of a service; its pipeline reports back when it is done."""
    ops_tools.EXECUTED.append(("start_deploy", {"service": service}))
    url = callback_url()
    assert callback_url() == url, "one URL per call"
    _hand_out(url)
    raise WaitForCallback(f"deploy of {service}", timeout="1h")


async def start_deploy_async(service: str) -> str:
    """Start a deploy of a service (async); its pipeline reports back when it is done."""
    ops_tools.EXECUTED.append(("start_deploy_async", {"service": service}))
    _hand_out(callback_url())
    raise WaitForCallback(f"async deploy of {service}")


async def slow_deploy_async(service: str, seconds: float) -> str:
    """Start a deploy after ``seconds``: the calls of one response reach their pauses in
    another order than they were asked in."""
    await asyncio.sleep(seconds)
    ops_tools.EXECUTED.append(("slow_deploy_async", {"service": service}))
    _hand_out(callback_url())
    raise WaitForCallback(f"slow deploy of {service}")


def peek_url(service: str) -> str:
    """Takes a callback URL, then does not wait for it."""
    ops_tools.EXECUTED.append(("peek_url", {"service": service}))
    _hand_out(callback_url())
    return f"{service}: nothing to wait for"


def rate_limited(service: str) -> str:
    """Call an API that rate-limits the first calls."""
    ops_tools.EXECUTED.append(("rate_limited", {"service": service}))
    attempts = sum(1 for name, _ in ops_tools.EXECUTED if name == "rate_limited")
    if attempts <= FAILURES[0]:
        raise RetryAt(datetime.now(UTC) + RETRY_IN[0], "rate limited")
    return f"{service} answered on attempt {attempts}"


def naive_retry(service: str) -> str:
    """Asks for a retry at a time without a time zone."""
    raise RetryAt(datetime.now() + timedelta(minutes=1), "oops")


class NoOffset(tzinfo):
    """A time zone that does not say its offset: a datetime in it is naive all the same."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> None:
        return None

    def tzname(self, dt: datetime | None) -> str:
        return "nowhere"


def offsetless_retry(service: str) -> str:
    """Asks for a retry at a time whose time zone has no offset."""
    raise RetryAt(datetime.now().replace(tzinfo=NoOffset()) + timedelta(minutes=1), "oops")


def edge_of_time_retry(service: str) -> str:
    """Asks for a retry at the last representable time, west of UTC (beyond year 9999 there)."""
    raise RetryAt(datetime.max.replace(tzinfo=timezone(timedelta(hours=-5))), "never")


def ancient_retry(service: str) -> str:
    """Asks for a retry at the first representable time, east of UTC (before year 1 there)."""
    raise RetryAt(datetime.min.replace(tzinfo=timezone(timedelta(hours=5))), "long ago")


def endless_deploy(service: str) -> str:
    """Start a deploy that may take for ever; its pipeline reports back when it is done."""
    ops_tools.EXECUTED.append(("endless_deploy", {"service": service}))
    _hand_out(callback_url())
    raise WaitForCallback(f"deploy of {service}", timeout=timedelta.max)


def far_retry(service: str) -> str:
    """Asks for a retry next month."""
    raise RetryAt(datetime.now(UTC) + timedelta(days=30), "maintenance")
