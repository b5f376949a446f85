"""A tool's pause as its row, and a settled row as the call's result (for the gate).

The gate catches the pauses of :mod:`bot.pauses` that a tool raises; here is what they become:
``refusal`` says why one cannot be taken as asked (a naive or too distant ``RetryAt``, an
empty question), ``draft_for`` builds the row stored with the paused history, ``call_context``
is what ``callback_url()`` needs to store a token while the tool runs, and ``pause_text`` is
the result the model reads once the row is settled.
"""

from __future__ import annotations

import asyncio
import reprlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import llm
from llm.parts import Message, TextPart

from bot.ids import new_approval_id, new_run_id
from bot.pauses import AskUser, CallContext, Delegate, Pause, RetryAt, WaitForCallback
from storage.hashes import PayloadHasher
from storage.repository import ApprovalDraft, ArmedCallback, ChildRun

if TYPE_CHECKING:
    from bot.gate.turn import TurnContext

MAX_QUESTION_LENGTH = 2000
MAX_CHOICES = 50
MAX_CHOICE_LENGTH = 75  # a Slack button's text
MAX_TASK_LENGTH = 8000
MAX_AGENT_SHOWN = 80  # of an unknown agent's name, in the tool error
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = MAX_AGENT_SHOWN
# A delegation waits as long as its child runs: the child's own waits expire, not this row.
DELEGATION_HORIZON = timedelta(days=3650)


def delegation_refusal(turn: TurnContext, pause: Delegate) -> str | None:
    """The error result for a ``delegate`` call that cannot start a sub-agent, or None: an
    unknown agent, an empty task, the depth limit, or an agent already up this chain."""
    context = turn.delegation
    if context is None or not context.agents:
        return "Error: no sub-agent is configured; nothing was delegated."
    agent, task = pause.agent, pause.task
    if not isinstance(agent, str) or agent not in context.agents:
        known = ", ".join(sorted(context.agents))
        # The model's name for it, cut: the result goes to the history, the model, the thread.
        shown = _SHORT.repr(agent)
        return f"Error: there is no agent {shown} (agents: {known}); nothing was delegated."
    if not isinstance(task, str) or not task.strip():
        return "Error: delegate needs a task; nothing was delegated."
    if len(task) > MAX_TASK_LENGTH:
        return (
            f"Error: the task is longer than {MAX_TASK_LENGTH} characters; nothing was delegated."
        )
    if agent in context.chain:
        chain = " -> ".join(["main", *context.chain])
        return (
            f"Error: {agent} is already working up this chain ({chain}): an agent may not "
            "delegate to itself or to one that delegated to it. Do the task yourself or ask "
            "another agent."
        )
    if context.at_limit:
        return (
            f"Error: delegation is limited to {context.max_depth} level(s) "
            "(max_delegation_depth); this agent may not delegate. Do the task yourself."
        )
    return None


def refusal(pause: Pause, *, now: datetime, max_retry_wait: timedelta) -> str | None:
    """The error result for a pause that cannot be taken as asked, or None."""
    if isinstance(pause, RetryAt):
        when = pause.when
        # A tzinfo whose utcoffset() is None leaves a datetime naive (Python's definition).
        if not isinstance(when, datetime) or when.utcoffset() is None:
            return (
                "Error: RetryAt needs a timezone-aware datetime (like "
                "datetime.now(UTC) + timedelta(minutes=5)); the call was not retried."
            )
        if _ahead(when, now) > max_retry_wait:
            return (
                f"Error: the tool asked to retry at {when.isoformat()}, more than "
                f"max_retry_wait ({max_retry_wait}) from now; the call was not retried."
            )
    timeout = pause.timeout if isinstance(pause, WaitForCallback) else None
    if timeout is not None and timeout > datetime.max - now:  # now + timeout: no such date
        return (
            f"Error: WaitForCallback timeout {timeout} is beyond any date; "
            "nothing waits for the callback and its URL is void."
        )
    if isinstance(pause, AskUser):
        question, choices = pause.question, pause.choices
        if not isinstance(question, str) or not question.strip():
            return "Error: ask_user needs a question; nothing was asked."
        if len(question) > MAX_QUESTION_LENGTH:
            return f"Error: the question is longer than {MAX_QUESTION_LENGTH} characters."
        if choices is not None and (
            not isinstance(choices, list)
            or len(choices) > MAX_CHOICES
            or not all(isinstance(c, str) and c.strip() for c in choices)
            or any(len(c) > MAX_CHOICE_LENGTH for c in choices)
            or len({c.strip() for c in choices}) != len(choices)  # told apart by more than spaces
        ):
            return (
                f"Error: choices must be up to {MAX_CHOICES} different, non-empty strings of "
                f"at most {MAX_CHOICE_LENGTH} characters; nothing was asked."
            )
    return None


async def given_up(turn: TurnContext, call: CallContext, pause: RetryAt) -> str | None:
    """The error result for a RetryAt from a call already retried ``max_retry_attempts``
    times, or None. Without a cap a tool that always asks again was retried forever, a row
    and audit events each time; the count is read from the call's stored retry rows, so a
    restart or another worker does not reset it."""
    retries = await turn.repo.retries_of_call(
        turn.run_id, tool_call_id=call.tool_call.tool_call_id or "", tool_name=call.tool_name
    )
    if retries < turn.max_retry_attempts:
        return None
    return f"Error: {call.tool_name} gave up after {retries} retries: {pause.reason}"


def _ahead(when: datetime, now: datetime) -> timedelta:
    """How far ``when`` (aware) is from ``now`` (naive UTC). Subtracting aware datetimes
    never leaves the calendar; converting one to UTC can (``datetime.max`` west of UTC,
    ``datetime.min`` east of it raised OverflowError, and the run failed)."""
    return when - now.replace(tzinfo=UTC)


def draft_for(
    turn: TurnContext,
    tool_name: str,
    hasher: PayloadHasher,
    tool_call: llm.ToolCall,
    armed_id: str | None,
    pause: Pause,
) -> ApprovalDraft:
    """The row of a call that paused (``refusal`` found nothing wrong with the pause).

    A callback armed by ``callback_url()`` keeps its row (the pause adopts it); a retry
    carries the call's payload hash, so only the very same call runs again.
    """
    now = turn.clock()
    arguments = dict(tool_call.arguments)
    common: dict[str, Any] = {
        "id": new_approval_id(),
        "tool_call_id": tool_call.tool_call_id or "",
        "tool_name": tool_name,
        "arguments": arguments,
        "payload_hash": hasher(tool_name, arguments),
        "approvers": [],
        "allow_self_approval": False,
    }
    if isinstance(pause, WaitForCallback):
        policy = turn.wait_policy(tool_name)
        return ApprovalDraft(
            **{**common, "id": armed_id or common["id"]},
            on_expiry=policy.on_expiry,
            expires_at=now + (pause.timeout or policy.ttl),
            kind="callback",
            reason=pause.description,
            adopt=armed_id is not None,
        )
    if isinstance(pause, RetryAt):
        due = now + max(_ahead(pause.when, now), timedelta(0))
        return ApprovalDraft(
            **common,
            on_expiry="deny",
            # Retries come due (``due_at``), they never expire. ``expires_at`` still bounds
            # the row for the previous release, whose sweeper expires every pending row past
            # it: at ``due`` it would expire a retry during a rolling deploy before this
            # release's ~1 s timer ran it. ``max_retry_wait`` later, that release is gone.
            expires_at=due + turn.max_retry_wait,
            kind="retry",
            due_at=due,
            reason=pause.reason,
        )
    if isinstance(pause, Delegate):
        return _delegation_draft(turn, common, pause, now)
    if isinstance(pause, AskUser):
        policy = turn.question_policy()
        return ApprovalDraft(
            **{
                **common,
                "arguments": {"question": pause.question, "choices": pause.choices or None},
                "approvers": list(policy.approvers) or [turn.requester],
                "allow_self_approval": True,
            },
            on_expiry=policy.on_expiry,
            expires_at=now + policy.ttl,
            kind="question",
        )
    raise RuntimeError(f"{tool_name} raised an unknown kind of pause: {pause!r}")


def _delegation_draft(
    turn: TurnContext, common: dict[str, Any], pause: Delegate, now: datetime
) -> ApprovalDraft:
    """The ``delegation`` row of a delegate call, with its child run (delegation_refusal
    found nothing wrong): the agent's system prompt, then the task as given."""
    assert turn.delegation is not None
    model_id, system_prompt = turn.delegation.agents[pause.agent]
    history: list[dict[str, Any]] = [
        dict(Message(role="system", parts=[TextPart(text=system_prompt)]).to_dict()),
        dict(Message(role="user", parts=[TextPart(text=pause.task)]).to_dict()),
    ]
    child = ChildRun(run_id=new_run_id(), agent=pause.agent, model_id=model_id, history=history)
    return ApprovalDraft(
        **common,
        on_expiry="deny",
        expires_at=now + DELEGATION_HORIZON,
        kind="delegation",
        reason=pause.agent,
        child=child,
    )


def call_context(turn: TurnContext, tool: llm.Tool, tool_call: llm.ToolCall) -> CallContext:
    """What ``callback_url()`` needs to store a token for this call, bound to it."""
    policy = turn.wait_policy(tool.name)

    def armed(digest: str) -> ArmedCallback:
        return ArmedCallback(
            id=new_approval_id(),
            run_id=turn.run_id,
            turn=turn.turn_number + 1,  # the pause that follows stores its rows there
            tool_call_id=tool_call.tool_call_id or "",
            tool_name=tool.name,
            arguments=dict(tool_call.arguments),
            token_hash=digest,
            expires_at=turn.clock() + policy.ttl,
        )

    async def arm(digest: str) -> str:
        callback = armed(digest)
        await turn.repo.arm_callback(callback, owner=turn.owner or "", now=turn.clock())
        return callback.id

    def arm_here(digest: str) -> str:
        callback = armed(digest)
        turn.repo.arm_callback_blocking(callback, owner=turn.owner or "", now=turn.clock())
        return callback.id

    return CallContext(
        tool_name=tool.name,
        tool_call=tool_call,
        arm=arm,
        arm_here=arm_here,
        loop=asyncio.get_running_loop(),
        base_url=turn.base_url,
    )
