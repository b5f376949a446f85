"""What a benchmark reads about processes from /proc: CPU time, memory, the machine's load.

Linux only (``/proc``); the PostgreSQL part samples the backends serving one scratch database,
so other work on a shared server does not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import asyncpg

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class BackendCpu:
    """CPU time that the PostgreSQL backends serving one database spend while this is open.

    Other work shares the server, so only backends connected to the benchmark's own scratch
    database count. They are sampled every 0.2 s, since a backend's time disappears with it
    when its connection closes (at most one interval of it is lost).
    """

    def __init__(self, database_url: str | None) -> None:
        self.url = (
            database_url.replace("postgresql+asyncpg://", "postgresql://") if database_url else None
        )
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def seconds(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)

    async def __aenter__(self) -> BackendCpu:
        if self.url is None or not self.url.startswith("postgresql://"):
            return self
        connection = await asyncpg.connect(self.url)
        name = self.url.rsplit("/", 1)[1]
        born_before = await self._sample(connection, name)
        self.first = dict(born_before)

        async def sampling() -> None:
            try:
                while True:
                    await asyncio.sleep(0.2)
                    for pid, cpu in (await self._sample(connection, name)).items():
                        self.first.setdefault(pid, 0.0)  # connected during the measurement
                        self.last[pid] = cpu
            finally:
                await connection.close()

        self.last = dict(born_before)
        self._task = asyncio.create_task(sampling())
        return self

    async def _sample(self, connection: Any, name: str) -> dict[int, float]:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        found = {}
        for row in rows:
            with contextlib.suppress(OSError):
                found[row["pid"]] = cpu_seconds(row["pid"])
        return found

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            await asyncio.sleep(0.2)  # one more sample
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, summed over its cores."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / CLOCK_TICKS, sum(ticks[:8]) / CLOCK_TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` (resident now) and ``VmHWM`` (peak resident) in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found
