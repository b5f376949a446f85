"""A database outage in the log: one line when it starts, one when it ends.

Every background loop of a process (the sweeper, the due-retry timer, each drive's lease
renewal, a finished tool's result waiting to be recorded) keeps trying while the database is
away. Each reports to the process's one :class:`OutageLog` instead of logging a traceback at
every attempt (about one a second from each loop): the first database failure logs
"database unavailable since …; retrying" and the moment every loop that failed has
succeeded again logs "database available again". Repeated failures go to DEBUG (``-v``).
A failure that is not the database's (a bug, Slack) is not an outage: the loop logs it as
before, with its traceback.

Owns no durable state: which loops are failing, since when, in memory.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta

from bot.clock import utcnow
from storage.limits import DatabaseBusy

log = logging.getLogger("bot.database")

# A source that has not failed again for this long no longer holds an outage open.
STALE = timedelta(seconds=60)

# Exceptions raised by the HTTP clients (Slack's Web API) are OSErrors too: not the database.
_NOT_DATABASE_MODULES = ("aiohttp", "slack_sdk", "slack_bolt")


def database_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached or written (an outage), rather
    than a bug: a lost or refused connection, a driver's operational error, a time limit."""
    if type(exc).__module__.split(".")[0] in _NOT_DATABASE_MODULES:
        return False
    if isinstance(exc, (DatabaseBusy, sqlite3.OperationalError, OSError)):
        return True
    # SQLAlchemy's wrappers: OperationalError, InterfaceError (a closed connection) … but not
    # an IntegrityError or a ProgrammingError, which are ours to fix, not to wait out.
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    if kinds & {"IntegrityError", "ProgrammingError", "DataError", "NotSupportedError"}:
        return False
    if kinds & {"OperationalError", "InterfaceError", "DBAPIError", "DisconnectionError"}:
        return True
    # asyncpg's own, when SQLAlchemy did not wrap them.
    return type(exc).__module__.startswith("asyncpg") and "Connection" in type(exc).__name__


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


class OutageLog:
    """Which loops are failing on the database, and the two lines an outage is worth.

    The outage ends when every source that failed has succeeded since, or stopped trying: a
    source that has not failed again for ``stale`` seconds (a readiness probe nobody calls
    any more, a drive that ended) no longer holds it open.
    """

    def __init__(
        self,
        clock: Callable[[], datetime] = utcnow,
        logger: logging.Logger = log,
        stale: timedelta = STALE,
    ) -> None:
        self._clock = clock
        self._log = logger
        self._stale = stale
        self._failing: dict[str, datetime] = {}  # source -> its last failure
        self.since: datetime | None = None

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, source: str, exc: BaseException) -> bool:
        """``source`` failed with ``exc``; False when that is not a database failure (the
        caller logs it as it would anything else)."""
        if not database_failure(exc):
            return False
        now = self._clock()
        self._failing[source] = now
        if self.since is None:
            self.since = now
            self._log.warning(
                "database unavailable since %s (%s: %s); retrying",
                f"{self.since:%Y-%m-%d %H:%M:%S} UTC",
                source,
                _first_line(exc),
            )
        else:
            self._log.debug("%s: database still unavailable: %s", source, _first_line(exc))
        return True

    def succeeded(self, source: str) -> None:
        """``source`` reached the database again (cheap when no outage is under way)."""
        if self.since is None:
            return
        self._failing.pop(source, None)
        now = self._clock()
        for other, last in list(self._failing.items()):
            if now - last >= self._stale:
                del self._failing[other]
        if not self._failing:
            self._log.warning(
                "database available again (unavailable since %s, %.0f s)",
                f"{self.since:%Y-%m-%d %H:%M:%S} UTC",
                (now - self.since).total_seconds(),
            )
            self.since = None

    def forget(self, source: str) -> None:
        """``source`` stopped trying (its drive ended): it no longer holds the outage open
        (the next success of any loop ends it)."""
        self._failing.pop(source, None)
