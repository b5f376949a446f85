"""Storage details that the engine tests do not reach: migrations and listing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from bot.clock import utcnow
from storage.models import Base
from storage.repository import PendingFilter, Repository


async def test_migrations_build_exactly_the_models(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'schema.db'}"
    repo = await Repository.open(url)
    await repo.close()
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == []


def approval_row(i: int, approvers: list[str], now: object) -> dict:
    return {
        "id": f"apr_{i:05d}",
        "run_id": f"run_{i:05d}",
        "turn": 1,
        "tool_call_id": "tc",
        "tool_name": "restart_service",
        "arguments": {"i": i},
        "payload_hash": "0" * 64,
        "status": "pending",
        "requester": "U0REQ",
        "team_id": "T1",
        "channel": "C1",
        "thread_ts": "1.0",
        "approvers": approvers,
        "allow_self_approval": False,
        "on_expiry": "deny",
        "created_at": now + timedelta(seconds=i),  # type: ignore[operator]
        "expires_at": now + timedelta(hours=1),  # type: ignore[operator]
    }


def run_row(i: int, now: object) -> dict:
    return {
        "id": f"run_{i:05d}",
        "conversation_key": f"k{i}",
        "team_id": "T1",
        "channel": "C1",
        "thread_ts": "1.0",
        "requester": "U0REQ",
        "status": "paused",
        "model_id": "m",
        "history": [],
        "turn": 1,
        "created_at": now,
        "updated_at": now,
    }


async def test_listing_what_an_approver_may_decide(repo: Repository) -> None:
    now = utcnow()
    runs = [run_row(i, now) for i in range(30)]
    approvals = [approval_row(i, [["U1"], ["U2"], [], ["S0GROUP"]][i % 4], now) for i in range(30)]
    await repo.insert_rows_for_benchmark(runs=runs, approvals=approvals)

    mine, total = await repo.list_pending(PendingFilter(approver="U1"), now=now, limit=100)
    # U1's own and the open-to-anyone ones, newest first.
    assert total == 15
    assert [a.id for a in mine] == [f"apr_{i:05d}" for i in range(29, -1, -1) if i % 4 in (0, 2)]

    grouped, total = await repo.list_pending(
        PendingFilter(approver="U9", approver_groups=["S0GROUP"]), now=now, limit=100
    )
    assert total == 14 and all(a.approvers in ([], ["S0GROUP"]) for a in grouped)

    page, capped = await repo.list_pending(
        PendingFilter(), now=now, limit=5, offset=5, count_limit=12
    )
    assert [a.id for a in page] == [f"apr_{i:05d}" for i in range(24, 19, -1)]
    assert capped == 13, "a capped count says 'more than 12', not the exact 30"

    later = now + timedelta(hours=2)
    assert (await repo.list_pending(PendingFilter(), now=later))[1] == 0


async def test_release_leases_ends_only_this_workers_live_leases(repo: Repository) -> None:
    now = utcnow()

    async def run(key: str, worker: str, lease_until: object) -> str:
        opened = await repo.open_run(
            run_id=f"run_{key}",
            conversation_key=key,
            requester="U0REQ",
            model_id="scripted",
            new_messages=[{"role": "user", "parts": [{"type": "text", "text": key}]}],
            worker=worker,
            lease_until=lease_until,  # type: ignore[arg-type]
            now=now,
        )
        return opened.id

    mine = await run("mine", "worker-a", now + timedelta(minutes=5))
    # A drive's lease: the worker id and a token of the drive.
    my_drive = await run("my-drive", "worker-a/01J8ZQ", now + timedelta(minutes=5))
    already_stale = await run("stale", "worker-a", now - timedelta(minutes=1))
    theirs = await run("theirs", "worker-b", now + timedelta(minutes=5))
    look_alike = await run("look-alike", "worker-ab/01J8ZQ", now + timedelta(minutes=5))

    assert sorted(await repo.release_leases("worker-a", now=now)) == sorted([mine, my_drive])
    released = await repo.get_run(mine)
    assert released is not None and released.lease_expires_at == now
    assert released.lease_owner == "worker-a" and released.status == "running"
    # Any replica takes it over at its next sweep, as it does a stale lease, and only then.
    later = now + timedelta(milliseconds=1)
    assert sorted(await repo.stale_runs(later)) == sorted([mine, my_drive, already_stale])
    for other_id in (theirs, look_alike):
        other = await repo.get_run(other_id)
        assert other is not None and other.lease_expires_at == now + timedelta(minutes=5)
    assert "lease_released" in [e.event for e in await repo.audit_trail(run_id=mine)]
    assert await repo.release_leases("worker-a", now=now) == []


def test_a_failure_to_open_is_one_line_with_its_reason() -> None:
    from storage.urls import describe_open_failure

    url = "postgresql://bot:secret@db.internal/approvals"
    assert describe_open_failure(url, TimeoutError()) == "timed out"  # asyncpg says nothing
    assert describe_open_failure(url, OSError("first line\nsecond line")) == "first line"


async def test_a_card_edit_mark_only_moves_later(repo: Repository) -> None:
    """A refused edit's mark, timed before a vote's and written after it, must not move the
    vote's mark back: an edit that read the row between the two would clear it without
    showing the vote, and the sweeper would never edit the card."""
    now = utcnow()
    await repo.insert_rows_for_benchmark(
        runs=[run_row(0, now)], approvals=[approval_row(0, ["U1"], now)]
    )
    vote, refused = now + timedelta(seconds=2), now + timedelta(seconds=1)
    await repo.card_edit_failed("apr_00000", now=vote)
    await repo.card_edit_failed("apr_00000", now=refused)
    await repo.card_edited("apr_00000", before=now + timedelta(milliseconds=1500))
    assert await repo.card_edits_due(before=now + timedelta(minutes=1)) == ["apr_00000"]
    await repo.card_edited("apr_00000", before=vote)
    assert await repo.card_edits_due(before=now + timedelta(minutes=1)) == []
