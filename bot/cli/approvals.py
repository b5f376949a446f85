"""``approvals list|decide|expire``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from bot.cli.common import slack_services, worker_id
from bot.cli.output import (
    approval_json,
    iso,
    print_outcome,
    quorum_progress,
    rule_line,
    short_args,
)
from bot.cli.parser import EXIT_OK, EXIT_REFUSED
from bot.clock import utcnow
from bot.quorum import progress
from storage.records import PendingFilter

if TYPE_CHECKING:
    from bot.config import Config
    from bot.runner import Runner
    from storage.models import Approval
    from storage.repository import Repository


async def approvals_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    approvals, total = await repo.list_pending(
        # Waits on systems and times are `waits list`'s: nobody decides them.
        PendingFilter(kinds=("approval", "question")),
        now=utcnow(),
        limit=args.limit,
    )
    if args.json:
        print(json.dumps([approval_json(a) for a in approvals], indent=2))
        return EXIT_OK
    if not approvals:
        print("No approvals are pending.")
        return EXIT_OK
    for approval in approvals:
        who = ", ".join(approval.approvers) or "anyone but the requester"
        print(
            f"{approval.id}  {approval.tool_name}({short_args(approval.arguments)})  "
            f"asked by {approval.requester}  approvers: {who}  "
            f"expires {approval.expires_at:%Y-%m-%d %H:%M} UTC{quorum_progress(approval)}"
        )
        if rule := rule_line(approval):
            print(f"    {rule}")
    if total > len(approvals):
        print(f"… and {total - len(approvals)} more (use --limit)")
    return EXIT_OK


async def approvals_show(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    """One approval (any kind, any status): what was asked, the rule that applied, its trail."""
    approval = await repo.get_approval(args.approval_id)
    if approval is None:
        print(f"no approval {args.approval_id}", file=sys.stderr)
        return EXIT_REFUSED
    audit = await repo.audit_trail(approval_id=approval.id)
    if args.json:
        trail = [
            {"at": iso(e.at), "event": e.event, "actor": e.actor, "detail": e.detail} for e in audit
        ]
        print(json.dumps({**approval_json(approval), "audit": trail}, indent=2))
        return EXIT_OK
    who = ", ".join(approval.approvers) or "anyone but the requester"
    print(f"{approval.kind} {approval.id}: {approval.tool_name} {approval.status}")
    print(f"  arguments: {short_args(approval.arguments, limit=400)}")
    print(f"  asked by {approval.requester} in run {approval.run_id}; approvers: {who}")
    print(f"  expires {approval.expires_at:%Y-%m-%d %H:%M} UTC")
    if rule := rule_line(approval):
        print(f"  {rule}")
    if approval.decided_by:
        print(f"  decided by {approval.decided_by}: {approval.reason or '(no reason)'}")
    for event in audit:
        print(f"  {event.at:%Y-%m-%d %H:%M:%S} {event.event} {event.actor or ''}".rstrip())
    return EXIT_OK


async def approvals_decide(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.runner import DecisionRefused, Runner
    from handlers.decisions import after_expiry, resume_and_publish

    runner = Runner(repo, config, worker_id=worker_id())
    slack = slack_services(repo, runner, config)

    async def resume(run_id: str) -> None:
        outcome = await (resume_and_publish(slack, run_id) if slack else runner.resume(run_id))
        if outcome is not None:
            print_outcome(outcome)

    asked = await repo.get_approval(args.approval_id)
    missing = await _missing_tools(runner, asked) if asked is not None else []
    try:
        decision = await runner.decide(
            args.approval_id,
            actor=args.actor,
            approve=args.approve,
            reason=args.reason,
            # Without the call's tool this process would cancel it on resume: the bot resumes.
            claim_resume=not missing,
        )
    except DecisionRefused as refused:
        print(f"refused ({refused.code}): {refused}", file=sys.stderr)
        expiry = getattr(refused, "expiry", None)
        if expiry is not None and slack:
            await after_expiry(slack, expiry)
        elif expiry is not None and expiry.resume_claimed:
            await resume(expiry.approval.run_id)
        return EXIT_REFUSED
    verb = "Approved" if args.approve else "Denied"
    print(f"{verb} {decision.approval.id} ({decision.approval.tool_name}) as {args.actor}.")
    if decision.approval.status == "pending":
        # An approval that needs several approvers: this was a vote.
        print(f"{progress(decision.approval)}; it waits for more.")
    if slack:
        await slack.publisher.refresh_card(decision.approval.id)
    if decision.resume_claimed:
        await resume(decision.approval.run_id)
    elif missing:
        print(
            f"This configuration has no {', '.join(missing)} tool, so the run is left to the "
            "bot: it carries the run on once no approval of it is pending (its sweeper "
            "resumes it; or run `approval-bot runs recover` with the bot's config)."
        )
    else:
        print("The run waits for its other approvals.")
    return EXIT_OK


async def _missing_tools(runner: Runner, approval: Approval) -> list[str]:
    """The tools of the approval's pause that this process does not have: resuming the run
    here would cancel their calls as "no longer configured", so the bot resumes it."""
    configured = {tool.name for tool in runner.tools}
    asked = await runner.repo.approvals_for_turn(approval.run_id, approval.turn)
    return sorted(({a.tool_name for a in asked} | {approval.tool_name}) - configured)


async def approvals_expire(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.runner import Runner
    from handlers.decisions import after_expiry

    runner = Runner(repo, config, worker_id=worker_id())
    slack = slack_services(repo, runner, config)
    outcomes = await runner.expire_due()
    for expiry in outcomes:
        print(f"expired {expiry.approval.id} ({expiry.approval.tool_name})")
        if slack:
            await after_expiry(slack, expiry)
        elif expiry.resume_claimed:
            print_outcome(await runner.resume(expiry.approval.run_id))
    if not outcomes:
        print("No approvals were overdue.")
    return EXIT_OK
