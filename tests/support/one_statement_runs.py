"""Helpers of the tests of a run's start and end in one statement on PostgreSQL
(tests/storage/test_one_statement_starts.py, test_one_statement_ends.py): statements counted,
the one-statement paths turned off, rows compared, another connection beside the bot's."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from storage.repository import Mode, Repository, Tx
from storage.sql.approvals import INSERT_APPROVAL
from storage.sql.columns import APPROVAL_COLUMNS
from storage.stores import runs as run_store
from tests.conftest import POSTGRES_URL

NOW = datetime(2026, 12, 2, 12, 0, 0)
LEASE = NOW + timedelta(minutes=5)
POSTGRES = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


@contextlib.contextmanager
def one_statement(on: bool) -> Iterator[None]:
    saved = run_store.ONE_STATEMENT
    run_store.ONE_STATEMENT = on
    try:
        yield
    finally:
        run_store.ONE_STATEMENT = saved


async def open_run(
    repo: Repository, prefix: str, *, event: str | None = None, key: str = "thread", **kw: Any
) -> Any:
    return await repo.open_run(
        run_id=f"{prefix}_run{kw.pop('n', '')}",
        conversation_key=f"{prefix}:{key}",
        requester="U0REQUESTER",
        model_id="echo",
        new_messages=[{"role": "user", "content": "restart svc"}],
        worker="drive",
        lease_until=LEASE,
        now=NOW,
        opening_messages=[{"role": "system", "content": "be careful"}],
        team_id="T1",
        channel=kw.pop("channel", "C0OPS"),
        thread_ts="1.0",
        event_id=None if event is None else f"{prefix}-{event}",
        **kw,
    )


async def add_approval(
    repo: Repository, run_id: str, approval_id: str, status: str, kind: str = "approval"
) -> None:
    row: dict[str, Any] = {
        "id": approval_id,
        "run_id": run_id,
        "turn": 0,
        "tool_call_id": f"call_{approval_id}",
        "tool_name": "restart_service",
        "arguments": {"service": "svc"},
        "payload_hash": "0" * 64,
        "status": status,
        "requester": "U0REQUESTER",
        "team_id": "T1",
        "channel": "C0OPS",
        "thread_ts": "1.0",
        "approvers": [],
        "approved_by": [],
        "edited_arguments": None,
        "allow_self_approval": False,
        "on_expiry": "deny",
        "created_at": NOW,
        "expires_at": NOW + timedelta(hours=1),
        "kind": kind,
        "min_approvals": 1,
        "allow_edit": False,
    }

    def body(tx: Tx) -> None:
        tx.execute(INSERT_APPROVAL, APPROVAL_COLUMNS.params(row))

    await repo.database.run(body, Mode.WRITE)


async def rows_of(repo: Repository, prefix: str) -> dict[str, list[Any]]:
    """Every row a scenario wrote (its ids all start with ``prefix``), audit trail in id order,
    with the prefix taken out so two scenarios' rows compare equal."""
    like = f"{prefix}%"
    queries = {
        "runs": "SELECT * FROM runs WHERE id LIKE :p ORDER BY id",
        "approvals": "SELECT * FROM approvals WHERE run_id LIKE :p ORDER BY id",
        "audit_events": (
            "SELECT at, run_id, approval_id, event, actor, detail FROM audit_events "
            "WHERE run_id LIKE :p ORDER BY id"
        ),
        "run_answers": "SELECT * FROM run_answers WHERE run_id LIKE :p ORDER BY run_id, turn",
        "processed_events": (
            "SELECT * FROM processed_events WHERE event_id LIKE :p ORDER BY event_id"
        ),
    }

    def body(tx: Tx) -> dict[str, list[Any]]:
        return {name: tx.all(sql, {"p": like}) for name, sql in queries.items()}

    found = await repo.database.run(body, Mode.READ)
    text = json.dumps(found, default=str, sort_keys=True).replace(prefix, "X")
    result: dict[str, list[Any]] = json.loads(text)
    return result


async def both_ways(
    repo: Repository, scenario: Callable[[str], Awaitable[None]]
) -> dict[str, list[Any]]:
    """The scenario's rows with the one statement paths, asserted equal to the full
    transactions' rows."""
    with one_statement(True):
        await scenario("fast")
    with one_statement(False):
        await scenario("full")
    fast, full = await rows_of(repo, "fast"), await rows_of(repo, "full")
    assert fast == full
    return fast


def sent_alone(sent: list[str]) -> None:
    assert len(sent) == 1, sent
    assert sent[0] not in ("BEGIN", "COMMIT")


async def beside(repo: Repository) -> asyncpg.Connection:
    """A connection of its own on the repository's schema, for a concurrent transaction."""
    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://"))
    schema = await repo.database.run(lambda tx: tx.one("SELECT current_schema()"), Mode.READ_ONE)
    assert schema is not None
    await admin.execute(f'SET search_path TO "{schema[0]}"')
    return admin


async def blocking(admin: asyncpg.Connection) -> bool:
    """Whether some backend waits for a lock ``admin``'s transaction holds (within 2 s)."""
    for _ in range(100):
        if await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE pg_blocking_pids(pid) @> ARRAY[pg_backend_pid()]"
        ):
            return True
        await asyncio.sleep(0.02)
    return False
