"""Approvals: decisions, expiry, execution records, cards and pending lists."""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from storage.db import Database, Mode, Tx
from storage.grants import GrantDraft, insert_grant
from storage.models import ANYONE, Approval
from storage.records import (
    DecisionOutcome,
    ExpiryOutcome,
    PendingFilter,
    StorageError,
    shows_current,
)
from storage.rows import APPROVALS
from storage.statements import (
    ADOPT_CARD,
    APPROVAL_BY_ID,
    APPROVALS_FOR_RUN,
    APPROVALS_FOR_TURN,
    BEGIN_EXECUTION,
    BEGIN_EXECUTION_FENCED,
    CANCEL_APPROVED,
    CANCEL_UNRUNNABLE,
    CARDS_TO_POST,
    CLAIM_CARD,
    DUE_APPROVALS,
    EXPIRE,
    MARK_OUTCOME_UNKNOWN,
    RECORD_EXECUTION,
    RECORD_LATE_EXECUTION,
    RENEW_LEASE_OF_APPROVAL,
    SET_CARD,
    START_CLAIMED_RUN,
    audit,
    cancel_paused_run,
    claim_resume,
    decide_row,
    decided_outcome,
    lock_run_of_approval,
)
from storage.votes import (
    APPROVE_VOTERS,
    CARD_EDITS_DUE,
    CLEAR_CARD_EDIT_DUE,
    approve_vote,
    record_deny_vote,
)

WRITE, READ, READ_ONE = Mode.WRITE, Mode.READ, Mode.READ_ONE


class ApprovalStore:
    database: Database
    # Called inside ``begin_execution``'s transaction, after its UPDATE, before its COMMIT:
    # diagnostics and tests read the connection's commit durability from there (the
    # transaction the ``executing`` record is committed in, not a look-alike).
    inside_begin_execution: Callable[[Tx], None] | None = None

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

    async def approve_voters(self, approval_id: str) -> list[str]:
        """Who has an Approve vote on an approval that needs several approvers, oldest first."""

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(APPROVE_VOTERS, {"id": approval_id})]

        return await self.database.run(body, READ_ONE)

    async def card_edited(self, approval_id: str, *, before: datetime) -> None:
        """The card shows the approval as read at ``before``: votes marked until then are on it."""

        def body(tx: Tx) -> None:
            tx.execute(CLEAR_CARD_EDIT_DUE, {"id": approval_id, "before": before})

        await self.database.run(body, WRITE)

    async def card_edits_due(self, *, before: datetime, limit: int = 100) -> list[str]:
        """Approvals whose card a vote changed before ``before`` and no edit has shown since."""

        def body(tx: Tx) -> list[str]:
            return [r[0] for r in tx.all(CARD_EDITS_DUE, {"before": before, "limit": limit})]

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
        claim: bool = True,
        grant: GrantDraft | None = None,
        actor_name: str | None = None,
        shown: str | None = None,
        not_allowed_voters: Collection[str] = (),
    ) -> DecisionOutcome | None:
        """Record a decision if the approval is still pending and unexpired.

        Returns None when another decision, or the clock, got there first; the caller reads
        the approval again to say which. An Approve of an approval that needs several
        approvers (``min_approvals``) is a vote (:mod:`storage.votes`): the outcome's approval
        is still pending until the last vote needed, and ``duplicate`` when the actor had
        approved already. The decision that leaves no approval of the run
        pending also claims the resume, in the same transaction, unless ``claim`` is False
        (a decider that could not resume the run: the sweeper resumes it). The claim is the
        resume's start: ``worker`` (the lease owner of the drive that will resume it) holds
        the run's lease from this commit, and the outcome carries the run, so resuming needs
        no write of its own (``run_resumed`` is audited here). An approval with ``grant``
        also creates that standing grant (storage.grants), in the same transaction.
        ``shown``: what the clicked copy showed (``records.fingerprint``, or ``UNEDITED``); an
        Approve of a pending approval whose arguments are no longer those changes nothing
        and comes back ``stale`` (None: not from a card, nothing to compare).
        ``not_allowed_voters``: earlier voters found no longer allowed; their votes are
        discarded and do not count (storage.votes).
        """
        status = "approved" if approve else "denied"
        # The name is what people knew the decider as: it cannot be longer than its column.
        actor_name = actor_name[:255] if actor_name else None

        def body(tx: Tx) -> DecisionOutcome | None:
            lock_run_of_approval(tx, approval_id)
            if approve and shown is not None:
                # Under the run's lock: an edit cannot land between this check and the vote.
                stale = _stale_copy(tx, approval_id, shown, now)
                if stale is not None:
                    return DecisionOutcome(stale, resume_claimed=False, stale=True)
            row = decide_row(tx, approval_id, status, actor, actor_name, reason, now)
            if row is None and approve:
                # An approval that needs several approvers (storage.votes): a vote, and the
                # decision only when it is the last one needed.
                vote = approve_vote(
                    tx,
                    approval_id,
                    actor=actor,
                    actor_name=actor_name,
                    reason=reason,
                    now=now,
                    not_allowed=not_allowed_voters,
                )
                if vote is not None and not vote.decided:
                    pending = APPROVALS.load(tx, vote.row)
                    return DecisionOutcome(pending, resume_claimed=False, duplicate=vote.duplicate)
                row = vote.row if vote is not None else None
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            if not approve:
                record_deny_vote(tx, approval, actor=actor, reason=reason, now=now)
            audit(
                tx,
                now,
                f"approval_{status}",
                run_id=approval.run_id,
                approval_id=approval_id,
                actor=actor,
                reason=reason,
                **({"actor_name": actor_name} if actor_name else {}),
            )
            if grant is not None and approve:
                insert_grant(tx, grant, approval, actor, now)
            return decided_outcome(tx, approval, claim, worker, lease_until, now)

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
            lock_run_of_approval(tx, approval_id)
            row = tx.one(EXPIRE, {"id": approval_id, "now": now})
            if row is None:
                return None
            approval = APPROVALS.load(tx, row)
            audit(
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
                outcome.run_cancelled = cancel_paused_run(tx, approval.run_id, reason, now)
            else:
                outcome.resume_claimed = claim_resume(tx, approval.run_id, worker, lease_until, now)
            return outcome

        return await self.database.run(body, WRITE)

    async def due_approvals(self, now: datetime, limit: int = 100) -> list[str]:
        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(DUE_APPROVALS, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def begin_execution(
        self, approval_id: str, *, now: datetime, owner: str | None = None
    ) -> bool:
        """``approved -> executing``, recorded before the tool runs: at most once.

        Only before the approval's ``expires_at``; with ``owner``, only while that lease owner
        still drives the approval's run. False when the call must not start (the caller reads
        the approval to say why).

        The one commit made durable whatever the database's setting (``durable=True``: SQLite
        ``synchronous = FULL``, PostgreSQL never an asynchronous commit): if a power cut lost
        it after the tool ran, a recovered bot would find the call ``approved`` and run it
        again. In WAL mode its fsync also makes every earlier commit durable.
        """
        params = {"id": approval_id, "now": now}
        sql = BEGIN_EXECUTION
        if owner is not None:
            params["owner"] = owner
            sql = BEGIN_EXECUTION_FENCED

        def body(tx: Tx) -> bool:
            if owner is not None:
                tx.execute(START_CLAIMED_RUN, {"id": approval_id, "owner": owner})
            row = tx.one(sql, params)
            if row is None:
                return False
            audit(tx, now, "execution_started", run_id=row[0], approval_id=approval_id)
            if self.inside_begin_execution is not None:
                self.inside_begin_execution(tx)
            return True

        return await self.database.run(body, WRITE, durable=True)

    async def record_execution(
        self,
        approval_id: str,
        *,
        result: str,
        failed: bool,
        now: datetime,
        owner: str | None = None,
        lease_until: datetime | None = None,
    ) -> bool:
        """``executing -> executed`` with the tool's output (or its error).

        Also ``unknown -> executed``: the run was taken over while the tool ran and the taker
        recorded the outcome as unknown (it never re-runs such a call). The worker that ran it
        is the only one that knows the result, so it still records it, marked as late.

        With ``owner`` and ``lease_until``, the same transaction renews that drive's lease on
        the approval's run (the check a drive makes after every gated call) and returns
        whether it still held it: False means another drive has the run (the result is
        recorded all the same). Without them, True.
        """
        params = {"id": approval_id, "result": result}
        lease = None
        if owner is not None and lease_until is not None:
            lease = {"id": approval_id, "owner": owner, "lease_until": lease_until}

        def body(tx: Tx) -> bool:
            # The run's row first, as every transaction takes them (see LOCK_RUN).
            still_ours = lease is None or tx.execute(RENEW_LEASE_OF_APPROVAL, lease) == 1
            late = False
            row = tx.one(RECORD_EXECUTION, params)
            if row is None:
                row = tx.one(RECORD_LATE_EXECUTION, params)
                late = True
            if row is None:
                raise StorageError(f"approval {approval_id} was not executing")
            detail: dict[str, Any] = {"result": result[:2000]}
            if late:
                detail["after_outcome_unknown"] = True
            audit(
                tx,
                now,
                "execution_failed" if failed else "execution_finished",
                run_id=row[0],
                approval_id=approval_id,
                **detail,
            )
            return still_ours

        return await self.database.run(body, WRITE)

    async def mark_outcome_unknown(self, approval_id: str, *, now: datetime) -> bool:
        """``executing -> unknown``: the call began but its result was never recorded."""

        def body(tx: Tx) -> bool:
            row = tx.one(MARK_OUTCOME_UNKNOWN, {"id": approval_id})
            if row is None:
                return False
            audit(tx, now, "execution_outcome_unknown", run_id=row[0], approval_id=approval_id)
            return True

        return await self.database.run(body, WRITE)

    async def cancel_approved(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """``approved -> cancelled``: what was approved is no longer what would run."""
        return await self._cancel(CANCEL_APPROVED, approval_id, reason=reason, now=now)

    async def cancel_unrunnable(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """``pending | approved -> cancelled``: the call can never run (its tool is gone)."""
        return await self._cancel(CANCEL_UNRUNNABLE, approval_id, reason=reason, now=now)

    async def _cancel(
        self, statement: str, approval_id: str, *, reason: str, now: datetime
    ) -> bool:
        params = {"id": approval_id, "reason": reason, "now": now}

        def body(tx: Tx) -> bool:
            row = tx.one(statement, params)
            if row is None:
                return False
            audit(
                tx,
                now,
                "approval_cancelled",
                run_id=row[0],
                approval_id=approval_id,
                reason=reason,
            )
            return True

        return await self.database.run(body, WRITE)

    async def claim_card(
        self, approval_id: str, *, now: datetime, until: datetime
    ) -> Approval | None:
        """Claim posting a pending approval's card until ``until``: one poster at a time.

        None when its card is posted, someone's live claim holds it, or it is no longer
        pending. Post, then :meth:`set_card`; a poster that dies in between lets the claim
        run out and the card is posted again (the one window for a second card).
        """

        def body(tx: Tx) -> Approval | None:
            row = tx.one(CLAIM_CARD, {"id": approval_id, "now": now, "until": until})
            return None if row is None else APPROVALS.load(tx, row)

        return await self.database.run(body, WRITE)

    async def cards_to_post(
        self, now: datetime, *, created_before: datetime, limit: int = 100
    ) -> list[str]:
        """Pending approvals with no card and no live claim on posting one (the outbox)."""
        params = {"now": now, "created_before": created_before, "limit": limit}

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(CARDS_TO_POST, params)]

        return await self.database.run(body, READ_ONE)

    async def adopt_card(self, approval_id: str, *, channel: str, ts: str) -> bool:
        """Record a clicked card as the approval's card if it has none on record yet."""

        def body(tx: Tx) -> bool:
            return tx.execute(ADOPT_CARD, {"id": approval_id, "channel": channel, "ts": ts}) == 1

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
        name nobody (anyone but the requester may decide those; with ``anyone_channel``,
        only those of that channel). ``count_limit`` stops
        counting there (a total above it means "more than that"): counting every match is
        the one part of a page whose cost grows with the table.
        """
        count_sql, count_params, page_sql, params = pending_list_sql(
            where, now=now, limit=limit, offset=offset, count_limit=count_limit
        )

        def body(tx: Tx) -> tuple[list[Approval], int]:
            total = tx.one(count_sql, count_params)
            rows = tx.all(page_sql, params)
            return [APPROVALS.load(tx, row) for row in rows], int(total[0] if total else 0)

        return await self.database.run(body, READ, inline=False)


def pending_list_sql(
    where: PendingFilter,
    *,
    now: datetime,
    limit: int = 20,
    offset: int = 0,
    count_limit: int | None = None,
) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """The count and page statements of :meth:`ApprovalStore.list_pending`, and their
    parameters: (count SQL, count parameters, page SQL, page parameters).

    Both name ``status = 'pending'`` literally: that is what lets both databases' planners use
    the partial indexes on pending approvals (tests/test_pending_indexes.py checks the plans).
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
    if where.kinds is not None:
        conditions.append(
            "kind IN ({})".format(", ".join(f":kind_{i}" for i in range(len(where.kinds))))
        )
        params.update({f"kind_{i}": kind for i, kind in enumerate(where.kinds)})
    if where.exclude_requester is not None:
        # The requester's Approve never counts towards a quorum (storage.votes).
        conditions.append(
            "(requester != :exclude_requester "
            "OR (allow_self_approval = TRUE AND min_approvals <= 1))"
        )
        params["exclude_requester"] = where.exclude_requester
    approvers = ""
    if where.approver is not None:
        names = [where.approver, *where.approver_groups]
        if where.anyone_channel is None:
            names.append(ANYONE)
        approvers = "approval_approvers.approver IN ({})".format(
            ", ".join(f":approver_{i}" for i in range(len(names)))
        )
        params.update({f"approver_{i}": name for i, name in enumerate(names)})
        if where.anyone_channel is not None:
            approvers += (
                " OR (approval_approvers.approver = :anyone"
                " AND approvals.channel = :anyone_channel)"
            )
            params.update(anyone=ANYONE, anyone_channel=where.anyone_channel)
    condition = " AND ".join(conditions)
    page_condition = condition
    if approvers:
        # The page walks approvals newest first and probes each one's approvers: it
        # stops after a page of matches. The count starts from the approver's own rows.
        page_condition += (
            " AND EXISTS (SELECT 1 FROM approval_approvers WHERE "
            f"approval_approvers.approval_id = approvals.id AND ({approvers}))"
        )
        matching = (
            "SELECT DISTINCT approvals.id FROM approval_approvers "
            "JOIN approvals ON approvals.id = approval_approvers.approval_id "
            f"WHERE ({approvers}) AND {condition}"
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
    return count_sql, count_params, page_sql, params


def _stale_copy(tx: Tx, approval_id: str, shown: str, now: datetime) -> Approval | None:
    """The approval, when it is still open and its arguments are not what ``shown`` says the
    clicked copy showed; None otherwise (a settled one is refused as settled, as ever)."""
    row = tx.one(APPROVAL_BY_ID, {"id": approval_id})
    if row is None:
        return None
    approval = APPROVALS.load(tx, row)
    if approval.status != "pending" or approval.expires_at <= now:
        return None
    return None if shows_current(approval, shown) else approval
