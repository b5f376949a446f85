"""The repository: every transaction approval-bot makes, and nothing else.

State changes are conditional UPDATEs (``... WHERE id = :id AND status = 'pending'``) whose row
count says who won, so double clicks, Slack retries and other replicas lose races cleanly
instead of acting twice. Callers pass ``now`` in: the clock belongs to the engine (and to
freezegun in tests), never to the database.

Approval statuses: ``pending -> approved | denied | expired | cancelled``, then for approved
calls ``approved -> executing -> executed``; ``executing -> unknown`` when a worker died between
starting a call and recording its result (it is never run again).

Run statuses: ``running -> paused -> resuming -> running -> completed | failed | cancelled``.
A run is driven only by the worker holding its lease (``lease_owner`` until
``lease_expires_at``); a crashed worker's lease runs out and ``take_over_run`` hands the run to
another.

How it is written: each public method is an ``async`` shell around one transaction body, a
plain function over a :class:`storage.db.Tx` that runs a few portable SQL statements, and
:mod:`storage.db` runs that body in one step per database (see there for why and for the
figures). The SQL is plain text rather than SQLAlchemy Core because SQLAlchemy's execution
layer costs 60-120 us per statement here against 5-10 us for ``sqlite3`` itself: more than the
whole transaction. The schema stays in :mod:`storage.models` (and Alembic); column lists and
value conversions are derived from it. Statements use ``UPDATE … RETURNING`` where a row is
needed after a change, instead of reading it again, and the objects returned are complete,
detached model instances: nothing is loaded lazily after the transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import JSON, Boolean, DateTime
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import DeclarativeBase, configure_mappers
from sqlalchemy.orm.attributes import instance_state

from storage import migrate
from storage.db import (
    Database,
    Mode,
    PostgresDatabase,
    SQLiteDatabase,
    Tx,
    is_sqlite,
    json_text,
    open_database,
)
from storage.models import ANYONE, Approval, AuditEvent, Run

FINISHED_RUN_STATUSES = ("completed", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("running", "resuming")

WRITE, READ, READ_ONE = Mode.WRITE, Mode.READ, Mode.READ_ONE


class StorageError(Exception):
    """Base of the errors the repository raises on purpose."""


class RunBusy(StorageError):
    """The conversation already has a run that is working or waiting for approvals."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"run {run.id} is {run.status}")
        self.run = run


class LeaseLost(StorageError):
    """This worker no longer holds the run's lease: another worker took the run over."""


@dataclass(frozen=True)
class ApprovalDraft:
    """A gated call that needs a decision; written together with the paused history."""

    id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    payload_hash: str
    approvers: list[str]
    allow_self_approval: bool
    on_expiry: str
    expires_at: datetime


@dataclass
class PauseOutcome:
    """The approvals a pause created; ``resume_claimed`` when none of the run's is pending."""

    approvals: list[Approval]
    resume_claimed: bool


@dataclass
class ExpiryOutcome:
    """What expiring one approval did to its run."""

    approval: Approval
    resume_claimed: bool = False
    run_cancelled: bool = False


@dataclass
class DecisionOutcome:
    """The result of a decision that won its race."""

    approval: Approval
    resume_claimed: bool


@dataclass
class PendingFilter:
    """Which pending approvals to list; every field narrows the list."""

    team_id: str | None = None
    channel: str | None = None
    requester: str | None = None
    approver: str | None = None
    approver_groups: Sequence[str] = field(default_factory=tuple)
    exclude_requester: str | None = None


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_hash(tool_name: str, arguments: dict[str, Any], definition: dict[str, Any]) -> str:
    """Hash of exactly what would run: the tool, its arguments and the tool's definition."""
    material = canonical_json({"tool": tool_name, "arguments": arguments, "definition": definition})
    return hashlib.sha256(material.encode()).hexdigest()


# -- rows <-> model instances ----------------------------------------------------------------

M = TypeVar("M", bound=DeclarativeBase)


class Rows(Generic[M]):
    """One table's columns (from the model) and detached instances built from its rows."""

    def __init__(self, model: type[M]) -> None:
        table = model.__table__  # type: ignore[attr-defined]
        self.model = model
        self.names: tuple[str, ...] = tuple(c.name for c in table.columns)
        self.columns = ", ".join(self.names)
        self.kinds = {c.name: kind for c in table.columns if (kind := _kind(c.type))}
        self._json = tuple(name for name, kind in self.kinds.items() if kind == "json")
        mapper = sa_inspect(model)
        (self._pk,) = (c.name for c in mapper.primary_key)
        self._mapper = mapper
        self._manager = mapper.class_manager
        # Per dialect: the columns whose stored values need converting, and how.
        self._converters: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}

    def values(self, tx: Tx, row: Sequence[Any]) -> dict[str, Any]:
        converters = self._converters.get(tx.dialect)
        if converters is None:
            converters = self._converters[tx.dialect] = [
                (name, tx.converters[kind])
                for name, kind in self.kinds.items()
                if kind in tx.converters
            ]
        values = dict(zip(self.names, row, strict=True))
        for name, convert in converters:
            value = values[name]
            if value is not None:
                values[name] = convert(value)
        return values

    def load(self, tx: Tx, row: Sequence[Any]) -> M:
        return self.build(self.values(tx, row))

    def build(self, values: dict[str, Any]) -> M:
        """A detached instance holding exactly ``values`` (every column), as a closed session
        would leave it; the ORM's own loader builds instances the same way."""
        instance = self._manager.new_instance()
        instance_state(instance).key = self._mapper.identity_key_from_primary_key(
            [values[self._pk]]
        )
        instance.__dict__.update(values)
        return instance

    def params(self, values: dict[str, Any]) -> dict[str, Any]:
        """Statement parameters for a row: JSON columns serialized."""
        return {**values, **{name: json_text(values[name]) for name in self._json}}


def _kind(column_type: Any) -> str | None:
    if isinstance(column_type, JSON):
        return "json"
    if isinstance(column_type, DateTime):
        return "datetime"
    if isinstance(column_type, Boolean):
        return "bool"
    return None


configure_mappers()  # instances are built without a Session, which would do it on first use
RUNS = Rows(Run)
APPROVALS = Rows(Approval)
AUDIT = Rows(AuditEvent)


def _insert(rows: Rows[Any], table: str, suffix: str = "") -> str:
    placeholders = ", ".join(f":{name}" for name in rows.names)
    return f"INSERT INTO {table} ({rows.columns}) VALUES ({placeholders}){suffix}"


# -- SQL --------------------------------------------------------------------------------------
# Portable between SQLite (3.35+) and PostgreSQL; ``:name`` parameters.

_FINISHED = ", ".join(f"'{s}'" for s in FINISHED_RUN_STATUSES)
_ACTIVE = ", ".join(f"'{s}'" for s in ACTIVE_RUN_STATUSES)

RUN_BY_ID = f"SELECT {RUNS.columns} FROM runs WHERE id = :id"
RUN_BY_KEY = f"SELECT {RUNS.columns} FROM runs WHERE conversation_key = :key"
INSERT_RUN = _insert(RUNS, "runs", " ON CONFLICT (conversation_key) DO NOTHING")
CONTINUE_RUN = (
    "UPDATE runs SET status = 'running', requester = :requester, model_id = :model_id, "
    "history = :history, turn = :turn, answer = NULL, error = NULL, lease_owner = :lease_owner, "
    "lease_expires_at = :lease_expires_at, updated_at = :updated_at "
    f"WHERE id = :id AND status IN ({_FINISHED})"
)
RENEW_LEASE = (
    "UPDATE runs SET lease_expires_at = :lease_until WHERE id = :id AND lease_owner = :worker"
)
PAUSE_RUN = (
    "UPDATE runs SET status = 'paused', history = :history, turn = turn + 1, "
    "lease_owner = NULL, lease_expires_at = NULL, updated_at = :now "
    "WHERE id = :id AND lease_owner = :worker AND status = 'running' "
    "RETURNING turn, requester, team_id, channel, thread_ts"
)
FINISH_RUN = (
    "UPDATE runs SET status = :status, answer = :answer, error = :error, lease_owner = NULL, "
    "lease_expires_at = NULL, updated_at = :now{history} "
    "WHERE id = :id AND lease_owner = :worker AND status = 'running'"
)
FINISH_RUN_KEEP_HISTORY = FINISH_RUN.format(history="")
FINISH_RUN_WITH_HISTORY = FINISH_RUN.format(history=", history = :history")
START_RESUMED_RUN = (
    "UPDATE runs SET status = 'running', lease_expires_at = :lease_until, updated_at = :now "
    "WHERE id = :id AND status = 'resuming' AND lease_owner = :worker "
    f"RETURNING {RUNS.columns}"
)
STALE_RUNS = (
    f"SELECT id FROM runs WHERE status IN ({_ACTIVE}) AND lease_expires_at < :now "
    "ORDER BY updated_at LIMIT :limit"
)
TAKE_OVER_RUN = (
    "UPDATE runs SET status = 'running', lease_owner = :worker, lease_expires_at = :lease_until, "
    "updated_at = :now "
    f"WHERE id = :id AND status IN ({_ACTIVE}) AND lease_expires_at < :now "
    f"RETURNING {RUNS.columns}"
)
CLAIM_RESUME = (
    "UPDATE runs SET status = 'resuming', lease_owner = :worker, "
    "lease_expires_at = :lease_until, updated_at = :now "
    "WHERE id = :run_id AND status = 'paused' AND NOT EXISTS ("
    "SELECT 1 FROM approvals WHERE approvals.run_id = :run_id AND approvals.status = 'pending')"
)
CANCEL_PAUSED_RUN = (
    "UPDATE runs SET status = 'cancelled', error = :reason, updated_at = :now "
    "WHERE id = :run_id AND status = 'paused'"
)
CANCEL_PENDING_APPROVALS = (
    "UPDATE approvals SET status = 'cancelled', reason = :reason, decided_at = :now "
    "WHERE run_id = :run_id AND status = 'pending'"
)

APPROVAL_BY_ID = f"SELECT {APPROVALS.columns} FROM approvals WHERE id = :id"
APPROVALS_FOR_TURN = (
    f"SELECT {APPROVALS.columns} FROM approvals WHERE run_id = :run_id AND turn = :turn"
)
# Whatever their status by now: one decided since the gate saw it pending must still be
# found by the resume that its decision makes possible.
RETAG_STILL_PENDING = "UPDATE approvals SET turn = :turn WHERE id = :id AND run_id = :run_id"
APPROVALS_FOR_RUN = f"SELECT {APPROVALS.columns} FROM approvals WHERE run_id = :run_id ORDER BY id"
INSERT_APPROVAL = _insert(APPROVALS, "approvals")
INSERT_APPROVER = (
    "INSERT INTO approval_approvers (approver, approval_id) VALUES (:approver, :approval_id)"
)
DECIDE = (
    "UPDATE approvals SET status = :status, decided_by = :actor, decided_at = :now, "
    "reason = :reason WHERE id = :id AND status = 'pending' AND expires_at > :now "
    f"RETURNING {APPROVALS.columns}"
)
EXPIRE = (
    "UPDATE approvals SET status = 'expired', decided_at = :now "
    "WHERE id = :id AND status = 'pending' AND expires_at <= :now "
    f"RETURNING {APPROVALS.columns}"
)
DUE_APPROVALS = (
    "SELECT id FROM approvals WHERE status = 'pending' AND expires_at <= :now "
    "ORDER BY expires_at LIMIT :limit"
)
BEGIN_EXECUTION = (
    "UPDATE approvals SET status = 'executing', executed_at = :now "
    "WHERE id = :id AND status = 'approved' RETURNING run_id"
)
RECORD_EXECUTION = (
    "UPDATE approvals SET status = 'executed', result = :result "
    "WHERE id = :id AND status = 'executing' RETURNING run_id"
)
MARK_OUTCOME_UNKNOWN = (
    "UPDATE approvals SET status = 'unknown' "
    "WHERE id = :id AND status = 'executing' RETURNING run_id"
)
CANCEL_APPROVED = (
    "UPDATE approvals SET status = 'cancelled', result = :reason "
    "WHERE id = :id AND status = 'approved' RETURNING run_id"
)
SET_CARD = "UPDATE approvals SET card_channel = :channel, card_ts = :ts WHERE id = :id"

INSERT_AUDIT = (
    "INSERT INTO audit_events (at, run_id, approval_id, event, actor, detail) "
    "VALUES (:at, :run_id, :approval_id, :event, :actor, :detail)"
)
CLAIM_EVENT = (
    "INSERT INTO processed_events (event_id, received_at) VALUES (:event_id, :now) "
    "ON CONFLICT (event_id) DO NOTHING"
)
FORGET_EVENTS = "DELETE FROM processed_events WHERE received_at < :cutoff"


# -- transaction pieces shared by several bodies ---------------------------------------------


def _audit_row(
    now: datetime,
    event: str,
    *,
    run_id: str | None = None,
    approval_id: str | None = None,
    actor: str | None = None,
    **detail: Any,
) -> dict[str, Any]:
    return {
        "at": now,
        "run_id": run_id,
        "approval_id": approval_id,
        "event": event,
        "actor": actor,
        "detail": json_text(detail),
    }


def _audit(tx: Tx, now: datetime, event: str, **fields: Any) -> None:
    tx.execute(INSERT_AUDIT, _audit_row(now, event, **fields))


def _claim_resume(tx: Tx, run_id: str, worker: str, lease_until: datetime, now: datetime) -> bool:
    """``paused -> resuming`` once no approval of the run is pending; one caller wins."""
    params = {"run_id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
    return tx.execute(CLAIM_RESUME, params) == 1


def _cancel_paused_run(tx: Tx, run_id: str, reason: str, now: datetime) -> bool:
    params = {"run_id": run_id, "reason": reason, "now": now}
    if tx.execute(CANCEL_PAUSED_RUN, params) != 1:
        return False
    tx.execute(CANCEL_PENDING_APPROVALS, params)
    _audit(tx, now, "run_cancelled", run_id=run_id, reason=reason)
    return True


def _run_busy(tx: Tx, conversation_key: str) -> RunBusy:
    row = tx.one(RUN_BY_KEY, {"key": conversation_key})
    assert row is not None
    return RunBusy(RUNS.load(tx, row))


class Repository:
    def __init__(self, database: Database | AsyncEngine) -> None:
        if isinstance(database, AsyncEngine):  # older callers built the engine themselves
            database = _database_for_engine(database)
        self.database = database
        self.dialect = database.dialect

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        sqlite_inline: bool = True,
        **engine_kwargs: Any,
    ) -> Repository:
        """Connect (and migrate, unless told not to). ``engine_kwargs`` go to SQLAlchemy.

        ``sqlite_inline=False`` runs every SQLite transaction on a worker thread instead of
        trying it on the event loop first (see :mod:`storage.db`).
        """
        database = open_database(url, sqlite_inline=sqlite_inline, **engine_kwargs)
        try:
            if upgrade:
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

    async def ping(self) -> None:
        """Raise when the database cannot be reached (health checks)."""

        def body(tx: Tx) -> None:
            tx.one("SELECT 1")

        await self.database.run(body, READ_ONE)

    async def analyze(self) -> None:
        """Refresh the query planner's statistics, as after a bulk load.

        PostgreSQL's autovacuum does this on its own schedule; until it has, a freshly
        loaded table has no statistics and its plans can be a thousand times slower.
        """

        def body(tx: Tx) -> None:
            tx.execute("ANALYZE")

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

        def full(rows: Rows[Any], row: dict[str, Any]) -> dict[str, Any]:
            return rows.params({name: row.get(name) for name in rows.names})

        run_rows = [full(RUNS, row) for row in runs]
        approval_rows = [full(APPROVALS, row) for row in approvals]

        def body(tx: Tx) -> None:
            if run_rows:
                tx.executemany(_insert(RUNS, "runs"), run_rows)
            if approval_rows:
                tx.executemany(INSERT_APPROVAL, approval_rows)
                tx.executemany(INSERT_APPROVER, _approver_rows(approvals))

        await self.database.run(body, WRITE, inline=False)

    # -- audit -------------------------------------------------------------------------

    async def audit_trail(
        self, *, run_id: str | None = None, approval_id: str | None = None
    ) -> list[AuditEvent]:
        conditions = []
        params: dict[str, Any] = {}
        if run_id is not None:
            conditions.append("run_id = :run_id")
            params["run_id"] = run_id
        if approval_id is not None:
            conditions.append("approval_id = :approval_id")
            params["approval_id"] = approval_id
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = f"SELECT {AUDIT.columns} FROM audit_events{where} ORDER BY id"

        def body(tx: Tx) -> list[AuditEvent]:
            return [AUDIT.load(tx, row) for row in tx.all(sql, params)]

        return await self.database.run(body, READ_ONE, inline=False)

    # -- runs --------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        def body(tx: Tx) -> Run | None:
            row = tx.one(RUN_BY_ID, {"id": run_id})
            return None if row is None else RUNS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def open_run(
        self,
        *,
        run_id: str,
        conversation_key: str,
        requester: str,
        model_id: str,
        new_messages: list[dict[str, Any]],
        worker: str,
        lease_until: datetime,
        now: datetime,
        opening_messages: Sequence[dict[str, Any]] = (),
        team_id: str = "",
        channel: str = "",
        thread_ts: str = "",
    ) -> Run:
        """Start a run for a conversation, or continue its finished run with new messages.

        ``opening_messages`` (the system prompt) begin a new conversation's history only.

        The new user message is stored before any model call, so a crash mid-turn loses
        nothing: whoever takes the run over replays the turn from the stored history.
        Raises RunBusy when the conversation's run is working or waiting for approvals.
        """

        def body(tx: Tx) -> Run:
            row = tx.one(RUN_BY_KEY, {"key": conversation_key})
            if row is None:
                values: dict[str, Any] = {
                    "id": run_id,
                    "conversation_key": conversation_key,
                    "team_id": team_id,
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "requester": requester,
                    "status": "running",
                    "model_id": model_id,
                    "history": [*opening_messages, *new_messages],
                    "turn": 0,
                    "answer": None,
                    "error": None,
                    "lease_owner": worker,
                    "lease_expires_at": lease_until,
                    "created_at": now,
                    "updated_at": now,
                }
                if tx.execute(INSERT_RUN, RUNS.params(values)) != 1:
                    raise _run_busy(tx, conversation_key)  # another replica just started it
                _audit(tx, now, "run_started", run_id=run_id, actor=requester)
                return RUNS.build(values)
            values = RUNS.values(tx, row)
            if values["status"] not in FINISHED_RUN_STATUSES:
                raise RunBusy(RUNS.build(values))
            values.update(
                status="running",
                requester=requester,
                model_id=model_id,
                history=[*values["history"], *new_messages],
                # A new request is a new turn: approvals of earlier turns never answer its
                # calls, even when a provider reuses tool call ids like "call_0".
                turn=values["turn"] + 1,
                answer=None,
                error=None,
                lease_owner=worker,
                lease_expires_at=lease_until,
                updated_at=now,
            )
            if tx.execute(CONTINUE_RUN, RUNS.params(values)) != 1:
                raise _run_busy(tx, conversation_key)  # another replica continued it first
            _audit(tx, now, "run_continued", run_id=values["id"], actor=requester)
            return RUNS.build(values)

        return await self.database.run(body, WRITE)

    async def renew_lease(self, run_id: str, worker: str, lease_until: datetime) -> None:
        def body(tx: Tx) -> None:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until}
            if tx.execute(RENEW_LEASE, params) != 1:
                raise LeaseLost(run_id)

        await self.database.run(body, WRITE)

    async def save_pause(
        self,
        run_id: str,
        *,
        worker: str,
        history: list[dict[str, Any]],
        drafts: Sequence[ApprovalDraft],
        lease_until: datetime,
        now: datetime,
        still_pending: Sequence[str] = (),
    ) -> PauseOutcome:
        """Store the paused history and its new pending approvals in one transaction.

        A pause with no new drafts waits on approvals from an earlier turn; if those were all
        decided while the run was running, this worker claims the resume itself.
        """
        history_text = json_text(history)

        def body(tx: Tx) -> PauseOutcome:
            params = {"id": run_id, "worker": worker, "history": history_text, "now": now}
            row = tx.one(PAUSE_RUN, params)
            if row is None:
                raise LeaseLost(run_id)
            turn, requester, team_id, channel, thread_ts = row
            if still_pending:
                # Approvals of an earlier pause that are still waiting: this pause waits on
                # them too, and the next resume must find them under this turn.
                tx.executemany(
                    RETAG_STILL_PENDING,
                    [{"turn": turn, "id": i, "run_id": run_id} for i in still_pending],
                )
            rows = [
                {
                    "id": draft.id,
                    "run_id": run_id,
                    "turn": turn,
                    "tool_call_id": draft.tool_call_id,
                    "tool_name": draft.tool_name,
                    "arguments": draft.arguments,
                    "payload_hash": draft.payload_hash,
                    "status": "pending",
                    "requester": requester,
                    "team_id": team_id,
                    "channel": channel,
                    "thread_ts": thread_ts,
                    "approvers": list(draft.approvers),
                    "allow_self_approval": draft.allow_self_approval,
                    "on_expiry": draft.on_expiry,
                    "created_at": now,
                    "expires_at": draft.expires_at,
                    "decided_by": None,
                    "decided_at": None,
                    "reason": None,
                    "result": None,
                    "executed_at": None,
                    "card_channel": None,
                    "card_ts": None,
                }
                for draft in drafts
            ]
            audits = [
                _audit_row(now, "run_paused", run_id=run_id, approvals=[d.id for d in drafts])
            ]
            audits += [
                _audit_row(
                    now,
                    "approval_requested",
                    run_id=run_id,
                    approval_id=draft.id,
                    actor=requester,
                    tool=draft.tool_name,
                    arguments=draft.arguments,
                    expires_at=draft.expires_at.isoformat(),
                )
                for draft in drafts
            ]
            if rows:
                tx.executemany(INSERT_APPROVAL, [APPROVALS.params(r) for r in rows])
                tx.executemany(INSERT_APPROVER, _approver_rows(rows))
            tx.executemany(INSERT_AUDIT, audits)
            claimed = not rows and _claim_resume(tx, run_id, worker, lease_until, now)
            return PauseOutcome(
                approvals=[APPROVALS.build(r) for r in rows], resume_claimed=claimed
            )

        return await self.database.run(body, WRITE)

    async def finish_run(
        self,
        run_id: str,
        *,
        worker: str,
        status: str,
        now: datetime,
        history: list[dict[str, Any]] | None = None,
        answer: str | None = None,
        error: str | None = None,
    ) -> None:
        if status not in FINISHED_RUN_STATUSES:
            raise ValueError(f"not a final status: {status}")
        params: dict[str, Any] = {
            "id": run_id,
            "worker": worker,
            "status": status,
            "answer": answer,
            "error": error,
            "now": now,
        }
        sql = FINISH_RUN_KEEP_HISTORY
        if history is not None:
            params["history"] = json_text(history)
            sql = FINISH_RUN_WITH_HISTORY

        def body(tx: Tx) -> None:
            if tx.execute(sql, params) != 1:
                raise LeaseLost(run_id)
            _audit(tx, now, f"run_{status}", run_id=run_id, error=error)

        await self.database.run(body, WRITE)

    async def start_resumed_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> Run:
        """``resuming -> running`` for the worker that claimed the resume."""

        def body(tx: Tx) -> Run:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
            row = tx.one(START_RESUMED_RUN, params)
            if row is None:
                raise LeaseLost(run_id)
            _audit(tx, now, "run_resumed", run_id=run_id)
            return RUNS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def stale_runs(self, now: datetime, limit: int = 100) -> list[str]:
        """Runs whose worker stopped renewing its lease (it crashed or lost the database)."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(STALE_RUNS, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def take_over_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> Run | None:
        """Take a run whose lease ran out; None when it is not stale (any more)."""

        def body(tx: Tx) -> Run | None:
            params = {"id": run_id, "worker": worker, "lease_until": lease_until, "now": now}
            row = tx.one(TAKE_OVER_RUN, params)
            if row is None:
                return None
            _audit(tx, now, "run_taken_over", run_id=run_id, worker=worker)
            return RUNS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def cancel_run(self, run_id: str, *, reason: str, actor: str, now: datetime) -> bool:
        """Cancel a paused run and every approval still pending in it."""

        def body(tx: Tx) -> bool:
            cancelled = _cancel_paused_run(tx, run_id, reason, now)
            if cancelled:
                _audit(tx, now, "run_cancel_requested", run_id=run_id, actor=actor)
            return cancelled

        return await self.database.run(body, WRITE)

    # -- approvals ---------------------------------------------------------------------

    async def get_approval(self, approval_id: str) -> Approval | None:
        def body(tx: Tx) -> Approval | None:
            row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
            return None if row is None else APPROVALS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def approvals_for_turn(self, run_id: str, turn: int) -> list[Approval]:
        """The approvals requested by a run's pause number ``turn``."""

        def body(tx: Tx) -> list[Approval]:
            rows = tx.all(APPROVALS_FOR_TURN, {"run_id": run_id, "turn": turn})
            return [APPROVALS.load(tx, row) for row in rows]

        return await self.database.run(body, READ_ONE)

    async def approvals_for_run(self, run_id: str) -> list[Approval]:
        def body(tx: Tx) -> list[Approval]:
            return [
                APPROVALS.load(tx, row) for row in tx.all(APPROVALS_FOR_RUN, {"run_id": run_id})
            ]

        return await self.database.run(body, READ_ONE)

    async def decide(
        self,
        approval_id: str,
        *,
        actor: str,
        approve: bool,
        reason: str | None,
        worker: str,
        lease_until: datetime,
        now: datetime,
    ) -> DecisionOutcome | None:
        """Record a decision if the approval is still pending and unexpired.

        Returns None when another decision, or the clock, got there first; the caller reads
        the approval again to say which. The decision that leaves no approval of the run
        pending also claims the resume, in the same transaction.
        """
        status = "approved" if approve else "denied"
        params = {"id": approval_id, "status": status, "actor": actor, "reason": reason, "now": now}

        def body(tx: Tx) -> DecisionOutcome | None:
            row = tx.one(DECIDE, params)
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            _audit(
                tx,
                now,
                f"approval_{status}",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                reason=reason,
            )
            claimed = _claim_resume(tx, approval.run_id, worker, lease_until, now)
            return DecisionOutcome(approval=approval, resume_claimed=claimed)

        return await self.database.run(body, WRITE)

    async def expire(
        self, approval_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> ExpiryOutcome | None:
        """Expire one approval past its deadline and move its run on per ``on_expiry``.

        ``deny``: the run resumes once nothing else is pending (the model is told it expired);
        ``cancel``: the run stops and its other pending approvals are cancelled.
        Returns None when the approval is not pending or not yet due.
        """

        def body(tx: Tx) -> ExpiryOutcome | None:
            row = tx.one(EXPIRE, {"id": approval_id, "now": now})
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            _audit(
                tx,
                now,
                "approval_expired",
                run_id=approval.run_id,
                approval_id=approval_id,
                expires_at=approval.expires_at.isoformat(),
            )
            outcome = ExpiryOutcome(approval=approval)
            if approval.on_expiry == "cancel":
                reason = f"approval for {approval.tool_name} expired with no decision"
                outcome.run_cancelled = _cancel_paused_run(tx, approval.run_id, reason, now)
            else:
                outcome.resume_claimed = _claim_resume(
                    tx, approval.run_id, worker, lease_until, now
                )
            return outcome

        return await self.database.run(body, WRITE)

    async def due_approvals(self, now: datetime, limit: int = 100) -> list[str]:
        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(DUE_APPROVALS, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def begin_execution(self, approval_id: str, *, now: datetime) -> bool:
        """``approved -> executing``, recorded before the tool runs: at most once."""

        def body(tx: Tx) -> bool:
            row = tx.one(BEGIN_EXECUTION, {"id": approval_id, "now": now})
            if row is None:
                return False
            _audit(tx, now, "execution_started", run_id=row[0], approval_id=approval_id)
            return True

        return await self.database.run(body, WRITE)

    async def record_execution(
        self, approval_id: str, *, result: str, failed: bool, now: datetime
    ) -> None:
        """``executing -> executed`` with the tool's output (or its error)."""

        def body(tx: Tx) -> None:
            row = tx.one(RECORD_EXECUTION, {"id": approval_id, "result": result})
            if row is None:
                raise StorageError(f"approval {approval_id} was not executing")
            _audit(
                tx,
                now,
                "execution_failed" if failed else "execution_finished",
                run_id=row[0],
                approval_id=approval_id,
                result=result[:2000],
            )

        await self.database.run(body, WRITE)

    async def mark_outcome_unknown(self, approval_id: str, *, now: datetime) -> bool:
        """``executing -> unknown``: the call began but its result was never recorded."""

        def body(tx: Tx) -> bool:
            row = tx.one(MARK_OUTCOME_UNKNOWN, {"id": approval_id})
            if row is None:
                return False
            _audit(tx, now, "execution_outcome_unknown", run_id=row[0], approval_id=approval_id)
            return True

        return await self.database.run(body, WRITE)

    async def cancel_approved(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """``approved -> cancelled``: what was approved is no longer what would run."""

        def body(tx: Tx) -> bool:
            row = tx.one(CANCEL_APPROVED, {"id": approval_id, "reason": reason})
            if row is None:
                return False
            _audit(
                tx,
                now,
                "approval_cancelled",
                run_id=row[0],
                approval_id=approval_id,
                reason=reason,
            )
            return True

        return await self.database.run(body, WRITE)

    async def set_card(self, approval_id: str, *, channel: str, ts: str) -> None:
        def body(tx: Tx) -> None:
            tx.execute(SET_CARD, {"id": approval_id, "channel": channel, "ts": ts})

        await self.database.run(body, WRITE)

    async def list_pending(
        self,
        where: PendingFilter,
        *,
        now: datetime,
        limit: int = 20,
        offset: int = 0,
        count_limit: int | None = None,
    ) -> tuple[list[Approval], int]:
        """Pending, unexpired approvals, newest first, with the total count for paging.

        ``approver`` keeps approvals that name the user (or one of their groups) or that
        name nobody (anyone but the requester may decide those). ``count_limit`` stops
        counting there (a total above it means "more than that"): counting every match is
        the one part of a page whose cost grows with the table.
        """
        conditions = ["status = 'pending'", "expires_at > :now"]
        params: dict[str, Any] = {"now": now, "limit": limit, "offset": offset}
        if where.team_id is not None:
            conditions.append("team_id = :team_id")
            params["team_id"] = where.team_id
        if where.channel is not None:
            conditions.append("channel = :channel")
            params["channel"] = where.channel
        if where.requester is not None:
            conditions.append("requester = :requester")
            params["requester"] = where.requester
        if where.exclude_requester is not None:
            conditions.append("(requester != :exclude_requester OR allow_self_approval = TRUE)")
            params["exclude_requester"] = where.exclude_requester
        approvers = ""
        if where.approver is not None:
            names = [where.approver, *where.approver_groups, ANYONE]
            approvers = ", ".join(f":approver_{i}" for i in range(len(names)))
            params.update({f"approver_{i}": name for i, name in enumerate(names)})
        condition = " AND ".join(conditions)
        page_condition = condition
        if approvers:
            # The page walks approvals newest first and probes each one's approvers: it
            # stops after a page of matches. The count starts from the approver's own rows.
            page_condition += (
                " AND EXISTS (SELECT 1 FROM approval_approvers WHERE "
                f"approval_approvers.approval_id = approvals.id AND approver IN ({approvers}))"
            )
            matching = (
                "SELECT DISTINCT approvals.id FROM approval_approvers "
                "JOIN approvals ON approvals.id = approval_approvers.approval_id "
                f"WHERE approval_approvers.approver IN ({approvers}) AND {condition}"
            )
        else:
            matching = f"SELECT approvals.id FROM approvals WHERE {condition}"
        count_params = {k: v for k, v in params.items() if k not in ("limit", "offset")}
        if count_limit is None:
            count_sql = f"SELECT count(*) FROM ({matching}) AS matching"
        else:
            count_sql = f"SELECT count(*) FROM ({matching} LIMIT :count_limit) AS matching"
            count_params["count_limit"] = count_limit + 1
        page_sql = (
            f"SELECT {APPROVALS.columns} FROM approvals WHERE {page_condition} "
            "ORDER BY created_at DESC, id DESC LIMIT :limit OFFSET :offset"
        )

        def body(tx: Tx) -> tuple[list[Approval], int]:
            total = tx.one(count_sql, count_params)
            rows = tx.all(page_sql, params)
            return [APPROVALS.load(tx, row) for row in rows], int(total[0] if total else 0)

        return await self.database.run(body, READ, inline=False)

    # -- Slack event de-duplication ----------------------------------------------------

    async def claim_event(self, event_id: str, *, now: datetime) -> bool:
        """True the first time an event id is seen, by any replica; False for a redelivery."""

        def body(tx: Tx) -> bool:
            return tx.execute(CLAIM_EVENT, {"event_id": event_id, "now": now}) == 1

        return await self.database.run(body, WRITE)

    async def forget_events_before(self, cutoff: datetime) -> int:
        def body(tx: Tx) -> int:
            return tx.execute(FORGET_EVENTS, {"cutoff": cutoff})

        return await self.database.run(body, WRITE, inline=False)


def _approver_rows(approvals: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """``approval_approvers`` rows: one per named approver, or ``*`` when anyone may decide."""
    return [
        {"approver": approver, "approval_id": approval["id"]}
        for approval in approvals
        for approver in (approval["approvers"] or [ANYONE])
    ]


def _database_for_engine(engine: AsyncEngine) -> Database:
    if not is_sqlite(engine):
        return PostgresDatabase(engine)
    return SQLiteDatabase(engine.url.render_as_string(hide_password=False), engine=engine)
