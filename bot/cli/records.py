"""What the command line says a decided call did: what ran, who allowed it, what came back.

``approvals show``, ``approvals list`` and ``runs show`` print a call as its records stand:
the arguments that ran (an approver's edit, with what it changed and who edited), who
allowed it (a click, or a standing grant, which nobody clicked for), and its result, outcome
or answer. People are named as Slack last named them (the ``people`` table the bot keeps,
and the name stored with each decision), else by id: the command line never asks Slack.
The sentences are :mod:`bot.policy.what_ran`'s, as on every Slack surface.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.cli.output import short_args
from bot.policy.what_ran import edit_text, grant_text, person, under_grant, was_edited, what_ran

if TYPE_CHECKING:
    from storage.models import Approval

RESULT_SHOWN = 300
NOUNS = {"approval": "approval", "question": "question", "callback": "wait", "retry": "retry"}


async def names_for(repo: Any, approvals: Iterable[Approval], *users: str | None) -> dict[str, str]:
    """The names of everyone ``approvals`` and ``users`` mention: the name stored with a
    decision first (as Slack said it then), else the bot's ``people`` table."""
    approvals = list(approvals)
    wanted: set[str] = {u for u in users if u}
    for a in approvals:
        wanted |= {u for u in (a.requester, a.decided_by, a.edited_by) if u}
        wanted |= set(a.approved_by or []) | {x for x in a.approvers or [] if x[:1] in "UW"}
    names: dict[str, str] = dict(await repo.names_of(wanted)) if wanted else {}
    for a in approvals:
        if a.decided_by and a.decided_by_name:
            names.setdefault(a.decided_by, a.decided_by_name)
    return names


def when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M} UTC" if value is not None else "an unknown time"


def noun(approval: Approval) -> str:
    """What a person calls the pause: questions and waits are not approvals."""
    return NOUNS.get(approval.kind, approval.kind)


def approvers_of(approval: Approval, names: dict[str, str]) -> str:
    if not approval.approvers:
        return "anyone but the requester" if not approval.allow_self_approval else "anyone"
    return ", ".join(person(a, names) for a in approval.approvers)


def edited_line(approval: Approval, names: dict[str, str]) -> str | None:
    """``edited: replicas 40 → 4, edited by Bo Lee (@bo) at …``; None: not edited."""
    text = edit_text(approval, person(approval.edited_by, names))
    if text is None:
        return None
    return f"edited: {text} at {when(approval.edited_at)}"


def allowed_line(approval: Approval, names: dict[str, str]) -> str | None:
    """Who decided (or answered, or completed) it and when; a standing grant says so."""
    who = person(approval.decided_by, names)
    if approval.kind == "approval" and under_grant(approval):
        return f"{grant_text(who, when(approval.grant_until))}, at {when(approval.decided_at)}"
    if not approval.decided_by:
        return None
    verb = {
        "question": "answered",
        "callback": "completed",
        "retry": "ran",
    }.get(approval.kind, "denied" if approval.status == "denied" else "approved")
    if approval.kind == "approval" and approval.approved_by and approval.status != "denied":
        who = ", ".join(person(v, names) for v in approval.approved_by)
    reason = ""
    if approval.kind == "approval" and approval.status == "denied":
        reason = f": {approval.reason or '(no reason)'}"
    return f"{verb} by {who} at {when(approval.decided_at)}{reason}"


def outcome_line(approval: Approval) -> str | None:
    """The call's result, outcome or answer, cut short."""
    result = (approval.result or "").strip()
    shown = result if len(result) <= RESULT_SHOWN else result[: RESULT_SHOWN - 1] + "…"
    if approval.kind == "question":
        return f"answer: {shown}" if approval.status == "answered" else None
    match approval.status:
        case "executed":
            return f"ran; result: {shown}" if shown else "ran"
        case "unknown":
            return "outcome unknown (it was started and never re-run)"
        case "executing":
            return "running"
        case "cancelled":
            return f"cancelled: {shown or approval.reason or 'cancelled'}"
        case "completed":
            return f"result: {shown}" if shown else None
    return None


def call_lines(approval: Approval, names: dict[str, str]) -> list[str]:
    """The lines under a call's heading: what ran, who allowed it, what came back."""
    lines = []
    if was_edited(approval):
        lines.append(f"ran with: {short_args(what_ran(approval), limit=400)}")
        lines.append(f"proposed: {short_args(approval.arguments, limit=400)}")
        if edited := edited_line(approval, names):
            lines.append(edited)
    for line in (allowed_line(approval, names), outcome_line(approval)):
        if line:
            lines.append(line)
    return lines
