"""``OutageLog`` (bot.ops.outage): a database outage is two log lines, whatever the loops do.

The clock is passed in; the failures are the exceptions the drivers really raise.
"""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime, timedelta

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from bot.ops.outage import OutageLog, database_failure
from storage.limits import DatabaseBusy

START = datetime(2026, 12, 2, 3, 0, 0)
DOWN = OperationalError("COMMIT", None, sqlite3.OperationalError("disk I/O error"))


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_loops_failing_every_second_log_two_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    outages = OutageLog(clock)
    for _ in range(10):
        assert outages.failed("sweeper", DOWN)
        assert outages.failed("due-retry check", ConnectionRefusedError(111, "refused"))
        clock.tick(1)
    outages.succeeded("sweeper")  # the other loop still fails: not over
    assert outages.ongoing
    outages.succeeded("due-retry check")
    assert not outages.ongoing
    outages.succeeded("sweeper")  # nothing more to say
    assert warnings(caplog) == [
        "database unavailable since 2026-12-02 03:00:00 UTC (sweeper: OperationalError: "
        "(sqlite3.OperationalError) disk I/O error); retrying",
        "database available again (unavailable since 2026-12-02 03:00:00 UTC, 10 s)",
    ]


def test_a_source_that_stopped_trying_does_not_hold_the_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outages = OutageLog(clock, stale=timedelta(seconds=60))
    outages.failed("readiness check", DOWN)  # probed once, then never again
    outages.failed("sweeper", DOWN)
    clock.tick(5)
    outages.succeeded("sweeper")
    assert outages.ongoing, "the readiness check failed 5 s ago"
    clock.tick(60)
    outages.succeeded("sweeper")
    assert not outages.ongoing
    outages.failed("renewing the lease of run_1", DOWN)
    outages.forget("renewing the lease of run_1")  # its drive ended
    outages.succeeded("sweeper")
    assert not outages.ongoing
    assert len(warnings(caplog)) == 4


@pytest.mark.parametrize(
    "exc",
    [
        DOWN,
        DatabaseBusy("the database did not answer in time"),
        ConnectionRefusedError(111, "Connect call failed"),
        sqlite3.OperationalError("attempt to write a readonly database"),
    ],
)
def test_database_failures(exc: BaseException) -> None:
    assert database_failure(exc)


@pytest.mark.parametrize(
    "exc",
    [
        IntegrityError("INSERT", None, sqlite3.IntegrityError("UNIQUE constraint failed")),
        KeyError("bug"),
        RuntimeError("bug"),
    ],
)
def test_bugs_are_not_outages(exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    outages = OutageLog()
    assert not database_failure(exc)
    assert not outages.failed("sweeper", exc)  # the loop logs its traceback as before
    assert not outages.ongoing
    assert caplog.records == []


def test_slack_being_unreachable_is_not_a_database_outage() -> None:
    import aiohttp

    exc = aiohttp.ClientOSError(111, "Connect call failed ('slack.com', 443)")
    assert isinstance(exc, OSError)
    assert not database_failure(exc)
