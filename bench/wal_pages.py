"""Which tables and indexes each write transaction of one cycle writes to the WAL.

One pause -> decide -> resume cycle of ``bench/engine_cycle.py`` (after ``--warm`` cycles, so
the tables are not empty), with the WAL checkpoints held back: after each transaction the new
WAL frames are read and each frame's page is named by SQLite's ``dbstat`` table (the b-tree
it belongs to; ``sqlite_schema`` is page 1, rewritten whenever the file grows). Every frame is
a whole page, and the ``executing`` commit's fsync flushes every frame written since the last
one: fewer pages per cycle is less for it to flush.

Run: ``.venv/bin/python bench/wal_pages.py [--warm 300]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sqlite3
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import engine_cycle
from storage.drivers.sqlite import connections as sqlite

WAL_HEADER, FRAME_HEADER = 32, 24


def wal_frames(path: str) -> tuple[int, int]:
    """(frames in the WAL, page size); (0, 0) when it is empty."""
    try:
        with open(path + "-wal", "rb") as wal:
            header = wal.read(WAL_HEADER)
    except FileNotFoundError:
        return 0, 0
    if len(header) < WAL_HEADER:
        return 0, 0
    page_size = struct.unpack(">I", header[8:12])[0]
    return (os.path.getsize(path + "-wal") - WAL_HEADER) // (page_size + FRAME_HEADER), page_size


def frame_pages(path: str, first: int, last: int, page_size: int) -> list[int]:
    """The page numbers of WAL frames ``first`` to ``last`` (exclusive)."""
    pages = []
    with open(path + "-wal", "rb") as wal:
        for frame in range(first, last):
            wal.seek(WAL_HEADER + frame * (page_size + FRAME_HEADER))
            pages.append(struct.unpack(">I", wal.read(4))[0])
    return pages


async def main(warm: int) -> None:
    sqlite.CHECKPOINT_EVERY = 1 << 62
    spans: list[tuple[str, int, int]] = []
    transact = sqlite._transact
    path = ""

    def traced(connection: Any, body: Callable[..., Any], mode: Any, durable: bool = False) -> Any:
        if durable and sqlite.raises_synchronous():
            # It raises the connection's level and calls itself: counted in that call.
            return transact(connection, body, mode, durable)
        before, _ = wal_frames(path)
        result = transact(connection, body, mode, durable)
        after, _ = wal_frames(path)
        if after > before:
            spans.append((body.__qualname__.split(".")[-3], before, after))
        return result

    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "pages.db"
        path = str(database)
        repo, runner = await engine_cycle.open_runner(database)
        for i in range(warm):
            await engine_cycle.cycle(runner, i)
        await engine_cycle.settle(repo)
        sqlite._transact = traced  # type: ignore[assignment]
        try:
            await engine_cycle.cycle(runner, warm)
            await engine_cycle.settle(repo)
        finally:
            sqlite._transact = transact  # type: ignore[assignment]
        _, page_size = wal_frames(path)
        probe = sqlite3.connect(database)
        owner = dict(probe.execute("SELECT pageno, name FROM dbstat"))
        probe.close()
        total = 0
        for name, before, after in spans:
            pages = frame_pages(path, before, after, page_size)
            where = collections.Counter(owner.get(page, f"page {page}") for page in pages)
            total += len(pages)
            print(f"{name:24} {len(pages):3} frames: " + ", ".join(sorted(where)))
        print(f"{'one cycle':24} {total:3} frames of {page_size + FRAME_HEADER} bytes")
        await repo.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=300, help="untimed cycles first")
    asyncio.run(main(parser.parse_args().warm))
