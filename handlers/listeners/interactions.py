"""What a Slack interaction payload says about itself, read the same way by every listener.

The approval buttons (:mod:`handlers.listeners.approvals`), the question buttons and forms
(:mod:`handlers.listeners.questions`), the recovery, batch, edit and grant listeners all need
where a click came from, which card or list it was on, how to answer the clicker, the JSON we
put on a button or modal, how a form is opened within a trigger's 3 seconds, and what a
submitted form says of where it was opened; one place keeps their readings from drifting
apart.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from handlers.flows import ClickPlace, FormClick, RefreshList, Tell, list_refresher
from handlers.services import Services
from handlers.slack import CardPlace

log = logging.getLogger(__name__)


def click_place(body: dict[str, Any]) -> ClickPlace:
    """Where a click came from: a card in a channel, or an ephemeral /approvals list.

    Both channels are Slack's (the signed payload's container), never a value of ours that
    a crafted request could point elsewhere.
    """
    team = (body.get("team") or {}).get("id") or body.get("user", {}).get("team_id", "")
    container = body.get("container") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    channel = channel if isinstance(channel, str) and channel else None
    if container.get("is_ephemeral"):
        return ClickPlace(team=team, channel=None, list_channel=channel)
    return ClickPlace(team=team, channel=channel)


def clicked_card(body: dict[str, Any]) -> tuple[str, str] | None:
    """The card message a button was clicked on; None for ephemeral lists."""
    container = body.get("container") or {}
    if container.get("is_ephemeral") or container.get("type") != "message":
        return None
    channel, ts = container.get("channel_id"), container.get("message_ts")
    return (channel, ts) if isinstance(channel, str) and isinstance(ts, str) else None


def teller(respond: AsyncRespond, services: Services, body: dict[str, Any]) -> Tell:
    """An ephemeral answer to the clicker, leaving the card or list as it is; on the App
    Home (no response URL), at the Home's top."""
    told = clicker_teller(services, body)
    if told is not None:
        return told

    async def tell(text: str) -> None:
        await respond(text=text, response_type="ephemeral", replace_original=False)

    return tell


def clicker_teller(services: Services, body: dict[str, Any]) -> Tell | None:
    """:func:`teller` without bolt's ``respond``, for work outside a listener (a click's
    dispatch that failed after its early answer): through the response URL, or at the App
    Home's top; None when the click has neither (or no clicker to tell)."""
    user = body.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    response_url = body.get("response_url")
    if not (isinstance(response_url, str) and response_url):
        if services.home is not None and isinstance(user_id, str) and user_id:
            return services.home.teller(click_place(body).team, user_id)
        return None

    async def tell(text: str) -> None:
        # Over the bot's own session: bolt's ``respond`` opens a session and a new
        # connection for every answer, about 0.7 ms of CPU and a TCP handshake on the
        # click's path before the run resumes (docs/benchmarks.md, a click's time).
        await AsyncWebhookClient(response_url, session=services.client.session).send(
            text=text, response_type="ephemeral", replace_original=False
        )

    return tell


def form_click(
    services: Services, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
) -> FormClick:
    """A click on a button that opens a form (Deny, Edit, Answer): its value is the id."""
    value = action.get("value")
    return FormClick(
        approval_id=value if isinstance(value, str) else "",
        actor=body["user"]["id"],
        place=click_place(body),
        tell=teller(respond, services, body),
        clicked=clicked_card(body),
        refresh_list=refresher_for_click(services, body, action),
        response_url=str(body.get("response_url") or ""),
    )


def json_object(text: Any) -> dict[str, Any]:
    """A JSON object from a value we put on a button or modal; {} for anything else."""
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError, RecursionError):  # deep nesting raises RecursionError
        log.warning("ignoring a malformed value sent back by Slack: %.200r", text)
        return {}
    return value if isinstance(value, dict) else {}


def refresher_for_click(
    services: Services, body: dict[str, Any], action: dict[str, Any]
) -> RefreshList | None:
    """The list refresher of a click on an ephemeral /approvals list, else None."""
    container = body.get("container") or {}
    if not container.get("is_ephemeral"):
        return None
    team = body.get("team") or {}
    return list_refresher(
        services,
        block_id=action.get("block_id"),
        response_url=body.get("response_url"),
        user=(body.get("user") or {}).get("id", ""),
        team=team.get("id", "") if isinstance(team, dict) else "",
        domain=team.get("domain", "") if isinstance(team, dict) else "",
        channel=container.get("channel_id") or (body.get("channel") or {}).get("id") or "",
    )


def nested(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]…``, or None where a level is missing, null or not an object: Slack sends
    a form's state in full, a signed request of another shape must not become a 500."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


async def open_form(
    client: AsyncWebClient, body: dict[str, Any], view: dict[str, Any], tell: Tell, *, what: str
) -> None:
    """Open a modal from a click, in the acknowledgement path (a trigger_id lives 3 seconds);
    when Slack does not open it, one log line and a word to the clicker."""
    try:
        await client.views_open(trigger_id=str(body.get("trigger_id") or ""), view=view)
    except SlackApiError as exc:
        log.error("could not open the %s: %s", what, exc)
        await tell(f":warning: Slack did not open the {what} in time; click again.")


@dataclass(frozen=True)
class Submission:
    """A submitted modal as its listener needs it: who, where the form was opened (from the
    private metadata we set on it, which Slack keeps server-side), how to answer them."""

    actor: str
    metadata: dict[str, Any]
    place: ClickPlace
    clicked: CardPlace | None  # the card whose button opened the form (None from a list)
    tell: Tell

    def text(self, key: str) -> str:
        """A string the opening click put in the form's metadata; "" for anything else."""
        return _text(self.metadata, key)


def _text(metadata: dict[str, Any], key: str) -> str:
    value = metadata.get(key)
    return value if isinstance(value, str) else ""


def view_submission(services: Services, body: dict[str, Any], view: dict[str, Any]) -> Submission:
    """Read a modal's submission: the workspace is Slack's (the signed payload), the channel,
    list and card are the ones the opening click had (:meth:`FormClick.metadata`)."""
    metadata = json_object(view.get("private_metadata"))

    def text(key: str) -> str:
        return _text(metadata, key)

    actor = str(nested(body, "user", "id") or "")
    team = nested(body, "team", "id")
    team = team if isinstance(team, str) and team else text("team")
    channel = text("channel") or None
    card_ts = text("card_ts")
    return Submission(
        actor=actor,
        metadata=metadata,
        place=ClickPlace(team=team, channel=channel, list_channel=text("list_channel") or None),
        clicked=(channel, card_ts) if channel and card_ts else None,
        tell=view_teller(
            services,
            actor=actor,
            team=team,
            channel=channel,
            thread_ts=text("thread_ts") or None,
            response_url=text("response_url"),
        ),
    )


def view_teller(
    services: Services,
    *,
    actor: str,
    team: str,
    channel: str | None,
    thread_ts: str | None,
    response_url: str,
) -> Tell:
    """Ephemeral answers after a modal: in the card's channel (and thread), or through the
    response URL of the /approvals list the modal was opened from (a list has no channel of
    its own), or at the top of the App Home it was opened from."""

    async def tell(text: str) -> None:
        if channel:
            await services.publisher.ephemeral(
                channel=channel, user=actor, text=text, team=team, thread_ts=thread_ts
            )
        elif response_url:
            await AsyncWebhookClient(response_url, session=services.client.session).send(
                text=text, response_type="ephemeral", replace_original=False
            )
        elif services.home is not None:
            await services.home.publish(team, actor, notice=text)

    return tell
