"""Slack listeners for the agent's questions: choice buttons, the choice menu, the Answer
button and its modal.

They follow the Approve / Deny listeners (:mod:`handlers.listeners`): acknowledge first, then
hand the answer to a tracked background task (:func:`handlers.decisions.answer_from_slack`,
the same exactly-once path as a decision). The one exception is the Answer button: Slack's
``trigger_id`` lives 3 seconds, so its modal is opened in the acknowledgement path, after a
bounded look-up that refuses people who may not answer before they type anything.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.runner import ensure_may_answer
from handlers import pause_blocks
from handlers.decisions import (
    ClickPlace,
    Tell,
    answer_from_slack,
    form_opening,
)
from handlers.interactions import click_place, clicked_card, form_click, json_object, teller
from handlers.list_refresh import refresher_for_click
from handlers.services import Services

log = logging.getLogger(__name__)

NOT_A_CHOICE = ":no_entry: That is not one of this question's choices."
BLANK_ANSWER = "Please type an answer."


def register(app: AsyncApp, services: Services) -> None:
    def answer_choice(body: dict[str, Any], value: Any, respond: AsyncRespond) -> None:
        """Hand a chosen answer to the background (after the caller acknowledged)."""
        chosen = pause_blocks.parse_choice_value(value)
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

    @app.action(re.compile(pause_blocks.CHOICE_PATTERN))
    async def on_choice(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        answer_choice(body, action.get("value"), respond)

    @app.action(pause_blocks.SELECT)
    async def on_select(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        answer_choice(body, (action.get("selected_option") or {}).get("value"), respond)

    @app.action(pause_blocks.ANSWER)
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
        approval_id, tell = form.approval_id, form.tell
        metadata = form.metadata()
        # trigger_id lives 3 seconds: open the modal now, in the acknowledgement path.
        try:
            await client.views_open(
                trigger_id=body.get("trigger_id", ""),
                view=pause_blocks.render_answer_modal(approval, metadata),
            )
        except SlackApiError as exc:
            log.error("question %s: could not open the answer form: %s", approval_id, exc)
            await tell(":warning: Slack did not open the answer form in time; click Answer again.")

    @app.view(pause_blocks.ANSWER_MODAL)
    async def on_answer_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]
    ) -> None:
        values = (view.get("state") or {}).get("values") or {}
        typed = (values.get(pause_blocks.ANSWER_BLOCK) or {}).get(pause_blocks.ANSWER_INPUT) or {}
        answer = typed.get("value")
        if not isinstance(answer, str) or not answer.strip():
            # The form stays open and says why: nothing to send the agent yet.
            await ack(response_action="errors", errors={pause_blocks.ANSWER_BLOCK: BLANK_ANSWER})
            return
        await ack()
        metadata = json_object(view.get("private_metadata"))
        actor = body["user"]["id"]
        team = (body.get("team") or {}).get("id", "") or metadata.get("team", "")
        channel = metadata.get("channel") or None
        services.background.spawn(
            answer_from_slack(
                services,
                approval_id=metadata.get("approval_id", ""),
                actor=actor,
                answer=answer,
                place=ClickPlace(
                    team=team, channel=channel, list_channel=metadata.get("list_channel") or None
                ),
                tell=view_teller(services, actor, channel, metadata.get("response_url") or ""),
                clicked=(channel, card_ts)
                if channel and (card_ts := metadata.get("card_ts"))
                else None,
            ),
            name=f"answer {metadata.get('approval_id')}",
        )


def view_teller(services: Services, actor: str, channel: str | None, response_url: str) -> Tell:
    """Ephemeral answers after a modal: in the card's channel, or through the response URL
    of the /approvals list the modal was opened from (a list has no channel of its own)."""

    async def tell(text: str) -> None:
        if channel:
            await services.publisher.ephemeral(channel=channel, user=actor, text=text)
        elif response_url:
            await AsyncWebhookClient(response_url, session=services.client.session).send(
                text=text, response_type="ephemeral", replace_original=False
            )

    return tell
