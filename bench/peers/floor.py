"""The SQLite floor: approval-bot's own write transactions, replayed with nothing around them.

At start-up one approval-bot cycle runs with a trace on its connection; every statement of
every write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) is kept, with the run's and the
approvals' ids, the conversation key and the thread turned into parameters. Each cycle then
runs those transactions on the same schema, with fresh ids: the same rows, the same indexes,
the same number of commits, at the same durability (a transaction the bot commits at a raised
``PRAGMA synchronous``, its ``executing`` record, is replayed at that level), and no Python
framework at all. It follows the bot's transactions as they change (the table says how many
commits it replayed).
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import engine_cycle
from bench.peers.approval_bot import settle
from bench.peers.common import connect
from storage.drivers.sqlite import connections as sqlite

APPROVAL_ID = re.compile(r"'(apr_[0-9A-Z]{26})'")


@dataclass
class Transaction:
    """One of approval-bot's write transactions: its statements, and the ``PRAGMA
    synchronous`` it was committed at when the bot raised it for this one (the ``executing``
    record's commit), else None (the connection's own)."""

    statements: list[str] = field(default_factory=list)
    synchronous: str | None = None


async def capture(database: Path) -> list[Transaction]:
    """approval-bot's write transactions for one cycle, as parameterized statements."""
    repo, runner = await engine_cycle.open_runner(database)
    try:
        await engine_cycle.cycle(runner, 0)  # first connections, statement caches
        statements: list[str] = []
        connections = list(repo.database._connections)  # type: ignore[attr-defined]
        await settle(repo)  # see CommitCounter: no other thread may be in a statement
        for connection in connections:
            connection.set_trace_callback(statements.append)
        try:
            _seconds, run_id = await engine_cycle.cycle(runner, 1)
        finally:
            await settle(repo)
            for connection in connections:
                connection.set_trace_callback(None)
    finally:
        await repo.close()
    approval_ids = sorted({m for s in statements for m in APPROVAL_ID.findall(s)})
    assert len(approval_ids) == 1, approval_ids
    replacements = {
        f"'{run_id}'": ":run",
        f"'{approval_ids[0]}'": ":approval",
        "':C0OPS:1.0'": ":conversation",
        "'1.0'": ":thread",
    }
    transactions: list[Transaction] = []
    current: Transaction | None = None
    raised: str | None = None  # a PRAGMA synchronous run before the next transaction
    for statement in statements:
        verb = statement.strip().upper()
        if verb.startswith("PRAGMA SYNCHRONOUS") and "=" in verb:
            # The bot raises the level before BEGIN and puts it back after COMMIT.
            level = verb.split("=", 1)[1].strip()
            raised = None if level == sqlite.SQLITE_SYNCHRONOUS.upper() else level
        elif verb.startswith("BEGIN IMMEDIATE"):
            current = Transaction(synchronous=raised)
        elif verb.startswith("COMMIT"):
            if current is not None:  # else a read's transaction
                transactions.append(current)
            current = None
        elif current is not None:
            for literal, parameter in replacements.items():
                statement = statement.replace(literal, parameter)
            current.statements.append(statement)
    assert transactions, "no write transaction was traced"
    return transactions


class SqliteFloor:
    name = "SQLite floor: approval-bot's own transactions, replayed"
    durability = "its connection's PRAGMA synchronous"

    def __init__(self) -> None:
        self.connection: sqlite3.Connection | None = None
        self.transactions: list[Transaction] = []
        self.synchronous = "NORMAL"
        self.measuring = False

    async def open(self, directory: Path, synchronous: str) -> None:
        database = directory / "floor.db"
        self.synchronous = synchronous
        before = sqlite.SQLITE_SYNCHRONOUS
        sqlite.SQLITE_SYNCHRONOUS = synchronous
        try:
            self.transactions = await capture(database)
        finally:
            sqlite.SQLITE_SYNCHRONOUS = before
        self.connection = connect(database, synchronous)
        self.connection.isolation_level = None  # BEGIN IMMEDIATE and COMMIT as the bot's
        self.connection.execute("PRAGMA foreign_keys = ON")
        # The replay must do what the bot did: every conditional UPDATE finds its row.
        self._replay("check")
        run = self.connection.execute("SELECT status FROM runs WHERE id = 'run_check'")
        assert run.fetchone() == ("completed",)
        approval = self.connection.execute(
            "SELECT status FROM approvals WHERE id = 'apr_check'"
        ).fetchone()
        assert approval == ("executed",), approval

    def _replay(self, key: str) -> None:
        connection = self.connection
        assert connection is not None
        params = {
            "run": f"run_{key}",
            "approval": f"apr_{key}",
            "conversation": f":C0FLOOR:{key}",
            "thread": key,
        }
        for transaction in self.transactions:
            if transaction.synchronous is not None:
                connection.execute(f"PRAGMA synchronous = {transaction.synchronous}")
            connection.execute("BEGIN IMMEDIATE")
            for statement in transaction.statements:
                connection.execute(statement, params).fetchall()
            connection.execute("COMMIT")
            if transaction.synchronous is not None:
                connection.execute(f"PRAGMA synchronous = {self.synchronous}")

    async def cycle(self, i: int) -> float:
        started = time.perf_counter()
        self._replay(str(i))
        return time.perf_counter() - started

    async def stored_at_pause(self) -> int | None:
        return None  # approval-bot's rows

    async def settle(self) -> None:
        """Nothing runs on its connection between cycles."""

    def connections(self) -> list[sqlite3.Connection]:
        return [self.connection] if self.connection is not None else []

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
