"""The Workflow Builder step "Request approval": Slack's ``function_executed`` event.

Slack runs the app's custom step (``functions.request_approval`` in manifest.yml) by sending
``function_executed`` with the step's inputs, its ``function_execution_id`` and a token for
that execution. The step's approval, its run and the step itself are stored in one
transaction before Slack gets its answer (bolt acknowledges when this listener returns), keyed
by the execution id, so a redelivery stores nothing twice; the card then goes out through the
card outbox like any approval's, with its DM copies and reminders. The step completes later,
when the approval is settled (:mod:`handlers.slack.steps`), not here: bolt's ``complete`` is
bound to this request, and a completion must survive the process. Inputs that cannot make an
approval fail the step at once (bolt's ``fail``, ``functions.completeError``) with a sentence
naming the input, and store nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.context.fail.async_fail import AsyncFail
from slack_bolt.response import BoltResponse

from bot.engine.steps import STEP_CALLBACK_ID, StepInputError, read_inputs
from handlers.services import Services
from handlers.slack import SLACK_FAILURES
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services) -> None:
    @app.function(STEP_CALLBACK_ID)
    async def on_request_approval(
        body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext, fail: AsyncFail
    ) -> BoltResponse | None:
        execution = str(event["function_execution_id"])
        try:
            inputs = read_inputs(event.get("inputs") or {}, context.bot_user_id)
        except StepInputError as bad:
            log.warning("workflow step %s refused: %s", execution, bad)
            services.background.spawn(
                _fail(fail, execution, f"Request approval: {bad}"), name=f"step {execution}"
            )
            return None
        try:
            with time_limit(services.ack_time_limit):
                started = await services.runner.steps.start(
                    inputs,
                    function_execution_id=execution,
                    workflow_execution_id=str(event.get("workflow_execution_id") or ""),
                    team_id=body.get("team_id") or context.team_id or "",
                    token=str(event.get("bot_access_token") or ""),
                    asked_by=context.bot_user_id or "",
                )
        except DATABASE_FAILURES as exc:
            log.error("workflow step %s not stored (%s); answered 503", execution, exc)
            return BoltResponse(status=503, body="the step could not be stored; retry")
        if started.created:
            log.info("workflow step %s: approval %s requested", execution, started.approval_id)
        services.background.spawn(
            services.publisher.cards.post_card(started.approval_id), name=f"step {execution}"
        )
        return None


async def _fail(fail: AsyncFail, execution: str, error: str) -> None:
    try:
        await fail(error)
    except SLACK_FAILURES as exc:  # a redelivery: Slack failed the step already
        log.warning("workflow step %s: could not fail it: %s", execution, exc)
