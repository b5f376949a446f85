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
URL), anything shaped like a Slack token or a callback URL's token, an OAuth redirect's ``code``
and ``state`` (bolt logs them at debug when a redirect fails), and values registered at run
time with :func:`register_secret`.

The ids travel in a contextvar: :func:`bind` (or the :func:`bound_to` decorator) sets them for
the current task, and asyncio copies them into the tasks it starts from there.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar, Token
from typing import Any, TypeVar

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
# An OAuth redirect's ``code`` (exchanged for a workspace's token) and ``state``: bolt logs
# the query of a failed redirect at debug, as a dict of lists; a URL carries them as a query;
# a refused code exchange is a WARNING "… oauth.v2.access result with code: <code> - error: …"
# (and state stores say "state: <state>"). In that last form only a value of 16 characters or
# more, as codes and states are, so that "exit code: 1" or "state: completed" stay readable.
OAUTH_PARAM = re.compile(
    r"""((?:['"](?:code|state)['"]\s*:\s*\[\s*['"])|(?:[?&](?:code|state)=)"""
    r"""|(?:\b(?:code|state)\\?['"]?\s*[:=]\s*\\?['"]?(?=[A-Za-z0-9._~-]{16})))"""
    r"""[^'"&\s\]\\,]+"""
)
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
    return _context.set(_with_ids(_context.get(), fields))


def _with_ids(
    context: Mapping[str, str] | None, fields: Mapping[str, str | None]
) -> dict[str, str]:
    """A new context: ``context`` (shared with other tasks, never changed) and the non-empty
    ``fields``. A plain loop: a comprehension is a call of its own (see :func:`bound_to`)."""
    merged = dict(context) if context else {}
    for key, value in fields.items():
        if value:
            merged[key] = value
    return merged


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
        # Looked up by position once here: inspect's bind per call cost 4 us. The ids go
        # straight to the context, not through bind(**ids): a pause -> decide -> resume cycle
        # passes here four times, and the keywords' dict, the comprehension and the calls
        # took 15 000 instructions each time, 10 000 now.
        position = list(inspect.signature(function).parameters).index(parameter)

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = args[position] if position < len(args) else kwargs.get(parameter)
            token = _context.set(_with_ids(_context.get(), ids_of(parameter, value)))
            try:
                return await function(*args, **kwargs)
            finally:
                _context.reset(token)

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


# -- text for terminals ------------------------------------------------------------------

# What a terminal obeys rather than shows: every C0 and C1 control character and DEL but
# newline and tab (an escape sequence clears the screen, retitles the window, writes to the
# clipboard), and the bidirectional controls (U+202A-U+202E embeddings and overrides,
# U+2066-U+2069 isolates, U+200E/U+200F and U+061C marks), which reorder what follows them
# so that text reads other than it is ("Trojan Source"): an argument or an answer could show
# "deny" where it says "approve".
_UNSAFE_FOR_TERMINALS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with each control character but newline and tab as ``\\xNN``, and each
    bidirectional control as ``\\uNNNN``: shown on a terminal, never obeyed."""
    return _UNSAFE_FOR_TERMINALS.sub(_escape, text)


def json_terminal_safe(line: str) -> str:
    """A JSON text with the same characters as JSON escapes (``\\u009b``, ``\\u202e``):
    the same value, and a terminal showing the line shows them."""
    return _UNSAFE_FOR_TERMINALS.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


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
        text = OAUTH_PARAM.sub(rf"\g<1>{REDACTED}", text)
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


# -- the process's own output ------------------------------------------------------------


# -- setting it all up -------------------------------------------------------------------
