"""Cards: which message shows each approval, one poster at a time, and cards to edit again.

Owns the ``approvals`` columns ``card_channel``, ``card_ts`` and ``card_claimed_until`` (the
card outbox: a poster claims a card with a conditional UPDATE, posts it, then records it; one
that died lets its claim run out and the sweeper posts it), and ``card_edits_due``: marked by
a quorum vote (:mod:`.votes`) or by a card edit Slack refused for now, cleared once an edit
of the card shows the approval as it was then.
"""

from __future__ import annotations

from datetime import datetime

from storage.drivers import Database, Mode, Tx
from storage.models import Approval
from storage.sql.approvals import (
    ADOPT_CARD,
    CARDS_TO_POST,
    CLAIM_CARD,
    REQUEST_CARDS_TO_POST,
    SET_CARD,
)
from storage.sql.votes import (
    CARD_EDITS_DUE,
    CLAIM_CARD_EDIT_DUE,
    CLEAR_CARD_EDIT_DUE,
    MARK_CARD_EDIT_DUE,
    MOVE_BATCH_CARD_EDITS_DUE,
)
from storage.stores.rows import APPROVALS

WRITE, WRITE_ONE, READ_ONE = Mode.WRITE, Mode.WRITE_ONE, Mode.READ_ONE


class CardStore:
    database: Database

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

        return await self.database.run(body, WRITE_ONE)

    async def cards_to_post(
        self, now: datetime, *, created_before: datetime, limit: int = 100
    ) -> list[str]:
        """Pending approvals with no card and no live claim on posting one (the outbox)."""
        params = {"now": now, "created_before": created_before, "limit": limit}

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(CARDS_TO_POST, params)]

        return await self.database.run(body, READ_ONE)

    async def request_cards_to_post(self, now: datetime, *, limit: int = 100) -> list[str]:
        """Pending API and MCP requests with no card and no live claim on posting one."""
        params = {"now": now, "limit": limit}

        def body(tx: Tx) -> list[str]:
            return [row[0] for row in tx.all(REQUEST_CARDS_TO_POST, params)]

        return await self.database.run(body, READ_ONE)

    async def adopt_card(self, approval_id: str, *, channel: str, ts: str) -> bool:
        """Record a clicked card as the approval's card if it has none on record yet."""

        def body(tx: Tx) -> bool:
            return tx.execute(ADOPT_CARD, {"id": approval_id, "channel": channel, "ts": ts}) == 1

        return await self.database.run(body, WRITE_ONE)

    async def set_card(self, approval_id: str, *, channel: str, ts: str) -> bool:
        """Record where the card was posted; False when a row it shows is no longer pending.

        A decision (from a list, the App Home, the API, the CLI), an expiry or a cancel that
        lands between the card's claim and this record found no card to edit: its card was
        posted showing the row as claimed, pending, buttons and all. Both are one statement
        on the row, so either the decision sees this card on record (and edits it) or this
        sees the decision (and the poster edits it)."""

        def body(tx: Tx) -> bool:
            rows = tx.all(SET_CARD, {"id": approval_id, "channel": channel, "ts": ts})
            return all(row[0] == "pending" for row in rows)

        return await self.database.run(body, WRITE_ONE)

    async def card_edited(self, approval_id: str, *, before: datetime) -> None:
        """The card shows the approval as read at ``before``: votes marked until then are on it."""

        def body(tx: Tx) -> None:
            tx.execute(CLEAR_CARD_EDIT_DUE, {"id": approval_id, "before": before})

        await self.database.run(body, WRITE_ONE)

    async def card_edit_failed(
        self, approval_id: str, *, now: datetime, batch: bool = False
    ) -> None:
        """Slack refused an edit of the card for now: a later sweep edits it (one that fails
        again moves the mark on, so a Slack outage is retried a grace apart, not in a loop).

        ``batch``: ``approval_id`` is a batch's first row; the marks its votes left on the
        batch's other rows move on too, else the oldest of them stayed first in every sweep,
        which stops at the first card Slack refuses (no other card was edited while this one
        failed)."""

        def body(tx: Tx) -> None:
            params = {"id": approval_id, "now": now}
            tx.execute(MARK_CARD_EDIT_DUE, params)
            if batch:
                tx.execute(MOVE_BATCH_CARD_EDITS_DUE, params)

        await self.database.run(body, WRITE if batch else WRITE_ONE)

    async def claim_card_edit(self, approval_id: str, *, before: datetime, now: datetime) -> bool:
        """Take a card edit due (marked before ``before``) for this sweep: False when another
        sweeper took it or an edit cleared it since it was read."""

        def body(tx: Tx) -> bool:
            claim = {"id": approval_id, "before": before, "now": now}
            return tx.execute(CLAIM_CARD_EDIT_DUE, claim) == 1

        return await self.database.run(body, WRITE_ONE)

    async def card_edits_due(self, *, before: datetime, limit: int = 100) -> list[str]:
        """Approvals whose card a vote changed, or an edit failed, before ``before`` and no
        edit has shown since."""

        def body(tx: Tx) -> list[str]:
            return [r[0] for r in tx.all(CARD_EDITS_DUE, {"before": before, "limit": limit})]

        return await self.database.run(body, READ_ONE)
