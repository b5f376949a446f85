"""approval-bot's own cycle: bench/engine_cycle.py's runner, model and tool, unchanged."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from bench import engine_cycle
from bot.engine import Runner
from storage.drivers.sqlite import connections as sqlite
from storage.repository import Repository


async def settle(repo: Repository) -> None:
    """Wait for the repository's writer thread: a WAL checkpoint it started may be running.

    Between two cycles that is the only work on another thread (every transaction of a cycle
    is awaited; checkpoints are submitted to the writer and not awaited).
    """
    writer = repo.database._writer  # type: ignore[attr-defined]
    await asyncio.get_running_loop().run_in_executor(writer, lambda: None)


class ApprovalBot:
    """``tool``: the gated tool as an async function (the default, as engine_cycle's) or a
    sync one, which the gate runs on a thread of its own (see bot/gate/tool_calls.py)."""

    durability = (
        "every connection's PRAGMA synchronous "
        "(`storage.drivers.sqlite.connections.SQLITE_SYNCHRONOUS`)"
    ) + (
        "; the repository raises it to FULL for the `executing` commit when it is lower"
        if hasattr(sqlite, "SQLITE_DURABLE_SYNCHRONOUS")
        else ""
    )

    def __init__(self, tool: str = "async") -> None:
        self.tool = tool
        self.name = (
            "approval-bot (`bench/engine_cycle.py`), async tool"
            if tool == "async"
            else "approval-bot, the same with a sync tool (run on a thread of its own)"
        )
        self.repo: Repository | None = None
        self.runner: Runner | None = None
        self._synchronous_before = sqlite.SQLITE_SYNCHRONOUS
        self.measuring = False
        self._run_id = ""

    async def open(self, directory: Path, synchronous: str) -> None:
        # Read whenever a connection opens (the writer thread's opens later): kept until close.
        sqlite.SQLITE_SYNCHRONOUS = synchronous
        database = directory / f"approval-bot-{self.tool}.db"
        self.repo, self.runner = await engine_cycle.open_runner(database, self.tool)

    async def cycle(self, i: int) -> float:
        assert self.runner is not None
        seconds, self._run_id = await engine_cycle.cycle(self.runner, i)
        return seconds

    async def stored_at_pause(self) -> int | None:
        """engine_cycle's measure: the paused history and the approval rows' fields."""
        assert self.repo is not None
        return await engine_cycle.paused_size(self.repo, self._run_id)

    async def settle(self) -> None:
        assert self.repo is not None
        await settle(self.repo)

    def connections(self) -> list[sqlite3.Connection]:
        assert self.repo is not None
        return list(self.repo.database._connections)  # type: ignore[attr-defined]

    async def close(self) -> None:
        if self.repo is not None:
            await self.repo.close()
        sqlite.SQLITE_SYNCHRONOUS = self._synchronous_before
