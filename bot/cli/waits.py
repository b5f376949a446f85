"""``approval-bot waits``: the pauses that wait on a person, another system or a time.

``waits list`` shows questions, callbacks and retries still waiting, and until when.
``waits complete ID --body JSON`` completes a wait for a callback by hand (the other system
lost its URL, or an operator knows the outcome): the body becomes the call's result exactly as
a POST to its URL would, once, and the run carries on.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bot.cli.common import slack_services, worker_id
from bot.cli.exits import complain
from bot.cli.output import iso, print_outcome

if TYPE_CHECKING:
    from bot.config import Config
    from storage.models import Approval
    from storage.repository import Repository


def add_waits_commands(commands: Any, list_limit: Any) -> argparse.ArgumentParser:
    """The ``waits`` parsers (bot.cli.parser calls this; nothing heavy is imported here)."""
    waits = commands.add_parser("waits", help="questions, callbacks and retries still waiting")
    wait_commands = waits.add_subparsers(dest="waits_command", metavar="SUBCOMMAND")
    listing = wait_commands.add_parser("list", help="waits, newest first, and until when")
    listing.add_argument("--json", action="store_true", help="print them as a JSON list")
    listing.add_argument("--limit", type=list_limit, default=100, help="at most this many (100)")
    complete = wait_commands.add_parser(
        "complete", help="complete a wait for a callback by hand, as its POST would"
    )
    complete.add_argument("wait_id", metavar="ID")
    complete.add_argument(
        "--body", required=True, type=json_body, metavar="JSON", help="the call's result"
    )
    return waits


def json_body(text: str) -> str:
    try:
        json.loads(text)
    except (ValueError, RecursionError) as exc:  # deep nesting raises RecursionError
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    return text


def wait_json(wait: Approval) -> dict[str, Any]:
    from bot.policy import describe_wait

    return {
        "id": wait.id,
        "kind": wait.kind,
        "run_id": wait.run_id,
        "tool": wait.tool_name,
        "status": wait.status,
        "waiting_for": describe_wait(wait),
        "reason": wait.reason,
        "arguments": wait.arguments,
        "expires_at": iso(wait.expires_at),
        "due_at": iso(wait.due_at),
        "created_at": iso(wait.created_at),
    }


async def waits_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.policy import describe_wait

    waits = await repo.pending_waits(limit=args.limit)
    if args.json:
        print(json.dumps([wait_json(w) for w in waits], indent=2))
        return 0
    if not waits:
        print("Nothing is waiting.")
        return 0
    for wait in waits:
        print(f"{wait.id}  {wait.kind}  run {wait.run_id}  {describe_wait(wait)}")
    return 0


async def waits_complete(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.engine import Runner
    from handlers.flows import after_expiry, after_the_decision, resume_and_publish

    runner = Runner(repo, config, worker_id=worker_id())
    wait = await repo.get_approval(args.wait_id)
    if wait is None or wait.kind == "approval":
        complain(args.wait_id, "there is no such wait")
        return 1
    if wait.kind != "callback":
        how = "its answerers answer it in Slack" if wait.kind == "question" else "it runs by itself"
        complain(wait.id, f"it is a {wait.kind}, not a wait for a callback: {how}")
        return 1
    slack = slack_services(repo, runner, config)
    outcome = await runner.complete_callback(approval_id=wait.id, body=args.body)
    if outcome.status != "completed":
        current = outcome.approval or wait
        complain(wait.id, f"it is {current.status} already")
        if outcome.expiry is not None and slack:
            await after_expiry(slack, outcome.expiry)
        elif outcome.expiry is not None and outcome.expiry.resume_claimed:
            print_outcome(await runner.resume(wait.run_id))
        return 1
    print(f"Completed {wait.id} ({wait.tool_name}).")
    if slack:  # the completion is stored: its notice's edit must not hold up its resume
        edit = slack.publisher.cards.refresh_card(wait.id)
        await after_the_decision(f"wait {wait.id}", ("the notice's edit", edit))
    if outcome.resume_claimed:
        resumed = await (
            resume_and_publish(slack, wait.run_id) if slack else runner.resume(wait.run_id)
        )
        if resumed is not None:
            print_outcome(resumed)
    else:
        print("The run waits for its other pauses.")
    return 0
