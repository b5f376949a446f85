"""Sub-agents (issue 20 section 1): child runs started with their parent's pause, and the
parent's ``delegation`` row settled in the transaction that records the child's end.

A parent's ``delegate(agent, task)`` call pauses on a row of kind ``delegation`` (pending,
like any pause: the run lock, the resume claim and the sweeper are the approvals' own). The
child run is inserted in the same transaction as that row (``insert_children``, called by
:mod:`.pauses`), ``running`` under a lease, so a crash before anyone drives it leaves it to
the sweeper's take-over. When the child ends (completed, failed, cancelled), the transaction
that records its end also settles the row with the child's result by conditional UPDATE
(:func:`storage.stores.transitions.settle_parent`) and, with a claimer, claims the parent's
resume once nothing else of it waits: several children end in any order on any replica, and
exactly one of them claims it.
Lock order: the child's row (its end's UPDATE), then the parent's (``lock_run``); nothing
locks a parent and then its child in one transaction (a parent's Stop reaches its children
in transactions of their own).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.models import Run
from storage.records import ApprovalDraft
from storage.sql.delegations import CHILDREN_OF_RUN, UNFINISHED_CHILDREN
from storage.sql.holds import HOLD_OF_RUN, INSERT_HOLD
from storage.sql.runs import INSERT_RUN_ROW
from storage.stores.events import audit
from storage.stores.rows import HOLDS, RUNS
from storage.values import storable

READ_ONE = Mode.READ_ONE
# A conversation key of its own per child (runs.conversation_key is unique).
CHILD_KEY = "delegation:{approval_id}"


def insert_children(
    tx: Tx,
    parent_run_id: str,
    drafts: Sequence[ApprovalDraft],
    *,
    requester: str,
    team_id: str,
    channel: str,
    thread_ts: str,
    lease_until: datetime,
    now: datetime,
) -> list[Run]:
    """The child run of each ``delegation`` draft, in the transaction that stores the pause."""
    children = []
    for draft in drafts:
        child = draft.child
        if child is None:
            continue
        values: dict[str, Any] = {
            "id": child.run_id,
            "conversation_key": CHILD_KEY.format(approval_id=draft.id),
            "team_id": team_id,
            "channel": channel,
            "thread_ts": thread_ts,
            "requester": requester,
            "status": "running",
            "model_id": child.model_id,
            "history": storable(child.history),
            "turn": 0,
            "lease_owner": child.lease_owner,
            "lease_expires_at": lease_until,
            "created_at": now,
            "updated_at": now,
            "agent": child.agent,
            "parent_run_id": parent_run_id,
            "parent_approval_id": draft.id,
        }
        tx.execute(INSERT_RUN_ROW, RUNS.params(values))
        audit(
            tx,
            now,
            "run_delegated",
            run_id=child.run_id,
            approval_id=draft.id,
            actor=requester,
            agent=child.agent,
            parent_run_id=parent_run_id,
        )
        children.append(RUNS.build(values))
    return children


def hold_children_as_parent(tx: Tx, parent_run_id: str, children: Sequence[Run]) -> None:
    """Children started by a pause stored under an operator's Pause start held, in the
    pause's transaction: written after its commit, a crash in between left them to a
    take-over that drove them while their parent stayed paused."""
    row = tx.one(HOLD_OF_RUN, {"run_id": parent_run_id})
    if row is None or not children:
        return
    hold = HOLDS.load(tx, row)
    for child in children:
        params = {
            "run_id": child.id,
            "action": hold.action,
            "requested_by": hold.requested_by,
            "reason": hold.reason,
            "requested_at": hold.requested_at,
        }
        tx.execute(INSERT_HOLD, params)
        audit(
            tx,
            child.created_at,
            f"run_{hold.action}_requested",
            run_id=child.id,
            actor=hold.requested_by,
            reason=hold.reason,
        )


class DelegationStore:
    database: Database

    async def children_of(self, run_id: str) -> list[Run]:
        """The runs ``run_id`` delegated to, oldest first."""

        def body(tx: Tx) -> list[Run]:
            return [RUNS.load(tx, row) for row in tx.all(CHILDREN_OF_RUN, {"id": run_id})]

        return await self.database.run(body, READ_ONE)

    async def unfinished_children(self, run_id: str) -> list[str]:
        """The ids of ``run_id``'s children that have not ended (working, waiting, held)."""

        def body(tx: Tx) -> list[str]:
            return [str(row[0]) for row in tx.all(UNFINISHED_CHILDREN, {"id": run_id})]

        return await self.database.run(body, READ_ONE)
