"""``main``: the log format, the arguments, the configuration, then the command.

Every command loads and checks the configuration first, so a broken file fails here with one
clear message (exit status 2) before anything touches the database or Slack; so does a
database that cannot be opened, a port that cannot be listened on and a mistyped command.
Exit status 1 means a decision or lookup was refused; 0 means it went through.

A command's module, and what it needs (SQLAlchemy, llm and its plugins, Slack), is imported
when that command runs: ``--help`` or a usage error waits for none of it, and only the
commands that reach a model load llm's plugins (the OpenAI client alone takes ~0.7 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from bot.cli.exits import EXIT_INTERRUPTED, EXIT_USAGE
from bot.cli.parser import build_parser
from bot.cli.terminal import terminal_safe, terminal_safe_output
from bot.ops.log_output import log_format_from, process_logging

if TYPE_CHECKING:
    from bot.config import Config
    from storage.reads import SQLiteReads
    from storage.repository import Repository

# What a shell reports for a command killed by SIGPIPE (128 + 13).
EXIT_BROKEN_PIPE = 141

Command = Callable[["Repository", "Config", argparse.Namespace], Awaitable[int]]

# (command, subcommand) -> "module:function" under bot.cli, imported when it runs.
COMMANDS = {
    ("db", "upgrade"): "database:db_upgrade",
    ("approvals", "list"): "approvals:approvals_list",
    ("approvals", "show"): "approvals:approvals_show",
    ("approvals", "decide"): "approvals:approvals_decide",
    ("approvals", "expire"): "approvals:approvals_expire",
    ("runs", "show"): "runs:runs_show",
    ("runs", "cancel"): "runs:runs_cancel",
    ("runs", "recover"): "runs:runs_recover",
    ("runs", "pause"): "run_holds:runs_pause",
    ("runs", "resume"): "run_holds:runs_resume",
    ("runs", "list"): "run_holds:runs_list",
    ("ask", ""): "ask:ask",
    ("waits", "list"): "waits:waits_list",
    ("waits", "complete"): "waits:waits_complete",
    ("grants", "list"): "grants:grants_list",
    ("grants", "revoke"): "grants:grants_revoke",
    ("audit", "export"): "audit:audit_export",
    ("api-tokens", "create"): "api_tokens:api_tokens_create",
    ("api-tokens", "list"): "api_tokens:api_tokens_list",
    ("api-tokens", "revoke"): "api_tokens:api_tokens_revoke",
    ("webhooks", "list"): "api_tokens:webhooks_list",
    ("webhooks", "retry"): "api_tokens:webhooks_retry",
}
# The commands that may drive a run, and so reach a model: they load llm's plugins.
DRIVE_RUNS = {
    ("approvals", "decide"),
    ("approvals", "expire"),
    ("runs", "recover"),
    ("runs", "resume"),
    ("ask", ""),
    ("waits", "complete"),
}


# The commands that only read the database.
READ_ONLY = {
    ("approvals", "list"),
    ("runs", "show"),
    ("runs", "list"),
    ("waits", "list"),
    ("audit", "export"),
    # It audits each grant's expiry once (storage.reads hands that case to the Repository).
    ("grants", "list"),
}


def command_for(key: tuple[str, str]) -> Command:
    module, _, function = COMMANDS[key].partition(":")
    command: Command = getattr(importlib.import_module(f"bot.cli.{module}"), function)
    return command


def main(argv: Sequence[str] | None = None) -> int:
    # The log format is known before the arguments are checked, so that even a usage error
    # is a JSON line in JSON mode.
    early, _ = _early_parser().parse_known_args(argv)
    try:
        log_format = log_format_from(early.log_format)
    except ValueError as exc:
        print(terminal_safe(f"approval-bot: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    with process_logging(log_format, verbose=early.verbose) as output:
        args = build_parser().parse_args(argv)
        if args.command in ("serve", "playground"):
            # Their stdout is a log (banners); other commands' stdout is their output.
            output.wrap_stdout()
            return _main(args)
        if args.command == "mcp":
            return _main(args)  # stdout carries the protocol: neither wrapped nor filtered
        # Their output shows what models, tools and users wrote: shown, never obeyed.
        try:
            with terminal_safe_output():
                return _main(args)
        except BrokenPipeError:
            return _reader_went_away()


def _reader_went_away() -> int:
    """``approval-bot approvals list --json | head``: the reader stopped reading, which is no
    error of ours; quiet, as a tool killed by SIGPIPE is (and the interpreter's final flush
    of stdout must not fail again)."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _early_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--log-format", default=None)  # checked by the full parser
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def _main(args: argparse.Namespace) -> int:
    if args.command == "config":
        # The schema describes any file, so a broken one (the reason to want it) is not read.
        from bot.cli.config_schema import config_schema

        return config_schema(args)
    if args.command == "playground":
        from bot.playground_cli import run_playground

        return run_playground(args)
    from bot.cli.database import NEEDS_A_DATABASE, missing_database_file
    from bot.config import ConfigError, load_config

    key = (args.command, _subcommand(args))
    try:
        # Commands that only read what is recorded need no tools (nor llm, which loading
        # them imports): they start in a fraction of the time.
        config = load_config(args.config, tools=key not in READ_ONLY and args.command != "mcp")
    except ConfigError as exc:
        print(f"approval-bot: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if key in NEEDS_A_DATABASE and (missing := missing_database_file(config.database_url)):
        print(
            f"approval-bot: there is no database at {missing}: nothing has been recorded "
            "yet (check --config or DATABASE_URL; `approval-bot db upgrade` creates it)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.command == "mcp":  # it stores requests and waits: no model, no tools
        from bot.cli.mcp import mcp

        return mcp(config, args)
    if args.command == "serve" or key in DRIVE_RUNS:
        _prepare_models(config)
    if args.command == "serve":
        from bot.serve import serve

        return serve(config, host=args.host, port=args.port, socket_mode=args.socket_mode)
    if args.command == "ask":
        from bot.cli.ask import model_problem

        if problem := model_problem(config.model):
            print(f"approval-bot: {problem}", file=sys.stderr)
            return EXIT_USAGE
    command = command_for(key)
    from storage.urls import DatabaseUnavailable

    try:
        run = command if key not in DRIVE_RUNS else _with_mcp_servers(command)
        code = asyncio.run(
            _interruptible(config, lambda repo: run(repo, config, args), read_only=key in READ_ONLY)
        )
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


def _with_mcp_servers(command: Command) -> Command:
    """A command that may run tools, with the ``[mcp_servers]`` connected while it runs: the
    tools of those that answer are listed before its runner is built (a server that is down
    is logged; its tools are missing here, so ``approvals decide`` leaves its calls to the
    bot, as for any tool this process lacks)."""

    async def run(repo: Any, config: Config, args: argparse.Namespace) -> int:
        if not config.mcp_servers:
            return await command(repo, config, args)
        from bot.mcp_servers import McpServers

        listed: list[Any] = []
        servers = await McpServers.start(
            config.mcp_servers, lambda _, tools: listed.extend(tools), policies=config.policies
        )
        config.tools.extend(listed)  # those listed later stay out: the runner is built now
        try:
            return await command(repo, config, args)
        finally:
            await servers.close()

    return run


def _prepare_models(config: Config) -> None:
    """llm's plugins, and the playground's offline model when the configuration names it
    (so `approval-bot ask` can be tried without a key)."""
    from bot.cli.ask import DEMO_MODEL_ID
    from bot.llm_setup import prepare_llm

    prepare_llm()
    if config.model == DEMO_MODEL_ID:
        from playground.demo import register_demo_model

        register_demo_model()


def _subcommand(args: argparse.Namespace) -> str:
    return getattr(args, f"{args.command.replace('-', '_')}_command", "") or ""


async def _interruptible(
    config: Config, body: Callable[[Repository], Awaitable[int]], *, read_only: bool = False
) -> int:
    """Run a command the way serve stops: the first Ctrl-C or SIGTERM lets the work in
    flight (an approved tool running) finish and be recorded within ``shutdown_grace``; a
    second one, or the end of the grace, stops at once and releases this process's leases."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(with_repository(config, body, read_only=read_only))
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


async def with_repository(
    config: Config, body: Callable[[Repository], Awaitable[int]], *, read_only: bool = False
) -> int:
    """``body`` with the repository; ``read_only`` (commands that only read) on a SQLite
    file at the schema's head: with storage.reads instead, which needs no SQLAlchemy."""
    if read_only and (reads := _sqlite_reads(config.database_url)) is not None:
        import sqlite3

        from storage.reads import NeedsRepository

        try:
            return await body(reads)  # type: ignore[arg-type]  # the methods reads call
        except NeedsRepository:
            pass  # it has something to write after all: on the Repository, below
        except sqlite3.Error as exc:  # damaged pages past the schema check, a long lock
            raise _unreadable(config.database_url, exc) from None
        except asyncio.CancelledError:
            _say_interrupted(0)  # a read holds no lease
            return EXIT_INTERRUPTED
        finally:
            await reads.close()
    from sqlalchemy.exc import DBAPIError

    from bot.cli.common import worker_id
    from bot.clock import utcnow
    from storage.repository import Repository

    repo = await Repository.open(
        config.database_url, statement_cache=config.database_statement_cache
    )
    try:
        return await body(repo)
    except DBAPIError as exc:
        if not read_only:
            raise
        raise _unreadable(config.database_url, exc.orig) from None
    except asyncio.CancelledError:
        released = await repo.release_leases(worker_id(), now=utcnow())
        _say_interrupted(len(released))
        return EXIT_INTERRUPTED
    finally:
        await repo.close()


def _unreadable(database_url: str, exc: BaseException | None) -> Exception:
    """A read that failed after the database opened (a damaged file): one line, exit 2."""
    from storage.urls import DatabaseUnavailable, safe_url

    return DatabaseUnavailable(f"cannot read the database {safe_url(database_url)}: {exc}")


def _sqlite_reads(database_url: str) -> SQLiteReads | None:
    from storage.urls import plain_sqlite_path

    if (path := plain_sqlite_path(database_url)) is None:
        return None
    from storage.reads import open_reads

    return open_reads(path)


def _say_interrupted(released: int) -> None:
    print(
        f"approval-bot: interrupted; released {released} run(s) for a bot or "
        "`approval-bot runs recover` to carry on (a tool cut off mid-call is reported "
        "outcome unknown, never run again)",
        file=sys.stderr,
    )
