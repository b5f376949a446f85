"""How the command line prints runs and approvals: lines for people, JSON for scripts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.clock import utcnow

if TYPE_CHECKING:
    from bot.engine import RunOutcome
    from storage.models import Approval, Run


def print_outcome(outcome: RunOutcome) -> None:
    print(f"run {outcome.run_id}: {outcome.status}")
    if outcome.status == "paused":
        for approval in outcome.new_approvals:
            print(
                f"  waiting for approval {approval.id}: {approval.tool_name}"
                f"({short_args(approval.arguments)})"
            )
    if outcome.answer:
        print(outcome.answer)
    if outcome.error:
        print(outcome.error)
    if outcome.status == "busy" and outcome.run is not None:
        print(f"  {busy_advice(outcome.run)}")


def busy_advice(run: Run) -> str:
    """What to do about the run that holds a conversation, by what it is doing."""
    if run.status == "paused":
        return (
            f"the conversation's run {run.id} waits for approvals: decide them (approvals "
            f"list) or stop it (runs cancel {run.id} --as USER)"
        )
    lease = run.lease_expires_at
    if lease is not None and lease > utcnow():
        return (
            f"the conversation's run {run.id} is {run.status} on worker {run.lease_owner} "
            f"(its lease runs until {lease:%Y-%m-%d %H:%M:%S} UTC); if that worker has "
            "stopped, `approval-bot runs recover` takes the run over once the lease has run out"
        )
    return (
        f"the conversation's run {run.id} is {run.status} but its worker stopped renewing "
        "its lease: `approval-bot runs recover` takes it over and carries it on"
    )


def approval_json(approval: Approval, names: dict[str, str] | None = None) -> dict[str, Any]:
    """An approval (or question, or wait) for scripts; ``names``: people's names, by id."""
    from bot.policy.what_ran import what_ran

    names = names or {}
    return {
        "id": approval.id,
        "run_id": approval.run_id,
        "tool_call_id": approval.tool_call_id,
        "tool": approval.tool_name,
        "arguments": approval.arguments,
        "status": approval.status,
        "requester": approval.requester,
        "approvers": approval.approvers,
        "allow_self_approval": approval.allow_self_approval,
        "on_expiry": approval.on_expiry,
        "channel": approval.channel,
        "thread_ts": approval.thread_ts,
        "created_at": iso(approval.created_at),
        "expires_at": iso(approval.expires_at),
        "decided_by": approval.decided_by,
        "decided_by_name": approval.decided_by_name,
        "decided_at": iso(approval.decided_at),
        "reason": approval.reason,
        "result": approval.result,
        "kind": approval.kind,
        "due_at": iso(approval.due_at),
        "rule": approval.rule,
        "rule_when": approval.rule_when,
        "rule_error": approval.rule_error,
        "min_approvals": approval.min_approvals,
        "approved_by": list(approval.approved_by or []),
        # Edit, then approve: what an approver changed the arguments to (they ran instead).
        "edited_arguments": approval.edited_arguments,
        "edited_by": approval.edited_by,
        "edited_at": iso(approval.edited_at),
        # What ran (the edit's arguments, once edited), who asked and edited, by name.
        "ran_with": what_ran(approval),
        "requester_name": names.get(approval.requester),
        "edited_by_name": names.get(approval.edited_by or ""),
        # A call a standing grant covered: which grant, until when (decided_by: its grantor).
        "grant_id": getattr(approval, "grant_id", None),
        "grant_until": iso(getattr(approval, "grant_until", None)),
    }


def rule_line(approval: Approval) -> str | None:
    """The rule on arguments that chose the approval's policy, for people; None: none did."""
    if not approval.rule:
        return None
    if approval.rule_error:
        return (
            f"rule {approval.rule} ({approval.rule_when}) could not be evaluated "
            f"({approval.rule_error}): failed closed, the tool's approvers decide"
        )
    return f"rule {approval.rule} applied: {approval.rule_when}"


def quorum_progress(approval: Approval, names: dict[str, str] | None = None) -> str:
    """``  1 of 2 approvals (Bo Lee (@bo))`` for an approval that needs several, else ""."""
    from bot.policy import approvals_so_far, needs_quorum, progress

    if not needs_quorum(approval):
        return ""
    voters = ", ".join((names or {}).get(v) or v for v in approvals_so_far(approval))
    return f"  {progress(approval)}" + (f" ({voters})" if voters else "")


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "conversation_key": run.conversation_key,
        "status": run.status,
        "requester": run.requester,
        "channel": run.channel,
        "thread_ts": run.thread_ts,
        "model": run.model_id,
        "answer": run.answer,
        "error": run.error,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "agent": run.agent,
        "parent_run_id": run.parent_run_id,
        "parent_approval_id": run.parent_approval_id,
        "history": run.history,
    }


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with its offset (``2026-12-01T10:00:00+00:00``) from the naive UTC the
    database stores (bot.clock): every time in JSON output and exports is written so."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def iso_detail(detail: dict[str, Any] | None) -> dict[str, Any]:
    """An audit event's detail with its times (``expires_at``, ``until`` …, stored as naive
    UTC ISO text) given their offset, as every other time in the output."""
    shown = dict(detail or {})
    for key, value in shown.items():
        if isinstance(value, str) and (key.endswith("_at") or key in ("until", "due")):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                continue
            shown[key] = iso(parsed)
    return shown


def short_args(arguments: dict[str, Any], limit: int = 80) -> str:
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
