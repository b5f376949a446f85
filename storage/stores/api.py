"""The human gate over HTTP: API tokens, the approvals and questions other systems create
(their run, approval and request row in one transaction), and the outbox of their webhooks.

Owns the ``api_tokens`` and ``api_requests`` rows and the ``runs`` and ``approvals`` rows a
request creates. A request's approval is an ordinary approval (the same card, expiry, DM
copies, reminders, quorum, audit), on a run whose status is ``step`` as a Workflow Builder
step's: nothing resumes it. The idempotency key is the run's conversation key, so two
replicas given the same request at once store one approval: the second INSERT does nothing
and reads the first one's row. Its webhook is then due once the approval is settled (by a
click, an expiry or a cancel, on any replica), claimed by one deliverer at a time, and marked
delivered on the receiver's 2xx; at least once, since a kill after the POST and before the
record of it sends it again, with the same ``delivery_id``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from storage.drivers import Database, Mode, Tx
from storage.records import (
    ApiRequestRow,
    ApiStarted,
    ApprovalDraft,
    StoredToken,
)
from storage.sql.api import (
    ALL_TOKENS,
    API_RUN_OF,
    CLAIM_WEBHOOK,
    END_SETTLED_API_RUNS,
    INSERT_API_REQUEST,
    INSERT_API_RUN,
    INSERT_TOKEN,
    RECENT_WEBHOOKS,
    REQUEST_BY_APPROVAL,
    REQUEST_BY_KEY,
    REVOKE_TOKEN,
    TOKEN_BY_HASH,
    TOKEN_BY_ID,
    WEBHOOK_DELIVERED,
    WEBHOOK_GAVE_UP,
    WEBHOOK_RETRY_AT,
    WEBHOOK_RETRY_NOW,
    WEBHOOKS_DUE,
)
from storage.stores.events import audit
from storage.stores.steps import insert_request_approval
from storage.stores.transitions import cancel_paused_run

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE


def _time(value: Any) -> Any:
    """A stored time as a datetime (SQLite hands back text, PostgreSQL a datetime)."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _token(row: Sequence[Any]) -> StoredToken:
    return StoredToken(
        id=row[0],
        name=row[1],
        channels=tuple(json.loads(row[2])),
        team_id=row[3],
        requester=row[4],
        webhook_secret=row[5],
        created_at=_time(row[6]),
        expires_at=_time(row[7]),
        revoked_at=_time(row[8]),
    )


def _request(row: Sequence[Any]) -> ApiRequestRow:
    return ApiRequestRow(
        approval_id=row[0],
        token_id=row[1],
        idempotency_key=row[2],
        webhook_url=row[3],
        delivery_id=row[4],
        created_at=_time(row[5]),
        attempts=int(row[6]),
        delivered_at=_time(row[7]),
        gave_up_at=_time(row[8]),
        last_error=row[9],
        claimed_until=_time(row[10]),
    )


class ApiStore:
    database: Database

    # -- tokens ------------------------------------------------------------------------------

    async def create_api_token(
        self,
        *,
        id: str,
        name: str,
        token_hash: str,
        webhook_secret: str,
        channels: list[str],
        team_id: str,
        requester: str,
        expires_at: datetime | None,
        now: datetime,
    ) -> None:
        params = {
            "id": id,
            "name": name,
            "token_hash": token_hash,
            "webhook_secret": webhook_secret,
            "channels": json.dumps(channels),
            "team_id": team_id,
            "requester": requester,
            "expires_at": expires_at,
            "now": now,
        }

        def body(tx: Tx) -> None:
            tx.execute(INSERT_TOKEN, params)
            audit(tx, now, "api_token_created", token_id=id, name=name, channels=channels)

        await self.database.run(body, WRITE)

    async def api_token_by_hash(self, token_hash: str) -> StoredToken | None:
        def body(tx: Tx) -> StoredToken | None:
            row = tx.one(TOKEN_BY_HASH, {"hash": token_hash})
            return None if row is None else _token(row)

        return await self.database.run(body, READ_ONE)

    async def api_token(self, token_id: str) -> StoredToken | None:
        def body(tx: Tx) -> StoredToken | None:
            row = tx.one(TOKEN_BY_ID, {"id": token_id})
            return None if row is None else _token(row)

        return await self.database.run(body, READ_ONE)

    async def api_tokens(self) -> list[StoredToken]:
        def body(tx: Tx) -> list[StoredToken]:
            return [_token(row) for row in tx.all(ALL_TOKENS, {})]

        return await self.database.run(body, READ_ONE)

    async def revoke_api_token(self, id_or_name: str, now: datetime) -> int:
        """Revoke the token with that id (or every live one with that name); how many."""

        def body(tx: Tx) -> int:
            count = tx.execute(REVOKE_TOKEN, {"id": id_or_name, "now": now})
            if count:
                audit(tx, now, "api_token_revoked", token=id_or_name)
            return count

        return await self.database.run(body, WRITE)

    # -- requests ----------------------------------------------------------------------------

    async def start_api_request(
        self,
        *,
        token: StoredToken,
        run_id: str,
        idempotency_key: str | None,
        body_hash: str,
        webhook_url: str | None,
        delivery_id: str,
        channel: str,
        draft: ApprovalDraft,
        now: datetime,
    ) -> ApiStarted:
        """Store the request's run, approval (approvers, reach) and row at once; a request
        whose idempotency key was used before stores nothing (``created`` False)."""

        def body(tx: Tx) -> ApiStarted:
            key = f"api:{token.id}:{idempotency_key}" if idempotency_key else f"api:{draft.id}"
            params = {
                "id": run_id,
                "key": key,
                "team_id": token.team_id,
                "requester": token.requester,
                "now": now,
            }
            if tx.execute(INSERT_API_RUN, params) != 1:
                row = tx.one(REQUEST_BY_KEY, {"token_id": token.id, "key": idempotency_key})
                if row is None:  # a run of another kind holds the key: never ours
                    raise ValueError(f"conversation key {key} is taken")
                return ApiStarted(approval_id=row[0], created=False, body_hash=row[1])
            insert_request_approval(tx, draft, run_id, token.team_id, channel, token.requester, now)
            tx.execute(
                INSERT_API_REQUEST,
                {
                    "approval_id": draft.id,
                    "token_id": token.id,
                    "run_id": run_id,
                    "idempotency_key": idempotency_key,
                    "body_hash": body_hash,
                    "webhook_url": webhook_url,
                    "delivery_id": delivery_id,
                    "now": now,
                },
            )
            event = "question_asked" if draft.kind == "question" else "approval_requested"
            audit(
                tx,
                now,
                event,
                run_id=run_id,
                approval_id=draft.id,
                actor=token.requester,
                tool=draft.tool_name,
                arguments=draft.arguments,
                expires_at=draft.expires_at.isoformat(),
                api_token=token.name,
            )
            return ApiStarted(approval_id=draft.id, created=True, body_hash=body_hash)

        return await self.database.run(body, WRITE)

    async def api_request(self, approval_id: str) -> ApiRequestRow | None:
        def body(tx: Tx) -> ApiRequestRow | None:
            row = tx.one(REQUEST_BY_APPROVAL, {"id": approval_id})
            return None if row is None else _request(row)

        return await self.database.run(body, READ_ONE)

    async def cancel_api_request(self, approval_id: str, *, reason: str, now: datetime) -> bool:
        """Cancel a pending API request (its run and approval); False once it is settled."""

        def body(tx: Tx) -> bool:
            row = tx.one(API_RUN_OF, {"id": approval_id})
            return row is not None and cancel_paused_run(tx, row[0], reason, now)

        return await self.database.run(body, WRITE)

    async def end_settled_api_runs(self, now: datetime) -> int:
        """End the runs of API requests nothing of which is pending any more; how many."""

        def body(tx: Tx) -> int:
            return tx.execute(END_SETTLED_API_RUNS, {"now": now})

        return await self.database.run(body, WRITE_ONE)

    # -- the webhook outbox ------------------------------------------------------------------

    async def webhooks_due(self, now: datetime, limit: int = 100) -> list[str]:
        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(WEBHOOKS_DUE, {"now": now, "limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def claim_webhook(
        self, approval_id: str, *, now: datetime, until: datetime
    ) -> tuple[str, str, str, int, datetime] | None:
        """Claim delivering a settled request's webhook until ``until``: (token id, url,
        delivery id, attempts, first attempt); None when not due or someone else has it."""

        def body(tx: Tx) -> tuple[str, str, str, int, datetime] | None:
            row = tx.one(CLAIM_WEBHOOK, {"id": approval_id, "now": now, "until": until})
            return None if row is None else (row[1], row[2], row[3], int(row[4]), _time(row[5]))

        return await self.database.run(body, WRITE_ONE)

    async def webhook_delivered(self, approval_id: str, now: datetime) -> None:
        await self._webhook(WEBHOOK_DELIVERED, {"id": approval_id, "now": now})

    async def webhook_retry_at(self, approval_id: str, at: datetime, error: str) -> None:
        await self._webhook(WEBHOOK_RETRY_AT, {"id": approval_id, "retry_at": at, "error": error})

    async def webhook_gave_up(self, approval_id: str, now: datetime, error: str) -> None:
        await self._webhook(WEBHOOK_GAVE_UP, {"id": approval_id, "now": now, "error": error})

    async def retry_webhook(self, id_: str) -> int:
        """An operator's ``webhooks retry``: deliver it again from now (delivered or not)."""
        return await self._webhook(WEBHOOK_RETRY_NOW, {"id": id_})

    async def recent_webhooks(self, limit: int = 100) -> list[ApiRequestRow]:
        def body(tx: Tx) -> list[ApiRequestRow]:
            return [_request(row) for row in tx.all(RECENT_WEBHOOKS, {"limit": limit})]

        return await self.database.run(body, READ_ONE)

    async def _webhook(self, statement: str, params: dict[str, Any]) -> int:
        if "error" in params:
            params["error"] = str(params["error"])[:255]

        def body(tx: Tx) -> int:
            return tx.execute(statement, params)

        return await self.database.run(body, WRITE_ONE)
