"""Slack listeners of edit-then-approve: the card's Edit button and the edit modal's submit.

The click opens the modal in the acknowledgement path (a trigger_id lives 3 seconds) after
the same checks as Deny (this workspace and channel, pending, may decide); the submission
is read and checked against the tool's schema in the acknowledgement path too, so field
errors show in the modal (``response_action: errors``) and nothing changes. A valid edit
is recorded and approved after the acknowledgement, through the path every decision takes
(:func:`handlers.flows.edit_from_slack`), by ``Runner.edit_and_approve``, which checks
everything again.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bot.policy import EDITED_MEANWHILE, describe_status, edit_errors, ensure_may_decide
from handlers.blocks import (
    EDIT,
    EDIT_MODAL,
    ERROR_LIMIT,
    WHOLE_BLOCK,
    editable,
    errors_by_block,
    parse_approve_value,
    read_form,
    render_edit_modal,
)
from handlers.flows import LOOKUP_FAILED, ClickPlace, edit_from_slack, form_opening, may_see_here
from handlers.listeners.interactions import form_click, nested, open_form
from handlers.services import Services
from storage.hashes import shows_current
from storage.models import Approval
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

NOT_EDITABLE = (
    ":no_entry: The policy of this tool does not allow editing its calls (`allow_edit`); "
    "approve or deny it as it is."
)
TOOL_GONE = ":no_entry: This tool is no longer configured, so its call cannot be edited."


def register(app: AsyncApp, services: Services) -> None:
    @app.action(EDIT)
    async def on_edit(
        ack: AsyncAck,
        body: dict[str, Any],
        action: dict[str, Any],
        respond: AsyncRespond,
        client: AsyncWebClient,
    ) -> None:
        await ack()
        form = form_click(services, body, action, respond)
        approval = await form_opening(
            services, form, click="edit click", ensure_may=ensure_may_decide
        )
        if approval is None:
            return
        tell = form.tell
        if not editable(approval):
            await tell(NOT_EDITABLE)
            return
        schema = _schema_of(services, approval)
        if schema is None:
            await tell(TOOL_GONE)
            return
        await open_form(client, body, render_edit_modal(approval, schema), tell, what="edit form")

    @app.view(EDIT_MODAL)
    async def on_edit_submitted(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        # "id:fingerprint" of what the form showed; the id alone from the previous release.
        approval_id, shown = parse_approve_value(view.get("private_metadata"))
        actor = body["user"]["id"]
        team = nested(body, "team", "id")
        team = team if isinstance(team, str) else ""
        try:
            with time_limit(services.ack_time_limit):
                approval = await services.repo.get_approval(approval_id) if approval_id else None
        except DATABASE_FAILURES as exc:
            log.error("approval %s: edit not looked up (%s)", approval_id, exc)
            await ack(response_action="errors", errors={_first(view): _short(LOOKUP_FAILED)})
            return
        if approval is None or (approval.team_id and team and approval.team_id != team):
            await ack(
                response_action="errors",
                errors={_first(view): "That approval does not belong to this workspace."},
            )
            return
        # The form only opens for an approver: a submission naming another approval by id
        # learns nothing of it (its state, who decided) unless its sender may see it.
        refusals: list[str] = []

        async def refuse(text: str) -> None:
            refusals.append(text.partition(": ")[2] if text.startswith(":") else text)

        if not await may_see_here(
            services, approval, actor, ClickPlace(team=team, channel=None), tell=refuse
        ):
            await ack(response_action="errors", errors={_first(view): _short(refusals[0])})
            return
        if not editable(approval):
            # A submission naming another approval (the modal only opens on editable ones):
            # refused here too, not after the modal closed.
            await ack(
                response_action="errors",
                errors={_first(view): _short(NOT_EDITABLE.removeprefix(":no_entry: "))},
            )
            return
        schema = _schema_of(services, approval)
        if approval.status != "pending" or schema is None:
            # Nothing changes; the form stays open saying why ("Already approved by @bo").
            why = describe_status(approval) if approval.status != "pending" else TOOL_GONE
            await ack(response_action="errors", errors={_first(view): _short(why)})
            return
        if not shows_current(approval, shown):
            await ack(response_action="errors", errors={_first(view): _short(EDITED_MEANWHILE)})
            return
        form = nested(view, "state", "values")
        arguments, errors = read_form(approval, schema, form)
        if not errors:
            problems = edit_errors(schema, approval.arguments, arguments)
            errors = errors_by_block(approval, schema, problems)
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        services.background.spawn(
            edit_from_slack(
                services, approval, actor=actor, arguments=arguments, team=team, shown=shown
            ),
            name=f"edit {approval_id}",
        )


def _schema_of(services: Services, approval: Approval) -> dict[str, Any] | None:
    """The input schema of the approval's tool as configured now; None if it is gone."""
    tool = services.config.tool_named(approval.tool_name)
    return None if tool is None else (tool.input_schema or {})


def _first(view: dict[str, Any]) -> str:
    """The block an error about the whole form goes on: the modal's first input."""
    blocks = view.get("blocks")
    for block in blocks if isinstance(blocks, list) else []:
        if isinstance(block, dict) and block.get("type") == "input" and block.get("block_id"):
            return str(block["block_id"])
    return WHOLE_BLOCK


def _short(text: str) -> str:
    return text[:ERROR_LIMIT]
