"""The arguments of ``approval-bot``: its commands, their flags and the global options.

Standard library only at import (``bot.ops.logs`` included), so ``--help`` and a usage error
answer at once.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from bot.cli.api_tokens import add_api_commands
from bot.cli.audit import add_audit_commands
from bot.cli.exits import EXIT_USAGE, shown
from bot.cli.grants import add_grants_commands
from bot.cli.mcp import add_mcp_command
from bot.cli.run_holds import add_hold_commands
from bot.cli.waits import add_waits_commands
from bot.ops.logs import LOG_FORMAT_ENV, LOG_FORMATS, terminal_safe

# Commands that need a subcommand, and where argparse puts it.
COMMANDS_WITH_SUBCOMMANDS = {
    "db": "db_command",
    "approvals": "approvals_command",
    "runs": "runs_command",
    "waits": "waits_command",
    "grants": "grants_command",
    "config": "config_command",
    "audit": "audit_command",
    "api-tokens": "api_tokens_command",
    "webhooks": "webhooks_command",
}


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit status 2, like every other error of the command line."""

    subcommand_parsers: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        """``approval-bot: --as: takes a Slack user id … (see approval-bot ask --help)``: the
        command line's one error style (``approval-bot: <what>: <why>``)."""
        if message.startswith("argument "):
            message = message.removeprefix("argument ")
        self.exit(EXIT_USAGE, f"approval-bot: {message} (see {self.prog} --help)\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        """Every message argparse prints (an error quoting what was typed, usage, help) is
        terminal-safe: it is written before the command's own output is wrapped
        (bot.cli.terminal), and a control character typed in an argument (ESC, U+202E)
        reached the terminal raw."""
        super()._print_message(terminal_safe(message) if message else message, file)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> Any:
        """Commands and subcommands are checked after the flags: argparse reports a missing
        required subcommand before an unknown flag, so ``approval-bot --bogus`` said "the
        following arguments are required: COMMAND" instead of naming ``--bogus``."""
        parsed = super().parse_args(args, namespace)
        if parsed.command is None:
            self.error("the following arguments are required: COMMAND")
        for command, dest in COMMANDS_WITH_SUBCOMMANDS.items():
            if parsed.command == command and getattr(parsed, dest) is None:
                self.subcommand_parsers[command].error(
                    "the following arguments are required: SUBCOMMAND"
                )
        return parsed


def tcp_port(text: str) -> int:
    """``--port``: a TCP port to listen on, checked before anything starts."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a TCP port (1-65535)")
    return int(text)


def bounded_text(table: str, column: str) -> Callable[[str], str]:
    """An argument stored in ``table.column``: PostgreSQL refused a longer one with a
    traceback where SQLite kept it; both are refused here, in one line. The length is the
    column's own, looked up only when such an argument is given (the models import
    SQLAlchemy, which ``--help`` and a usage error need not wait for)."""

    def check(text: str) -> str:
        from storage.models import Base

        limit = getattr(Base.metadata.tables[table].c[column].type, "length", None) or 0
        if not text or len(text) > limit:
            raise argparse.ArgumentTypeError(f"must be 1 to {limit} characters long")
        return text

    return check


def list_limit(text: str) -> int:
    """``--limit``: a count the database can take (SQLite overflowed, PostgreSQL refused
    negatives, each with a traceback)."""
    if not text.isdigit() or not 0 < int(text) <= MAX_LIST_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{shown(text)!r} is not a number from 1 to {MAX_LIST_LIMIT}"
        )
    return int(text)


_STORED_USER_ID = bounded_text("approvals", "decided_by")
_SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]+")


def slack_user_id(text: str) -> str:
    """``--as``: a Slack user id (``U0123ABCD``), as every record keys people on. A name, a
    handle or an email would be recorded as someone nobody is, so it is refused, saying what
    it takes (Slack shows a member's id in their profile, under "Copy member ID")."""
    if text and not _SLACK_USER_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f'takes a Slack user id such as U0123ABCD, not "{shown(text)}"'
        )
    return _STORED_USER_ID(text)


USER_ID = slack_user_id
CONVERSATION_KEY = bounded_text("runs", "conversation_key")
MAX_LIST_LIMIT = 100_000


def build_parser() -> _Parser:
    parser = _Parser(
        prog="approval-bot",
        description="A Slack bot that runs llm agents and asks humans before risky tool calls.",
    )
    _add_global_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND")
    db_commands.add_parser("upgrade", help="apply schema migrations (the bot also does at start)")

    approvals = commands.add_parser("approvals", help="list and decide approvals")
    approval_commands = approvals.add_subparsers(dest="approvals_command", metavar="SUBCOMMAND")
    listing = approval_commands.add_parser("list", help="pending approvals, newest first")
    listing.add_argument("--json", action="store_true", help="print them as a JSON list")
    listing.add_argument("--limit", type=list_limit, default=100, help="at most this many (100)")
    show_approval = approval_commands.add_parser(
        "show", help="one approval: its call, the rule that applied, its audit trail"
    )
    show_approval.add_argument("approval_id", metavar="ID")
    show_approval.add_argument("--json", action="store_true")
    decide = approval_commands.add_parser(
        "decide", help="approve or deny one approval, or choose a failed call's recovery"
    )
    decide.add_argument("approval_id", metavar="ID")
    verdict = decide.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", help="let the call run")
    verdict.add_argument("--deny", action="store_true", help="refuse it; the agent is told")
    # A recovery (on_error = "ask": a call failed, or its outcome is unknown).
    verdict.add_argument("--retry", action="store_true", help="a failed call: run it again")
    verdict.add_argument("--skip", action="store_true", help="a failed call: skip it")
    verdict.add_argument("--stop", action="store_true", help="a failed call: stop the run")
    verdict.add_argument(
        "--ran", action="store_true", help="an unknown outcome: it ran (--reason: a note)"
    )
    decide.add_argument(
        "--as", dest="actor", type=USER_ID, required=True, metavar="USER", help="Slack user id"
    )
    decide.add_argument("--reason", default=None, help="why (the agent reads it)")
    approval_commands.add_parser("expire", help="expire overdue approvals now (the bot sweeps too)")

    runs = commands.add_parser("runs", help="inspect, pause, resume and cancel runs")
    run_commands = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND")
    show = run_commands.add_parser("show", help="a run, its approvals and its audit trail")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true")
    cancel = run_commands.add_parser(
        "cancel", help="stop a run that waits for approvals; they are cancelled too"
    )
    cancel.add_argument("run_id", metavar="ID")
    cancel.add_argument("--as", dest="actor", type=USER_ID, required=True, metavar="USER")
    cancel.add_argument("--reason", default="cancelled from the command line")
    cancel.add_argument(
        "--force",
        action="store_true",
        help="an operator cancels a run that is not theirs to cancel (recorded as forced)",
    )
    add_hold_commands(run_commands, USER_ID, list_limit)
    run_commands.add_parser(
        "recover",
        help="what the sweeper does, once: expire overdue approvals, take over runs whose "
        "worker stopped, resume paused runs with nothing left to decide",
    )

    ask = commands.add_parser("ask", help="run a request from the terminal (no Slack)")
    ask.add_argument("text")
    ask.add_argument("--as", dest="actor", type=USER_ID, required=True, metavar="USER")
    ask.add_argument(
        "--conversation", type=CONVERSATION_KEY, default=None, help="continue this conversation key"
    )

    config = commands.add_parser("config", help="the configuration file")
    config_commands = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    config_commands.add_parser(
        "schema", help="print the JSON Schema of the configuration file (for editors)"
    )

    waits = add_waits_commands(commands, list_limit)
    grants = add_grants_commands(commands, list_limit, USER_ID)
    audit = add_audit_commands(commands)
    api_tokens, webhooks = add_api_commands(commands, list_limit)
    add_mcp_command(commands, tcp_port)
    _add_slack_commands(commands)
    parser.subcommand_parsers = {
        "db": db,
        "approvals": approvals,
        "runs": runs,
        "waits": waits,
        "grants": grants,
        "config": config,
        "audit": audit,
        "api-tokens": api_tokens,
        "webhooks": webhooks,
    }
    _global_options_everywhere(parser)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--config``, ``-v`` and ``--log-format``. On a subcommand they default to SUPPRESS, so
    one given after the subcommand (``approval-bot serve --config x.toml``) sets the value
    and one not given there leaves the value given before it untouched."""
    unset: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--config",
        default=unset,
        help="TOML configuration file (default: $APPROVAL_BOT_CONFIG or ./approval-bot.toml)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="log debug output",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=unset,
        help=f"text (default) or json: one JSON object per line (env {LOG_FORMAT_ENV})",
    )


def _global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """People put options where they think of them: after the subcommand as often as before
    (``scripts/playground --config my.toml`` ends up as ``approval-bot playground --config
    my.toml``), so every command and subcommand takes the global options too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_global_options(sub, suppress=True)
                _global_options_everywhere(sub)


def _add_slack_commands(commands: Any) -> None:
    serve = commands.add_parser("serve", help="serve Slack (HTTP, or Socket Mode)")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=tcp_port, default=3000)
    serve.add_argument("--socket-mode", action="store_true", help="connect with SLACK_APP_TOKEN")

    playground = commands.add_parser(
        "playground", help="the whole bot in a browser, offline: no Slack, no API key"
    )
    playground.add_argument("--port", type=tcp_port, default=8080)
    playground.add_argument("--host", default="127.0.0.1")
    playground.add_argument("--no-browser", action="store_true", help="do not open a browser")
    playground.add_argument("--model", default=None, help="an llm model id instead of the demo")
    playground.add_argument("--data-dir", default=None, help="where the playground keeps data")
