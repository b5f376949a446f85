"""The listing and the sweeper use the partial indexes on pending approvals, and an approval's
audit trail the partial audit index, on both databases.

Plans are read with each database's EXPLAIN on the repository's own statements. On
PostgreSQL sequential scans are turned off for the EXPLAIN (a small test table would
otherwise be scanned whatever indexes exist): the question is which index the planner can
use, and a full index on ``status`` would be picked if it were there.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from bot.clock import utcnow
from bot.engine import Runner
from storage.repository import Mode, PendingFilter, Repository, Tx
from storage.sql.approvals import (
    CARDS_TO_POST,
    DUE_APPROVALS,
    REQUEST_CARDS_TO_POST,
    pending_list_sql,
)
from tests.bot.test_engine import calls, request
from tests.conftest import make_config
from tests.storage.test_storage import approval_row


async def seed(repo: Repository) -> Any:
    """300 approvals in three channels, most of them long decided, 30 pending."""
    now = utcnow()
    runs = [
        {
            "id": f"run_{i:05d}",
            "conversation_key": f"k{i}",
            "team_id": "T1",
            "channel": f"C{i % 3}",
            "thread_ts": "1.0",
            "requester": "U0REQ",
            "status": "completed",
            "model_id": "m",
            "history": [],
            "turn": 1,
            "created_at": now,
            "updated_at": now,
        }
        for i in range(300)
    ]
    approvals = []
    for i in range(300):
        row = approval_row(i, ["U1"], now) | {"channel": f"C{i % 3}"}
        if i % 10:
            row |= {"status": "executed", "expires_at": now - timedelta(days=1)}
        approvals.append(row)
    await repo.insert_rows_for_benchmark(runs=runs, approvals=approvals)
    await repo.analyze()
    return now


async def plan(repo: Repository, sql: str, params: dict[str, Any]) -> str:
    """The database's plan for ``sql``, as one text."""

    def body(tx: Tx) -> str:
        if tx.dialect == "sqlite":
            return "\n".join(str(row[-1]) for row in tx.all(f"EXPLAIN QUERY PLAN {sql}", params))
        tx.execute("SET LOCAL enable_seqscan = off")
        return "\n".join(str(row[0]) for row in tx.all(f"EXPLAIN {sql}", params))

    return await repo.database.run(body, Mode.WRITE, inline=False)


def uses_a_pending_index(text: str) -> bool:
    """The plan reads approvals through a partial index on pending rows, never the table.

    Which of them a planner picks depends on the table's statistics; each holds pending
    approvals only.
    """
    whole_table = "Seq Scan on approvals" in text or any(
        line.startswith("SCAN approvals") and "USING" not in line for line in text.splitlines()
    )
    return "ix_approvals_pending_" in text and not whole_table


@pytest.mark.parametrize(
    "where",
    [PendingFilter(), PendingFilter(team_id="T1", channel="C1")],
    ids=["everything", "one-channel"],
)
async def test_approvals_pages_use_the_pending_indexes(
    repo: Repository, where: PendingFilter
) -> None:
    now = await seed(repo)
    count_sql, count_params, page_sql, page_params = pending_list_sql(
        where, now=now, limit=20, count_limit=100
    )
    page_plan = await plan(repo, page_sql, page_params)
    assert uses_a_pending_index(page_plan), page_plan
    count_plan = await plan(repo, count_sql, count_params)
    assert uses_a_pending_index(count_plan), count_plan
    # And the answer is the pending approvals only.
    approvals, total = await repo.list_pending(where, now=now, limit=100)
    assert {a.status for a in approvals} == {"pending"}
    assert total == len(approvals) == (30 if where.channel is None else 10)


async def test_the_sweeper_uses_the_pending_indexes(repo: Repository) -> None:
    now = await seed(repo)
    later = now + timedelta(hours=2)
    due_plan = await plan(repo, DUE_APPROVALS, {"now": later, "limit": 100})
    assert uses_a_pending_index(due_plan), due_plan
    assert len(await repo.due_approvals(later)) == 30, "the pending ones, not the history"
    cards = {"now": now, "created_before": later, "limit": 100}
    assert "ix_approvals_card_outbox" in await plan(repo, CARDS_TO_POST, cards)
    # serve's card outbox for requests of other systems (every second), likewise.
    requests = {"now": now, "limit": 100}
    assert "ix_approvals_card_outbox" in await plan(repo, REQUEST_CARDS_TO_POST, requests)


async def test_an_approvals_audit_trail_uses_the_partial_audit_index(repo: Repository) -> None:
    """The audit's approval index leaves out run-level events; an approval's trail still
    reads through it."""
    runner = Runner(repo, make_config(), worker_id="audited")
    paused = await runner.start(request(calls(("restart_service", {"service": "web"}))))
    [approval] = paused.new_approvals
    await runner.decide(approval.id, actor="U0APPROVER1", approve=True)
    assert (await runner.resume(paused.run_id)).status == "completed"
    await repo.analyze()
    sql = "SELECT id FROM audit_events WHERE approval_id = :approval_id"
    trail_plan = await plan(repo, sql, {"approval_id": approval.id})
    # The partial index by name (not the full ix_audit_events_approval_id it replaced).
    assert re.search(r"ix_audit_events_approval(?!_id)", trail_plan), trail_plan
    events = [e.event for e in await repo.audit_trail(approval_id=approval.id)]
    assert events == [
        "approval_requested",
        "approval_approved",
        "execution_started",
        "execution_finished",
    ]
