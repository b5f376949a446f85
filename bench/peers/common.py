"""What every peer shares: the cycle interface, its SQLite connection, the fake model's clock."""

from __future__ import annotations

import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

SYNCHRONOUS_SETTINGS = ("NORMAL", "FULL")


class Peer(Protocol):
    """One framework doing the cycle: set up once, then one cycle per call."""

    name: str
    durability: str  # how the peer is set to the table's synchronous setting, for the table
    measuring: bool  # set during the one untimed cycle that counts commits and stored bytes

    async def open(self, directory: Path, synchronous: str) -> None: ...

    async def cycle(self, i: int) -> float:
        """One cycle (run ``i``); its seconds less the fake model's own."""
        ...

    def connections(self) -> list[sqlite3.Connection]:
        """Its SQLite connections, to count the commits of one cycle (:class:`CommitCounter`)."""
        ...

    async def settle(self) -> None:
        """Return when no other thread is using its connections (between two cycles)."""
        ...

    async def stored_at_pause(self) -> int | None:
        """Bytes the measured cycle stored for its run while it waited for the decision."""
        ...

    async def close(self) -> None: ...


def connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection as the peers' own docs set one up, plus WAL and the table's setting.

    Python's default transaction handling (an implicit BEGIN before a write, ``commit()``);
    SQLite's own WAL auto-checkpoint (every 1,000 pages), as an application would have.
    """
    connection = sqlite3.connect(path, check_same_thread=False)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    return connection


SYNCHRONOUS_LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}


def check_durability(connections: list[sqlite3.Connection], synchronous: str) -> None:
    """Every connection a peer writes through is in WAL mode at the table's setting."""
    assert connections, "a peer without a connection cannot be checked"
    for connection in connections:
        (level,) = connection.execute("PRAGMA synchronous").fetchone()
        (journal,) = connection.execute("PRAGMA journal_mode").fetchone()
        assert (level, journal) == (SYNCHRONOUS_LEVELS[synchronous], "wal"), (level, journal)


class CommitCounter:
    """Counts the COMMITs SQLite runs on some connections (trace callbacks), while enabled,
    and how many of them were made at ``synchronous = FULL`` or above (each fsyncs the WAL).

    A connection's level is followed from the ``PRAGMA synchronous`` statements it runs
    (approval-bot raises it to FULL around its ``executing`` commit), starting from the level
    it has when counting starts.

    Used on one cycle after the warm-up, never on a timed one: a trace callback costs time.
    Only set or cleared while no other thread uses the connections (``Peer.settle``):
    ``set_trace_callback`` waits for the connection's mutex holding the GIL, and a thread
    inside a traced statement holds that mutex while it waits for the GIL to call back.
    """

    def __init__(self) -> None:
        self.count = 0
        self.fsynced = 0

    def _tracer(self, level: int) -> Callable[[str], None]:
        def trace(statement: str) -> None:
            nonlocal level
            verb = statement.strip().upper()
            if verb.startswith(("COMMIT", "END")):
                self.count += 1
                self.fsynced += level >= SYNCHRONOUS_LEVELS["FULL"]
            elif verb.startswith("PRAGMA SYNCHRONOUS") and "=" in verb:
                value = verb.split("=", 1)[1].strip().rstrip(";").strip()
                level = SYNCHRONOUS_LEVELS.get(value, int(value) if value.isdigit() else level)

        return trace

    @contextmanager
    def counting(self, *connections: sqlite3.Connection) -> Iterator[None]:
        self.count = self.fsynced = 0
        for connection in connections:
            (level,) = connection.execute("PRAGMA synchronous").fetchone()
            connection.set_trace_callback(self._tracer(level))
        try:
            yield
        finally:
            for connection in connections:
                connection.set_trace_callback(None)


class ModelClock:
    """The fake models' own time, to subtract from each cycle."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started


def fsync_ms(directory: Path, samples: int = 50) -> float:
    """The disk's fsync latency right now (p50 of ``samples`` 4 KB appends, each fsynced), in
    ms: what every FULL commit waits for at least, so the FULL figures move with it."""
    path = directory / "fsync-probe"
    seconds = []
    with path.open("ab") as probe:
        for _ in range(samples):
            probe.write(b"\0" * 4096)
            probe.flush()
            started = time.perf_counter()
            os.fsync(probe.fileno())
            seconds.append(time.perf_counter() - started)
    path.unlink()
    return statistics.median(seconds) * 1000


def load() -> str:
    """The machine's load average (1, 5, 15 minutes) now."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
