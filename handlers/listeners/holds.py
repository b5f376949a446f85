"""The progress message's buttons: Pause, Resume, Stop (action ids ``run_pause``,
``run_resume``, ``run_stop``).

Each acknowledges first and hands the click to a tracked background task
(:func:`handlers.flows.holds.hold_from_slack`); the button's value is the run's id and nothing
else on it is trusted.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from handlers import blocks
from handlers.flows import hold_from_slack
from handlers.listeners.interactions import click_place, teller
from handlers.services import Services

ACTIONS = {blocks.RUN_PAUSE: "pause", blocks.RUN_RESUME: "resume", blocks.RUN_STOP: "stop"}


def register(app: AsyncApp, services: Services) -> None:
    for action_id, verb in ACTIONS.items():
        app.action(action_id)(_listener(services, verb))


def _listener(services: Services, verb: str) -> Any:
    async def on_click(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], respond: AsyncRespond
    ) -> None:
        await ack()
        value = action.get("value")
        run_id = value if isinstance(value, str) else ""
        services.background.spawn(
            hold_from_slack(
                services,
                run_id=run_id,
                actor=body["user"]["id"],
                action=verb,
                team=click_place(body).team,
                tell=teller(respond, services, body),
            ),
            name=f"{verb} {run_id}",
        )

    return on_click
