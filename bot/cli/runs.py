"""``runs show|cancel|recover``."""

from __future__ import annotations

import argparse
import json
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
    run_json,
    short_args,
)
from bot.cli.records import call_lines, names_for, noun
from bot.cli.run_holds import hold_json, hold_line
from bot.policy.what_ran import person, was_edited

# Sub-agents' runs shown under their parent, at most this deep.
MAX_TREE_DEPTH = 16
# Audit events of operators' holds whose reason ``runs show`` prints.
HOLD_EVENTS = ("run_pause_requested", "run_stop_requested")

if TYPE_CHECKING:
    from bot.config import Config
    from storage.models import Run
    from storage.repository import Repository


async def run_tree(repo: Repository, run_id: str, depth: int = 0) -> list[dict[str, Any]]:
    """The runs ``run_id`` delegated to, each with its own (issue 20 section 1)."""
    if depth > MAX_TREE_DEPTH:
        return []
    return [
        {
            "id": child.id,
            "agent": child.agent,
            "status": child.status,
            "parent_approval_id": child.parent_approval_id,
            "answer": child.answer,
            "error": child.error,
            "children": await run_tree(repo, child.id, depth + 1),
        }
        for child in await repo.children_of(run_id)
    ]


def tree_lines(tree: list[dict[str, Any]], indent: str) -> list[str]:
    """``└ run_… researcher: completed``, children under their parent."""
    lines = []
    for child in tree:
        lines.append(f"{indent}└ {child['id']} {child['agent']}: {child['status']}")
        lines += tree_lines(child["children"], indent + "  ")
    return lines


async def runs_show(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    run = await repo.get_run(args.run_id)
    if run is None:
        complain(args.run_id, "there is no such run")
        return EXIT_REFUSED
    approvals = await repo.approvals_for_run(run.id)
    audit = await repo.audit_trail(run_id=run.id)
    names = await names_for(repo, approvals, run.requester, *(e.actor for e in audit))
    hold = await repo.hold_of(run.id)
    tree = await run_tree(repo, run.id)
    if args.json:
        print(
            json.dumps(
                {
                    **run_json(run),
                    "children": tree,
                    "requester_name": names.get(run.requester),
                    "approvals": [approval_json(a, names) for a in approvals],
                    "hold": hold_json(hold),
                    "audit": [
                        {
                            "at": iso(e.at),
                            "event": e.event,
                            "actor": e.actor,
                            "actor_name": names.get(e.actor or ""),
                            "approval_id": e.approval_id,
                            "detail": iso_detail(e.detail),
                        }
                        for e in audit
                    ],
                },
                indent=2,
            )
        )
        return EXIT_OK
    print(
        f"run {run.id}: {run.status} (asked by {person(run.requester, names)}, "
        f"model {run.model_id})"
    )
    print(f"  conversation: {run.conversation_key}")
    if run.agent is not None:
        print(f"  agent: {run.agent} (a sub-agent of run {run.parent_run_id})")
    if tree:
        print("  sub-agents:")
        for line in tree_lines(tree, "    "):
            print(line)
    if hold is not None and run.status not in ("completed", "failed", "cancelled"):
        print(f"  {hold_line(hold)}" + ("" if run.status == "paused" else " (not yet in effect)"))
    if run.answer:
        print(f"  answer: {run.answer}")
    if run.error:
        print(f"  error: {run.error}")
    for approval in approvals:
        line = f"  {noun(approval)} {approval.id}: {approval.tool_name} {approval.status}"
        if approval.kind != "approval" and approval.status == "pending":
            from bot.policy import describe_wait

            line += f": {describe_wait(approval)}"  # what the run waits for, until when
        print(line + quorum_progress(approval, names))
        if approval.arguments and not was_edited(approval):
            print(f"    arguments: {short_args(approval.arguments)}")
        for detail in call_lines(approval, names):
            print(f"    {detail}")
        if rule := rule_line(approval):
            print(f"    {rule}")
    for event in audit:
        actor = person(event.actor, names) if event.actor else ""
        line = f"  {event.at:%Y-%m-%d %H:%M:%S} {event.event} {actor}".rstrip()
        if event.event in HOLD_EVENTS and (event.detail or {}).get("reason"):
            line += f": {event.detail['reason']}"  # why an operator paused or stopped it
        print(line)
    return EXIT_OK


async def runs_cancel(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.engine import Runner

    runner = Runner(repo, config, worker_id=worker_id())
    run = await repo.get_run(args.run_id)
    if run is not None and run.status in ("paused", "step") and not args.force:
        refusal = await cancel_refusal(repo, run, args.actor, admins=config.admins)
        if refusal:
            complain(args.run_id, refusal)
            return EXIT_REFUSED
    forced = " (forced by an operator)" if args.force else ""
    reason = f"{args.reason} (by {args.actor}{forced})"
    if not await repo.cancel_run(args.run_id, reason=reason, actor=args.actor, now=runner.clock()):
        run = await repo.get_run(args.run_id)
        state = f"it is {run.status}" if run else "there is no such run"
        complain(args.run_id, f"only a run waiting for approvals can be cancelled; {state}")
        return EXIT_REFUSED
    print(f"run {args.run_id}: cancelled")
    # Its sub-agents' runs are stopped with it (issue 20 section 1).
    children = await repo.hold_children(
        args.run_id, action="stop", actor=args.actor, reason=args.reason, now=runner.clock()
    )
    for child_id in children:
        print(f"run {child_id}: stopped (a sub-agent of {args.run_id})")
    slack = slack_services(repo, runner, config)
    if slack:
        from handlers.flows import announce_cancelled
        from handlers.flows.runs import announce_cancelled_children

        await announce_cancelled(slack, args.run_id)
        await announce_cancelled_children(slack, children)
    return EXIT_OK


async def cancel_refusal(
    repo: Repository, run: Run, actor: str, *, admins: list[str] | tuple[str, ...] = ()
) -> str | None:
    """Why ``actor`` may not cancel ``run``, or None: the rule of deciding, so the requester
    or anyone who may decide one of its pending approvals (user groups are Slack's to
    resolve; a member of an approving group uses ``--force``), and ``admins`` by id."""
    from bot.policy import refusal_reason

    if actor == run.requester or actor in admins:
        return None
    for approval in await repo.approvals_for_run(run.id):
        if approval.status == "pending" and not refusal_reason(
            actor=actor,
            requester=approval.requester,
            approvers=approval.approvers,
            allow_self_approval=approval.allow_self_approval,
        ):
            return None
    return (
        f"only the run's requester ({run.requester}) or an approver of its pending calls "
        "may cancel it; an operator may add --force"
    )


async def runs_recover(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    """One sweep, as every replica's sweeper makes: for when no bot is running."""
    from bot.engine import Runner
    from handlers.flows import after_expiry, refresh_settled_cards, resume_and_publish

    runner = Runner(repo, config, worker_id=worker_id())
    slack = slack_services(repo, runner, config)
    expiries = await runner.expire_due()
    for expiry in expiries:
        approval = expiry.approval
        then = "its run waits for its other approvals"
        if expiry.resume_claimed:
            then = f"run {approval.run_id} carries on"
        elif expiry.run_cancelled:
            then = f"run {approval.run_id} is cancelled (on_expiry = cancel)"
        print(f"expired {approval.id} ({approval.tool_name}): {then}")
        if slack:
            await after_expiry(slack, expiry)
        elif expiry.resume_claimed:
            print_outcome(await runner.resume(approval.run_id))
    taken = await runner.take_over_stale_runs()
    for run in taken:
        print(f"took over run {run.id}: its worker stopped renewing its lease")
        outcome = await runner.carry_on(run)
        print_outcome(outcome)
        if slack:
            await slack.publisher.outcome(outcome)
            await refresh_settled_cards(slack, run.id)
    stranded = await runner.claim_stranded_runs()
    for run_id in stranded:
        print(f"resumed run {run_id}: it was paused with nothing left to decide")
        resumed = await (resume_and_publish(slack, run_id) if slack else runner.resume(run_id))
        if resumed is not None:
            print_outcome(resumed)
    # Sub-agents whose parent ended without them (an expiry's cancel, an uninstall).
    orphans = await runner.stop_orphans()
    for run_id in orphans:
        orphan = await repo.get_run(run_id)
        parent = orphan.parent_run_id if orphan else None
        print(f"stopped run {run_id} (a sub-agent of {parent}, which ended)")
        if slack:
            from handlers.flows import announce_cancelled

            await announce_cancelled(slack, run_id)
    cards = await slack.publisher.cards.post_missing_cards() if slack else 0
    if cards:
        print(f"posted {cards} approval card(s) that no worker had posted")
    answers = await slack.publisher.answers.post_due() if slack else 0
    if answers:
        print(f"posted {answers} run answer(s) that no worker had posted")
    if not (expiries or taken or stranded or orphans or cards or answers):
        print("Nothing to recover: no approval is overdue and every run's worker is alive.")
    return EXIT_OK
