"""A burst of Approve clicks while another process holds ``approvals`` locked (a migration, a
stuck transaction) on PostgreSQL, against a real ``approval-bot serve``.

Each click's read of its approval (one statement, under the click's time limit) waits behind
the lock until asyncpg's own timeout cuts it off and asks the server to cancel it. Every
clicker is told to try again; no backend is left waiting behind the lock (a cut-off read
whose CancelRequest never went out would wait there, on a connection the bot no longer
counts, until the lock goes); once the lock goes, the same clicks decide, and each call runs
once. (Before reads waited for their cancellation's acknowledgement, 1 run in 5 here left
11 reads behind the lock; tests/storage/test_time_limits.py shows it every time.)
"""

from __future__ import annotations

import asyncio

import asyncpg

from tests.faults.harness import (
    APPROVER,
    PATIENCE,
    Deployment,
    approval_id_of,
    eventually,
    quiet_sweeps,
    request,
)
from tests.faults.test_callback_busy import approvals_locked

CLICKS = 150
TRY_AGAIN = "Please try again"


# A click's read of its approval as the server shows it (storage.sql.approvals).
READ_OF_AN_APPROVAL = "% FROM approvals WHERE id = $1"


async def blocked_by(database_url: str, holder_pid: int, query: str) -> int:
    """Backends running a statement like ``query`` that wait for ``holder_pid``'s locks."""
    observer = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        return int(
            await observer.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE $2",
                holder_pid,
                query,
            )
        )
    finally:
        await observer.close()


async def test_a_burst_of_clicks_behind_a_lock_is_told_to_try_again_and_leaves_nothing_waiting(
    replicas: Deployment,
) -> None:
    deployment = replicas
    await deployment.start()
    threads = []
    for n in range(CLICKS):
        asked = await deployment.mention(request(("restart_service", {"service": f"s{n}"})))
        threads.append(asked.ts)
    cards = [await deployment.card(ts) for ts in threads]
    await quiet_sweeps(deployment, 3)  # the cards' own writes (DM copies, reach) all done

    async with approvals_locked(deployment.database_url):
        observer = await asyncpg.connect(
            deployment.database_url.replace("postgresql+asyncpg://", "postgresql://")
        )
        holder_pid = await observer.fetchval(
            "SELECT pid FROM pg_locks WHERE relation = 'approvals'::regclass "
            "AND mode = 'AccessExclusiveLock' AND granted"
        )
        await observer.close()
        replies = await asyncio.gather(
            *(deployment.slack.click(APPROVER, card, "approval_approve") for card in cards)
        )
        assert all(reply.status == 200 for reply in replies)

        def told() -> list[str]:
            return [
                m.text for m in deployment.slack.ephemerals_for(APPROVER) if TRY_AGAIN in m.text
            ]

        await eventually(lambda: len(told()) >= CLICKS, lambda: f"told: {told()}", PATIENCE)
        assert len(told()) == CLICKS
        await asyncio.sleep(2)  # a cancellation reaches the server asynchronously
        # The sweeper's own statements wait there too (no time limit: they are the pool's);
        # a click's read of its approval must not.
        reads = await blocked_by(deployment.database_url, holder_pid, READ_OF_AN_APPROVAL)
        assert reads == 0, f"{reads} clicks' reads still wait behind the lock"

    for card in cards:
        reply = await deployment.slack.click(APPROVER, card, "approval_approve")
        assert reply.status == 200
    for n in range(CLICKS):
        await eventually(
            lambda n=n: deployment.executions("restart_service", f"s{n}") >= 1,
            f"restart_service s{n} to run",
        )
    await asyncio.sleep(1)
    assert all(deployment.executions("restart_service", f"s{n}") == 1 for n in range(CLICKS))
    statuses = {(await deployment.approval(approval_id_of(card))).status for card in cards}
    assert statuses <= {"approved", "executed"}, statuses
