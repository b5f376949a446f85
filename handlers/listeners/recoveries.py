"""Slack listeners for a recovery card (``on_error = "ask"``): Retry, Skip, Stop run, and for
an unknown outcome "It ran" (a note form) and "Retry: it may run twice"; "Show details".

They follow the Approve / Deny listeners (:mod:`handlers.listeners.approvals`): acknowledge
first, then hand the choice to a tracked background task
(:func:`handlers.flows.recover_from_slack`, the same exactly-once path as a decision). "It
ran" opens its note form in the acknowledgement path (a trigger_id lives 3 seconds).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.policy import ensure_may_decide
from handlers import blocks
from handlers.flows import (
    clicked_approval,
    form_opening,
    may_see_here,
    recover_from_slack,
)
from handlers.listeners.interactions import (
    click_place,
    clicked_card,
    form_click,
    nested,
    open_form,
    refresher_for_click,
    teller,
    view_submission,
)
from handlers.services import Services

log = logging.getLogger(__name__)

CHOICES = {
    blocks.RETRY_ACTION: "retry",
    blocks.RETRY_UNKNOWN: "retry",
    blocks.SKIP_ACTION: "skip",
    blocks.STOP_ACTION: "stop",
}


def register(app: AsyncApp, services: Services) -> None:
    def choose(body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond) -> None:
        value = action.get("value")
        approval_id = value if isinstance(value, str) else ""
        choice = CHOICES[action["action_id"]]
        services.background.spawn(
            recover_from_slack(
                services,
                approval_id=approval_id,
                actor=body["user"]["id"],
                choice=choice,
                place=click_place(body),
                tell=teller(respond, services, body),
                clicked=clicked_card(body),
                refresh_list=refresher_for_click(services, body, action),
            ),
            name=f"recovery {choice} {approval_id}",
        )

    for action_id in CHOICES:

        @app.action(action_id)
        async def on_choice(
            ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
        ) -> None:
            await ack()
            choose(body, action, respond)

    @app.action(blocks.RESOLVE_ACTION)
    async def on_resolve(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        form = form_click(services, body, action, respond)
        approval = await clicked_approval(
            services, form.approval_id, form.place, tell=form.tell, click="it ran", row="recovery"
        )
        if approval is None:
            return
        if approval.status != "pending":  # the choice path says why, and settles the card
            services.background.spawn(
                recover_from_slack(
                    services,
                    approval_id=form.approval_id,
                    actor=form.actor,
                    choice="resolve",
                    place=form.place,
                    tell=form.tell,
                    clicked=form.clicked,
                ),
                name=f"recovery resolve {form.approval_id}",
            )
            return
        view = blocks.render_resolve_modal(approval, json.dumps(form.metadata()))
        await open_form(client, body, view, form.tell, what="note form")

    @app.view(blocks.RESOLVE_MODAL)
    async def on_resolve_note(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        form = view_submission(services, body, view)
        note = nested(view, "state", "values", blocks.NOTE_BLOCK, blocks.NOTE_INPUT, "value")
        services.background.spawn(
            recover_from_slack(
                services,
                approval_id=form.text("approval_id"),
                actor=form.actor,
                choice="resolve",
                note=note if isinstance(note, str) else None,
                place=form.place,
                tell=form.tell,
                clicked=form.clicked,
            ),
            name=f"recovery resolve {form.text('approval_id')}",
        )

    @app.action(blocks.EDIT_ACTION)
    async def on_edit(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        """Edit, then retry: the edit-then-approve form (its submission is
        :mod:`handlers.listeners.edits`', which settles a recovery by ``edit_and_retry``)."""
        await ack()
        form = form_click(services, body, action, respond)
        approval = await form_opening(
            services, form, click="edit click", ensure_may=ensure_may_decide, row="recovery"
        )
        if approval is None:
            return
        tool = services.config.tool_named(approval.tool_name)
        if tool is None or not blocks.editable(approval):
            await form.tell(":no_entry: This call cannot be edited.")
            return
        view = blocks.render_edit_modal(approval, tool.input_schema or {})
        await open_form(client, body, view, form.tell, what="edit form")

    @app.action(blocks.DETAILS_ACTION)
    async def on_details(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        client: AsyncWebClient,
        respond: AsyncRespond,
    ) -> None:
        await ack()
        tell = teller(respond, services, body)
        place = click_place(body)
        approval = await clicked_approval(
            services, str(action.get("value", "")), place, tell=tell, click="details"
        )
        if approval is None or not await may_see_here(
            services, approval, body["user"]["id"], place, tell=tell
        ):
            return
        await open_form(client, body, blocks.render_details_modal(approval), tell, what="details")
