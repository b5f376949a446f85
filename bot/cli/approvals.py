"""``approvals list|decide|expire``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.cli.common import slack_services, worker_id
from bot.cli.exits import EXIT_OK, EXIT_REFUSED, complain
from bot.cli.output import (
    approval_json,
    iso,
    iso_detail,
    print_outcome,
    quorum_progress,
    rule_line,
    short_args,
)
from bot.cli.records import approvers_of, call_lines, edited_line, names_for, noun
from bot.clock import utcnow
from bot.policy import progress
from bot.policy.what_ran import person, was_edited, what_ran
from storage.records import PendingFilter

if TYPE_CHECKING:
    from bot.config import Config
    from bot.engine import Runner
    from storage.models import Approval
    from storage.repository import Repository


async def approvals_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    approvals, total = await repo.list_pending(
        # Waits on systems and times are `waits list`'s: nobody decides them.
        PendingFilter(kinds=("approval", "question", "recovery")),
        now=utcnow(),
        limit=args.limit,
    )
    names = await names_for(repo, approvals)
    if args.json:
        print(json.dumps([approval_json(a, names) for a in approvals], indent=2))
        return EXIT_OK
    if not approvals:
        print("Nothing waits for a decision or an answer.")
        return EXIT_OK
    for approval in approvals:
        kind = "" if approval.kind == "approval" else f"{noun(approval)}  "
        print(
            f"{approval.id}  {kind}{approval.tool_name}({short_args(what_ran(approval))})  "
            f"asked by {person(approval.requester, names)}  "
            f"{'answerers' if approval.kind == 'question' else 'approvers'}: "
            f"{approvers_of(approval, names)}  "
            f"expires {approval.expires_at:%Y-%m-%d %H:%M} UTC{quorum_progress(approval, names)}"
        )
        if edited := edited_line(approval, names):
            print(f"    {edited}")
        if rule := rule_line(approval):
            print(f"    {rule}")
        if approval.kind == "recovery":
            print(f"    failed (attempt {approval.attempt or 1}): {approval.reason or ''}"[:300])
            print("    decide with --retry, --skip or --stop")
    if total > len(approvals):
        print(f"… and {total - len(approvals)} more (use --limit)")
    return EXIT_OK


async def approvals_show(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    """One approval (any kind, any status): what was asked, the rule that applied, its trail."""
    approval = await repo.get_approval(args.approval_id)
    if approval is None:
        complain(args.approval_id, "there is no approval, question or wait with this id")
        return EXIT_REFUSED
    audit = await repo.audit_trail(approval_id=approval.id)
    names = await names_for(repo, [approval], *(e.actor for e in audit))
    if args.json:
        trail = [
            {
                "at": iso(e.at),
                "event": e.event,
                "actor": e.actor,
                "actor_name": names.get(e.actor or ""),
                "detail": iso_detail(e.detail),
            }
            for e in audit
        ]
        print(json.dumps({**approval_json(approval, names), "audit": trail}, indent=2))
        return EXIT_OK
    print(f"{noun(approval)} {approval.id}: {approval.tool_name} {approval.status}")
    if not was_edited(approval):
        print(f"  arguments: {short_args(approval.arguments, limit=400)}")
    for line in call_lines(approval, names):
        print(f"  {line}")
    who = "answerers" if approval.kind == "question" else "approvers"
    print(
        f"  asked by {person(approval.requester, names)} in run {approval.run_id}; "
        f"{who}: {approvers_of(approval, names)}"
    )
    if approval.status == "pending":
        expires = f"{approval.expires_at:%Y-%m-%d %H:%M} UTC"
        print(f"  expires {expires}{quorum_progress(approval, names)}")
    if rule := rule_line(approval):
        print(f"  {rule}")
    for event in audit:
        actor = person(event.actor, names) if event.actor else ""
        print(f"  {event.at:%Y-%m-%d %H:%M:%S} {event.event} {actor}".rstrip())
    return EXIT_OK


async def approvals_decide(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.engine import Runner
    from bot.policy import DecisionRefused
    from handlers.flows import after_expiry, after_the_decision, resume_and_publish

    runner = Runner(repo, config, worker_id=worker_id())
    slack = slack_services(repo, runner, config)

    async def resume(run_id: str) -> None:
        if slack:
            outcome = await resume_and_publish(slack, run_id)
            if outcome is not None:
                print_outcome(outcome)
            return
        for outcome in await runner.resume_following(run_id):  # and its sub-agents' parents
            print_outcome(outcome)

    asked = await repo.get_approval(args.approval_id)
    missing = await _missing_tools(runner, asked) if asked is not None else []
    choice = recovery_choice(args)
    try:
        if choice is not None:
            return await _recover(runner, slack, args, choice, missing, resume)
        decision = await runner.decide(
            args.approval_id,
            actor=args.actor,
            approve=args.approve,
            reason=args.reason,
            # Without the call's tool this process would cancel it on resume: the bot resumes.
            claim_resume=not missing,
        )
    except DecisionRefused as refused:
        complain(args.approval_id, str(refused))
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
        edit = slack.publisher.cards.refresh_card(decision.approval.id)
        await after_the_decision(f"approval {decision.approval.id}", ("the card's edit", edit))
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


def recovery_choice(args: argparse.Namespace) -> str | None:
    """``--retry``, ``--skip``, ``--stop`` or ``--ran`` (a recovery, on_error = "ask")."""
    flags = {"retry": "retry", "skip": "skip", "stop": "stop", "ran": "resolve"}
    return next((choice for flag, choice in flags.items() if getattr(args, flag, False)), None)


async def _recover(
    runner: Runner,
    slack: Any,
    args: argparse.Namespace,
    choice: str,
    missing: list[str],
    resume: Callable[[str], Awaitable[None]],
) -> int:
    """Settle a recovery from the command line, as its card's buttons do."""
    from handlers.flows import after_the_decision, announce_cancelled

    decision = await runner.recover(
        args.approval_id,
        actor=args.actor,
        choice=choice,
        note=args.reason if choice == "resolve" else None,
        claim_resume=not missing,
    )
    row = decision.approval
    print(f"{RECOVERY_DONE[choice]} {row.id} ({row.tool_name}) as {args.actor}.")
    if slack:
        edit = slack.publisher.cards.refresh_card(row.id)
        await after_the_decision(f"approval {row.id}", ("the card's edit", edit))
        if choice == "stop":
            news = announce_cancelled(slack, row.run_id)
            await after_the_decision(f"approval {row.id}", ("its thread's news", news))
    if decision.resume_claimed:
        await resume(row.run_id)
    elif choice != "stop":
        print("The run waits for its other pauses, or for the bot to resume it.")
    return EXIT_OK


RECOVERY_DONE = {
    "retry": "Retry chosen for",
    "skip": "Skipped",
    "stop": "Stopped the run of",
    "resolve": "Marked as run:",
}


async def _missing_tools(runner: Runner, approval: Approval) -> list[str]:
    """The tools of the approval's pause that this process does not have: resuming the run
    here would cancel their calls as "no longer configured", so the bot resumes it."""
    run = await runner.repo.get_run(approval.run_id)
    tools = runner.tools if run is None else runner.drives.tools_for(run)  # a sub-agent's own
    configured = {tool.name for tool in tools}
    asked = await runner.repo.approvals_for_turn(approval.run_id, approval.turn)
    return sorted(({a.tool_name for a in asked} | {approval.tool_name}) - configured)


async def approvals_expire(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.engine import Runner
    from handlers.flows import after_expiry

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
