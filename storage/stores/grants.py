"""Standing grants: the ``grants`` table, and the approvals the gate records under them.

A grant says "``tool_name`` may run in this thread without a card until ``expires_at``". It is
created in the transaction of the decision that grants it (:func:`insert_grant`, called by
``DecisionStore.decide``), so a decision that loses its race grants nothing. Each use is an
approval row, already approved by the grantor, inserted by :meth:`GrantStore.use_grant` in
the same transaction that checks the grant is still live (a conditional UPDATE of the grant,
so a revocation either comes first and wins, or after): the call then goes through the
approval's ``approved -> executing -> executed`` records like any approved call.

Such an approval answers no tool call id of the model's (its ``tool_call_id`` is
``grant:<approval id>``; ``grant_id`` and ``grant_until`` say which grant and until when,
so every view says it ran under that grant): it is found again only by a take-over of the
drive that made it (same tool, same arguments; see ``bot.gate``). Audited:
``grant_created``, ``grant_used``, ``grant_revoked``, ``grant_expired`` (once, when an
expired grant is first noticed).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.errors import LeaseLost
from storage.models import Approval, Grant
from storage.records import ApprovalDraft, GrantDraft
from storage.sql.approvals import INSERT_APPROVAL, INSERT_APPROVER, approver_rows
from storage.sql.edits import edit_columns
from storage.sql.grants import (
    GRANT_BY_ID,
    GRANTOR_NAME,
    GRANTS_FOR_RUN_TOOL,
    INSERT_GRANT,
    REVOKE_GRANT,
    RUN_FOR_GRANT,
    USE_GRANT,
    expired_grants_sql,
    grant_list_sql,
)
from storage.stores.events import asked_for, audit
from storage.stores.rows import APPROVALS, GRANTS
from storage.values import storable

WRITE, READ_ONE = Mode.WRITE, Mode.READ_ONE


def insert_grant(tx: Tx, draft: GrantDraft, approval: Approval, actor: str, now: datetime) -> None:
    """Create ``draft`` for ``approval``'s thread and tool, inside its decision's transaction."""
    values: dict[str, Any] = {
        "id": draft.id,
        "team_id": approval.team_id,
        "channel": approval.channel,
        "thread_ts": approval.thread_ts,
        "tool_name": approval.tool_name,
        "payload_scope": draft.payload_scope,
        "grantor": actor,
        "grantor_groups": list(draft.grantor_groups),
        "approval_id": approval.id,
        "run_id": approval.run_id,
        "created_at": now,
        "expires_at": now + draft.duration,
        "revoked_at": None,
        "revoked_by": None,
        "last_used_at": None,
        "expiry_noticed_at": None,
    }
    tx.execute(INSERT_GRANT, GRANTS.params(values))
    audit(
        tx,
        now,
        "grant_created",
        run_id=approval.run_id,
        approval_id=approval.id,
        actor=actor,
        grant_id=draft.id,
        tool=approval.tool_name,
        channel=approval.channel,
        thread_ts=approval.thread_ts,
        expires_at=values["expires_at"].isoformat(),
        scope="any arguments" if draft.payload_scope is None else "these arguments",
    )


class GrantStore:
    database: Database

    async def get_grant(self, grant_id: str) -> Grant | None:
        def body(tx: Tx) -> Grant | None:
            row = tx.one(GRANT_BY_ID, {"id": grant_id})
            return None if row is None else GRANTS.load(tx, row)

        return await self.database.run(body, READ_ONE)

    async def grant_candidates(self, run_id: str, tool_name: str) -> list[Grant]:
        """The unrevoked grants (live or expired) of a tool in a run's thread."""

        def body(tx: Tx) -> list[Grant]:
            rows = tx.all(GRANTS_FOR_RUN_TOOL, {"run_id": run_id, "tool_name": tool_name})
            return [GRANTS.load(tx, row) for row in rows]

        return await self.database.run(body, READ_ONE)

    async def list_grants(
        self,
        *,
        now: datetime,
        team_id: str | None = None,
        channel: str | None = None,
        thread_ts: str | None = None,
        live_only: bool = True,
        limit: int = 100,
    ) -> list[Grant]:
        """Grants, newest first; ``live_only``: not revoked and not expired at ``now``."""
        sql, params = grant_list_sql(
            now=now,
            team_id=team_id,
            channel=channel,
            thread_ts=thread_ts,
            live_only=live_only,
            limit=limit,
        )

        def body(tx: Tx) -> list[Grant]:
            return [GRANTS.load(tx, row) for row in tx.all(sql, params)]

        return await self.database.run(body, READ_ONE)

    async def use_grant(
        self,
        grant_id: str,
        *,
        run_id: str,
        owner: str,
        turn: int,
        draft: ApprovalDraft,
        scope: str,
        now: datetime,
    ) -> Approval | None:
        """Record a call under a live grant: an approval already approved by the grantor.

        None when the grant no longer applies (revoked, expired, another thread, tool or
        arguments); raises LeaseLost when ``owner`` no longer drives the run.
        """

        def body(tx: Tx) -> Approval | None:
            run = tx.one(RUN_FOR_GRANT, {"run_id": run_id, "owner": owner})
            if run is None:
                raise LeaseLost(run_id)
            requester, team_id, channel, thread_ts = run
            params = {
                "id": grant_id,
                "now": now,
                "team_id": team_id,
                "channel": channel,
                "thread_ts": thread_ts,
                "tool_name": draft.tool_name,
                "scope": scope,
            }
            row = tx.one(USE_GRANT, params)
            if row is None:
                return None
            grant = GRANTS.load(tx, row)
            # The grantor's name as Slack gave it when they granted (their decision's).
            named = tx.one(GRANTOR_NAME, {"approval_id": grant.approval_id or ""})
            values = {
                "id": draft.id,
                "run_id": run_id,
                "turn": turn,
                "tool_call_id": f"grant:{draft.id}",
                "tool_name": draft.tool_name,
                "arguments": storable(draft.arguments),
                "payload_hash": draft.payload_hash,
                "status": "approved",
                "requester": requester,
                "team_id": team_id,
                "channel": channel,
                "thread_ts": thread_ts,
                "approvers": list(draft.approvers),
                "allow_self_approval": draft.allow_self_approval,
                "on_expiry": draft.on_expiry,
                "created_at": now,
                "expires_at": draft.expires_at,
                "decided_by": grant.grantor,
                "decided_by_name": named[0] if named else None,
                "decided_at": now,
                "reason": f"standing grant {grant.id} by {grant.grantor}",
                "result": None,
                "executed_at": None,
                "card_channel": None,
                "card_ts": None,
                "card_claimed_until": None,
                "kind": "approval",
                "token_hash": None,
                "due_at": None,
                "rule": draft.rule,
                "rule_when": draft.rule_when,
                "rule_error": draft.rule_error,
                # A grant never stands in for a quorum (bot.policy.grants): one approval.
                "min_approvals": 1,
                "approved_by": None,
                **edit_columns(False),
                "grant_id": grant.id,
                "grant_until": grant.expires_at,
            }
            tx.execute(INSERT_APPROVAL, APPROVALS.params(values))
            tx.executemany(INSERT_APPROVER, approver_rows([values]))
            audit(
                tx,
                now,
                "approval_requested",
                run_id=run_id,
                approval_id=draft.id,
                actor=requester,
                **asked_for(draft),
                grant_id=grant.id,
            )
            audit(
                tx,
                now,
                "grant_used",
                run_id=run_id,
                approval_id=draft.id,
                actor=grant.grantor,
                grant_id=grant.id,
                tool=draft.tool_name,
                until=grant.expires_at.isoformat(),
            )
            return APPROVALS.build(values)

        return await self.database.run(body, WRITE)

    async def revoke_grant(
        self, grant_id: str, *, actor: str, now: datetime, forced: bool = False
    ) -> Grant | None:
        """Revoke a live grant (audited; ``forced``: by an operator's override); None when it
        is revoked or expired already."""

        def body(tx: Tx) -> Grant | None:
            row = tx.one(REVOKE_GRANT, {"id": grant_id, "actor": actor, "now": now})
            if row is None:
                return None
            grant = GRANTS.load(tx, row)
            audit(
                tx,
                now,
                "grant_revoked",
                run_id=grant.run_id,
                approval_id=grant.approval_id,
                actor=actor,
                grant_id=grant.id,
                tool=grant.tool_name,
                **({"forced": True} if forced else {}),
            )
            return grant

        return await self.database.run(body, WRITE)

    async def notice_expired_grants(
        self,
        *,
        now: datetime,
        grant_ids: Sequence[str] | None = None,
        team_id: str | None = None,
        channel: str | None = None,
    ) -> list[Grant]:
        """Audit ``grant_expired`` once for each expired grant not noticed yet (by id, or in
        a channel, or everywhere). Expiry itself needs no write: a grant past ``expires_at``
        never applies."""
        if grant_ids is not None and not grant_ids:
            return []
        sql, params = expired_grants_sql(
            now=now, grant_ids=grant_ids, team_id=team_id, channel=channel
        )

        def body(tx: Tx) -> list[Grant]:
            expired = [GRANTS.load(tx, row) for row in tx.all(sql, params)]
            for grant in expired:
                audit(
                    tx,
                    now,
                    "grant_expired",
                    run_id=grant.run_id,
                    approval_id=grant.approval_id,
                    grant_id=grant.id,
                    tool=grant.tool_name,
                    expired_at=grant.expires_at.isoformat(),
                )
            return expired

        return await self.database.run(body, WRITE)
