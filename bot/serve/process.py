"""``approval-bot serve``: the server process, its listening sockets and its signals.

Start-up order matters: configuration (already checked), the listening port (bound first, so
a port in use fails before anything else happens), the model (known, its key set: what
``ask`` checks; a warning when no tool is configured), the database (migrated before any request
is accepted), the runner, then Slack (``bot.serve.started``). The sweeper runs beside it in
every replica, and so does the ~1 s check for due retries (``bot.ops.retry_timer``);
``POST /callbacks/{token}`` (``bot.ops.callback_route``) shares the port with ``/slack/events``.

Shutdown (SIGTERM from a rolling deploy, or Ctrl-C) runs the other way round, within
``shutdown_grace`` counted from the signal: stop taking new work (close the port or the
Socket Mode connection), then ``Bot.shut_down``. A second signal stops the waiting for work
in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys

from aiohttp import web

from bot.config import Config, ConfigError
from bot.llm_setup import model_problem
from bot.ops.callback_route import RedactingAccessLogger
from bot.ops.endpoints import serving_operations
from bot.ops.http_logs import SERVER_LOGGER
from bot.serve.started import EXIT_USAGE, ShutdownReport, started_bot
from handlers.slack import SlackSettings
from storage.repository import DatabaseUnavailable

log = logging.getLogger(__name__)


def serve(config: Config, *, host: str, port: int, socket_mode: bool) -> int:
    try:
        settings = SlackSettings.from_env(socket_mode=socket_mode)
    except ConfigError as exc:
        print(f"approval-bot: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if config.metrics_port == port and not socket_mode:
        print(
            f"approval-bot: metrics_port ({port}) must differ from --port: it keeps /metrics "
            "off the public port",
            file=sys.stderr,
        )
        return EXIT_USAGE
    sock = metrics_sock = None
    try:
        if not socket_mode:
            sock = _listen_or_say(host, port)
        if config.metrics_port is not None:
            metrics_sock = _listen_or_say(host, config.metrics_port)
    except _CannotListen:
        if sock is not None:
            sock.close()
        return EXIT_USAGE
    # What `ask` checks, before the database or Slack: a bot that started without its
    # model's key would acknowledge every mention and then fail each run.
    if problem := model_problem(config.model):
        print(f"approval-bot: {problem}", file=sys.stderr)
        for opened in (sock, metrics_sock):
            if opened is not None:
                opened.close()
        return EXIT_USAGE
    if not config.tool_refs and not config.mcp_servers:
        where = "no configuration file" if config.source == "(defaults)" else config.source
        log.warning(
            "no tools are configured (`tools` is empty; %s): the model can only answer in "
            "words, and nothing will ever wait for an approval",
            where,
        )
    if config.public_url is None:
        # Where callbacks reach this process unless public_url says otherwise.
        reachable = socket.getfqdn() if host in ("", "0.0.0.0", "::") else host
        config.public_url = f"http://{reachable}:{port}"
    with asyncio.Runner() as loop:
        try:
            report = loop.run(_serve(config, settings, sock=sock, metrics_sock=metrics_sock))
        except DatabaseUnavailable as exc:
            print(f"approval-bot: {exc}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            for opened in (sock, metrics_sock):
                if opened is not None:
                    opened.close()
        if report.cancelled:
            # A tool cut off by the grace may still be running in a thread, which the
            # interpreter would wait for at exit. Its call is recorded as started, never as
            # finished, so it is reported "outcome unknown" and never run again: let it stop
            # with the process now rather than finish unrecorded.
            _exit_now(report.exit_code)
    return report.exit_code


class _CannotListen(Exception):
    pass


def _listen_or_say(host: str, port: int) -> socket.socket:
    try:
        return bound_socket(host, port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(f"approval-bot: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        raise _CannotListen from exc


def bound_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (not yet listening): a port in use fails here, first."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


async def _serve(
    config: Config,
    settings: SlackSettings,
    *,
    sock: socket.socket | None,
    metrics_sock: socket.socket | None = None,
) -> ShutdownReport:
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            log.warning("second signal: not waiting for work in flight any longer")
            hurry.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal)
    grace = config.shutdown_grace.total_seconds()
    async with (
        started_bot(config, settings) as bot,
        # The metrics port stays up while work in flight finishes (/readyz says 503).
        serving_operations(
            metrics_sock, bot.services.repo, stop.is_set, bot.services.runner.outages
        ),
    ):
        # What start-up built (modules, the app, the configuration) lives as long as the
        # process: frozen, the collector's full passes (40-85 ms over ~155,000 objects,
        # every thousand or two requests) walk only what requests create.
        gc.collect()
        gc.freeze()
        if sock is None:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(bot.app, settings.app_token)  # type: ignore[arg-type]
            await handler.connect_async()
            log.info("connected to Slack in Socket Mode")
            log.info(
                "Socket Mode serves no HTTP port: POST /callbacks/{token} is not served here "
                "(tools that wait for callbacks need HTTP mode; `approval-bot waits complete`)"
            )
            await stop.wait()
            deadline = loop.time() + grace
            log.info("stopping: no new events; finishing work in flight")
            await handler.close_async()
        else:
            runner = web.AppRunner(
                bot.web_app,
                shutdown_timeout=grace,
                access_log_class=RedactingAccessLogger,
                logger=SERVER_LOGGER,  # a request aiohttp cannot parse: one line, no traceback
            )
            await runner.setup()
            site = web.SockSite(runner, sock)
            await site.start()
            log.info("listening on %s/slack/events", site.name)
            log.info("callback URLs start with %s/callbacks/", bot.services.runner.public_url)
            await stop.wait()
            deadline = loop.time() + grace
            log.info("stopping: no new requests; finishing work in flight")
            bot.closing.set()  # held long-polls answer now; their clients ask another replica
            # Closes the port at once; requests already being handled get their answers.
            await runner.cleanup()
        return await bot.shut_down(deadline - loop.time(), hurry)


def _exit_now(code: int) -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
