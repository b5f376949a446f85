"""The approval card's buttons: Approve, Deny and its reason form, Show all arguments.

Each listener acknowledges first (Slack wants an answer within 3 seconds) and hands the
decision to a tracked background task (:func:`handlers.flows.decide_from_slack`), which
settles it exactly once. Deny opens its reason form in the acknowledgement path (a trigger_id
lives 3 seconds), after a bounded check that the clicker may decide; so does "Show all
arguments". The same buttons work on a card, its DM copies, an /approvals list and the App
Home: where the click came from is read from Slack's payload (:mod:`.interactions`).
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.policy import ensure_may_decide
from handlers import blocks
from handlers.flows import (
    clicked_approval,
    decide_from_slack,
    form_opening,
    list_refresher,
    may_see_here,
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


def register(app: AsyncApp, services: Services) -> None:
    @app.action(blocks.APPROVE)
    async def on_approve(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        approval_id, shown = blocks.parse_approve_value(action.get("value"))
        services.background.spawn(
            decide_from_slack(
                services,
                approval_id=approval_id,
                actor=body["user"]["id"],
                approve=True,
                reason=None,
                shown=shown,
                place=click_place(body),
                tell=teller(respond, services, body),
                clicked=clicked_card(body),
                refresh_list=refresher_for_click(services, body, action),
            ),
            name=f"approve {approval_id}",
        )

    @app.action(blocks.DENY)
    async def on_deny(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        form = form_click(services, body, action, respond)
        approval = await form_opening(
            services, form, click="deny click", ensure_may=ensure_may_decide
        )
        if approval is None:
            return
        place, tell = form.place, form.tell
        metadata: dict[str, Any] = {
            **form.metadata(),
            # The card's thread: the denial's notice lands there, as an approval's does.
            "thread_ts": approval.thread_ts or "",
            # Denied from an /approvals list: which one, to edit it after (handlers.flows.lists).
            "list_block": action.get("block_id") if place.channel is None else None,
            "team_domain": (body.get("team") or {}).get("domain", ""),
        }
        await open_form(
            client, body, blocks.render_deny_modal(approval, metadata), tell, what="deny form"
        )

    @app.view(blocks.DENY_MODAL)
    async def on_deny_reason(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        await ack()
        form = view_submission(services, body, view)
        reason = nested(view, "state", "values", blocks.REASON_BLOCK, blocks.REASON_INPUT, "value")
        services.background.spawn(
            decide_from_slack(
                services,
                approval_id=form.text("approval_id"),
                actor=form.actor,
                approve=False,
                reason=reason if isinstance(reason, str) else None,
                place=form.place,
                tell=form.tell,
                clicked=form.clicked,
                refresh_list=list_refresher(
                    services,
                    block_id=form.text("list_block") or None,
                    response_url=form.text("response_url"),
                    user=form.actor,
                    team=form.place.team,
                    domain=form.text("team_domain"),
                    channel=form.text("list_channel"),
                ),
            ),
            name=f"deny {form.text('approval_id')}",
        )

    @app.action(blocks.SHOW_ARGUMENTS)
    async def on_show_arguments(
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
            services, action.get("value", ""), place, tell=tell, click="arguments"
        )
        # Seeing follows the rule for listing: from a list elsewhere or the App Home, only
        # its requester, approvers and answerers see its arguments.
        if approval is None or not await may_see_here(
            services, approval, body["user"]["id"], place, tell=tell
        ):
            return
        await open_form(
            client, body, blocks.render_arguments_modal(approval), tell, what="arguments"
        )
