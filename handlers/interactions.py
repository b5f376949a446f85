"""What a Slack interaction payload says about itself, read the same way by every listener.

The approval buttons (handlers/listeners.py) and the question buttons and forms
(handlers/question_listeners.py) both need where a click came from, which card it was on,
how to answer the clicker, and the JSON we put on a button or modal; one place keeps the
two readings from drifting apart.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncRespond

from handlers.decisions import ClickPlace, FormClick, Tell
from handlers.list_refresh import refresher_for_click
from handlers.services import Services

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
    if not body.get("response_url") and services.home is not None:
        return services.home.teller(click_place(body).team, body["user"]["id"])

    async def tell(text: str) -> None:
        await respond(text=text, response_type="ephemeral", replace_original=False)

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
