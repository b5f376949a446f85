"""Pauses for tool authors: ask a person, wait for another system, retry at a time.

Each is an exception the gate and the runner understand as a pause (a subclass of
``llm.PauseChain``): the call's row is stored with the paused history, sibling calls of the
same model response finish first, and the run resumes exactly once, on any replica, after
restarts too. The rule for tool authors: side effects before the pause happen once; the
call's result on resume comes from the pause (the answer, the callback's body), except for
``RetryAt``, where the tool runs again.

``ask_user`` is the built-in tool the model calls to ask the requester (or the configured
answerers) a question; its answer is the tool's result.

Long tools: ``checkpoint(state)`` stores a JSON state for the running call (durably, before it
returns; it renews the run's lease and is where a shutdown, or an operator's pause, stops the
call), ``last_checkpoint()`` reads it back when the call runs again, and ``progress(done,
total, note)`` shows how far it got on the thread's progress message. A call that stored a
checkpoint is resumed from it after a crash or a take-over (work after the last checkpoint may
run again); a call that stored none keeps the at-most-once rule ("outcome unknown").
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import llm

from bot.config import parse_duration

log = logging.getLogger(__name__)

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

DELEGATE = "delegate"


class Delegate(Pause):
    """Raised by the built-in ``delegate`` tool: a sub-agent's run is started on ``task`` in
    the same thread, and its end (its final answer, or "failed: …", "stopped by @x") is the
    call's result (issue 20 section 1)."""

    def __init__(self, agent: str, task: str) -> None:
        super().__init__(f"delegated to {agent}: {task}")
        self.agent = agent
        self.task = task


def delegate(agent: str, task: str) -> str:
    """Hand a task to a sub-agent and wait for its answer."""
    raise Delegate(agent, task)


def delegate_tool(agents: Sequence[tuple[str, str]]) -> llm.Tool:
    """The built-in ``delegate(agent, task)`` tool, its description listing the configured
    agents (name, what each does)."""
    listed = "\n".join(f"- {name}: {description}" for name, description in agents)
    description = (
        "Hand a task to a sub-agent and wait for its final answer, which is this tool's "
        "result (or 'failed: …' / 'stopped by @x'). The sub-agent works in this thread with "
        "its own tools; several delegate calls in one response run at the same time. "
        "Give `task` as a complete instruction: it is all the sub-agent reads.\n"
        f"Agents:\n{listed}"
    )
    tool = llm.Tool.function(delegate)
    schema = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "enum": [name for name, _ in agents]},
            "task": {"type": "string"},
        },
        "required": ["agent", "task"],
    }
    return dataclasses.replace(tool, description=description, input_schema=schema)


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
    # Checkpoints (set by the gate): the state this attempt resumes from (JSON text, None on
    # a first attempt); storing a state (on the loop; raises Interrupted when the call must
    # stop there); reporting progress (on the loop).
    resumed_from: str | None = None
    save_checkpoint: Callable[[str], Awaitable[None]] | None = None
    report_progress: Callable[[ToolProgress], None] | None = None


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


# -- long tools: checkpoints and progress ---------------------------------------------------

# The largest checkpoint state, as compact JSON in UTF-8.
MAX_CHECKPOINT_BYTES = 64 * 1024


class Interrupted(BaseException):
    """Raised by ``checkpoint()`` after storing the state when the call must stop there: the
    bot is shutting down, another drive holds the run now, or an operator paused it. The call
    runs again from this checkpoint later (on any replica). A BaseException, so that a tool's
    ``except Exception`` does not swallow it: let it propagate."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CheckpointTooLarge(ValueError):
    """The state given to ``checkpoint()`` is more than ``MAX_CHECKPOINT_BYTES`` as JSON."""


@dataclass(frozen=True)
class ToolProgress:
    """How far a running call got (``progress()``), for the thread's progress message."""

    run_id: str
    tool_name: str
    done: int
    total: int | None = None
    note: str = ""


class _Stored:
    """What ``checkpoint()`` returns once the state is stored: awaiting it does nothing."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # pragma: no cover (a generator that ends at once)


class _Saving:
    """What ``checkpoint()`` returns in an async tool: the state is stored when it is awaited.
    Forgotten (``checkpoint(state)`` without ``await``), nothing is stored, silently but for
    Python's anonymous "never awaited" warning: dropped unawaited, it logs an error naming the
    tool instead."""

    def __init__(self, saving: Awaitable[None], tool_name: str) -> None:
        self._saving = saving
        self._tool_name = tool_name
        self._awaited = False

    def __await__(self) -> Generator[Any, None, None]:
        self._awaited = True
        return self._saving.__await__()

    def __del__(self) -> None:
        if self._awaited:
            return
        if isinstance(self._saving, Coroutine):
            self._saving.close()  # no second, anonymous RuntimeWarning
        log.error(
            "tool %s called checkpoint() without await: nothing was stored (in an async tool, "
            "write `await checkpoint(state)`)",
            self._tool_name,
        )


def _encoded(state: Any) -> str:
    try:
        text = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"checkpoint() needs a JSON value (dicts, lists, strings, numbers): {exc}"
        ) from None
    size = len(text.encode())
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointTooLarge(
            f"checkpoint state is {size:,} bytes as JSON, more than the {MAX_CHECKPOINT_BYTES:,} "
            "(64 KiB) allowed; store where the work stands (a cursor, the last id done), "
            "not the work itself"
        )
    return text


def _on_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def checkpoint(state: Any) -> Awaitable[None]:
    """Store ``state`` (a JSON value, at most 64 KiB) for the call running now.

    It is stored durably before this returns and renews the run's lease. If the worker dies
    (kill -9, a lost lease, a shutdown past its grace) the call runs again by itself, on any
    replica, with the same arguments, and ``last_checkpoint()`` returns the last state stored:
    work done after the last checkpoint may run again, so checkpoint after each side effect.
    A call that never stored a checkpoint is never run again ("outcome unknown").

    In a sync tool call it plainly; in an async tool ``await checkpoint(state)`` (not awaited,
    nothing is stored, and an error naming the tool is logged). It is also
    where the call stops when the bot shuts down or an operator pauses the run: it raises
    ``Interrupted`` (do not catch it), after storing the state. A state that is not JSON or is
    larger than 64 KiB raises ``ValueError`` (``CheckpointTooLarge``), storing nothing.
    Outside a call the bot runs (a tool's own tests) it checks the state and does nothing.
    """
    text = _encoded(state)
    call = current_call.get()
    if call is None or call.save_checkpoint is None:
        return _Stored()
    if _on_loop_thread():  # an async tool: the caller awaits the commit
        return _Saving(call.save_checkpoint(text), call.tool_name)
    # A sync tool, in a worker thread: the loop stores it; wait for the commit.
    asyncio.run_coroutine_threadsafe(_awaited(call.save_checkpoint(text)), call.loop).result()
    return _Stored()


async def _awaited(saving: Awaitable[None]) -> None:
    await saving


def last_checkpoint() -> Any:
    """The state the call running now last stored with ``checkpoint()`` before this attempt:
    ``None`` on a first attempt (and outside a call the bot runs). A fresh copy each time."""
    call = current_call.get()
    if call is None or call.resumed_from is None:
        return None
    return json.loads(call.resumed_from)


def progress(done: int, total: int | None = None, note: str = "") -> None:
    """Show how far the call running now got on the thread's progress message, like
    ``migrate_tenants: 7,431 / 10,000 (acme)``. Cheap: call it as often as you like, the
    message is edited at most once a second. Does nothing outside a call the bot runs."""
    if not isinstance(done, int) or (total is not None and not isinstance(total, int)):
        raise TypeError("progress() takes whole numbers: progress(done, total=None, note='')")
    call = current_call.get()
    if call is None or call.report_progress is None:
        return
    report = ToolProgress(
        run_id=str(call.extra.get("run_id", "")),
        tool_name=call.tool_name,
        done=done,
        total=total,
        note=str(note)[:200],
    )
    if _on_loop_thread():
        call.report_progress(report)
    else:
        call.loop.call_soon_threadsafe(call.report_progress, report)
