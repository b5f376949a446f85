"""``approval-bot grants``: standing grants (a tool allowed in a thread until a time).

``grants list`` shows the live ones (``--all``: revoked and expired too); ``grants revoke ID
--as USER`` revokes one, as the Revoke button of ``/approvals grants`` does: its grantor or
an approver of its tool (user ids; a member of an approving user group, which cannot be
resolved offline, uses ``--force``, recorded as forced).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bot.cli.exits import complain
from bot.cli.output import iso

if TYPE_CHECKING:
    from bot.config import Config
    from storage.models import Grant
    from storage.repository import Repository


def add_grants_commands(commands: Any, list_limit: Any, user_id: Any) -> argparse.ArgumentParser:
    """The ``grants`` parsers (bot.cli.parser calls this; nothing heavy is imported here)."""
    grants = commands.add_parser("grants", help="standing grants: list and revoke")
    grant_commands = grants.add_subparsers(dest="grants_command", metavar="SUBCOMMAND")
    listing = grant_commands.add_parser("list", help="live grants, newest first")
    listing.add_argument("--json", action="store_true", help="print them as a JSON list")
    listing.add_argument("--all", action="store_true", help="revoked and expired ones too")
    listing.add_argument("--limit", type=list_limit, default=100, help="at most this many (100)")
    revoke = grant_commands.add_parser("revoke", help="revoke a grant: its tool asks again")
    revoke.add_argument("grant_id", metavar="ID")
    revoke.add_argument("--as", dest="actor", type=user_id, required=True, metavar="USER")
    revoke.add_argument(
        "--force",
        action="store_true",
        help="an operator revokes a grant that is not theirs to revoke (recorded as forced)",
    )
    return grants


def grant_state(grant: Grant, now: Any, names: dict[str, str] | None = None) -> str:
    if grant.revoked_at is not None:
        who = (names or {}).get(grant.revoked_by or "") or grant.revoked_by
        return f"revoked by {who} at {grant.revoked_at:%Y-%m-%d %H:%M:%S} UTC"
    if grant.expires_at <= now:
        return f"expired at {grant.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    return f"until {grant.expires_at:%Y-%m-%d %H:%M:%S} UTC"


def grant_json(grant: Grant, now: Any) -> dict[str, Any]:
    return {
        "id": grant.id,
        "tool": grant.tool_name,
        "team_id": grant.team_id,
        "channel": grant.channel,
        "thread_ts": grant.thread_ts,
        "scope": "any arguments" if grant.payload_scope is None else "same arguments",
        "payload_scope": grant.payload_scope,
        "grantor": grant.grantor,
        "approval_id": grant.approval_id,
        "run_id": grant.run_id,
        "created_at": iso(grant.created_at),
        "expires_at": iso(grant.expires_at),
        "revoked_at": iso(grant.revoked_at),
        "revoked_by": grant.revoked_by,
        "last_used_at": iso(grant.last_used_at),
        "live": grant.revoked_at is None and grant.expires_at > now,
    }


async def grants_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.clock import utcnow

    now = utcnow()
    await repo.notice_expired_grants(now=now)  # audits grant_expired once for each
    grants = await repo.list_grants(now=now, live_only=not args.all, limit=args.limit)
    if args.json:
        print(json.dumps([grant_json(g, now) for g in grants], indent=2))
        return 0
    if not grants:
        print("No standing grants." if args.all else "No live standing grants.")
        return 0
    # People by the names the bot stored (it never asks Slack from here), else by id.
    names = await repo.names_of({g.grantor for g in grants} | {g.revoked_by or "" for g in grants})
    for grant in grants:
        scope = " (same arguments only)" if grant.payload_scope else ""
        print(
            f"{grant.id}  {grant.tool_name}{scope}  in {grant.channel}/{grant.thread_ts}  "
            f"by {names.get(grant.grantor) or grant.grantor}  {grant_state(grant, now, names)}"
        )
    return 0


async def grants_revoke(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.clock import utcnow
    from bot.policy import revoke_refusal

    grant = await repo.get_grant(args.grant_id)
    if grant is None:
        complain(args.grant_id, "there is no such grant")
        return 1
    if not args.force and (
        refusal := revoke_refusal(grant, args.actor, config.policies.get(grant.tool_name))
    ):
        complain(grant.id, f"{refusal} An operator may add --force.")
        return 1
    now = utcnow()
    if await repo.revoke_grant(grant.id, actor=args.actor, now=now, forced=args.force) is None:
        complain(grant.id, f"the grant is {grant_state(grant, now)} already")
        return 1
    print(f"Revoked {grant.id}: {grant.tool_name} asks again in its thread.")
    return 0
