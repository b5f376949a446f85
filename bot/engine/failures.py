"""Why a drive stops without an answer: the model's mistakes it refuses before anything is
stored (two gated calls under one id, more gated calls than ``max_approvals_per_turn``), and
the one sentence the thread shows for any failure (:func:`describe_failure`): the first line
of the error only, since a database error goes on with its SQL and every parameter (the whole
history, a tool's arguments), which do not belong in a Slack thread.
"""

from __future__ import annotations

from collections import Counter

import llm
from llm.parts import Message, ToolCallPart

from bot.gate import TurnContext


class ToolCallIdReused(Exception):
    """The model gave a gated call an id another call of the same response also has.

    Results are matched to calls by id (by llm when it resumes, and by the database's
    approvals), so the other call's result would pass for the gated one's: the approved call
    would never run. Such a response is refused before anything is stored for it.
    """

    def __init__(self, tool_call_id: str) -> None:
        super().__init__(
            f"the model gave two tool calls the same id {tool_call_id!r}, so their results "
            "could not be told apart; no call that needs approval ran"
        )


class TooManyApprovals(Exception):
    """One model response asked for more gated calls than ``max_approvals_per_turn``."""

    def __init__(self, asked: int, limit: int) -> None:
        super().__init__(
            f"the agent asked for {asked} calls that need approval in one response, more "
            f"than the {limit} allowed (max_approvals_per_turn); none was stored or run"
        )


def reused_call_id(history: list[Message], turn: TurnContext) -> str | None:
    """The id of a new gated call that another call of its response shares, if any."""
    for message in reversed(history):
        calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
        if message.role == "assistant" and calls:
            if len(calls) == 1:
                return None  # the common response, one call: its id is its own (no Counter)
            seen = Counter(p.tool_call_id for p in calls if p.tool_call_id)
            for draft in turn.drafts:
                if seen[draft.tool_call_id] > 1:
                    return draft.tool_call_id
            return None
    return None


FAILURE_LINE_LIMIT = 500


def describe_failure(exc: BaseException, chain_limit: int) -> str:
    text = str(exc)
    if isinstance(exc, ValueError) and text.startswith("Chain limit"):
        return (
            f"Stopped: the agent needed more than {chain_limit} model calls (chain_limit) "
            "without finishing."
        )
    if isinstance(exc, llm.UnknownModelError):
        return f"Stopped: unknown model ({text}). Install its llm plugin or fix `model`."
    if isinstance(exc, llm.NeedsKeyException):
        return f"Stopped: the model needs an API key ({text})."
    if isinstance(exc, (ToolCallIdReused, TooManyApprovals)):
        return f"Stopped: {text}."
    # The first line only: a database error goes on with its SQL and every parameter (the
    # whole history, a tool's arguments), which do not belong in a Slack thread.
    lines = text.strip().splitlines()
    first = lines[0][:FAILURE_LINE_LIMIT] if lines else ""
    return f"Stopped by an error: {type(exc).__name__}: {first}"
