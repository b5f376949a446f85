"""``runs pause|resume|list``: operators pause and resume runs from the terminal.

Owns no state: a pause is a ``run_holds`` row (:mod:`storage.stores.holds`), asked for through
``Runner.pause_run`` with the same checks as Slack's Pause button (the requester, an approver
of one of the run's tools, or an ``admins`` id; groups are Slack's to resolve). A Resume that
claims the run drives it here, as ``approvals decide`` does, and tells its thread when Slack
is configured.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from bot.cli.common import slack_services, worker_id
from bot.cli.exits import EXIT_OK, EXIT_REFUSED
from bot.cli.output import iso, print_outcome

if TYPE_CHECKING:
    from bot.config import Config
    from storage.models import RunHold
    from storage.repository import Repository

RUN_LIST_STATUSES = (
    "running",
    "resuming",
    "paused",
    "held",
    "step",
    "completed",
    "failed",
    "cancelled",
)


def add_hold_commands(run_commands: Any, user_id: Any, list_limit: Any) -> None:
    pause = run_commands.add_parser(
        "pause", help="pause a run at its next safe point (before a tool or model call)"
    )
    pause.add_argument("run_id", metavar="RUN")
    pause.add_argument("--reason", default=None, metavar="TEXT", help="why (shown and audited)")
    pause.add_argument("--as", dest="actor", type=user_id, required=True, metavar="USER")
    resume = run_commands.add_parser("resume", help="resume a run an operator paused")
    resume.add_argument("run_id", metavar="RUN")
    resume.add_argument("--as", dest="actor", type=user_id, required=True, metavar="USER")
    listing = run_commands.add_parser("list", help="runs, newest change first")
    listing.add_argument(
        "--status",
        choices=RUN_LIST_STATUSES,
        default=None,
        help="only runs in this status (held: paused by an operator)",
    )
    listing.add_argument("--json", action="store_true", help="print them as a JSON list")
    listing.add_argument("--limit", type=list_limit, default=100, help="at most this many (100)")


def hold_line(hold: RunHold | Any) -> str:
    """Who paused a run, when and why, in one line."""
    line = f"paused by {hold.requested_by} since {hold.requested_at:%Y-%m-%d %H:%M:%S} UTC"
    if hold.action == "stop":
        line = f"stop asked for by {hold.requested_by} at {hold.requested_at:%Y-%m-%d %H:%M:%S} UTC"
    return line + (f": {hold.reason}" if hold.reason else "")


def hold_json(hold: RunHold | Any | None) -> dict[str, Any] | None:
    if hold is None:
        return None
    return {
        "action": hold.action,
        "requested_by": hold.requested_by,
        "reason": hold.reason,
        "requested_at": iso(hold.requested_at),
    }


async def runs_pause(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.engine import Runner
    from bot.policy import HoldRefused

    runner = Runner(repo, config, worker_id=worker_id())
    try:
        outcome = await runner.pause_run(args.run_id, actor=args.actor, reason=args.reason)
    except HoldRefused as refused:
        print(f"refused ({refused.code}): {refused}", file=sys.stderr)
        return EXIT_REFUSED
    if outcome.result == "already" and outcome.hold is not None:
        print(f"run {args.run_id}: already {hold_line(outcome.hold)}")
        return EXIT_OK
    if outcome.result == "held":
        print(
            f"run {args.run_id}: paused. It was waiting on people: their decisions still count, "
            "and it carries on with them once resumed."
        )
    else:
        print(f"run {args.run_id}: pausing at its next safe point (before a tool or model call).")
    slack = slack_services(repo, runner, config)
    if slack:
        from handlers.flows import show_hold

        await show_hold(slack, args.run_id)
    return EXIT_OK


async def runs_resume(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.engine import Runner
    from bot.policy import HoldRefused

    runner = Runner(repo, config, worker_id=worker_id())
    try:
        outcome = await runner.resume_run(args.run_id, actor=args.actor)
    except HoldRefused as refused:
        print(f"refused ({refused.code}): {refused}", file=sys.stderr)
        return EXIT_REFUSED
    slack = slack_services(repo, runner, config)
    if outcome.claimed is None:
        state = outcome.run.status if outcome.run else "gone"
        then = (
            "it waits for its approvals and carries on once they are decided"
            if state == "paused"
            else "the pause had not taken effect yet; it carries on"
        )
        print(f"run {args.run_id}: resumed ({then}).")
        if slack:
            from handlers.flows import show_hold

            await show_hold(slack, args.run_id)
        return EXIT_OK
    print(f"run {args.run_id}: resumed by {args.actor}; carrying on.")
    if slack:
        from handlers.flows import resume_and_publish

        resumed = await resume_and_publish(slack, args.run_id)
    else:
        resumed = await runner.resume(args.run_id)
    if resumed is not None:
        print_outcome(resumed)
    return EXIT_OK


async def runs_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    rows = await repo.list_runs(status=args.status, limit=args.limit)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": run.id,
                        "status": run.status,
                        "held": hold is not None and run.status == "paused",
                        "requester": run.requester,
                        "channel": run.channel,
                        "thread_ts": run.thread_ts,
                        "updated_at": iso(run.updated_at),
                        "hold": hold_json(hold),
                    }
                    for run, hold in rows
                ],
                indent=2,
            )
        )
        return EXIT_OK
    if not rows:
        print("No runs." if args.status is None else f"No {args.status} runs.")
        return EXIT_OK
    for run, hold in rows:
        line = f"{run.id}  {run.status:<9}  {run.requester}  {run.updated_at:%Y-%m-%d %H:%M:%S}"
        if hold is not None and run.status not in ("completed", "failed", "cancelled"):
            line += f"  ({hold_line(hold)})"
        print(line)
    return EXIT_OK
