"""Logging: plain text (the default) or one JSON object per line, never a secret.

``--log-format json`` (or ``APPROVAL_BOT_LOG_FORMAT=json``) makes every line the process
writes a JSON object with ``time``, ``level``, ``logger`` and ``message``, plus ``run_id``,
``approval_id``, ``workspace`` and ``channel`` wherever the code that logs knows them: log
collectors can then search one run or one approval across replicas. "Every line" includes
what does not go through a logger: lines printed to stderr (error messages), lines a
long-running command prints to stdout (``serve``'s and the playground's banners), warnings
from libraries (``logging.captureWarnings``), uncaught exceptions (``sys.excepthook``,
``threading.excepthook``; an asyncio task's unhandled error goes to the ``asyncio`` logger).

Secrets are redacted from every line, in either format, as defence in depth: the values of
the environment's secrets (``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET``, any ``*_TOKEN``,
``*_SECRET``, ``*_KEY`` or ``*_PASSWORD``, the password in ``DATABASE_URL`` or any other
URL), anything shaped like a Slack token or a callback URL's token, and values registered at
run time with :func:`register_secret`.

The ids travel in a contextvar: :func:`bind` (or the :func:`bound_to` decorator) sets them for
the current task, and asyncio copies them into the tasks it starts from there.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar, Token
from typing import Any, TextIO, TypeVar

LOG_FORMAT_ENV = "APPROVAL_BOT_LOG_FORMAT"
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "[redacted]"
# The ids a log line carries when they are known, in this order.
CONTEXT_FIELDS = ("run_id", "approval_id", "workspace", "channel")
# Environment variables whose values are secrets, by name or by suffix. Short values (a
# placeholder like "x") are not redacted: they would blank out ordinary words.
SECRET_NAMES = frozenset(
    {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_CLIENT_SECRET"}
)
SECRET_SUFFIXES = ("_TOKEN", "_SECRET", "_KEY", "_PASSWORD", "_PASS")
MIN_SECRET_LENGTH = 6
# Slack's token shapes: bot, user, app-level, refresh and configuration tokens.
SLACK_TOKEN = re.compile(r"\b(?:xox[abeoprs]|xapp|xoxe\.xox[bp])-[0-9A-Za-z.-]{4,}")
# A callback URL's token (bot.pauses): plain, JSON-escaped ("\\/") or percent-encoded (a URL
# handed to a pipeline in a query string). Matched by shape: a process may hand out any
# number of them, and registering each would grow the redacting pattern for ever.
CALLBACK_TOKEN = re.compile(r"((?:/|\\/|%2[Ff])callbacks(?:/|\\/|%2[Ff]))[A-Za-z0-9_-]{20,}")
# Bolt warns that SLACK_BOT_TOKEN goes unused whenever a client is passed, on every start.
BOLT_TOKEN_UNUSED = "`token` will be unused"

_context: ContextVar[Mapping[str, str] | None] = ContextVar(
    "approval_bot_log_context", default=None
)
F = TypeVar("F", bound=Callable[..., Any])


# -- context -----------------------------------------------------------------------------


def bind(**fields: str | None) -> Token[Mapping[str, str] | None]:
    """Add ids to the current task's log context (empty values are ignored); reset with
    :func:`unbind`. Tasks started afterwards from this one inherit them."""
    known = {k: v for k, v in fields.items() if v}
    return _context.set({**(_context.get() or {}), **known})


def unbind(token: Token[Mapping[str, str] | None]) -> None:
    _context.reset(token)


@contextlib.contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)


def current_context() -> dict[str, str]:
    return dict(_context.get() or {})


def ids_of(name: str, value: Any) -> dict[str, str | None]:
    """The log ids an argument named ``name`` stands for (a run, an outcome, an id)."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {name: value} if name in ("run_id", "approval_id") else {}
    if name == "outcome":
        run = getattr(value, "run", None)
        return {"run_id": getattr(value, "run_id", None), **(ids_of("run", run) if run else {})}
    if name == "approval":
        return {
            "approval_id": getattr(value, "id", None),
            "run_id": getattr(value, "run_id", None),
            "workspace": getattr(value, "team_id", None),
            "channel": getattr(value, "channel", None),
        }
    return {
        "run_id": getattr(value, "id", None),
        "workspace": getattr(value, "team_id", None),
        "channel": getattr(value, "channel", None),
    }


def bound_to(parameter: str) -> Callable[[F], F]:
    """Decorate a coroutine function: the lines it logs carry the ids of its ``parameter``
    (``run``, ``outcome``, ``approval``, ``run_id`` or ``approval_id``), until it returns."""

    def decorate(function: F) -> F:
        # Looked up by position once here: inspect's bind per call cost 4 us.
        position = list(inspect.signature(function).parameters).index(parameter)

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = args[position] if position < len(args) else kwargs.get(parameter)
            token = bind(**ids_of(parameter, value))
            try:
                return await function(*args, **kwargs)
            finally:
                unbind(token)

        return wrapper  # type: ignore[return-value]

    return decorate


class ContextFilter(logging.Filter):
    """Puts the known ids on every record (as attributes; JSON lines show them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class DropBoltTokenWarning(logging.Filter):
    """Bolt's "`token` will be unused" comes on every start: we pass our own client, and
    bolt reads SLACK_BOT_TOKEN from the environment anyway. It says nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return BOLT_TOKEN_UNUSED not in record.getMessage()


class DropAlembicPreamble(logging.Filter):
    """With ``-v``, Alembic announced its dialect on every command, migration or not; the
    lines that say a migration ran stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Context impl", "Will assume"))


class HideWebhookUrls(logging.Filter):
    """slack_sdk's webhook client logs (at debug) the URL it posts to: a ``response_url``,
    which lets whoever holds it post to the channel as the app. Only its origin is kept."""

    URL = re.compile(r"(https?://[^/\s]+)/\S*")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = self.URL.sub(lambda m: f"{m.group(1)}/{REDACTED}", message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


# -- secrets -----------------------------------------------------------------------------


class Redactor:
    """Replaces secret values (and anything shaped like a Slack token) in text."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str | None) -> None:
        if not value or len(value) < MIN_SECRET_LENGTH:
            return
        # Also as it appears inside a JSON string (escaped quotes, backslashes, non-ASCII).
        forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
        with self._lock:
            if forms <= self._secrets:
                return
            self._secrets |= forms
            # Longest first, so a secret that contains another is replaced whole.
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def add_environment(self, environ: Mapping[str, str]) -> None:
        for name, value in environ.items():
            if name in SECRET_NAMES or name.upper().endswith(SECRET_SUFFIXES):
                self.add(value)
            elif "://" in value:  # DATABASE_URL and any other URL with a password in it
                self.add(_url_password(value))

    def redact(self, text: str) -> str:
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(REDACTED, text)
        text = CALLBACK_TOKEN.sub(rf"\g<1>{REDACTED}", text)
        return SLACK_TOKEN.sub(REDACTED, text)


def _url_password(url: str) -> str | None:
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


SECRETS = Redactor()


def register_secret(value: str | None) -> None:
    """Never write ``value`` in a log line or an error message from now on."""
    SECRETS.add(value)


def redact(text: str) -> str:
    return SECRETS.redact(text)


# -- formatters --------------------------------------------------------------------------


def json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    class RedactingJsonFormatter(JsonFormatter):
        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            # time, level, logger, message first: what a person reads in a raw line.
            first = {
                k: log_data[k] for k in ("time", "level", "logger", "message") if k in log_data
            }
            return {**first, **log_data}

        def format(self, record: logging.LogRecord) -> str:
            return redact(super().format(record))

    return RedactingJsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=False,
    )


class RedactingTextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def make_handler(stream: TextIO, json_lines: bool) -> logging.Handler:
    """A handler that writes to ``stream`` as it is now (under our line wrapper, so that
    records never loop back through it), redacted, with the log ids."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter() if json_lines else RedactingTextFormatter(TEXT_FORMAT))
    handler.addFilter(ContextFilter())
    return handler


# -- the process's own output ------------------------------------------------------------


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


# -- setting it all up -------------------------------------------------------------------


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
        _log_uncaught(*sys.exc_info())  # type: ignore[arg-type]
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
