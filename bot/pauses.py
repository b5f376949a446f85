"""Pauses for tool authors: ask a person, wait for another system, retry at a time.

Each is an exception the gate and the runner understand as a pause (a subclass of
``llm.PauseChain``): the call's row is stored with the paused history, sibling calls of the
same model response finish first, and the run resumes exactly once, on any replica, after
restarts too. The rule for tool authors: side effects before the pause happen once; the
call's result on resume comes from the pause (the answer, the callback's body), except for
``RetryAt``, where the tool runs again.

``ask_user`` is the built-in tool the model calls to ask the requester (or the configured
answerers) a question; its answer is the tool's result.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import llm

from bot.config import parse_duration

ASK_USER = "ask_user"
CALLBACK_PATH = "/callbacks/"
# secrets.token_urlsafe(32): 256 bits, 43 URL-safe characters.
TOKEN_BYTES = 32


class Pause(llm.PauseChain):
    """Base of the pauses a tool may raise; the gate stores and resumes them."""


class WaitForCallback(Pause):
    """Raise after handing ``callback_url()`` to another system: the run waits for its POST,
    whose body becomes this call's result (the tool is not run again).

    ``timeout``: a duration like ``"1h"`` or a ``timedelta``; default the tool's policy
    ``ttl`` (else ``approval_ttl``). When it passes with no callback, the tool's
    ``on_expiry`` applies (deny: the model is told no callback came; cancel: the run ends).
    """

    def __init__(self, description: str, timeout: str | timedelta | None = None) -> None:
        super().__init__(f"waiting for {description}")
        self.description = description
        if isinstance(timeout, str):
            timeout = parse_duration(timeout, "WaitForCallback timeout")
        if timeout is not None and timeout <= timedelta(0):
            raise ValueError("WaitForCallback timeout must be positive")
        self.timeout = timeout


class RetryAt(Pause):
    """Raise to have this call run again at ``when`` (timezone-aware): the run waits and
    resumes by itself at that time, then calls the tool again with the same arguments.

    Refused (the model gets an error result, the run does not pause) when ``when`` is naive
    or later than ``max_retry_wait`` from now.
    """

    def __init__(self, when: datetime, reason: str = "") -> None:
        super().__init__(f"retry at {when.isoformat()}: {reason}")
        self.when = when
        self.reason = reason


class AskUser(Pause):
    """Raised by the ``ask_user`` tool: the question is stored and posted; its answer is the
    call's result."""

    def __init__(self, question: str, choices: list[str] | None) -> None:
        super().__init__(f"question: {question}")
        self.question = question
        self.choices = choices


def ask_user(question: str, choices: list[str] | None = None) -> str:
    """Ask the person who made the request a question and wait for the answer.

    Use it when you need information only they have. With ``choices`` the answer is one
    of them; without, they type it. The answer is this tool's result.
    """
    raise AskUser(question, choices)


ASK_USER_TOOL = llm.Tool.function(ask_user)


@dataclass
class CallContext:
    """The call the gate is running now, for ``callback_url()``: set per call by the gate,
    copied by asyncio into the worker thread of a sync tool."""

    tool_name: str
    tool_call: llm.ToolCall
    # Stores the token's row before the URL is handed out (the runner provides it): given
    # the token's hash, returns the row's id. ``arm_here`` is the same, for a caller on the
    # event loop's own thread, which cannot await.
    arm: Callable[[str], Any]
    arm_here: Callable[[str], str]
    loop: asyncio.AbstractEventLoop
    base_url: str
    token: str | None = None
    armed_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


current_call: ContextVar[CallContext | None] = ContextVar("approval_bot_call", default=None)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def callback_url() -> str:
    """A single-use URL bound to the tool call running now; POST to it to finish the call.

    Works in sync tools (which run in worker threads) and in async ones. The token is
    stored (its hash) before this returns, so the other system may call back at once, even
    before the tool raises ``WaitForCallback``. Calling it again in the same call returns
    the same URL. If the tool then returns or raises anything else, the URL is void.
    """
    call = current_call.get()
    if call is None:
        raise RuntimeError("callback_url() works only inside a tool the bot is running")
    if call.token is not None:
        return call.base_url + CALLBACK_PATH + call.token
    token = secrets.token_urlsafe(TOKEN_BYTES)
    digest = token_hash(token)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a worker thread (a sync tool): the loop does the storing
        armed_id = asyncio.run_coroutine_threadsafe(call.arm(digest), call.loop).result()
    else:  # the loop's own thread (an async tool): nothing can be awaited from here
        armed_id = call.arm_here(digest)
    call.token, call.armed_id = token, armed_id
    return call.base_url + CALLBACK_PATH + token
