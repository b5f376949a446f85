"""``approval-bot audit export``: the audit trail, for compliance tools and spreadsheets.

Every event (request, decision, execution, expiry, cancel, …) with who, when, what and where,
as JSON lines or CSV, to stdout or ``--output FILE``. Read-only: on a database that does not
exist it says so (see bot.cli.database). Rows are streamed a page at a time (paged by id), so
a trail of millions of events never sits in memory.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from bot.cli.exits import shown

if TYPE_CHECKING:
    from bot.config import Config
    from storage.records import ExportedEvent
    from storage.repository import Repository

FORMATS = ("jsonl", "csv")
# The columns of both formats, in this order (CSV's header row). ``actor_name``: the actor as
# Slack last named them (the bot's ``people`` table); ``summary``: the event in a sentence,
# what ran and who allowed it (bot.policy.what_ran's words). Times: ISO 8601 with offset.
FIELDS = (
    "id",
    "at",
    "event",
    "actor",
    "run_id",
    "approval_id",
    "team_id",
    "channel",
    "detail",
    "actor_name",
    "summary",
)
PAGE = 1000
DATE_HELP = "YYYY-MM-DD, or an ISO 8601 time such as 2026-01-31T12:00:00Z (UTC if no offset)"


class ExportWindow(argparse.Namespace):
    since: datetime
    until: datetime | None


def add_audit_commands(commands: Any) -> argparse.ArgumentParser:
    """The ``audit`` parsers (bot.cli.parser calls this; nothing heavy is imported here)."""
    audit = commands.add_parser("audit", help="export the audit trail")
    audit_commands = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")
    export = audit_commands.add_parser(
        "export", help="every audit event in a time window, as JSON lines or CSV"
    )
    export.add_argument(
        "--since", required=True, type=since_time, metavar="DATE", help=f"from ({DATE_HELP})"
    )
    export.add_argument(
        "--until",
        type=until_time,
        default=None,
        metavar="DATE",
        help="up to, excluded (a date alone includes that whole day); default: now",
    )
    export.add_argument("--format", choices=FORMATS, default="jsonl", help="jsonl (default) or csv")
    export.add_argument("--output", metavar="FILE", default=None, help="write here, not stdout")
    return audit


def parse_time(text: str) -> tuple[datetime, bool]:
    """A naive UTC datetime, and whether ``text`` was a date alone."""
    try:
        if len(text) == 10:
            return datetime.strptime(text, "%Y-%m-%d"), True
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a date ({DATE_HELP})") from None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value, False


def since_time(text: str) -> datetime:
    return parse_time(text)[0]


def until_time(text: str) -> datetime:
    value, date_only = parse_time(text)
    return value + timedelta(days=1) if date_only else value


async def audit_export(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.cli.exits import EXIT_OK, EXIT_USAGE
    from bot.clock import utcnow

    until = args.until or utcnow() + timedelta(seconds=1)
    if until <= args.since:
        print(
            f"approval-bot: --until: {until:%Y-%m-%d %H:%M:%S} must be after "
            f"--since ({args.since:%Y-%m-%d %H:%M:%S})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not args.output:
        await write_export(repo, sys.stdout, args.format, since=args.since, until=until)
        return EXIT_OK
    try:
        with open(args.output, "w", newline="", encoding="utf-8") as out:
            await write_export(repo, out, args.format, since=args.since, until=until)
    except OSError as exc:
        print(f"approval-bot: {args.output}: cannot write it: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


async def write_export(
    repo: Repository, stream: TextIO, fmt: str, *, since: datetime, until: datetime
) -> int:
    """Write every event with ``since <= at < until`` to ``stream``; how many."""
    writer = csv.writer(stream, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(FIELDS)
    count, after = 0, 0
    while page := await repo.audit_page(since=since, until=until, after=after, limit=PAGE):
        names = await repo.names_of({e.event.actor for e in page if e.event.actor})
        for row in rows_of(page, names):
            if writer is not None:
                writer.writerow([_csv_cell(row[name]) for name in FIELDS])
            else:
                stream.write(json.dumps(row) + "\n")
        stream.flush()
        count += len(page)
        after = page[-1].event.id
    return count


def rows_of(
    page: list[ExportedEvent], names: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    from bot.cli.output import iso, iso_detail
    from bot.policy.what_ran import person

    names = names or {}
    for exported in page:
        event = exported.event
        detail = iso_detail(event.detail)
        yield {
            "id": event.id,
            "at": iso(event.at),
            "event": event.event,
            "actor": event.actor,
            "run_id": event.run_id,
            "approval_id": event.approval_id,
            "team_id": exported.team_id or None,
            "channel": exported.channel or None,
            "detail": detail,
            "actor_name": names.get(event.actor or ""),
            "summary": summary(event.event, person(event.actor, names), detail),
        }


def summary(event: str, who: str, detail: dict[str, Any]) -> str:
    """The event in a sentence for people reading the export: what ran, who allowed it."""
    from bot.policy import changes_text
    from bot.policy.what_ran import grant_text, no_approval_text

    tool = detail.get("tool") or detail.get("tool_name") or ""
    match event:
        case "approval_requested" if detail.get("grant_id"):
            return f"{tool} asked for; a standing grant covers it"
        case "approval_requested":
            return f"{tool} asked for"
        case "approval_edited":
            changed = changes_text(
                detail.get("proposed_arguments") or {}, detail.get("edited_arguments") or {}
            )
            return f"{changed}, edited by {who}"
        case "approval_approved":
            return f"approved by {who}" + (" with their edit" if detail.get("edited") else "")
        case "approval_denied":
            reason = detail.get("reason")
            return f"denied by {who}" + (f": {reason}" if reason else "")
        case "grant_used":
            until = detail.get("until") or "its end"
            return f"{tool} {grant_text(who, until)} ({detail.get('grant_id', '')})"
        case "grant_created":
            return f"{who} allowed {tool} in its thread until {detail.get('expires_at', '?')}"
        case "grant_revoked":
            return f"{who} revoked standing grant {detail.get('grant_id', '')}"
        case "rule_matched" if detail.get("approval") == "never":
            return f"{tool}: {no_approval_text(detail.get('rule', ''), detail.get('when'))}"
        case "rule_matched":
            return f"{tool} refused by {detail.get('rule', 'a rule')}"
        case "execution_finished":
            return "ran"
        case "execution_failed":
            return "ran and failed"
        case "execution_outcome_unknown":
            return "outcome unknown (started, never re-run)"
        case "question_answered":
            return f"answered by {who}"
        case "run_delegated":
            parent = detail.get("parent_run_id", "?")
            return f"sub-agent {detail.get('agent', '?')} started for run {parent}"
        case "delegation_settled":
            child = detail.get("child_run_id", "?")
            return f"sub-agent run {child} ended {detail.get('outcome', '')}".rstrip()
    return ""


# A cell a spreadsheet would read as a formula (OWASP's "CSV injection"): a Slack display name
# or a reason such as ``=HYPERLINK(…)`` or ``+cmd|' /C calc'!A0``. Such a cell is written with
# a single quote in front, so it is shown as text; in every column.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict):
        value = json.dumps(value, sort_keys=True)
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value
