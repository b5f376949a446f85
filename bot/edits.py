"""Edit, then approve: an approver corrects a call's arguments and approves the corrected call.

Holds no state of its own (the edit is stored on the approval: see ``storage.edits``). This
module checks an edit (the approval is editable and pending, the approver may decide it,
the arguments fit the tool's schema, the edited call's policy asks for nothing more), and
says what changed, in the words the model reads with the call's result, so that it does not
repeat the original call. The tool's name is never part of an edit: an edit cannot change
which tool runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import llm

from bot.arguments import _validator, argument_error
from bot.config import Config
from bot.decisions import (
    ApprovalNotFound,
    Decision,
    DecisionRefused,
    ensure_may_decide,
)
from bot.policy import Policy, refusal_reason
from bot.tools import tool_definition
from storage.edits import EditConflict, EditRequest
from storage.models import Approval
from storage.records import (
    ApprovalDraft,
    DecisionOutcome,
    PayloadHasher,
    canonical_json,
    fingerprint,
)
from storage.repository import Repository
from storage.values import storable

# Changes listed in a tool result or on a card before "and N more".
CHANGES_SHOWN = 10
VALUE_SHOWN = 80


EDITED_MEANWHILE = (
    "Someone else edited this call after you opened the form, so yours was not applied "
    "over arguments you did not see. Click Edit again."
)


class EditRefused(DecisionRefused):
    """An edit that was not recorded (nothing changed); the message says why, for people."""

    code = "edit_refused"


class InvalidEdit(EditRefused):
    """Edited arguments that do not fit the tool's schema; ``errors`` by top-level argument
    name ("" for the arguments as a whole)."""

    code = "invalid_edit"

    def __init__(self, errors: dict[str, str], approval: Approval | None = None) -> None:
        super().__init__("; ".join(f"{k or 'arguments'}: {v}" for k, v in errors.items()), approval)
        self.errors = errors


def field_errors(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, str]:
    """Every way ``arguments`` break ``schema``, one message per top-level argument."""
    if not schema:
        return {}
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:
        return {}
    errors: dict[str, str] = {}
    for error in validator.iter_errors(arguments):
        path = list(error.absolute_path)
        name = str(path[0]) if path else ""
        if not path and error.validator == "required":
            # "'replicas' is a required property": the missing argument's own field.
            missing = [p for p in error.validator_value if p not in arguments]
            name = str(missing[0]) if missing else ""
        rest = "/".join(str(p) for p in path[1:])
        message = f"{error.message} (at {rest})" if rest else error.message
        errors.setdefault(name, message)
    return errors


def edit_errors(
    schema: dict[str, Any], proposed: dict[str, Any], arguments: dict[str, Any]
) -> dict[str, str]:
    """Every reason ``arguments`` cannot replace ``proposed``, by top-level argument name
    ("" for the whole): checked over the stored form, the one the tool runs with (NaN
    becomes "NaN"). The modal's check and :meth:`EditSettling.edit_and_approve`'s, so an
    edit the modal accepts is not refused after it closed."""
    from bot.gate import MAX_ARGUMENT_DEPTH, too_deep  # the gate builds on this module

    if not isinstance(arguments, dict):
        return {"": "the arguments must be a JSON object"}
    deep = [name for name, value in arguments.items() if too_deep(value, MAX_ARGUMENT_DEPTH - 1)]
    if deep or too_deep(arguments, MAX_ARGUMENT_DEPTH):
        return {(deep[0] if deep else ""): f"nested more than {MAX_ARGUMENT_DEPTH} levels deep"}
    edited = storable(arguments)
    if errors := unknown_arguments(schema, proposed, edited):
        return errors
    if errors := field_errors(schema, edited):
        return errors
    if problem := argument_error(schema, edited):  # belt and braces
        return {"": problem}
    return {}


def unknown_arguments(
    schema: dict[str, Any], proposed: dict[str, Any], edited: dict[str, Any]
) -> dict[str, str]:
    """Arguments an edit adds that the schema does not declare (nor the model proposed):
    a function tool would be called with a keyword it does not take."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {
        name: "not an argument of this tool"
        for name in edited
        if name not in properties and name not in proposed
    }


def shown_value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= VALUE_SHOWN else text[: VALUE_SHOWN - 1] + "…"


def changes(proposed: dict[str, Any], edited: dict[str, Any]) -> list[str]:
    """What an edit changed, one item per top-level argument: ``replicas 30 → 10``."""
    items = []
    for name in [*proposed, *(k for k in edited if k not in proposed)]:
        if name not in edited:
            items.append(f"{name} {shown_value(proposed[name])} → (removed)")
        elif name not in proposed:
            items.append(f"{name} (not set) → {shown_value(edited[name])}")
        elif storable(proposed[name]) != storable(edited[name]):
            items.append(f"{name} {shown_value(proposed[name])} → {shown_value(edited[name])}")
    return items


def changes_text(proposed: dict[str, Any], edited: dict[str, Any]) -> str:
    items = changes(proposed, edited)
    if not items:
        return "no argument changed"
    more = len(items) - CHANGES_SHOWN
    return ", ".join(items[:CHANGES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def edit_note(approval: Any) -> str | None:
    """What the model reads before an edited call's result, or None when it was not edited."""
    edited = getattr(approval, "edited_arguments", None)
    if edited is None:
        return None
    name = getattr(approval, "decided_by_name", None)  # "Bo Lee (@bo)", as decision_text
    who = approval.decided_by or approval.edited_by
    by = f"by {name} " if name else f"by @{who} " if who else "by a person "  # a retry: nobody
    return (
        f"Approved {by}after editing the arguments: "
        f"{changes_text(approval.arguments, edited)}. The call ran with "
        f"{json.dumps(edited, ensure_ascii=False, sort_keys=True, default=str)} instead of "
        "the proposed arguments; do not repeat the original call."
    )


def with_edit_note(approval: Any, result: str) -> str:
    note = edit_note(approval)
    return result if note is None else f"{note} Result: {result}"


class EditedCallFailed(Exception):
    """An edited call's tool raised; the message says what the person changed first."""


def noted_result(approval: Any, result: Any) -> Any:
    """An edited call's result (text or ``llm.ToolOutput``) after :func:`edit_note`."""
    if isinstance(result, llm.ToolOutput):
        output = result.output
        text = output if isinstance(output, str) else json.dumps(output, default=repr)
        return dataclasses.replace(result, output=with_edit_note(approval, text))
    text = result if isinstance(result, str) else json.dumps(result, default=repr)
    return with_edit_note(approval, text)


def carry_edit(draft: ApprovalDraft, row: Any) -> ApprovalDraft:
    """The row of a pause an edited call took (a retry): what was proposed and what runs."""
    edited = getattr(row, "edited_arguments", None)
    if edited is None:
        return draft
    return dataclasses.replace(draft, arguments=dict(row.arguments), edited_arguments=edited)


def proposed_here(tool_name: str, tool_call: llm.ToolCall, row: Any) -> bool:
    """Whether an edited row's proposed call is this one (an unedited row's hash says so):
    an edit answers only the call it was made for."""
    if getattr(row, "edited_arguments", None) is None:
        return True
    return tool_name == row.tool_name and canonical_json(
        storable(dict(tool_call.arguments))
    ) == canonical_json(row.arguments)


def edited_call(tool_call: llm.ToolCall, approval: Any) -> llm.ToolCall:
    """The call to run for ``approval``: the edited arguments under the same name and id."""
    edited = getattr(approval, "edited_arguments", None)
    if edited is None:
        return tool_call
    return llm.ToolCall(
        name=tool_call.name, arguments=dict(edited), tool_call_id=tool_call.tool_call_id
    )


def effective_policy(config: Config, approval: Approval, arguments: dict[str, Any]) -> Policy:
    """The policy the edited call falls under: the rules' choice once rules exist
    (``Policy.resolve``), else the tool's policy as configured."""
    policy = getattr(config, "policies", {}).get(approval.tool_name) or Policy()
    resolve: Callable[..., Policy] | None = getattr(policy, "resolve", None)
    if resolve is None:
        return policy
    return resolve(arguments, requester=approval.requester, channel=approval.channel)


def stricter_by(
    approval: Approval, policy: Policy, actor: str, actor_groups: Collection[str]
) -> str | None:
    """Why the edited call needs more than this approver's approval, or None.

    More approvals than the snapshot asked for, or approvers this actor is not one of (a
    group the actor was not looked up in counts as not: asking again is the safe side).
    """
    wanted = getattr(policy, "min_approvals", 1) or 1
    had = getattr(approval, "min_approvals", 1) or 1
    if max(wanted, had) > 1:
        # Quorum: votes given for the proposed arguments do not count for the edited ones,
        # and one person's edit is never N approvals: the edited call is voted on afresh.
        return f"the edited call needs {max(wanted, had)} approvals"
    if policy.approval != "never" and refusal_reason(
        actor=actor,
        requester=approval.requester,
        approvers=policy.approvers,
        allow_self_approval=policy.allow_self_approval,
        actor_groups=actor_groups,
    ):
        rule = getattr(policy, "rule", None)
        names = ", ".join(f"@{a}" for a in policy.approvers) or "someone else"
        return f"the edited call must be approved by {names}" + (f" ({rule})" if rule else "")
    return None


class EditSettling:
    """Mixed into :class:`bot.runner.Runner`: ``edit_and_approve``."""

    repo: Repository
    config: Config
    clock: Callable[[], datetime]

    def _lease_until(self) -> datetime:
        raise NotImplementedError

    def _new_owner(self) -> str:
        raise NotImplementedError

    def _remember_claim(self, outcome: DecisionOutcome) -> None:
        raise NotImplementedError

    async def _refuse_settled(self, approval_id: str, now: datetime) -> Any:
        raise NotImplementedError

    def _configured_tool(self, name: str) -> llm.Tool | None:
        return next((t for t in self.config.tools if t.name == name), None)

    async def edit_and_approve(
        self,
        approval_id: str,
        *,
        actor: str,
        arguments: dict[str, Any],
        actor_groups: Collection[str] = (),
        actor_name: str | None = None,
        claim_resume: bool = True,
        shown: str | None = None,
    ) -> Decision:
        """Approve the call with ``arguments`` instead of the proposed ones, exactly once.

        ``actor_name``: the approver's display name, stored with the decision as ``decide``
        stores it (the model reads who approved by name). ``shown``: the fingerprint of the
        arguments the editor's form showed (``storage.records.shows_current``); without it,
        those of the approval as read here. Either way an edit made by someone else since
        is refused (EditRefused), never overwritten.

        Raises what ``decide`` raises (not found, not allowed, decided already, expired),
        EditRefused when the approval may not be edited or the edited call is denied by its
        policy, InvalidEdit when the arguments do not fit the tool's schema. An edited call
        whose policy asks for more (other approvers, more approvals) is recorded and stays
        pending with the stricter approvers: the Decision's approval is still ``pending``.
        """
        approval = await self.repo.get_approval(approval_id)
        if approval is None:
            raise ApprovalNotFound(f"There is no approval {approval_id}.")
        if approval.kind != "approval":
            raise EditRefused(f"{approval_id} is a {approval.kind}: it cannot be edited.", approval)
        ensure_may_decide(approval, actor, actor_groups)
        if not approval.allow_edit:
            raise EditRefused(
                f"The policy of `{approval.tool_name}` does not allow editing its calls "
                "(allow_edit); approve or deny it as it is.",
                approval,
            )
        tool = self._configured_tool(approval.tool_name)
        if tool is None:
            raise EditRefused(
                f"The tool {approval.tool_name} is no longer configured; it cannot be edited.",
                approval,
            )
        if errors := edit_errors(tool.input_schema, approval.arguments, arguments):
            raise InvalidEdit(errors, approval)
        edited = storable(arguments)
        policy = effective_policy(self.config, approval, edited)
        if policy.approval == "deny":
            message = getattr(policy, "message", None) or "its policy denies it"
            raise EditRefused(f"The edited call is refused: {message}", approval)
        why = stricter_by(approval, policy, actor, actor_groups)
        hasher = PayloadHasher(tool_definition(tool))
        edit = EditRequest(
            arguments=edited,
            payload_hash=hasher(approval.tool_name, edited),
            stricter_approvers=list(policy.approvers) if why else None,
            min_approvals=max(
                getattr(policy, "min_approvals", 1) or 1, getattr(approval, "min_approvals", 1) or 1
            ),
            why_stricter=why,
            rule=getattr(policy, "rule", None),
            rule_when=getattr(policy, "rule_when", None),
            rule_error=getattr(policy, "rule_error", None),
            # The checks above read ``approval``: they hold only while it is unchanged.
            shown=fingerprint(approval.payload_hash) if shown is None else shown,
        )
        now = self.clock()
        try:
            outcome = await self.repo.edit_approval(
                approval_id,
                actor=actor,
                edit=edit,
                actor_name=actor_name,
                worker=self._new_owner(),
                lease_until=self._lease_until(),
                now=now,
                claim=claim_resume,
            )
        except EditConflict:
            raise EditRefused(EDITED_MEANWHILE, approval) from None
        if outcome is None:
            current = await self.repo.get_approval(approval_id)
            if current is not None and current.status == "pending" and not current.allow_edit:
                raise EditRefused("This approval cannot be edited.", current)
            await self._refuse_settled(approval_id, now)  # raises: expired or decided
        assert outcome is not None
        if outcome.resume_claimed:
            self._remember_claim(outcome)
        return Decision(approval=outcome.approval, resume_claimed=outcome.resume_claimed)
