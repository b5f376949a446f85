"""Slack listeners for the agent's questions: choice buttons, the choice menu, the Answer
button and its modal.

They follow the Approve / Deny listeners (:mod:`handlers.listeners.approvals`): acknowledge
first, then hand the answer to a tracked background task (:func:`handlers.flows.answer_from_slack`,
the same exactly-once path as a decision). The one exception is the Answer button: Slack's
``trigger_id`` lives 3 seconds, so its modal is opened in the acknowledgement path, after a
bounded look-up that refuses people who may not answer before they type anything.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.policy import ensure_may_answer
from handlers.blocks import (
    ANSWER,
    ANSWER_BLOCK,
    ANSWER_INPUT,
    ANSWER_MODAL,
    CHOICE_PATTERN,
    SELECT,
    parse_choice_value,
    render_answer_modal,
)
from handlers.flows import answer_from_slack, form_opening
from handlers.listeners.interactions import (
    click_place,
    clicked_card,
    form_click,
    open_form,
    refresher_for_click,
    teller,
    view_submission,
)
from handlers.services import Services

log = logging.getLogger(__name__)

NOT_A_CHOICE = ":no_entry: That is not one of this question's choices."
BLANK_ANSWER = "Please type an answer."


def register(app: AsyncApp, services: Services) -> None:
    def answer_choice(body: dict[str, Any], value: Any, respond: AsyncRespond) -> None:
        """Hand a chosen answer to the background (after the caller acknowledged)."""
        chosen = parse_choice_value(value)
        tell = teller(respond, services, body)
        if chosen is None:  # payloads.problem refuses these; a second line of defence
            services.background.spawn(tell(NOT_A_CHOICE), name="not a choice")
            return
        approval_id, index = chosen
        services.background.spawn(
            answer_from_slack(
                services,
                approval_id=approval_id,
                actor=body["user"]["id"],
                choice=index,
                place=click_place(body),
                tell=tell,
                clicked=clicked_card(body),
                refresh_list=refresher_for_click(services, body, (body.get("actions") or [{}])[0]),
            ),
            name=f"answer {approval_id}",
        )

    @app.action(re.compile(CHOICE_PATTERN))
    async def on_choice(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        answer_choice(body, action.get("value"), respond)

    @app.action(SELECT)
    async def on_select(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        answer_choice(body, (action.get("selected_option") or {}).get("value"), respond)

    @app.action(ANSWER)
    async def on_answer_button(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        form = form_click(services, body, action, respond)
        approval = await form_opening(
            services, form, click="answer click", ensure_may=ensure_may_answer, row="question"
        )
        if approval is None:
            return
        view = render_answer_modal(approval, form.metadata())
        await open_form(client, body, view, form.tell, what="answer form")

    @app.view(ANSWER_MODAL)
    async def on_answer_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        values = (view.get("state") or {}).get("values") or {}
        typed = (values.get(ANSWER_BLOCK) or {}).get(ANSWER_INPUT) or {}
        answer = typed.get("value")
        if not isinstance(answer, str) or not answer.strip():
            # The form stays open and says why: nothing to send the agent yet.
            await ack(response_action="errors", errors={ANSWER_BLOCK: BLANK_ANSWER})
            return
        await ack()
        form = view_submission(services, body, view)
        services.background.spawn(
            answer_from_slack(
                services,
                approval_id=form.text("approval_id"),
                actor=form.actor,
                answer=answer,
                place=form.place,
                tell=form.tell,
                clicked=form.clicked,
            ),
            name=f"answer {form.text('approval_id')}",
        )
