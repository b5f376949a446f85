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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Text, and_, cast, delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from storage import migrate
from storage.db import READ_ONLY, create_engine
from storage.models import Approval, AuditEvent, ProcessedEvent, Run

FINISHED_RUN_STATUSES = ("completed", "failed", "cancelled")
ACTIVE_RUN_STATUSES = ("running", "resuming")


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


class Repository:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._write_sessions = async_sessionmaker(engine, expire_on_commit=False)
        self._read_sessions = async_sessionmaker(
            engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False
        )

    @classmethod
    async def open(cls, url: str, *, upgrade: bool = True, **engine_kwargs: Any) -> Repository:
        """Connect (and migrate, unless told not to). ``engine_kwargs`` go to SQLAlchemy."""
        engine = create_engine(url, **engine_kwargs)
        if upgrade:
            await migrate.upgrade(engine)
        return cls(engine)

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncSession]:
        async with self._write_sessions() as session, session.begin():
            yield session

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncSession]:
        async with self._read_sessions() as session, session.begin():
            yield session

    # -- audit -------------------------------------------------------------------------

    @staticmethod
    def _audit(
        session: AsyncSession,
        now: datetime,
        event: str,
        *,
        run_id: str | None = None,
        approval_id: str | None = None,
        actor: str | None = None,
        **detail: Any,
    ) -> None:
        session.add(
            AuditEvent(
                at=now,
                run_id=run_id,
                approval_id=approval_id,
                event=event,
                actor=actor,
                detail=detail,
            )
        )

    async def audit_trail(
        self, *, run_id: str | None = None, approval_id: str | None = None
    ) -> list[AuditEvent]:
        query = select(AuditEvent).order_by(AuditEvent.id)
        if run_id is not None:
            query = query.where(AuditEvent.run_id == run_id)
        if approval_id is not None:
            query = query.where(AuditEvent.approval_id == approval_id)
        async with self._read() as session:
            return list((await session.scalars(query)).all())

    # -- runs --------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        async with self._read() as session:
            return await session.get(Run, run_id)

    async def get_run_by_conversation(self, conversation_key: str) -> Run | None:
        async with self._read() as session:
            return await session.scalar(select(Run).where(Run.conversation_key == conversation_key))

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
        team_id: str = "",
        channel: str = "",
        thread_ts: str = "",
    ) -> Run:
        """Start a run for a conversation, or continue its finished run with new messages.

        The new user message is stored before any model call, so a crash mid-turn loses
        nothing: whoever takes the run over replays the turn from the stored history.
        Raises RunBusy when the conversation's run is working or waiting for approvals.
        """
        async with self._write() as session:
            run = await session.scalar(select(Run).where(Run.conversation_key == conversation_key))
            if run is None:
                run = Run(
                    id=run_id,
                    conversation_key=conversation_key,
                    team_id=team_id,
                    channel=channel,
                    thread_ts=thread_ts,
                    requester=requester,
                    status="running",
                    model_id=model_id,
                    history=list(new_messages),
                    turn=0,
                    lease_owner=worker,
                    lease_expires_at=lease_until,
                    created_at=now,
                    updated_at=now,
                )
                session.add(run)
                await session.flush()
                self._audit(session, now, "run_started", run_id=run.id, actor=requester)
                return run
            if run.status not in FINISHED_RUN_STATUSES:
                session.expunge(run)  # keep its loaded state through the rollback
                raise RunBusy(run)
            run.status = "running"
            run.requester = requester
            run.model_id = model_id
            run.history = [*run.history, *new_messages]
            run.answer = None
            run.error = None
            run.lease_owner = worker
            run.lease_expires_at = lease_until
            run.updated_at = now
            self._audit(session, now, "run_continued", run_id=run.id, actor=requester)
            return run

    async def set_progress_message(self, run_id: str, ts: str | None) -> None:
        async with self._write() as session:
            await session.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(progress_ts=ts)
                .execution_options(synchronize_session=False)
            )

    async def renew_lease(self, run_id: str, worker: str, lease_until: datetime) -> None:
        async with self._write() as session:
            result = await session.execute(
                update(Run)
                .where(Run.id == run_id, Run.lease_owner == worker)
                .values(lease_expires_at=lease_until)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                raise LeaseLost(run_id)

    async def save_pause(
        self,
        run_id: str,
        *,
        worker: str,
        history: list[dict[str, Any]],
        drafts: Sequence[ApprovalDraft],
        lease_until: datetime,
        now: datetime,
    ) -> PauseOutcome:
        """Store the paused history and its new pending approvals in one transaction.

        A pause with no new drafts waits on approvals from an earlier turn; if those were all
        decided while the run was running, this worker claims the resume itself.
        """
        async with self._write() as session:
            run = await session.get(Run, run_id)
            if run is None or run.lease_owner != worker or run.status != "running":
                raise LeaseLost(run_id)
            run.status = "paused"
            run.history = history
            run.turn += 1
            run.lease_owner = None
            run.lease_expires_at = None
            run.updated_at = now
            approvals = [
                Approval(
                    id=draft.id,
                    run_id=run.id,
                    turn=run.turn,
                    tool_call_id=draft.tool_call_id,
                    tool_name=draft.tool_name,
                    arguments=draft.arguments,
                    payload_hash=draft.payload_hash,
                    status="pending",
                    requester=run.requester,
                    team_id=run.team_id,
                    channel=run.channel,
                    thread_ts=run.thread_ts,
                    approvers=list(draft.approvers),
                    allow_self_approval=draft.allow_self_approval,
                    on_expiry=draft.on_expiry,
                    created_at=now,
                    expires_at=draft.expires_at,
                )
                for draft in drafts
            ]
            session.add_all(approvals)
            self._audit(session, now, "run_paused", run_id=run.id, approvals=[d.id for d in drafts])
            for approval in approvals:
                self._audit(
                    session,
                    now,
                    "approval_requested",
                    run_id=run.id,
                    approval_id=approval.id,
                    actor=run.requester,
                    tool=approval.tool_name,
                    arguments=approval.arguments,
                    expires_at=approval.expires_at.isoformat(),
                )
            await session.flush()
            claimed = not approvals and await self._claim_resume(
                session, run.id, worker, lease_until, now
            )
            return PauseOutcome(approvals=approvals, resume_claimed=claimed)

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
        values: dict[str, Any] = {
            "status": status,
            "answer": answer,
            "error": error,
            "lease_owner": None,
            "lease_expires_at": None,
            "updated_at": now,
        }
        if history is not None:
            values["history"] = history
        async with self._write() as session:
            result = await session.execute(
                update(Run)
                .where(Run.id == run_id, Run.lease_owner == worker, Run.status == "running")
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                raise LeaseLost(run_id)
            self._audit(session, now, f"run_{status}", run_id=run_id, error=error)

    async def start_resumed_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> Run:
        """``resuming -> running`` for the worker that claimed the resume."""
        async with self._write() as session:
            result = await session.execute(
                update(Run)
                .where(Run.id == run_id, Run.status == "resuming", Run.lease_owner == worker)
                .values(status="running", lease_expires_at=lease_until, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                raise LeaseLost(run_id)
            self._audit(session, now, "run_resumed", run_id=run_id)
            run = await session.get(Run, run_id)
            assert run is not None
            return run

    async def stale_runs(self, now: datetime, limit: int = 100) -> list[str]:
        """Runs whose worker stopped renewing its lease (it crashed or lost the database)."""
        async with self._read() as session:
            rows = await session.scalars(
                select(Run.id)
                .where(Run.status.in_(ACTIVE_RUN_STATUSES), Run.lease_expires_at < now)
                .order_by(Run.updated_at)
                .limit(limit)
            )
            return list(rows.all())

    async def take_over_run(
        self, run_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> Run | None:
        """Take a run whose lease ran out; None when it is not stale (any more)."""
        async with self._write() as session:
            result = await session.execute(
                update(Run)
                .where(
                    Run.id == run_id,
                    Run.status.in_(ACTIVE_RUN_STATUSES),
                    Run.lease_expires_at < now,
                )
                .values(
                    status="running",
                    lease_owner=worker,
                    lease_expires_at=lease_until,
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                return None
            self._audit(session, now, "run_taken_over", run_id=run_id, worker=worker)
            return await session.get(Run, run_id)

    @staticmethod
    async def _claim_resume(
        session: AsyncSession, run_id: str, worker: str, lease_until: datetime, now: datetime
    ) -> bool:
        """``paused -> resuming`` once no approval of the run is pending; one caller wins."""
        still_pending = exists().where(Approval.run_id == run_id, Approval.status == "pending")
        result = await session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status == "paused", ~still_pending)
            .values(
                status="resuming", lease_owner=worker, lease_expires_at=lease_until, updated_at=now
            )
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

    async def _cancel_paused_run(
        self, session: AsyncSession, run_id: str, reason: str, now: datetime
    ) -> bool:
        result = await session.execute(
            update(Run)
            .where(Run.id == run_id, Run.status == "paused")
            .values(status="cancelled", error=reason, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:
            return False
        await session.execute(
            update(Approval)
            .where(Approval.run_id == run_id, Approval.status == "pending")
            .values(status="cancelled", reason=reason, decided_at=now)
            .execution_options(synchronize_session=False)
        )
        self._audit(session, now, "run_cancelled", run_id=run_id, reason=reason)
        return True

    async def cancel_run(self, run_id: str, *, reason: str, actor: str, now: datetime) -> bool:
        """Cancel a paused run and every approval still pending in it."""
        async with self._write() as session:
            cancelled = await self._cancel_paused_run(session, run_id, reason, now)
            if cancelled:
                self._audit(session, now, "run_cancel_requested", run_id=run_id, actor=actor)
            return cancelled

    # -- approvals ---------------------------------------------------------------------

    async def get_approval(self, approval_id: str) -> Approval | None:
        async with self._read() as session:
            return await session.get(Approval, approval_id)

    async def approval_for_call(self, run_id: str, tool_call_id: str) -> Approval | None:
        async with self._read() as session:
            return await session.scalar(
                select(Approval).where(
                    Approval.run_id == run_id, Approval.tool_call_id == tool_call_id
                )
            )

    async def approvals_for_run(self, run_id: str) -> list[Approval]:
        async with self._read() as session:
            rows = await session.scalars(
                select(Approval).where(Approval.run_id == run_id).order_by(Approval.id)
            )
            return list(rows.all())

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
        async with self._write() as session:
            result = await session.execute(
                update(Approval)
                .where(
                    Approval.id == approval_id,
                    Approval.status == "pending",
                    Approval.expires_at > now,
                )
                .values(status=status, decided_by=actor, decided_at=now, reason=reason)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                return None
            approval = await session.get(Approval, approval_id)
            assert approval is not None
            self._audit(
                session,
                now,
                f"approval_{status}",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                reason=reason,
            )
            claimed = await self._claim_resume(session, approval.run_id, worker, lease_until, now)
            return DecisionOutcome(approval=approval, resume_claimed=claimed)

    async def expire(
        self, approval_id: str, *, worker: str, lease_until: datetime, now: datetime
    ) -> ExpiryOutcome | None:
        """Expire one approval past its deadline and move its run on per ``on_expiry``.

        ``deny``: the run resumes once nothing else is pending (the model is told it expired);
        ``cancel``: the run stops and its other pending approvals are cancelled.
        Returns None when the approval is not pending or not yet due.
        """
        async with self._write() as session:
            result = await session.execute(
                update(Approval)
                .where(
                    Approval.id == approval_id,
                    Approval.status == "pending",
                    Approval.expires_at <= now,
                )
                .values(status="expired", decided_at=now)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                return None
            approval = await session.get(Approval, approval_id)
            assert approval is not None
            self._audit(
                session,
                now,
                "approval_expired",
                run_id=approval.run_id,
                approval_id=approval_id,
                expires_at=approval.expires_at.isoformat(),
            )
            outcome = ExpiryOutcome(approval=approval)
            if approval.on_expiry == "cancel":
                reason = f"approval for {approval.tool_name} expired with no decision"
                outcome.run_cancelled = await self._cancel_paused_run(
                    session, approval.run_id, reason, now
                )
            else:
                outcome.resume_claimed = await self._claim_resume(
                    session, approval.run_id, worker, lease_until, now
                )
            return outcome

    async def due_approvals(self, now: datetime, limit: int = 100) -> list[str]:
        async with self._read() as session:
            rows = await session.scalars(
                select(Approval.id)
                .where(Approval.status == "pending", Approval.expires_at <= now)
                .order_by(Approval.expires_at)
                .limit(limit)
            )
            return list(rows.all())

    async def begin_execution(self, approval_id: str, *, now: datetime) -> bool:
        """``approved -> executing``, recorded before the tool runs: at most once."""
        async with self._write() as session:
            result = await session.execute(
                update(Approval)
                .where(Approval.id == approval_id, Approval.status == "approved")
                .values(status="executing", executed_at=now)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                return False
            approval = await session.get(Approval, approval_id)
            assert approval is not None
            self._audit(
                session, now, "execution_started", run_id=approval.run_id, approval_id=approval_id
            )
            return True

    async def record_execution(
        self, approval_id: str, *, result: str, failed: bool, now: datetime
    ) -> None:
        """``executing -> executed`` with the tool's output (or its error)."""
        async with self._write() as session:
            updated = await session.execute(
                update(Approval)
                .where(Approval.id == approval_id, Approval.status == "executing")
                .values(status="executed", result=result)
                .execution_options(synchronize_session=False)
            )
            if updated.rowcount != 1:
                raise StorageError(f"approval {approval_id} was not executing")
            approval = await session.get(Approval, approval_id)
            assert approval is not None
            self._audit(
                session,
                now,
                "execution_failed" if failed else "execution_finished",
                run_id=approval.run_id,
                approval_id=approval_id,
                result=result[:2000],
            )

    async def mark_outcome_unknown(self, approval_id: str, *, now: datetime) -> bool:
        """``executing -> unknown``: the call began but its result was never recorded."""
        async with self._write() as session:
            result = await session.execute(
                update(Approval)
                .where(Approval.id == approval_id, Approval.status == "executing")
                .values(status="unknown")
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                return False
            approval = await session.get(Approval, approval_id)
            assert approval is not None
            self._audit(
                session,
                now,
                "execution_outcome_unknown",
                run_id=approval.run_id,
                approval_id=approval_id,
            )
            return True

    async def cancel_approved(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """``approved -> cancelled``: what was approved is no longer what would run."""
        async with self._write() as session:
            result = await session.execute(
                update(Approval)
                .where(Approval.id == approval_id, Approval.status == "approved")
                .values(status="cancelled", result=reason)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                return False
            approval = await session.get(Approval, approval_id)
            assert approval is not None
            self._audit(
                session,
                now,
                "approval_cancelled",
                run_id=approval.run_id,
                approval_id=approval_id,
                reason=reason,
            )
            return True

    async def set_card(self, approval_id: str, *, channel: str, ts: str) -> None:
        async with self._write() as session:
            await session.execute(
                update(Approval)
                .where(Approval.id == approval_id)
                .values(card_channel=channel, card_ts=ts)
                .execution_options(synchronize_session=False)
            )

    async def list_pending(
        self, where: PendingFilter, *, now: datetime, limit: int = 20, offset: int = 0
    ) -> tuple[list[Approval], int]:
        """Pending, unexpired approvals, newest first, with the total count for paging.

        ``approver`` keeps approvals that name the user (or one of their groups) or that
        name nobody (anyone but the requester may decide those).
        """
        conditions: list[Any] = [Approval.status == "pending", Approval.expires_at > now]
        if where.team_id is not None:
            conditions.append(Approval.team_id == where.team_id)
        if where.channel is not None:
            conditions.append(Approval.channel == where.channel)
        if where.requester is not None:
            conditions.append(Approval.requester == where.requester)
        if where.exclude_requester is not None:
            conditions.append(
                or_(Approval.requester != where.exclude_requester, Approval.allow_self_approval)
            )
        if where.approver is not None:
            names = [where.approver, *where.approver_groups]
            conditions.append(
                or_(
                    *[_json_list_contains(Approval.approvers, n) for n in names],
                    _json_list_empty(Approval.approvers),
                )
            )
        async with self._read() as session:
            total = await session.scalar(
                select(func.count()).select_from(Approval).where(and_(*conditions))
            )
            rows = await session.scalars(
                select(Approval)
                .where(and_(*conditions))
                .order_by(Approval.created_at.desc(), Approval.id.desc())
                .limit(limit)
                .offset(offset)
            )
            return list(rows.all()), int(total or 0)

    # -- Slack event de-duplication ----------------------------------------------------

    async def claim_event(self, event_id: str, *, now: datetime) -> bool:
        """True the first time an event id is seen, by any replica; False for a redelivery."""
        try:
            async with self._write() as session:
                await session.execute(
                    insert(ProcessedEvent).values(event_id=event_id, received_at=now)
                )
        except IntegrityError:
            return False
        return True

    async def forget_events_before(self, cutoff: datetime) -> int:
        async with self._write() as session:
            result = await session.execute(
                delete(ProcessedEvent).where(ProcessedEvent.received_at < cutoff)
            )
            return result.rowcount


def _json_list_contains(column: Any, value: str) -> Any:
    """Portable "JSON array contains this string": matches the serialized element.

    Slack ids are plain ``[A-Z0-9]`` strings, so matching the quoted element in the array's
    text is exact on both databases without dialect-specific JSON operators.
    """
    return cast(column, Text).like(f'%"{_like_escape(value)}"%', escape="\\")


def _json_list_empty(column: Any) -> Any:
    return cast(column, Text) == "[]"


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace('"', "")
