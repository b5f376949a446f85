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

if TYPE_CHECKING:
    from bot.config import Config
    from storage.events import ExportedEvent
    from storage.repository import Repository

FORMATS = ("jsonl", "csv")
# The columns of both formats, in this order (CSV's header row).
FIELDS = ("id", "at", "event", "actor", "run_id", "approval_id", "team_id", "channel", "detail")
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
        raise argparse.ArgumentTypeError(f"{text!r} is not a date ({DATE_HELP})") from None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value, False


def since_time(text: str) -> datetime:
    return parse_time(text)[0]


def until_time(text: str) -> datetime:
    value, date_only = parse_time(text)
    return value + timedelta(days=1) if date_only else value


async def audit_export(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from bot.cli.parser import EXIT_OK, EXIT_USAGE
    from bot.clock import utcnow

    until = args.until or utcnow() + timedelta(seconds=1)
    if until <= args.since:
        print(
            f"approval-bot audit export: --until ({until:%Y-%m-%d %H:%M:%S}) must be after "
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
        print(f"approval-bot audit export: cannot write {args.output}: {exc}", file=sys.stderr)
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
        for row in rows_of(page):
            if writer is not None:
                writer.writerow([_csv_cell(row[name]) for name in FIELDS])
            else:
                stream.write(json.dumps(row) + "\n")
        stream.flush()
        count += len(page)
        after = page[-1].event.id
    return count


def rows_of(page: list[ExportedEvent]) -> Iterator[dict[str, Any]]:
    for exported in page:
        event = exported.event
        yield {
            "id": event.id,
            "at": f"{event.at.isoformat()}Z",
            "event": event.event,
            "actor": event.actor,
            "run_id": event.run_id,
            "approval_id": event.approval_id,
            "team_id": exported.team_id or None,
            "channel": exported.channel or None,
            "detail": event.detail or {},
        }


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else value
