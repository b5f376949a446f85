"""An /approvals list edited in place after a decision made from it.

A list is an ephemeral message: Slack gives the app no handle on it (no ts for chat.update)
except the response URL of an interaction on it, and the payload of such a click does not even
carry the list's blocks. So a decision made from a list (Approve, Deny and its reason form, or a
click found already decided or expired) re-renders that list from the database: its view and
page come from the block_id of the clicked item's buttons (``blocks.list_block_id``), and the
decided item stays in its place with its outcome instead of its buttons. Other lists showing the
same approval (older ones, other people's) are not reachable; a click on one is answered
"Already approved by @bo" and refreshes that list.

Owns no durable state; a refresh that fails (response URL expired or used up) is logged only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.webhook.async_client import AsyncWebhookClient

from handlers.blocks import LIST_BLOCK_PREFIX
from handlers.services import GroupLookupFailed, Services
from storage.repository import DATABASE_FAILURES

log = logging.getLogger(__name__)

VIEWS = ("approve", "mine", "all")
# Refreshes the list a click came from, given the approval the click settled (or found settled).
RefreshList = Callable[[str], Awaitable[None]]


def listed_at(block_id: Any) -> tuple[str, int] | None:
    """(view, page) of the /approvals list an item's block_id names, or None."""
    if not isinstance(block_id, str):
        return None
    prefix, _, rest = block_id.partition(":")
    view, _, rest = rest.partition(":")
    page, _, _ = rest.partition(":")
    # ASCII digits only: str.isdigit also takes "²", which int() then refuses (a 500).
    numeric = page.isascii() and page.isdigit()
    if prefix != LIST_BLOCK_PREFIX or view not in VIEWS or not numeric or len(page) > 4:
        return None
    return view, int(page)


def list_refresher(
    services: Services,
    *,
    block_id: Any,
    response_url: Any,
    user: str,
    team: str,
    domain: str,
    channel: str,
) -> RefreshList | None:
    """How to refresh the list a click came from; None when it did not come from one."""
    where = listed_at(block_id)
    if where is None or not isinstance(response_url, str) or not response_url or not channel:
        return None
    view, page = where
    command = {"user_id": user, "team_id": team, "team_domain": domain, "channel_id": channel}

    async def refresh(approval_id: str) -> None:
        from handlers.listeners import approvals_page  # listeners registers this module's user

        try:
            settled = await services.repo.get_approval(approval_id)
            text, blocks = await approvals_page(services, command, view, page, settled=settled)
            answer = await AsyncWebhookClient(response_url, session=services.client.session).send(
                text=text, blocks=blocks, replace_original=True
            )
        except (*DATABASE_FAILURES, GroupLookupFailed, OSError) as exc:
            log.warning("approval %s: its /approvals list not refreshed (%s)", approval_id, exc)
            return
        if answer.status_code != 200:
            log.warning(
                "approval %s: its /approvals list not refreshed (HTTP %s: %.200s)",
                approval_id,
                answer.status_code,
                answer.body,
            )

    return refresh


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
