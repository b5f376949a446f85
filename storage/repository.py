"""The repository: every transaction approval-bot makes, and nothing else.

State changes are conditional UPDATEs (``... WHERE id = :id AND status = 'pending'``) whose row
count says who won, so double clicks, Slack retries and other replicas lose races cleanly
instead of acting twice. Callers pass ``now`` in: the clock belongs to the engine (and to
freezegun in tests), never to the database.

Approval statuses: ``pending -> approved | denied | expired | cancelled``, then for approved
calls ``approved -> executing -> executed``; ``executing -> unknown`` when a worker died between
starting a call and recording its result (it is never run again).

Run statuses: ``running -> paused -> resuming -> running -> completed | failed | cancelled``.
A decision's resume claim gives the lease to the drive that resumes the run; the run reads
``resuming`` until that drive starts its first call (or pauses or ends it).
A run is driven only by the drive holding its lease (``lease_owner``, a worker id plus a
token per drive, until ``lease_expires_at``); a crashed worker's lease runs out and
``take_over_run`` hands the run to another.

How it is written: the :class:`Repository` is the stores of :mod:`storage.stores`, one per
aggregate, over one :class:`~storage.drivers.Database`; owns nothing itself but opening,
migrating and closing that database (and a few maintenance reads). Each public method is an
``async`` shell around one transaction body, a plain function over a
:class:`storage.drivers.Tx` that runs a few portable SQL statements (:mod:`storage.sql`), and
:mod:`storage.drivers` runs that body in one step per database (see
:mod:`storage.drivers.sqlite` for why and for the figures). The SQL is plain text rather than
SQLAlchemy Core because SQLAlchemy's execution layer costs 60-120 us per statement here against
5-10 us for ``sqlite3`` itself: more than the whole transaction. The schema stays in
:mod:`storage.models` (and Alembic); the SQL layer declares the same column lists, and a test
checks that they agree. Statements use ``UPDATE … RETURNING`` where a row is needed after a
change, instead of reading it again, and the objects returned are complete, detached model
instances: nothing is loaded lazily after the transaction.

The layers above import storage through this module and :mod:`storage.records` (what the
repository takes and gives), :mod:`storage.models` (what it returns), :mod:`storage.limits`,
:mod:`storage.values`, :mod:`storage.urls`, :mod:`storage.reads` and :mod:`storage.migrate`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from storage import migrate
from storage.drivers import (
    Database,
    Mode,
    PostgresDatabase,
    SQLiteDatabase,
    Tx,
    is_sqlite,
    open_database,
)
from storage.errors import (
    DuplicateEvent,
    EditConflict,
    LeaseLost,
    RunBusy,
    RunHeld,
    StorageError,
    ValueTooLong,
)
from storage.hashes import arguments_hash, canonical_json, payload_hash
from storage.limits import DATABASE_FAILURES, DatabaseBusy, time_limit
from storage.records import (
    ACTIVE_RUN_STATUSES,
    FINISHED_RUN_STATUSES,
    AnswerToPost,
    ApiRequestRow,
    ApiStarted,
    ApprovalDraft,
    ArmedCallback,
    BatchOutcome,
    CallbackOutcome,
    ChildRun,
    DecisionOutcome,
    EditRequest,
    ExpiryOutcome,
    ExportedEvent,
    GrantDraft,
    LiveCounts,
    PauseOutcome,
    PendingFilter,
    ReachState,
    StepStarted,
    StepToComplete,
    StoredCheckpoint,
    StoredToken,
)
from storage.sql.approvals import INSERT_APPROVAL, INSERT_APPROVER, approver_rows
from storage.sql.runs import INSERT_RUN_ROW
from storage.sql.stats import (
    ANALYZE_TABLES,
    PING,
    STATUS_COUNTS,
    WRITE_PROBE_DELETE,
    WRITE_PROBE_INSERT,
)
from storage.stores import (
    AnswerStore,
    ApiStore,
    ApprovalStore,
    BatchStore,
    CardStore,
    CheckpointStore,
    DecisionStore,
    DelegationStore,
    EditStore,
    EventStore,
    ExecutionStore,
    GrantStore,
    HomeStore,
    InstallationStore,
    LeaseStore,
    PauseStore,
    PeopleStore,
    ReachStore,
    RecoveryStore,
    RunStore,
    StepStore,
    VoteStore,
    WaitStore,
    live_counts,
)
from storage.stores.holds import HoldOutcome, HoldStore, ReleaseOutcome
from storage.stores.rows import APPROVALS, RUNS, Rows
from storage.urls import DatabaseUnavailable, reporting_unavailable

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "ACTIVE_RUN_STATUSES",
    "DATABASE_FAILURES",
    "FINISHED_RUN_STATUSES",
    "AnswerToPost",
    "ApiRequestRow",
    "ApiStarted",
    "ApprovalDraft",
    "ArmedCallback",
    "BatchOutcome",
    "CallbackOutcome",
    "ChildRun",
    "Database",
    "DatabaseBusy",
    "DatabaseUnavailable",
    "DecisionOutcome",
    "DuplicateEvent",
    "EditConflict",
    "EditRequest",
    "ExpiryOutcome",
    "ExportedEvent",
    "GrantDraft",
    "HoldOutcome",
    "LeaseLost",
    "LiveCounts",
    "Mode",
    "PauseOutcome",
    "PendingFilter",
    "ReachState",
    "ReleaseOutcome",
    "Repository",
    "RunBusy",
    "RunHeld",
    "StepStarted",
    "StepToComplete",
    "StorageError",
    "StoredCheckpoint",
    "StoredToken",
    "Tx",
    "ValueTooLong",
    "arguments_hash",
    "canonical_json",
    "live_counts",
    "payload_hash",
    "time_limit",
]

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


class Repository(
    RunStore,
    AnswerStore,
    HoldStore,
    LeaseStore,
    PauseStore,
    ApprovalStore,
    DecisionStore,
    ExecutionStore,
    CheckpointStore,
    CardStore,
    VoteStore,
    EditStore,
    WaitStore,
    EventStore,
    InstallationStore,
    HomeStore,
    GrantStore,
    ReachStore,
    PeopleStore,
    BatchStore,
    RecoveryStore,
    StepStore,
    ApiStore,
    DelegationStore,
):
    """Every transaction approval-bot makes, by aggregate (:mod:`storage.stores`: runs, their
    leases and pauses; approvals, their decisions, executions, cards, votes and edits; the
    other waits; events, Slack installs, App Homes, standing grants, the approvers' reach,
    people's names)."""

    def __init__(self, database: Database | AsyncEngine) -> None:
        if hasattr(database, "sync_engine"):  # older callers built the engine themselves
            database = _database_for_engine(cast("AsyncEngine", database))
        self.database = database
        self.dialect = database.dialect
        # Kept apart: callers may wrap ``database`` (bot.ops.metrics counts its failures).
        self._sqlite = database if isinstance(database, SQLiteDatabase) else None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        sqlite_inline: bool = True,
        statement_cache: bool = True,
        **engine_kwargs: Any,
    ) -> Repository:
        """Connect (and migrate, unless told not to). ``engine_kwargs`` go to SQLAlchemy.

        ``sqlite_inline=False`` runs every SQLite transaction on a worker thread instead of
        trying it on the event loop first (see :mod:`storage.drivers.sqlite`).
        ``statement_cache=False``: PostgreSQL behind a transaction-mode pooler (the
        ``database_statement_cache`` key; :func:`storage.drivers.opening.open_database`).
        """
        # A URL of the wrong shape raises ValueError; a database that is not there (or will
        # not let us in) raises DatabaseUnavailable, one sentence either way.
        with reporting_unavailable(url):
            database = open_database(
                url, sqlite_inline=sqlite_inline, statement_cache=statement_cache, **engine_kwargs
            )
        try:
            if upgrade:
                with reporting_unavailable(url):
                    await migrate.upgrade(database)
        except BaseException:
            await database.close()
            raise
        return cls(database)

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy async engine on the same database, for ad-hoc SQL.

        On PostgreSQL it is the repository's own; on SQLite it is created on first use and the
        repository does not go through it. Prefer :meth:`execute_sql`.
        """
        return self.database.engine

    async def execute_sql(self, statement: str, params: dict[str, Any] | None = None) -> None:
        """Run one raw SQL statement in its own write transaction (tests, maintenance)."""
        await self.database.execute_sql(statement, params)

    async def close(self) -> None:
        await self.database.close()

    def fsync_on_loop_when(self, predicate: Callable[[], bool] | None) -> None:
        """When a durable commit (the ``executing`` record) may fsync on the event loop.

        On SQLite that commit waits for the disk: on the loop it costs the fsync alone, on
        the writer thread also two thread wake-ups, but the loop goes on answering requests
        meanwhile. ``predicate`` is asked before each such commit; ``None``: always on the
        loop (the default: the CLI and benchmarks answer nobody else). PostgreSQL: nothing to
        choose, its commits never block the loop.
        """
        if self._sqlite is not None:
            self._sqlite.durable_inline = predicate or (lambda: True)

    async def ping(self) -> None:
        """Raise when the database cannot be reached (health checks)."""

        def body(tx: Tx) -> None:
            tx.one(PING)

        await self.database.run(body, READ_ONE)

    async def probe_write(self, now: datetime) -> None:
        """Raise unless the database can be written now (the readiness check).

        One committed transaction that inserts a row and deletes it again: it leaves nothing
        behind but must reach the disk (the WAL), so a read-only file, a read-only server or
        one that cannot commit fails it, where a ping (a read) would pass.
        """
        params = {"event_id": f"readyz-probe:{secrets.token_hex(8)}", "now": now}

        def body(tx: Tx) -> None:
            tx.execute(WRITE_PROBE_INSERT, params)
            tx.execute(WRITE_PROBE_DELETE, params)

        await self.database.run(body, WRITE)

    async def analyze(self) -> None:
        """Refresh the query planner's statistics, as after a bulk load.

        PostgreSQL's autovacuum does this on its own schedule; until it has, a freshly
        loaded table has no statistics and its plans can be a thousand times slower.
        """

        def body(tx: Tx) -> None:
            for statement in ANALYZE_TABLES:
                tx.execute(statement)

        await self.database.run(body, WRITE, inline=False)

    async def insert_rows_for_benchmark(
        self,
        *,
        runs: Sequence[dict[str, Any]] = (),
        approvals: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Bulk-insert rows as given, in one transaction (seeding benchmarks and tests).

        Each row maps column names to Python values; columns left out are NULL (every
        non-nullable column must be given). No audit events are written.
        """

        defaults = {"kind": "approval", "min_approvals": 1, "allow_edit": False}  # NOT NULL

        def full(rows: Rows[Any], row: dict[str, Any]) -> dict[str, Any]:
            return rows.params({name: row.get(name, defaults.get(name)) for name in rows.names})

        run_rows = [full(RUNS, row) for row in runs]
        approval_rows = [full(APPROVALS, row) for row in approvals]

        def body(tx: Tx) -> None:
            if run_rows:
                tx.executemany(INSERT_RUN_ROW, run_rows)
            if approval_rows:
                tx.executemany(INSERT_APPROVAL, approval_rows)
                tx.executemany(INSERT_APPROVER, approver_rows(approvals))

        await self.database.run(body, WRITE, inline=False)

    async def status_counts(self) -> dict[str, dict[str, int]]:
        """How many runs and approvals are in each status (benchmarks check their outcome)."""

        def body(tx: Tx) -> dict[str, dict[str, int]]:
            return {
                table: {
                    str(status): int(count)
                    for status, count in tx.all(STATUS_COUNTS.format(table=table))
                }
                for table in ("runs", "approvals")
            }

        return await self.database.run(body, Mode.READ, inline=False)


def _database_for_engine(engine: AsyncEngine) -> Database:
    if not is_sqlite(engine):
        return PostgresDatabase(engine)
    return SQLiteDatabase(engine.url.render_as_string(hide_password=False), engine=engine)
