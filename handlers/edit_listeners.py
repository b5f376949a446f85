"""Slack listeners of edit-then-approve: the card's Edit button and the edit modal's submit.

The click opens the modal in the acknowledgement path (a trigger_id lives 3 seconds) after
the same checks as Deny (this workspace and channel, pending, may decide); the submission
is read and checked against the tool's schema in the acknowledgement path too, so field
errors show in the modal (``response_action: errors``) and nothing changes. A valid edit
is recorded and approved after the acknowledgement, through the path every decision takes
(``handlers.decisions``), by ``Runner.edit_and_approve``, which checks everything again.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.decisions import Decision, describe_status
from bot.edits import EDITED_MEANWHILE, changes_text, edit_errors
from bot.runner import ensure_may_decide
from handlers import edit_blocks
from handlers.blocks import escape, parse_approve_value
from handlers.decisions import (
    LOOKUP_FAILED,
    ClickPlace,
    _settle_from_slack,
    form_opening,
)
from handlers.interactions import form_click
from handlers.services import Services
from storage.models import Approval
from storage.records import shows_current
from storage.repository import DATABASE_FAILURES, time_limit

log = logging.getLogger(__name__)

NOT_EDITABLE = (
    ":no_entry: The policy of this tool does not allow editing its calls (`allow_edit`); "
    "approve or deny it as it is."
)
TOOL_GONE = ":no_entry: This tool is no longer configured, so its call cannot be edited."


def register(app: AsyncApp, services: Services) -> None:
    @app.action(edit_blocks.EDIT)
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
        approval_id, tell = form.approval_id, form.tell
        if not edit_blocks.editable(approval):
            await tell(NOT_EDITABLE)
            return
        schema = _schema_of(services, approval)
        if schema is None:
            await tell(TOOL_GONE)
            return
        try:
            await client.views_open(
                trigger_id=body.get("trigger_id", ""),
                view=edit_blocks.render_edit_modal(approval, schema),
            )
        except SlackApiError as exc:
            log.error("approval %s: could not open the edit form: %s", approval_id, exc)
            await tell(":warning: Slack did not open the edit form in time; click Edit again.")

    @app.view(edit_blocks.EDIT_MODAL)
    async def on_edit_submitted(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        # "id:fingerprint" of what the form showed; the id alone from the previous release.
        approval_id, shown = parse_approve_value(view.get("private_metadata"))
        actor = body["user"]["id"]
        team = _nested(body, "team", "id")
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
        if not edit_blocks.editable(approval):
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
        form = _nested(view, "state", "values")
        arguments, errors = edit_blocks.read_form(approval, schema, form)
        if not errors:
            problems = edit_errors(schema, approval.arguments, arguments)
            errors = edit_blocks.errors_by_block(approval, schema, problems)
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
    tool = next((t for t in services.config.tools if t.name == approval.tool_name), None)
    return None if tool is None else (tool.input_schema or {})


def _nested(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]``, or None where a level is missing or not an object: a signed request
    of another shape than Slack's gets a clear answer, never a 500."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _first(view: dict[str, Any]) -> str:
    """The block an error about the whole form goes on: the modal's first input."""
    blocks = view.get("blocks")
    for block in blocks if isinstance(blocks, list) else []:
        if isinstance(block, dict) and block.get("type") == "input" and block.get("block_id"):
            return str(block["block_id"])
    return edit_blocks.WHOLE_BLOCK


def _short(text: str) -> str:
    return text[: edit_blocks.ERROR_LIMIT]


async def edit_from_slack(
    services: Services,
    approval: Approval,
    *,
    actor: str,
    arguments: dict[str, Any],
    team: str,
    shown: str | None = None,
) -> None:
    """Record the edit and approve it (or keep it pending for stricter approvers), then
    settle the card and resume the run, exactly as an Approve click does."""

    async def tell(text: str) -> None:
        await services.publisher.ephemeral(
            channel=approval.channel,
            user=actor,
            text=text,
            team=team or approval.team_id,
            thread_ts=approval.thread_ts or None,
        )

    async def edit(current: Approval, groups: set[str]) -> Decision:
        # Stored with the decision, as an Approve click's: the model reads who by name.
        name = None
        if services.people is not None:
            name = await services.people.name_of(actor, team=current.team_id)
        return await services.runner.edit_and_approve(
            current.id,
            actor=actor,
            arguments=arguments,
            actor_groups=groups,
            actor_name=name,
            shown=shown,
        )

    def done(edited: Approval) -> str:
        what = escape(changes_text(edited.arguments, edited.edited_arguments or {}))
        if edited.status == "pending":
            return (
                f":lock: Your edit of `{escape(edited.tool_name)}` ({what}) is saved, but it "
                f"was not approved: {escape(edited.reason or 'it needs other approvers')}. "
                "The card asks them now."
            )
        return f"Approved `{escape(edited.tool_name)}` with your edits: {what} ({edited.id})."

    await _settle_from_slack(
        services,
        approval_id=approval.id,
        actor=actor,
        # The approval's own channel: the modal carries nothing but its id.
        place=ClickPlace(team=team, channel=approval.channel or None),
        tell=tell,
        clicked=None,
        settle=edit,
        done=done,
    )
