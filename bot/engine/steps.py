"""The Workflow Builder step "Request approval": its inputs read and checked, its approval
drafted, and the outputs its completion reports.

A step is an approval with no agent behind it: Workflow Builder names the title, details,
approvers, channel and timeout, and waits for the decision as the step's outputs. So it is
drafted here as the approval of a call (the title where a tool's name goes, the details as
its one argument), stored with a run of its own (storage.stores.steps) and settled by the
same conditional UPDATEs as every approval; the step's completion reads the settled row
(:func:`step_outcome`). Inputs are checked before anything is stored: a step whose inputs
cannot make an approval fails at once, with a sentence that says which input is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.clock import utcnow
from bot.config import Config
from bot.config.fields import duration_problem
from bot.ids import SLACK_CHANNEL_ID, SLACK_USER_ID, new_approval_id, new_run_id
from storage.models import Approval
from storage.repository import ApprovalDraft, Repository, StepStarted, payload_hash

# The step's callback_id in manifest.yml (functions.request_approval).
STEP_CALLBACK_ID = "request_approval"
# What the card says for the step's details (the one "argument" of the approval).
DETAILS = "details"
TITLE_LIMIT = 255  # approvals.tool_name
DETAILS_LIMIT = 3000
APPROVERS_LIMIT = 100
USER_ID = SLACK_USER_ID
CHANNEL_ID = SLACK_CHANNEL_ID
# A step's approval says so in ``on_expiry``: an expiry is the workflow's ``expired`` (the
# storage treats it as "deny": nothing resumes a step's run). The card words it so.
ON_EXPIRY_WORKFLOW = "workflow"
# The step's definition, bound into the approval's payload hash as a tool's definition is.
DEFINITION = {"workflow_step": STEP_CALLBACK_ID}


class StepInputError(ValueError):
    """The step's inputs cannot make an approval; the message says which one and why."""


@dataclass(frozen=True)
class StepInputs:
    title: str
    details: str
    approvers: tuple[str, ...]
    channel: str
    timeout: timedelta | None = None
    remind_after: timedelta | None = None
    requester: str | None = None


def read_inputs(inputs: Mapping[str, Any], bot_user_id: str | None = None) -> StepInputs:
    """The step's inputs as Slack sent them, checked; StepInputError names what is wrong.
    ``bot_user_id``: the app itself, which can never decide (nor can the requester), so a
    step whose approvers are only those could never be approved and is refused."""
    title = _text(inputs, "title", TITLE_LIMIT, required=True)
    details = _text(inputs, "details", DETAILS_LIMIT, required=False)
    approvers = inputs.get("approvers")
    if isinstance(approvers, str):  # one user, sent as a string
        approvers = [approvers]
    if not isinstance(approvers, list) or not approvers:
        raise StepInputError("approvers must name at least one person (a list of user ids).")
    if len(approvers) > APPROVERS_LIMIT:
        raise StepInputError(f"approvers may name at most {APPROVERS_LIMIT} people.")
    for user in approvers:
        if not isinstance(user, str) or not USER_ID.match(user):
            raise StepInputError(f"approvers: {str(user)[:40]!r} is not a Slack user id.")
    channel = inputs.get("channel")
    if not isinstance(channel, str) or not CHANNEL_ID.match(channel):
        raise StepInputError("channel must be a Slack channel id (C…, G… or D…).")
    requester = inputs.get("requester")
    if requester in (None, ""):
        requester = None
    elif not isinstance(requester, str) or not USER_ID.match(requester):
        raise StepInputError(f"requester: {str(requester)[:40]!r} is not a Slack user id.")
    if not set(approvers) - {requester, bot_user_id}:
        raise StepInputError(
            "approvers must name someone other than the requester (who never approves their "
            "own request) and this app."
        )
    return StepInputs(
        title=title,
        details=details,
        approvers=tuple(dict.fromkeys(approvers)),
        channel=channel,
        timeout=_duration(inputs, "timeout"),
        remind_after=_duration(inputs, "remind_after"),
        requester=requester,
    )


def _text(inputs: Mapping[str, Any], name: str, limit: int, *, required: bool) -> str:
    value = inputs.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise StepInputError(f"{name} must be a non-empty string.")
    if len(value) > limit:
        raise StepInputError(f"{name} may be at most {limit} characters long.")
    return value.strip()


def _duration(inputs: Mapping[str, Any], name: str) -> timedelta | None:
    value = inputs.get(name)
    if value in (None, ""):
        return None
    parsed = duration_problem(value)
    if isinstance(parsed, str):
        raise StepInputError(f"{name}: {parsed}.")
    return parsed


class Steps:
    """Starts steps: drafts the approval of a step's inputs and stores it with the step."""

    def __init__(
        self, repo: Repository, config: Config, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.repo = repo
        self.config = config
        self.clock = clock

    async def start(
        self,
        inputs: StepInputs,
        *,
        function_execution_id: str,
        workflow_execution_id: str,
        team_id: str,
        token: str,
        asked_by: str,
    ) -> StepStarted:
        """Store the step's approval (pending, its card to post); a redelivered execution
        stores nothing and returns the approval it has. ``asked_by``: who the card says
        asked when the inputs name nobody (the bot itself: it can never decide)."""
        now = self.clock()
        arguments = {DETAILS: inputs.details} if inputs.details else {}
        draft = ApprovalDraft(
            id=new_approval_id(),
            tool_call_id=function_execution_id,
            tool_name=inputs.title,
            arguments=arguments,
            payload_hash=payload_hash(inputs.title, arguments, DEFINITION),
            approvers=list(inputs.approvers),
            allow_self_approval=False,
            on_expiry=ON_EXPIRY_WORKFLOW,
            expires_at=now + (inputs.timeout or self.config.approval_ttl),
            remind_at=now + inputs.remind_after if inputs.remind_after else None,
        )
        return await self.repo.start_step(
            function_execution_id=function_execution_id,
            workflow_execution_id=workflow_execution_id,
            team_id=team_id,
            token=token,
            run_id=new_run_id(),
            channel=inputs.channel,
            requester=inputs.requester or asked_by,
            draft=draft,
            now=now,
        )


@dataclass(frozen=True)
class StepOutcome:
    """What completes a step: ``outputs`` (functions.completeSuccess) or ``error``
    (functions.completeError)."""

    outputs: dict[str, str] | None = None
    error: str | None = None


def step_outcome(approval: Approval) -> StepOutcome:
    """The outputs of a settled step's approval: ``decision`` approved, denied or expired,
    ``decided_by`` (absent for an expiry) and ``reason``; a cancelled one is an error."""
    match approval.status:
        case "approved" | "executing" | "executed":
            decision = "approved"
        case "denied":
            decision = "denied"
        case "expired":
            decision = "expired"
        case "cancelled":
            why = approval.result or approval.reason or "cancelled"
            return StepOutcome(error=f"The approval request was cancelled: {why}"[:1000])
        case status:
            return StepOutcome(error=f"The approval request ended as {status}.")
    outputs = {"decision": decision}
    if approval.decided_by and decision != "expired":
        outputs["decided_by"] = approval.decided_by
    outputs["reason"] = approval.reason or ""
    return StepOutcome(outputs=outputs)
