"""Deferred writes (``Tx.defer``): rows a transaction writes without reading them back.

On PostgreSQL's direct path (storage.drivers.pg_direct) they ride on the transaction's next
statement as data-modifying CTEs, or go out before COMMIT; on SQLite they run at once. Either
way the transaction must keep its meaning: every row stored, in the order it was written (the
audit trail is read in id order), the carrying statement's own row count and rows unchanged,
a statement that cannot carry them (``SHOW``, ``FOR UPDATE``) still run, and nothing stored
when the transaction rolls back.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from storage.repository import Mode, Repository, Tx
from storage.sql.events import INSERT_AUDIT, audit_row

NOW = datetime(2026, 12, 2, 12, 0, 0)
RUN = "run_deferred"
SEEN = "INSERT INTO processed_events (event_id, received_at) VALUES (:event_id, :received_at)"


def row(event: str) -> dict[str, object]:
    return audit_row(NOW, event, run_id=RUN)


async def events(repo: Repository) -> list[str]:
    return [e.event for e in await repo.audit_trail(run_id=RUN)]


async def test_deferred_rows_are_stored_in_order_around_other_statements(
    repo: Repository,
) -> None:
    def body(tx: Tx) -> tuple[int, object]:
        tx.defer(INSERT_AUDIT, [row("first"), row("second")])
        tx.defer(INSERT_AUDIT, [row("third")])
        # An UPDATE that carries them keeps its own row count (none here).
        changed = tx.execute("UPDATE runs SET turn = turn + 1 WHERE id = :id", {"id": RUN})
        tx.defer(INSERT_AUDIT, [row("fourth")])
        # A statement with a WITH of its own, and its rows.
        # Rows of another table between them, then a statement that writes the audit trail
        # itself: the trail keeps the order its rows were made in.
        tx.defer(SEEN, [{"event_id": "Ev1", "received_at": NOW}])
        tx.defer(INSERT_AUDIT, [row("fourth and a half")])
        tx.execute(INSERT_AUDIT, row("written"))
        answer = tx.one("WITH x AS (SELECT CAST(:n AS INTEGER) AS n) SELECT n FROM x", {"n": 7})
        tx.defer(INSERT_AUDIT, [row("fifth")])
        return changed, answer  # "fifth" goes out before COMMIT

    changed, answer = await repo.database.run(body, Mode.WRITE)
    assert changed == 0
    assert answer is not None and answer[0] == 7
    assert await events(repo) == [
        "first",
        "second",
        "third",
        "fourth",
        "fourth and a half",
        "written",
        "fifth",
    ]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_statement_that_cannot_carry_them_runs_after_them(repo: Repository) -> None:
    def body(tx: Tx) -> tuple[object, object]:
        tx.defer(INSERT_AUDIT, [row("before show")])
        shown = tx.one("SHOW synchronous_commit")
        tx.defer(INSERT_AUDIT, [row("before lock")])
        locked = tx.one("SELECT id FROM runs WHERE id = :id FOR UPDATE", {"id": RUN})
        return shown, locked

    shown, locked = await repo.database.run(body, Mode.WRITE)
    assert shown is not None and shown[0] in ("on", "off", "local", "remote_write", "remote_apply")
    assert locked is None
    assert await events(repo) == ["before show", "before lock"]


async def test_deferred_rows_of_a_rolled_back_transaction_are_not_stored(
    repo: Repository,
) -> None:
    def body(tx: Tx) -> None:
        tx.defer(INSERT_AUDIT, [row("carried")])
        tx.execute("UPDATE runs SET turn = turn + 1 WHERE id = :id", {"id": RUN})
        tx.defer(INSERT_AUDIT, [row("pending")])
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        await repo.database.run(body, Mode.WRITE)
    assert await events(repo) == []


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_only_a_plain_insert_can_be_deferred(repo: Repository) -> None:
    def body(tx: Tx) -> None:
        tx.defer(INSERT_AUDIT + " ON CONFLICT DO NOTHING", [row("x")])

    with pytest.raises(ValueError, match="plain INSERT"):
        await repo.database.run(body, Mode.WRITE)
