"""The standing grants' buttons: a card's "Approve, and allow …" menus and Revoke on the
``/approvals grants`` list.

Both acknowledge first and hand the rest to a tracked background task: the choice to
:func:`handlers.flows.grant_from_slack` (the one path of every decision: where it came from,
who chose it, then ``bot.engine.approve_and_grant``, exactly once), the revocation to
:func:`handlers.flows.revoke_from_slack`. The list itself is ``/approvals grants``
(:mod:`handlers.listeners.commands`); what cards show of grants, :class:`handlers.flows.CardGrants`.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from handlers.blocks import GRANT, GRANT_SAME, REVOKE, parse_grant_value
from handlers.flows import grant_from_slack, revoke_from_slack
from handlers.listeners.interactions import click_place, clicked_card, teller
from handlers.services import Services

NOT_A_CHOICE = ":no_entry: That is not one of the durations this card offers."


def register(app: AsyncApp, services: Services) -> None:
    async def on_grant(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        tell = teller(respond, services, body)
        option = action.get("selected_option")
        parsed = parse_grant_value(option.get("value") if isinstance(option, dict) else None)
        if parsed is None:
            await tell(NOT_A_CHOICE)
            return
        approval_id, duration, shown = parsed
        services.background.spawn(
            grant_from_slack(
                services,
                approval_id=approval_id,
                actor=body["user"]["id"],
                duration=duration,
                same_arguments=action.get("action_id") == GRANT_SAME,
                shown=shown,
                place=click_place(body),
                tell=tell,
                clicked=clicked_card(body),
            ),
            name=f"grant {approval_id}",
        )

    app.action(GRANT)(on_grant)
    app.action(GRANT_SAME)(on_grant)

    @app.action(REVOKE)
    async def on_revoke(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        services.background.spawn(
            revoke_from_slack(
                services,
                str(action.get("value") or ""),
                actor=body["user"]["id"],
                place=click_place(body),
                tell=teller(respond, services, body),
                respond=respond,
            ),
            name=f"revoke {action.get('value')}",
        )
