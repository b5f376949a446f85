"""``approval-bot api-tokens`` and ``approval-bot webhooks``: the HTTP API's tokens and the
outbox of its webhooks (issue 20 section 2).

``api-tokens create NAME --channels C1,C2 [--expires 90d]`` prints the token and its webhook
secret once (``token: …`` and ``webhook_secret: …``, or ``--json``): only the token's hash is
stored, so it cannot be shown again. ``api-tokens list`` shows what each may do, never a
secret; ``revoke ID|NAME`` ends it at once. ``webhooks list`` shows recent deliveries and why
one failed; ``webhooks retry ID`` (an approval id or a delivery id) sends one again.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bot.cli.exits import complain
from bot.cli.output import iso
from bot.ids import SLACK_CHANNEL_ID, SLACK_USER_ID

if TYPE_CHECKING:
    from bot.config import Config
    from storage.repository import ApiRequestRow, Repository

CHANNEL = SLACK_CHANNEL_ID
USER = SLACK_USER_ID


def _channels(value: str) -> list[str]:
    channels = [part.strip() for part in value.split(",") if part.strip()]
    bad = [channel for channel in channels if not CHANNEL.match(channel)]
    if not channels or bad:
        raise argparse.ArgumentTypeError(
            f"not Slack channel ids: {', '.join(bad) or value!r} (write C1,C2)"
        )
    return list(dict.fromkeys(channels))


def _user(value: str) -> str:
    if not USER.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Slack user id")
    return value


def _duration(value: str) -> Any:
    from bot.config.fields import duration_problem

    parsed = duration_problem(value)
    if isinstance(parsed, str):
        raise argparse.ArgumentTypeError(parsed)
    return parsed


def add_api_commands(commands: Any, list_limit: Any) -> tuple[Any, Any]:
    """The ``api-tokens`` and ``webhooks`` parsers (bot.cli.parser calls this)."""
    tokens = commands.add_parser("api-tokens", help="tokens of the HTTP API: create, list, revoke")
    token_commands = tokens.add_subparsers(dest="api_tokens_command", metavar="SUBCOMMAND")
    create = token_commands.add_parser(
        "create", help="create a token; prints it and its webhook secret once"
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument(
        "--channels", type=_channels, required=True, help="the channels it may post to: C1,C2"
    )
    create.add_argument("--expires", type=_duration, default=None, help="e.g. 90d (default never)")
    create.add_argument(
        "--requester",
        type=_user,
        default=None,
        help="the Slack user its cards say asked (default: the token's name); may not decide",
    )
    create.add_argument("--team", default="", help="the workspace's team id (OAuth installs)")
    create.add_argument("--json", action="store_true", help="print the result as JSON")
    listing = token_commands.add_parser("list", help="every token, never its secret")
    listing.add_argument("--json", action="store_true", help="print them as a JSON list")
    revoke = token_commands.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("token_id", metavar="ID|NAME")

    webhooks = commands.add_parser("webhooks", help="the API's webhook deliveries: list, retry")
    webhook_commands = webhooks.add_subparsers(dest="webhooks_command", metavar="SUBCOMMAND")
    wl = webhook_commands.add_parser("list", help="recent webhooks, newest first")
    wl.add_argument("--json", action="store_true", help="print them as a JSON list")
    wl.add_argument("--limit", type=list_limit, default=100, help="at most this many (100)")
    retry = webhook_commands.add_parser("retry", help="send a webhook again, from now")
    retry.add_argument("delivery", metavar="ID", help="its approval id or delivery id")
    return tokens, webhooks


async def api_tokens_create(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.api.tokens import hash_token, new_token
    from bot.clock import utcnow

    now = utcnow()
    token_id, token, secret = new_token()
    expires_at = now + args.expires if args.expires else None
    requester = args.requester or args.name[:64]
    await repo.create_api_token(
        id=token_id,
        name=args.name,
        token_hash=hash_token(token),
        webhook_secret=secret,
        channels=args.channels,
        team_id=args.team,
        requester=requester,
        expires_at=expires_at,
        now=now,
    )
    if args.json:
        result = {
            "id": token_id,
            "name": args.name,
            "channels": args.channels,
            "expires_at": iso(expires_at),
            "token": token,
            "webhook_secret": secret,
        }
        print(json.dumps(result, indent=2))
        return 0
    print(f"id: {token_id}")
    print(f"name: {args.name}")
    print(f"channels: {','.join(args.channels)}")
    print(f"expires_at: {iso(expires_at) or 'never'}")
    print(f"token: {token}")
    print(f"webhook_secret: {secret}")
    print("Keep both now: they are not shown again.")
    return 0


async def api_tokens_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.clock import utcnow

    now = utcnow()
    tokens = await repo.api_tokens()
    rows: list[dict[str, Any]] = [
        {
            "id": t.id,
            "name": t.name,
            "channels": list(t.channels),
            "requester": t.requester,
            "created_at": iso(t.created_at),
            "expires_at": iso(t.expires_at),
            "revoked_at": iso(t.revoked_at),
            "live": t.usable(now),
        }
        for t in tokens
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("No API tokens.")
        return 0
    for row in rows:
        state = "live" if row["live"] else ("revoked" if row["revoked_at"] else "expired")
        until = f" until {row['expires_at']}" if row["expires_at"] and row["live"] else ""
        print(f"{row['id']}  {row['name']}  {','.join(row['channels'])}  {state}{until}")
    return 0


async def api_tokens_revoke(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.clock import utcnow

    count = await repo.revoke_api_token(args.token_id, utcnow())
    if not count:
        complain(args.token_id, "no live token has that id or name")
        return 1
    print(f"Revoked {count} token{'s' if count > 1 else ''}: {args.token_id}.")
    return 0


def _state(row: ApiRequestRow) -> str:
    if row.delivered_at is not None:
        return f"delivered {iso(row.delivered_at)}"
    if row.gave_up_at is not None:
        return f"gave up {iso(row.gave_up_at)} ({row.last_error})"
    if row.attempts:
        return f"retrying after {iso(row.claimed_until)} ({row.last_error})"
    return "waiting for the decision"


async def webhooks_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    rows = await repo.recent_webhooks(args.limit)
    if args.json:
        listed = [
            {
                "delivery_id": r.delivery_id,
                "approval_id": r.approval_id,
                "url": r.webhook_url,
                "attempts": r.attempts,
                "delivered_at": iso(r.delivered_at),
                "gave_up_at": iso(r.gave_up_at),
                "next_attempt_at": iso(r.claimed_until) if r.delivered_at is None else None,
                "last_error": r.last_error,
                "state": _state(r),
            }
            for r in rows
        ]
        print(json.dumps(listed, indent=2))
        return 0
    if not rows:
        print("No webhooks.")
        return 0
    for r in rows:
        print(f"{r.delivery_id}  {r.approval_id}  attempts {r.attempts}  {_state(r)}")
    return 0


async def webhooks_retry(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    if not await repo.retry_webhook(args.delivery):
        complain(args.delivery, "no webhook has that approval id or delivery id")
        return 1
    print(f"{args.delivery}: sent again by the next replica to look (within seconds).")
    return 0
