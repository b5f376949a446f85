"""What the model reads about a call it did not get to run as asked: a decision, an expiry,
an answer, a callback's body, a refusal by a rule, an unknown outcome, or a person's edit.

Every sentence is built here from the call's row, so a resume on any replica, a take-over
and a follow-up that closes a dead run's calls (:mod:`bot.engine.transcript`) all say the same.
People are named as the decision stored them ("Bo Lee (@bo)"), never as a bare user id when a
name is known.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import llm

from bot.policy import Policy, changes_text


def decision_text(approval: Any) -> str:
    """The tool result for a call whose approval (or other pause) is settled (never runs it)."""
    kind = getattr(approval, "kind", "approval")
    if kind != "approval" and approval.status not in ("executed", "unknown"):
        return pause_text(approval)
    match approval.status:
        case "executed":
            # Already ran (the run was taken over after the result was recorded): same answer.
            return with_edit_note(approval, approval.result or "")
        case "denied":
            reason = f": {approval.reason}" if approval.reason else " (no reason given)"
            return f"Denied by {decider(approval)}{reason}. The call was not run."
        case "expired":
            when = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
            return f"Expired at {when} with no decision. The call was not run."
        case "cancelled":
            return f"Cancelled: {approval.result or approval.reason}. The call was not run."
    return unknown_text(approval.tool_name)


def decider(approval: Any) -> str:
    """Who decided, as the model reads it: the display name stored with the decision
    ("Bo Lee (@bo)"), else the user id as @U…."""
    return getattr(approval, "decided_by_name", None) or f"@{approval.decided_by}"


def unknown_text(tool_name: str) -> str:
    return (
        f"Outcome unknown: the approved call to {tool_name} started but its result was never "
        "recorded (the worker stopped). It was not run again; check its effect by hand."
    )


def pause_text(row: Any) -> str:
    """The result of a settled question, callback or retry."""
    when = row.expires_at.strftime("%Y-%m-%d %H:%M UTC")
    match row.kind, row.status:
        case "question", "answered":
            return row.result or ""
        case "question", "expired":
            return f"No answer came: the question expired at {when} unanswered."
        case "callback", "completed":
            return row.result or ""
        case "callback", "expired":
            return (
                f"No callback came for {row.reason or row.tool_name} before {when}: its "
                "outcome is unknown. The call was not run again."
            )
        case "delegation", "completed":
            return row.result or ""  # the child's answer, or "failed: …", "stopped by @x"
        case "recovery", _:
            return recovery_text(row)
        case _, "cancelled":
            return f"Cancelled: {row.result or row.reason}. The call was not run again."
    return f"Outcome unknown: this {row.kind} is {row.status}."


def recovery_text(row: Any) -> str:
    """What the model reads after a person's recovery choice (on_error = "ask"), or after
    nobody chose before ``recovery_ttl``: the error, as without asking."""
    error = row.reason or "the tool failed"
    note = (row.result or "").strip()
    match row.status:
        case "skipped":
            return (
                f"Skipped by {decider(row)} after the error: {error}. The call was not run again."
            )
        case "resolved":
            said = f" Their note: {note}" if note else ""
            return (
                f"{decider(row)} says the call to {row.tool_name} ran and succeeded (its "
                f"result was never recorded); it was not run again.{said}"
            )
        case "cancelled":
            return f"Stopped by {decider(row)} after the error: {error}. The run was cancelled."
        case "execution_failed":
            return row.result or f"Error: {error}"
    return f"Error: {error}"


def refusal_text(tool_name: str, policy: Policy) -> str:
    """What the model reads for a call a policy refuses outright."""
    by = f"rule {policy.rule}" if policy.rule else f"the policy of {tool_name}"
    message = (policy.message or "no reason given").strip().rstrip(".")
    if policy.rule_error:
        message = f"the rule could not be evaluated ({policy.rule_error})"
    return (
        f"Refused by {by}: {message}. The call to {tool_name} was not run and no approval "
        "was asked for; do not try to get around this."
    )


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


def noted_result(approval: Any, result: Any) -> Any:
    """An edited call's result (text or ``llm.ToolOutput``) after :func:`edit_note`."""
    if isinstance(result, llm.ToolOutput):
        output = result.output
        text = output if isinstance(output, str) else json.dumps(output, default=repr)
        return dataclasses.replace(result, output=with_edit_note(approval, text))
    text = result if isinstance(result, str) else json.dumps(result, default=repr)
    return with_edit_note(approval, text)
