"""The batch card's buttons: Approve all N, Deny all, Review each (and its form), Review all.

Each acknowledges first and hands the decision to a tracked background task
(:func:`handlers.flows.decide_batch_from_slack`), which decides the batch's calls in one
transaction. Review each and Review all open their modal in the acknowledgement path (a
trigger_id lives 3 seconds), after a bounded read of the batch. Buttons carry the batch's id
and the fingerprint of the set the card showed; the review form carries them in its
private_metadata, which Slack keeps server-side.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.policy import NotAllowed, ensure_may_decide
from handlers import blocks
from handlers.flows import ClickPlace, clicked_approval, decide_batch_from_slack
from handlers.listeners.interactions import (
    click_place,
    clicked_card,
    nested,
    open_form,
    teller,
    view_submission,
)
from handlers.services import Services
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

NOTHING_WAITS = ":ballot_box_with_check: Every call of this batch is decided already."


def register(app: AsyncApp, services: Services) -> None:
    def spawn_decision(
        body: dict[str, Any], respond: AsyncRespond, value: Any, *, approve_all: bool
    ) -> None:
        batch_id, shown = blocks.parse_batch_value(value)
        services.background.spawn(
            decide_batch_from_slack(
                services,
                batch_id=batch_id,
                actor=body["user"]["id"],
                shown=shown,
                approve=None if approve_all else (),
                deny=() if approve_all else None,
                reason=None,
                place=click_place(body),
                tell=teller(respond, services, body),
                clicked=clicked_card(body),
            ),
            name=f"batch {'approve' if approve_all else 'deny'} {batch_id}",
        )

    @app.action(blocks.BATCH_APPROVE_ALL)
    async def on_approve_all(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        spawn_decision(body, respond, action.get("value"), approve_all=True)

    @app.action(blocks.BATCH_DENY_ALL)
    async def on_deny_all(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        spawn_decision(body, respond, action.get("value"), approve_all=False)

    async def batch_for_modal(
        body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond, click: str
    ) -> tuple[list[Any], str, ClickPlace] | None:
        """The batch's rows, read within the ack's time limit, if the click is from here."""
        tell = teller(respond, services, body)
        place = click_place(body)
        batch_id, shown = blocks.parse_batch_value(action.get("value"))
        lead = await clicked_approval(services, batch_id, place, tell=tell, click=click)
        if lead is None:
            return None
        if lead.batch_id != lead.id:
            await tell(":no_entry: That is not a batch of calls.")
            return None
        try:
            with time_limit(services.ack_time_limit):
                rows = await services.repo.batch_rows(batch_id)
        except DATABASE_FAILURES as exc:
            log.error("batch %s: %s not looked up (%s)", batch_id, click, exc)
            await tell(":warning: I couldn't look that batch up just now. Please try again.")
            return None
        return rows, shown, place

    @app.action(blocks.BATCH_REVIEW)
    async def on_review(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        tell = teller(respond, services, body)
        found = await batch_for_modal(body, action, respond, "review click")
        if found is None:
            return
        rows, shown, place = found
        actor = body["user"]["id"]
        lead = rows[0]
        if not any(row.status == "pending" for row in rows):
            await tell(NOTHING_WAITS)
            await services.publisher.cards.refresh_card(lead.batch_id or lead.id)
            return
        if not any(a.startswith("S") for a in lead.approvers):
            # Named people only: say now who may not decide (groups: checked on submit).
            try:
                ensure_may_decide(lead, actor, set())
            except NotAllowed as refused:
                await tell(f":no_entry: {refused}")
                return
        card = clicked_card(body)
        metadata = {
            "batch_id": lead.batch_id,
            "shown": shown,
            "channel": place.channel or "",
            "team": place.team,
            "card_ts": card[1] if card else "",
            "thread_ts": lead.thread_ts or "",
        }
        view = blocks.render_batch_review_modal(rows, metadata)
        await open_form(client, body, view, tell, what="review form")

    @app.view(blocks.BATCH_REVIEW_MODAL)
    async def on_review_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        await ack()
        form = view_submission(services, body, view)
        reason = nested(
            view, "state", "values", blocks.BATCH_REASON_BLOCK, blocks.BATCH_REASON_INPUT, "value"
        )
        batch_id = form.text("batch_id")
        services.background.spawn(
            decide_batch_from_slack(
                services,
                batch_id=batch_id,
                actor=form.actor,
                shown=form.text("shown"),
                approve=blocks.checked_calls(view),
                deny=None,  # the rest of the batch (what is still pending of it)
                reason=reason if isinstance(reason, str) else None,
                place=form.place,
                tell=form.tell,
                clicked=form.clicked,
            ),
            name=f"batch review {batch_id}",
        )

    @app.action(blocks.BATCH_REVIEW_ALL)
    async def on_review_all(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        found = await batch_for_modal(body, action, respond, "review all click")
        if found is None:
            return
        view = blocks.render_batch_all_modal(found[0])
        await open_form(client, body, view, teller(respond, services, body), what="list")
