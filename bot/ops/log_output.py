"""Where log lines go: the process's handlers, text or JSON lines, and stray output.

``--log-format json`` (or ``APPROVAL_BOT_LOG_FORMAT=json``) makes every line the process
writes a JSON object; :func:`process_logging` sets that up for a command's lifetime and also
catches what libraries print to stdout or stderr themselves (:class:`LineStream`), so no line
escapes the format or the redaction of :mod:`bot.ops.logs`. Uncaught exceptions, in the main
thread or another, are logged rather than printed raw.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from bot.ops.logs import (
    LOG_FORMAT_ENV,
    LOG_FORMATS,
    SECRETS,
    TEXT_FORMAT,
    ContextFilter,
    DropAlembicPreamble,
    DropBoltTokenWarning,
    HideWebhookUrls,
    json_terminal_safe,
    redact,
    terminal_safe,
)


def json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    class RedactingJsonFormatter(JsonFormatter):
        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            # time, level, logger, message first: what a person reads in a raw line.
            first: dict[str, Any] = {
                k: log_data[k] for k in ("time", "level", "logger", "message") if k in log_data
            }
            return {**first, **log_data}

        def format(self, record: logging.LogRecord) -> str:
            # Control and bidirectional characters as JSON escapes: a terminal tailing the
            # log shows them (JSON with ensure_ascii off leaves C1 and U+202E raw).
            return json_terminal_safe(redact(super().format(record)))

    return RedactingJsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=False,
    )


class RedactingTextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # Lines quote what users and models wrote: shown on a terminal, never obeyed.
        return terminal_safe(redact(super().format(record)))


def make_handler(stream: TextIO, json_lines: bool) -> logging.Handler:
    """A handler that writes to ``stream`` as it is now (under our line wrapper, so that
    records never loop back through it), redacted, with the log ids."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter() if json_lines else RedactingTextFormatter(TEXT_FORMAT))
    handler.addFilter(ContextFilter())
    return handler


class LineStream(io.TextIOBase):
    """Wraps stdout or stderr: each complete line is redacted and, in JSON mode, written as a
    JSON object (a line that already is one passes as it is)."""

    def __init__(self, target: TextIO, *, json_lines: bool, logger: str, level: str) -> None:
        self.target = target
        self.json_lines = json_lines
        self.logger = logger
        self.level = logging.getLevelName(level)
        # Its own handler: a line printed to stdout stays on stdout.
        self.handler = make_handler(target, json_lines)
        self._buffer = ""
        self._lock = threading.RLock()
        self._writing = threading.local()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8")

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    def write(self, text: str) -> int:
        with self._lock:
            self._buffer += text
            *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            rest, self._buffer = self._buffer, ""
        if rest:
            self._emit(rest)
        self.target.flush()

    def _emit(self, line: str) -> None:
        if getattr(self._writing, "active", False) or not self.json_lines:
            # Plain text, or a line written while a record is being written (logging's own
            # error report): redacted, never re-encoded.
            self.target.write(redact(line) + "\n")
            self.target.flush()
            return
        if _is_json_object(line):
            self.target.write(redact(line) + "\n")
            self.target.flush()
            return
        if not line.strip():
            return
        record = logging.LogRecord(self.logger, self.level, "", 0, line, None, None)
        self._writing.active = True
        try:
            self.handler.handle(record)
        finally:
            self._writing.active = False


def _is_json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def log_format_from(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The flag, else ``APPROVAL_BOT_LOG_FORMAT``, else text. Raises ValueError naming the
    variable for a value it does not know."""
    env = os.environ if environ is None else environ
    if flag:
        return flag
    value = env.get(LOG_FORMAT_ENV, "").strip().lower()
    if not value:
        return "text"
    if value not in LOG_FORMATS:
        raise ValueError(
            f"{LOG_FORMAT_ENV}: {value!r} is not a log format (choose from text, json)"
        )
    return value


def quiet_noisy_loggers(verbose: bool) -> None:
    """One line per HTTP request, Alembic's steps on every command and bolt's token warning
    drown what matters; ``-v`` brings the first two back (without Alembic's preamble)."""
    level = logging.DEBUG if verbose else logging.WARNING
    logging.getLogger("aiohttp.access").setLevel(level)
    logging.getLogger("alembic").setLevel(level)
    # Its plugin set-up lines come on the import of Alembic, which the CLI now imports after
    # logging is set up: never what a person running a command looks for, even with -v.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    for name, kind in (
        ("slack_bolt", DropBoltTokenWarning),
        ("alembic.runtime.migration", DropAlembicPreamble),
        ("slack_sdk.webhook.async_client", HideWebhookUrls),
        ("slack_sdk.webhook.client", HideWebhookUrls),
    ):
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())


class ProcessOutput:
    """What :func:`process_logging` set up; ``wrap_stdout`` once the command is known."""

    def __init__(self, json_lines: bool, active: bool) -> None:
        self.json_lines = json_lines
        self.active = active

    def wrap_stdout(self) -> None:
        """For long-running commands, whose stdout is a log (banners): other commands'
        stdout is their output (``approvals list --json``) and stays as it is."""
        if self.active and not isinstance(sys.stdout, LineStream):
            sys.stdout = LineStream(
                sys.stdout, json_lines=self.json_lines, logger="stdout", level="INFO"
            )


@contextlib.contextmanager
def process_logging(log_format: str, *, verbose: bool) -> Iterator[ProcessOutput]:
    """Set up the process's logging and output for one command; undone on the way out.

    When something else already configured the root logger (the CLI called from a test, or
    embedded), its handlers stay and only the noisy loggers are quieted, as
    ``logging.basicConfig`` would.
    """
    SECRETS.add_environment(os.environ)
    quiet_noisy_loggers(verbose)
    root = logging.getLogger()
    json_lines = log_format == "json"
    if root.handlers:
        yield ProcessOutput(json_lines, active=False)
        return
    saved = (sys.stdout, sys.stderr, sys.excepthook, threading.excepthook, root.level)
    handler = make_handler(sys.stderr, json_lines)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.captureWarnings(True)
    sys.stderr = LineStream(sys.stderr, json_lines=json_lines, logger="stderr", level="ERROR")
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    try:
        yield ProcessOutput(json_lines, active=True)
    except Exception:
        # Logged here, as JSON in JSON mode: the interpreter's own report would be plain
        # text, and comes after this block has put the hooks back.
        _log_uncaught(*sys.exc_info())
        raise SystemExit(1) from None
    finally:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, LineStream):
                stream.flush()
        sys.stdout, sys.stderr, sys.excepthook, threading.excepthook, level = saved
        root.removeHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)


def _log_uncaught(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, traceback)
        return
    logging.getLogger("approval_bot").critical(
        "uncaught exception", exc_info=(kind, error, traceback)
    )


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    logging.getLogger("approval_bot").critical(
        "uncaught exception in thread %s",
        args.thread.name if args.thread else "?",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )
