"""Edit, then approve: an approver corrects a call's arguments and approves the corrected call.

Holds no state of its own (the edit is stored on the approval: see ``storage.stores.edits``). This
module checks an edit (the approval is editable and pending, the approver may decide it,
the arguments fit the tool's schema, the edited call's policy asks for nothing more), and
says what changed, in the words the model reads with the call's result, so that it does not
repeat the original call. The tool's name is never part of an edit: an edit cannot change
which tool runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from bot.policy.arguments import MAX_ARGUMENT_DEPTH, argument_error, schema_validator, too_deep
from bot.policy.decisions import DecisionRefused
from bot.policy.policy import Policy, refusal_reason
from storage.values import storable

if TYPE_CHECKING:
    from storage.models import Approval

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
    validator = schema_validator(json.dumps(schema, sort_keys=True))
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
    becomes "NaN"). The modal's check and :meth:`bot.engine.edits.Edits.edit_and_approve`'s, so an
    edit the modal accepts is not refused after it closed."""

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


def edited_call_policy(
    policies: Mapping[str, Policy], approval: Approval, arguments: dict[str, Any]
) -> Policy:
    """The policy the edited call falls under: the rules' choice once rules exist
    (``Policy.resolve``), else the tool's policy as configured."""
    policy = policies.get(approval.tool_name) or Policy()
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
