"""Time limits on acknowledgement paths: the answer says truly whether the write committed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event

from bot.clock import utcnow
from storage.drivers import pg_direct, postgres
from storage.limits import PG_UNRESPONSIVE_GRACE, DatabaseBusy, time_limit
from storage.repository import DecisionOutcome, Repository
from tests.conftest import POSTGRES_URL, Database
from tests.storage.test_storage import approval_row, run_row
from tests.support.statements import statements
from tests.support.tcp_proxy import proxied

LIMIT = 2.0


@pytest.fixture
def backend() -> str:
    """PostgreSQL only (the ``repo`` fixture follows this): SQLite commits on the calling
    thread, with no client-side timer to outlive."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL only: APPROVAL_BOT_TEST_POSTGRES_URL is not set")
    return "postgres"


@pytest.fixture(params=["direct", "engine"])
async def repo(
    request: pytest.FixtureRequest, database: Database, monkeypatch: pytest.MonkeyPatch
) -> Repository:
    """The repository on the direct path (storage.drivers.pg_direct, as shipped) or with
    every transaction through SQLAlchemy's engine (``POSTGRES_DIRECT = False``)."""
    if request.param == "engine":
        monkeypatch.setattr(postgres, "POSTGRES_DIRECT", False)
    return await database.open()


@contextlib.contextmanager
def before_statement(
    repo: Repository, starts: str | tuple[str, ...], act: Callable[[], None]
) -> Iterator[None]:
    """``act()`` just before a statement starting with ``starts`` (or one of them) is sent,
    on either path."""

    def hook(statement: str) -> None:
        if statement.lstrip().upper().startswith(starts):
            act()

    if repo.database._direct is not None:  # type: ignore[attr-defined]
        pg_direct.STATEMENT_HOOKS.append(hook)
        try:
            yield
        finally:
            pg_direct.STATEMENT_HOOKS.remove(hook)
        return
    engine = repo.database.engine.sync_engine

    def on_commit(connection: Any) -> None:
        hook("COMMIT")

    def on_execute(connection: Any, cursor: Any, statement: str, *_: Any) -> None:
        hook(statement)

    event.listen(engine, "commit", on_commit)
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield
    finally:
        event.remove(engine, "commit", on_commit)
        event.remove(engine, "before_cursor_execute", on_execute)


async def decide(repo: Repository, now: datetime) -> DecisionOutcome | None:
    return await repo.decide(
        "apr_00000",
        actor="U1",
        approve=True,
        reason=None,
        worker="worker-a",
        lease_until=now + timedelta(minutes=5),
        now=now,
    )


async def test_a_decision_whose_commit_outlasts_the_limit_is_not_reported_as_failed(
    repo: Repository,
) -> None:
    """The event loop stalls (a busy process) while the server commits a decision: the clicker
    must not be told "try again" for a decision that was stored (the replicas benchmark saw
    it: the run then waited for its 5-minute lease with nobody resuming it)."""
    now = utcnow()
    await repo.insert_rows_for_benchmark(
        runs=[run_row(0, now)], approvals=[approval_row(0, ["U1"], now)]
    )
    # COMMIT takes 0.5 s on the server (the test's schema is the search_path).
    await repo.database.execute_sql(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$"
    )
    await repo.database.execute_sql(
        "CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON approvals "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()"
    )

    loop = asyncio.get_running_loop()

    def stall_loop_during_commit() -> None:
        # Once COMMIT is on the wire, the loop stops for longer than the whole limit.
        loop.call_later(0.1, time.sleep, LIMIT + PG_UNRESPONSIVE_GRACE + 1)

    stalled = 0

    def stall_once() -> None:
        nonlocal stalled
        stalled += 1
        if stalled == 1:
            stall_loop_during_commit()

    try:
        with before_statement(repo, "COMMIT", stall_once), time_limit(LIMIT):
            outcome = await decide(repo, now)
    except DatabaseBusy:
        outcome = None
    assert stalled, "the decision's COMMIT was never sent"

    approval = await repo.get_approval("apr_00000")
    assert approval is not None
    if outcome is None:
        assert approval.status == "pending", "told 'try again' for a decision that was stored"
    else:
        assert approval.status == "approved" and outcome.resume_claimed


async def test_a_transaction_cut_off_before_commit_commits_nothing_and_drops_its_connection(
    repo: Repository,
) -> None:
    """The loop stalls past the limit while the decision's UPDATE is in flight: DatabaseBusy,
    nothing stored, and the connection (mid-statement, state unknown) is not pooled again."""
    now = utcnow()
    await repo.insert_rows_for_benchmark(
        runs=[run_row(0, now)], approvals=[approval_row(0, ["U1"], now)]
    )
    loop = asyncio.get_running_loop()
    invalidated: list[object] = []
    direct = repo.database._direct  # type: ignore[attr-defined]
    discarded = direct.discarded if direct is not None else 0

    def stall_loop_during_update() -> None:
        loop.call_soon(time.sleep, LIMIT + PG_UNRESPONSIVE_GRACE + 1)

    def record(dbapi_connection: Any, record: Any, exception: Any) -> None:
        invalidated.append(dbapi_connection)

    event.listen(repo.database.engine.sync_engine.pool, "invalidate", record)
    with (
        pytest.raises(DatabaseBusy),
        # The decision's UPDATE; on PostgreSQL it carries its audit row (audited_postgres),
        # or is the one-statement decision with its claim (storage.sql.decisions).
        before_statement(
            repo,
            ("UPDATE APPROVALS", "WITH CHANGED AS (UPDATE APPROVALS", "WITH RUN AS MATERIALIZED"),
            stall_loop_during_update,
        ),
        time_limit(LIMIT),
    ):
        await decide(repo, now)
    if direct is not None:
        invalidated.extend(range(direct.discarded - discarded))
    assert invalidated, "a connection cut off mid-statement must not return to the pool"
    approval = await repo.get_approval("apr_00000")
    assert approval is not None and approval.status == "pending"
    # The pool still serves: the clicker's retry is recorded.
    with time_limit(LIMIT):
        outcome = await decide(repo, now)
    assert outcome is not None and outcome.approval.status == "approved"


# -- a one-statement read under a time limit -------------------------------------------------


async def stored_approval(repo: Repository) -> None:
    now = utcnow()
    await repo.insert_rows_for_benchmark(
        runs=[run_row(0, now)], approvals=[approval_row(0, ["U1"], now)]
    )


@pytest.fixture
async def direct_repo(database: Database) -> Repository:
    """The repository on the direct path alone (as shipped): what it sends is counted
    (pg_direct.STATEMENT_HOOKS); the engine's path sends its time limits as before."""
    return await database.open()


async def test_a_time_limited_one_statement_read_is_its_statement_alone(
    direct_repo: Repository,
) -> None:
    """A click's read of its approval (Mode.READ_ONE) under a time limit is one round trip:
    no BEGIN with the server's timeouts, no COMMIT; asyncpg's own timeout bounds it."""
    await stored_approval(direct_repo)
    with statements() as sent, time_limit(LIMIT):
        approval = await direct_repo.get_approval("apr_00000")
    assert approval is not None and approval.id == "apr_00000"
    assert len(sent) == 1 and sent[0].endswith("FROM approvals WHERE id = $1"), sent
    # A write under a time limit still sends the server's timeouts with its BEGIN: cut off
    # by the client alone, it could have committed (PostgresDatabase._run_until).
    with statements() as sent, time_limit(LIMIT):
        assert await decide(direct_repo, utcnow()) is not None
    assert sent[0].startswith("BEGIN; SELECT set_config('lock_timeout'"), sent
    assert sent[-1] == "COMMIT"


@contextlib.asynccontextmanager
async def table_locked(database: Database, table: str) -> AsyncIterator[int]:
    """Another connection holds ``table`` in ACCESS EXCLUSIVE mode (even reads wait); its
    backend's pid."""
    schema = database.engine_kwargs["connect_args"]["server_settings"]["search_path"]
    holder = await asyncpg.connect(POSTGRES_URL.replace("+asyncpg", ""))
    try:
        await holder.execute(f'SET search_path TO "{schema}"')
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        try:
            yield holder.get_server_pid()
        finally:
            await transaction.rollback()
    finally:
        await holder.close()


async def waiting_behind(holder_pid: int, *, within: float) -> int:
    """Queries still waiting for ``holder_pid``'s locks once they stop, or after ``within``
    seconds (a cancellation reaches the server asynchronously)."""
    observer = await asyncpg.connect(POSTGRES_URL.replace("+asyncpg", ""))
    try:
        give_up = time.monotonic() + within
        while True:
            waiting = await observer.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                holder_pid,
            )
            if waiting == 0 or time.monotonic() > give_up:
                return int(waiting)
            await asyncio.sleep(0.05)
    finally:
        await observer.close()


async def test_a_time_limited_read_behind_a_lock_is_cancelled_on_the_server(
    repo: Repository, database: Database
) -> None:
    """A read that waits past its limit for a lock (an outage: one per click) is DatabaseBusy
    about then, and stops waiting on the server too: no backend is left behind the lock. Its
    connection, sound once the cancellation is acknowledged, serves the next read."""
    await stored_approval(repo)
    direct = repo.database._direct  # type: ignore[attr-defined]
    with time_limit(LIMIT):  # a connection in the pool, and its statement prepared
        assert await repo.get_approval("apr_00000") is not None
    discarded = direct.discarded if direct is not None else 0
    limit = 0.5
    async with table_locked(database, "approvals") as holder_pid:
        started = time.monotonic()
        with pytest.raises(DatabaseBusy), time_limit(limit):
            await repo.get_approval("apr_00000")
        assert time.monotonic() - started < limit + 1.0, "answered about at the limit"
        assert await waiting_behind(holder_pid, within=2.0) == 0, "still waiting on the server"
    with time_limit(LIMIT):
        approval = await repo.get_approval("apr_00000")
    assert approval is not None and approval.status == "pending"
    if direct is not None:
        assert direct.discarded == discarded, "a cancelled read's connection is pooled again"


async def test_reads_cut_off_together_leave_no_backend_behind_the_lock(
    database: Database,
) -> None:
    """Clicks at once while a lock is held (an outage): their reads share about one
    deadline, more of them than the pool has connections, so a read cut off hands its
    connection to one with almost no time left. Each is DatabaseBusy about at the limit,
    and none stays waiting on the server: a connection goes back to the pool only once the
    server has acknowledged its cancellation. (Pooled at once, the next read on it would
    give up waiting for that acknowledgement within its few milliseconds, and asyncpg then
    closes the connection with its CancelRequest not sent yet: the cut-off read stays
    behind the lock, on a backend no pool counts, until the lock goes.)"""
    seeded = await database.open()
    await stored_approval(seeded)
    repo = await Repository.open(
        database.url, upgrade=False, pool_size=3, max_overflow=0, **database.engine_kwargs
    )
    database._repos.append(repo)  # closed with the database
    limit = 0.3

    async def read(later: float) -> None:
        with time_limit(limit + later):
            await repo.get_approval("apr_00000")

    async with table_locked(database, "approvals") as holder_pid:
        for _ in range(5):
            started = time.monotonic()
            # Deadlines a millisecond apart: a read cut off hands its connection to one with
            # a few milliseconds left, about what the acknowledgement takes.
            reads = [read(i / 1000) for i in range(20)]
            results = await asyncio.gather(*reads, return_exceptions=True)
            assert all(isinstance(r, DatabaseBusy) for r in results), results
            assert time.monotonic() - started < limit + 0.02 + PG_UNRESPONSIVE_GRACE
        assert await waiting_behind(holder_pid, within=2.0) == 0, "a read still waits on the server"
    with time_limit(LIMIT):
        approval = await repo.get_approval("apr_00000")
    assert approval is not None and approval.status == "pending"


async def test_a_read_cut_off_by_a_server_that_stopped_answering_holds_up_no_one(
    database: Database,
) -> None:
    """The server stops answering a pooled connection (its backend stopped, its flow dropped
    on the way) and a time-limited read is sent on it: DatabaseBusy by the limit and the
    grace, as before. The connection is not pooled again with its cancellation never
    acknowledged: the next transaction, with no time limit of its own (the sweeper's, a
    resume's), would wait on it for as long as the server stays silent."""
    seeded = await database.open()
    await stored_approval(seeded)
    async with proxied(database.url) as proxy:
        repo = await Repository.open(
            proxy.url_for(database.url), upgrade=False, **database.engine_kwargs
        )
        try:
            with time_limit(LIMIT):  # a connection in the pool, through the proxy
                assert await repo.get_approval("apr_00000") is not None
            proxy.stall()
            limit = 0.5
            started = time.monotonic()
            with pytest.raises(DatabaseBusy), time_limit(limit):
                await repo.get_approval("apr_00000")
            assert time.monotonic() - started < limit + PG_UNRESPONSIVE_GRACE + 0.5
            approval = await asyncio.wait_for(repo.get_approval("apr_00000"), 5)
            assert approval is not None and approval.status == "pending"
        finally:
            await repo.close()
