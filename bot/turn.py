"""One drive of a run as the gate sees it: ``TurnContext`` and what the gate raises.

Owns no durable state: the context carries the run's ids, the repository, the approvals read
when the drive started and the rows its calls draft (the runner stores them). It travels in
the ``current_turn`` contextvar, which llm copies into the tasks that run sibling calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import llm

from bot.policy import Policy
from storage.repository import ApprovalDraft, Repository


class ApprovalRequired(llm.PauseChain):
    """Raised by the gate: this call waits (for a human's decision or answer, another
    system's callback, or a time); its row is in ``TurnContext.drafts``."""


class GateFailure(llm.PauseChain):
    """The gate itself failed (storage error, bug): the run must end loudly.

    A PauseChain subclass so that llm propagates it instead of turning it into an
    ``Error: …`` tool result that the model would shrug off.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"approval gate failed: {original!r}")
        self.original = original


class HandedOver(llm.PauseChain):
    """This drive lost its run's lease: another drive carries the run on, so stop quietly."""


@dataclass
class TurnContext:
    run_id: str
    requester: str
    repo: Repository
    clock: Callable[[], datetime]
    # The lease owner of this drive (fences the start of gated calls), and the deadline a
    # renewal of its lease sets now (renewed with each gated call's result).
    owner: str | None = None
    lease_until: Callable[[], datetime] | None = None
    # The approvals of the resumed history's trailing calls, by tool call id, read once when
    # the drive starts: every one is decided by then, and decided ones only move through the
    # conditional UPDATEs below. Each answers its call once (``take_approval``).
    approvals: dict[str, Any] = field(default_factory=dict)
    drafts: list[ApprovalDraft] = field(default_factory=list)
    still_pending: list[str] = field(default_factory=list)
    failures: list[GateFailure] = field(default_factory=list)
    lease_lost: bool = False
    # The run's turn while this drive runs: a pause stores its rows under the next one.
    turn_number: int = 0
    # For the other pauses (bot.pauses): the base of callback URLs, ask_user's policy, the
    # longest RetryAt wait, and each tool's ttl and on_expiry for its waits.
    base_url: str = ""
    question_policy: Policy = field(default_factory=Policy)
    max_retry_wait: timedelta = timedelta(days=1)
    max_retry_attempts: int = 5
    wait_policy: Callable[[str], Policy] = lambda _name: Policy()
    # Where the run's conversation is: rules on arguments see it as ``channel``.
    channel: str = ""

    # A replay's (``Runner.carry_on``): the callbacks that calls of a drive that died armed
    # for the pause it never stored, still waiting or already completed. That call ran and
    # handed its URL out; the same call in the replay waits on its row, it does not run again.
    armed_by_dead_drive: list[Any] = field(default_factory=list)
    # A replay's too: calls a dead drive recorded under a standing grant (bot.grants). The
    # same call in the replay is answered from its row (run, ran, or outcome unknown).
    granted_by_dead_drive: list[Any] = field(default_factory=list)

    def take_approval(self, tool_call: llm.ToolCall) -> Any | None:
        """The approval requested for this call, at most once per drive."""
        return self.approvals.pop(tool_call.tool_call_id or "", None)

    def take_armed_by_dead_drive(self, tool_name: str, tool_call: llm.ToolCall) -> Any | None:
        """The callback a dead drive armed for this very call (same tool and arguments), once."""
        return _take_same_call(self.armed_by_dead_drive, tool_name, tool_call)

    def take_granted_by_dead_drive(self, tool_name: str, tool_call: llm.ToolCall) -> Any | None:
        """The grant's approval a dead drive recorded for this very call, once."""
        return _take_same_call(self.granted_by_dead_drive, tool_name, tool_call)


def _take_same_call(rows: list[Any], tool_name: str, tool_call: llm.ToolCall) -> Any | None:
    arguments = json.loads(json.dumps(dict(tool_call.arguments), default=str))
    for row in rows:
        if row.tool_name == tool_name and row.arguments == arguments:
            rows.remove(row)
            return row
    return None


current_turn: ContextVar[TurnContext] = ContextVar("approval_bot_turn")


class ToolRaised(Exception):
    """Carries the tool's own exception past the gate's failure handling."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original
