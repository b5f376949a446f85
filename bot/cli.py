"""The ``approval-bot`` command line.

Every command loads and checks the configuration first, so a broken file fails here with one
clear message (exit status 2) before anything touches the database or Slack; so does a
database that cannot be opened, a port that cannot be listened on and a mistyped command.
Exit status 1 means a decision or lookup was refused; 0 means it went through.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn

from bot.cli_waits import add_waits_commands, waits_complete, waits_list
from bot.clock import utcnow
from bot.config import Config, ConfigError, load_config
from bot.llm_setup import prepare_llm
from bot.logs import LOG_FORMAT_ENV, LOG_FORMATS, log_format_from, process_logging
from bot.runner import (
    DecisionRefused,
    Request,
    Runner,
    RunOutcome,
    default_worker_id,
    describe_wait,
)
from storage.models import Approval, Run
from storage.repository import DatabaseUnavailable, PendingFilter, Repository

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # what shells report for a command stopped by Ctrl-C
# Every runner of this process drives as one worker, so an interrupted command can release
# exactly the leases it holds.
WORKER_ID = default_worker_id()


# Commands that need a subcommand, and where argparse puts it.
COMMANDS_WITH_SUBCOMMANDS = {
    "db": "db_command",
    "approvals": "approvals_command",
    "runs": "runs_command",
    "waits": "waits_command",
}


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit status 2, like every other error of the command line."""

    subcommand_parsers: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

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
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def bounded_text(limit: int) -> Callable[[str], str]:
    """An argument stored in a column of ``limit`` characters: PostgreSQL refused a longer
    one with a traceback where SQLite kept it; both are refused here, in one line."""

    def check(text: str) -> str:
        if not text or len(text) > limit:
            raise argparse.ArgumentTypeError(f"must be 1 to {limit} characters long")
        return text

    return check


def list_limit(text: str) -> int:
    """``--limit``: a count the database can take (SQLite overflowed, PostgreSQL refused
    negatives, each with a traceback)."""
    if not text.isdigit() or not 0 < int(text) <= MAX_LIST_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 1 to {MAX_LIST_LIMIT}")
    return int(text)


USER_ID = bounded_text(Approval.__table__.c.decided_by.type.length)
CONVERSATION_KEY = bounded_text(Run.__table__.c.conversation_key.type.length)
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
    decide = approval_commands.add_parser("decide", help="approve or deny one approval")
    decide.add_argument("approval_id", metavar="ID")
    verdict = decide.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", help="let the call run")
    verdict.add_argument("--deny", action="store_true", help="refuse it; the agent is told")
    decide.add_argument(
        "--as", dest="actor", type=USER_ID, required=True, metavar="USER", help="Slack user id"
    )
    decide.add_argument("--reason", default=None, help="why (the agent reads it)")
    approval_commands.add_parser("expire", help="expire overdue approvals now (the bot sweeps too)")

    runs = commands.add_parser("runs", help="inspect runs")
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

    waits = add_waits_commands(commands, list_limit)
    _add_slack_commands(commands)
    parser.subcommand_parsers = {"db": db, "approvals": approvals, "runs": runs, "waits": waits}
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


def main(argv: Sequence[str] | None = None) -> int:
    # The log format is known before the arguments are checked, so that even a usage error
    # is a JSON line in JSON mode.
    early, _ = _early_parser().parse_known_args(argv)
    try:
        log_format = log_format_from(early.log_format)
    except ValueError as exc:
        print(f"approval-bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with process_logging(log_format, verbose=early.verbose) as output:
        args = build_parser().parse_args(argv)
        if args.command in ("serve", "playground"):
            # Their stdout is a log (banners); other commands' stdout is their output.
            output.wrap_stdout()
        return _main(args)


def _early_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--log-format", default=None)  # checked by the full parser
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def _main(args: argparse.Namespace) -> int:
    if args.command == "playground":
        from bot.playground_cli import run_playground

        return run_playground(args)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"approval-bot: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    key = (args.command, _subcommand(args))
    if key in NEEDS_A_DATABASE and (missing := missing_database_file(config.database_url)):
        print(
            f"approval-bot: there is no database at {missing}: nothing has been recorded "
            "yet (check --config or DATABASE_URL; `approval-bot db upgrade` creates it)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    prepare_llm()
    if config.model == DEMO_MODEL_ID:
        # The playground's offline model, so `approval-bot ask` can be tried without a key.
        from playground.demo import register_demo_model

        register_demo_model()
    if args.command == "serve":
        from bot.serve import serve

        return serve(config, host=args.host, port=args.port, socket_mode=args.socket_mode)
    if args.command == "ask" and (problem := model_problem(config.model)):
        print(f"approval-bot: {problem}", file=sys.stderr)
        return EXIT_USAGE
    command = _COMMANDS[key]
    try:
        code = asyncio.run(_interruptible(config, lambda repo: command(repo, config, args)))
    except DatabaseUnavailable as exc:
        print(f"approval-bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if code == EXIT_INTERRUPTED:
        # A tool cut off mid-call may still run in its thread, which the interpreter would
        # wait for: its call is recorded as started and reported "outcome unknown", never
        # run again, so stop now rather than let it finish unrecorded (as serve does).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


# Commands about what is already recorded: on a database that does not exist they would
# create an empty one (and migrate it) only to say there is nothing, so they say so instead.
NEEDS_A_DATABASE = {
    ("approvals", "list"),
    ("approvals", "decide"),
    ("approvals", "expire"),
    ("runs", "show"),
    ("runs", "cancel"),
    ("runs", "recover"),
    ("waits", "list"),
    ("waits", "complete"),
}
DEMO_MODEL_ID = "demo"  # playground.demo.DEMO_MODEL_ID, without importing the playground


def missing_database_file(database_url: str) -> str | None:
    """The path of a SQLite database file that does not exist, or None (it exists, it is in
    memory, or the database is a server: PostgreSQL databases are made by their admins)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(database_url)
    except ArgumentError:
        return None  # Repository.open says what is wrong with it
    if url.get_backend_name() != "sqlite" or url.query.get("mode") == "memory":
        return None
    path = url.database
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    if os.path.exists(path) or not os.path.isdir(os.path.dirname(path) or "."):
        return None  # a missing folder is Repository.open's error, which names the folder
    return path


def model_problem(model_id: str) -> str | None:
    """Why ``ask`` cannot reach the model, in one line, before a run is recorded: a missing
    key used to surface as a failed run and a logged traceback."""
    import llm

    try:
        model = llm.get_async_model(model_id)
    except llm.UnknownModelError:
        return (
            f"unknown model {model_id!r}: install its llm plugin, or set model = "
            f'"{DEMO_MODEL_ID}" to try the bot offline'
        )
    if getattr(model, "needs_key", None):
        try:
            model.get_key()
        except llm.NeedsKeyException:
            env = f" or set {model.key_env_var}" if getattr(model, "key_env_var", None) else ""
            return (
                f"the model {model_id!r} needs an API key: `llm keys set {model.needs_key}`"
                f'{env} (or set model = "{DEMO_MODEL_ID}" to try the bot offline)'
            )
    return None


def _subcommand(args: argparse.Namespace) -> str:
    return getattr(args, f"{args.command}_command", "") or ""


async def _interruptible(config: Config, body: Callable[[Repository], Awaitable[int]]) -> int:
    """Run a command the way serve stops: the first Ctrl-C or SIGTERM lets the work in
    flight (an approved tool running) finish and be recorded within ``shutdown_grace``; a
    second one, or the end of the grace, stops at once and releases this process's leases."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(_with_repository(config, body))
    grace = config.shutdown_grace.total_seconds()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            print(
                f"approval-bot: finishing the work in flight (up to {grace:.0f}s); "
                "press Ctrl-C again to stop now",
                file=sys.stderr,
            )
            loop.call_later(grace, task.cancel)
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not on Windows, nor off the main thread (tests that call main() in a thread).
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    try:
        return await task
    except asyncio.CancelledError:  # stopped before the database was even open
        return EXIT_INTERRUPTED


async def _with_repository(config: Config, body: Callable[[Repository], Awaitable[int]]) -> int:
    repo = await Repository.open(config.database_url)
    try:
        return await body(repo)
    except asyncio.CancelledError:
        released = await repo.release_leases(WORKER_ID, now=utcnow())
        print(
            f"approval-bot: interrupted; released {len(released)} run(s) for a bot or "
            "`approval-bot runs recover` to carry on (a tool cut off mid-call is reported "
            "outcome unknown, never run again)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        await repo.close()


async def _db_upgrade(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    # Repository.open has already migrated; say so plainly.
    print(f"database is up to date ({_safe_url(config.database_url)})")
    return EXIT_OK


async def _approvals_list(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    runner = Runner(repo, config, worker_id=WORKER_ID)
    approvals, total = await repo.list_pending(
        # Waits on systems and times are `waits list`'s: nobody decides them.
        PendingFilter(kinds=("approval", "question")),
        now=runner.clock(),
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
            f"{approval.id}  {approval.tool_name}({_short_args(approval.arguments)})  "
            f"asked by {approval.requester}  approvers: {who}  "
            f"expires {approval.expires_at:%Y-%m-%d %H:%M} UTC"
        )
    if total > len(approvals):
        print(f"… and {total - len(approvals)} more (use --limit)")
    return EXIT_OK


def _slack_services(repo: Repository, runner: Runner, config: Config) -> Any:
    """Slack, when ``SLACK_BOT_TOKEN`` (or OAuth installs' ``SLACK_CLIENT_ID`` …) is set:
    decisions made here then edit their cards and the resumed run answers in its thread,
    as if the button had been clicked, with the token of the run's workspace."""
    if not (os.environ.get("SLACK_BOT_TOKEN") or os.environ.get("SLACK_CLIENT_ID")):
        return None
    from handlers.oauth import workspace_clients
    from handlers.services import Services, SlackSettings

    settings = SlackSettings.from_env(web_api_only=True)
    clients = workspace_clients(repo, settings)
    return Services.create(repo, config, runner, clients.default, clients)


async def _approvals_decide(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from handlers.decisions import after_expiry, resume_and_publish

    runner = Runner(repo, config, worker_id=WORKER_ID)
    slack = _slack_services(repo, runner, config)

    async def resume(run_id: str) -> None:
        outcome = await (resume_and_publish(slack, run_id) if slack else runner.resume(run_id))
        if outcome is not None:
            _print_outcome(outcome)

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


async def _approvals_expire(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    from handlers.decisions import after_expiry

    runner = Runner(repo, config, worker_id=WORKER_ID)
    slack = _slack_services(repo, runner, config)
    outcomes = await runner.expire_due()
    for expiry in outcomes:
        print(f"expired {expiry.approval.id} ({expiry.approval.tool_name})")
        if slack:
            await after_expiry(slack, expiry)
        elif expiry.resume_claimed:
            _print_outcome(await runner.resume(expiry.approval.run_id))
    if not outcomes:
        print("No approvals were overdue.")
    return EXIT_OK


async def _runs_show(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    run = await repo.get_run(args.run_id)
    if run is None:
        print(f"no run {args.run_id}", file=sys.stderr)
        return EXIT_REFUSED
    approvals = await repo.approvals_for_run(run.id)
    audit = await repo.audit_trail(run_id=run.id)
    if args.json:
        print(
            json.dumps(
                {
                    **run_json(run),
                    "approvals": [approval_json(a) for a in approvals],
                    "audit": [
                        {
                            "at": _iso(e.at),
                            "event": e.event,
                            "actor": e.actor,
                            "approval_id": e.approval_id,
                            "detail": e.detail,
                        }
                        for e in audit
                    ],
                },
                indent=2,
            )
        )
        return EXIT_OK
    print(f"run {run.id}: {run.status} (asked by {run.requester}, model {run.model_id})")
    print(f"  conversation: {run.conversation_key}")
    if run.answer:
        print(f"  answer: {run.answer}")
    if run.error:
        print(f"  error: {run.error}")
    for approval in approvals:
        line = f"  {approval.kind} {approval.id}: {approval.tool_name} {approval.status}"
        if approval.kind != "approval" and approval.status == "pending":
            line += f": {describe_wait(approval)}"  # what the run waits for, until when
        print(line)
    for event in audit:
        print(f"  {event.at:%Y-%m-%d %H:%M:%S} {event.event} {event.actor or ''}".rstrip())
    return EXIT_OK


async def _runs_cancel(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    runner = Runner(repo, config, worker_id=WORKER_ID)
    run = await repo.get_run(args.run_id)
    if run is not None and run.status == "paused" and not args.force:
        refusal = await cancel_refusal(repo, run, args.actor)
        if refusal:
            print(f"refused (not_allowed): {refusal}", file=sys.stderr)
            return EXIT_REFUSED
    forced = " (forced by an operator)" if args.force else ""
    reason = f"{args.reason} (by {args.actor}{forced})"
    if not await repo.cancel_run(args.run_id, reason=reason, actor=args.actor, now=runner.clock()):
        run = await repo.get_run(args.run_id)
        state = f"it is {run.status}" if run else "there is no such run"
        print(
            f"refused: only a run waiting for approvals can be cancelled; {state}", file=sys.stderr
        )
        return EXIT_REFUSED
    print(f"run {args.run_id}: cancelled")
    slack = _slack_services(repo, runner, config)
    if slack:
        from handlers.decisions import announce_cancelled

        await announce_cancelled(slack, args.run_id)
    return EXIT_OK


async def cancel_refusal(repo: Repository, run: Run, actor: str) -> str | None:
    """Why ``actor`` may not cancel ``run``, or None: the rule of deciding, so the requester
    or anyone who may decide one of its pending approvals (user groups are Slack's to
    resolve; a member of an approving group uses ``--force``)."""
    from bot.policy import refusal_reason

    if actor == run.requester:
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


async def _runs_recover(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    """One sweep, as every replica's sweeper makes: for when no bot is running."""
    from handlers.decisions import after_expiry, refresh_settled_cards, resume_and_publish

    runner = Runner(repo, config, worker_id=WORKER_ID)
    slack = _slack_services(repo, runner, config)
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
            _print_outcome(await runner.resume(approval.run_id))
    taken = await runner.take_over_stale_runs()
    for run in taken:
        print(f"took over run {run.id}: its worker stopped renewing its lease")
        outcome = await runner.carry_on(run)
        _print_outcome(outcome)
        if slack:
            await slack.publisher.outcome(outcome)
            await refresh_settled_cards(slack, run.id)
    stranded = await runner.claim_stranded_runs()
    for run_id in stranded:
        print(f"resumed run {run_id}: it was paused with nothing left to decide")
        outcome = await (resume_and_publish(slack, run_id) if slack else runner.resume(run_id))
        if outcome is not None:
            _print_outcome(outcome)
    cards = await slack.publisher.post_missing_cards() if slack else 0
    if cards:
        print(f"posted {cards} approval card(s) that no worker had posted")
    if not (expiries or taken or stranded or cards):
        print("Nothing to recover: no approval is overdue and every run's worker is alive.")
    return EXIT_OK


async def _ask(repo: Repository, config: Config, args: argparse.Namespace) -> int:
    runner = Runner(repo, config, worker_id=WORKER_ID)
    outcome = await runner.start(
        Request(text=args.text, requester=args.actor, conversation_key=args.conversation)
    )
    _print_outcome(outcome)
    # Busy: the conversation's run is still going or waiting; nothing was started.
    return EXIT_REFUSED if outcome.status in ("failed", "busy") else EXIT_OK


_COMMANDS: dict[tuple[str, str], Callable[[Repository, Config, argparse.Namespace], Awaitable[int]]]
_COMMANDS = {
    ("db", "upgrade"): _db_upgrade,
    ("approvals", "list"): _approvals_list,
    ("approvals", "decide"): _approvals_decide,
    ("approvals", "expire"): _approvals_expire,
    ("runs", "show"): _runs_show,
    ("runs", "cancel"): _runs_cancel,
    ("runs", "recover"): _runs_recover,
    ("ask", ""): _ask,
    ("waits", "list"): waits_list,
    ("waits", "complete"): lambda repo, config, args: waits_complete(
        repo, config, args, worker_id=WORKER_ID
    ),
}


def _print_outcome(outcome: RunOutcome) -> None:
    print(f"run {outcome.run_id}: {outcome.status}")
    if outcome.status == "paused":
        for approval in outcome.new_approvals:
            print(
                f"  waiting for approval {approval.id}: {approval.tool_name}"
                f"({_short_args(approval.arguments)})"
            )
    if outcome.answer:
        print(outcome.answer)
    if outcome.error:
        print(outcome.error)
    if outcome.status == "busy" and outcome.run is not None:
        print(f"  {busy_advice(outcome.run)}")


def busy_advice(run: Run) -> str:
    """What to do about the run that holds a conversation, by what it is doing."""
    if run.status == "paused":
        return (
            f"the conversation's run {run.id} waits for approvals: decide them (approvals "
            f"list) or stop it (runs cancel {run.id} --as USER)"
        )
    lease = run.lease_expires_at
    if lease is not None and lease > utcnow():
        return (
            f"the conversation's run {run.id} is {run.status} on worker {run.lease_owner} "
            f"(its lease runs until {lease:%Y-%m-%d %H:%M:%S} UTC); if that worker has "
            "stopped, `approval-bot runs recover` takes the run over once the lease has run out"
        )
    return (
        f"the conversation's run {run.id} is {run.status} but its worker stopped renewing "
        "its lease: `approval-bot runs recover` takes it over and carries it on"
    )


def approval_json(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.id,
        "run_id": approval.run_id,
        "tool_call_id": approval.tool_call_id,
        "tool": approval.tool_name,
        "arguments": approval.arguments,
        "status": approval.status,
        "requester": approval.requester,
        "approvers": approval.approvers,
        "allow_self_approval": approval.allow_self_approval,
        "on_expiry": approval.on_expiry,
        "channel": approval.channel,
        "thread_ts": approval.thread_ts,
        "created_at": _iso(approval.created_at),
        "expires_at": _iso(approval.expires_at),
        "decided_by": approval.decided_by,
        "decided_at": _iso(approval.decided_at),
        "reason": approval.reason,
        "result": approval.result,
        "kind": approval.kind,
        "due_at": _iso(approval.due_at),
    }


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "conversation_key": run.conversation_key,
        "status": run.status,
        "requester": run.requester,
        "channel": run.channel,
        "thread_ts": run.thread_ts,
        "model": run.model_id,
        "answer": run.answer,
        "error": run.error,
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
        "history": run.history,
    }


def _iso(value: datetime | None) -> str | None:
    return f"{value.isoformat()}Z" if value is not None else None


def _short_args(arguments: dict[str, Any], limit: int = 80) -> str:
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    sys.exit(main())
