"""What ran, and who allowed it: the words every view of a decided call shares.

A decided call is read in many places (its card, the thread, ``/approvals history``, the App
Home, ``approval-bot approvals show|list``, ``runs show``, the audit export). Each must say
what ran, not only what was proposed ("replicas 40 → 4, edited by @bo"), and who allowed it:
a call a standing grant covered "ran under @bo's standing grant (until 10:00 PM)", since
nobody clicked for it. The surfaces differ only in how they name a person (a Slack mention, a
stored display name) and a time (a Slack date token, ISO 8601), so they pass those in as
text and the sentences stay the same everywhere. Pure functions of the row; no state.
"""

from __future__ import annotations

import re
from typing import Any

from bot.policy.edits import changes_text

_RULE_LABEL = re.compile(r"^policies\.(?P<tool>.+)\.rules\[(?P<index>\d+)\]$")


def was_edited(approval: Any) -> bool:
    return getattr(approval, "edited_arguments", None) is not None


def under_grant(approval: Any) -> bool:
    """Whether a standing grant, not a click, allowed this call."""
    return getattr(approval, "grant_id", None) is not None


def what_ran(approval: Any) -> dict[str, Any]:
    """The arguments the call runs (or ran) with: an approver's edit, else the model's."""
    edited = getattr(approval, "edited_arguments", None)
    ran: dict[str, Any] = edited if edited is not None else approval.arguments
    return ran


def edit_text(approval: Any, editor: str) -> str | None:
    """``replicas 40 → 4, edited by @bo``; None for a call nobody edited."""
    if not was_edited(approval):
        return None
    return f"{changes_text(approval.arguments, approval.edited_arguments)}, edited by {editor}"


def grant_text(grantor: str, until: str) -> str:
    """``ran under @bo's standing grant (until 10:00 PM)``."""
    return f"ran under {grantor}'s standing grant (until {until})"


def rule_name(label: str | None) -> str | None:
    """``rule 1 of scale_service`` for ``policies.scale_service.rules[0]`` (as people count)."""
    if not label:
        return None
    match = _RULE_LABEL.match(label)
    if match is None:
        return label
    return f"rule {int(match['index']) + 1} of {match['tool']}"


def no_approval_text(label: str, when: str | None) -> str:
    """Why a rule let a call run unasked: ``no approval needed: rule 1 of scale_service
    (args.env == "staging")``."""
    condition = f" ({when})" if when else ""
    return f"no approval needed: {rule_name(label)}{condition}"


def person(user: str | None, names: dict[str, str]) -> str:
    """A user as the command line and the exports name them: "Ana Diaz (@ana)", else the id."""
    if not user:
        return "nobody"
    return names.get(user) or user
