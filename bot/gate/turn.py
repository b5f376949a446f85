"""One drive of a run as the gate sees it: ``TurnContext`` and what the gate raises.

Owns no durable state: the context carries the run's ids, the repository, the approvals read
when the drive started and the rows its calls draft (the runner stores them). It travels in
the ``current_turn`` contextvar, which llm copies into the tasks that run sibling calls.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import llm

from bot.gate.stream_events import EventListener, RunEvent
from bot.ops.outage import OutageLog
from bot.pauses import ToolProgress
from bot.policy import Policy, RecoveryPolicy
from storage.repository import ApprovalDraft, Repository

_log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class DelegationContext:
    """What the built-in ``delegate`` tool needs (issue 20 section 1): the configured agents
    (name -> model id and system prompt), ``max_delegation_depth``, and the agents up this
    run's chain, the run's own last (empty for the main agent)."""

    agents: dict[str, tuple[str, str]]
    max_depth: int
    chain: tuple[str, ...] = ()

    @property
    def at_limit(self) -> bool:
        """This run's agent is ``max_delegation_depth`` deep: it may not delegate."""
        return len(self.chain) >= self.max_depth


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
    # Until when the lease is known to be ours: the deadline last written (by the claim, a
    # renewal or a recorded result). A result waits out a database outage until then.
    lease_expires_at: datetime | None = None
    # The process's record of a database outage (bot.ops.outage): one line when it starts.
    outages: OutageLog = field(default_factory=OutageLog)
    # The process's runs whose result waits out an outage (its sweeper leaves them alone).
    recording: set[str] = field(default_factory=set)
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
    # longest RetryAt wait, and each tool's ttl and on_expiry for its waits. ask_user's policy
    # is asked for when a question is drafted: making it cost 33 000 instructions a drive.
    base_url: str = ""
    question_policy: Callable[[], Policy] = Policy
    max_retry_wait: timedelta = timedelta(days=1)
    max_retry_attempts: int = 5
    wait_policy: Callable[[str], Policy] = lambda _name: Policy()
    # Each tool's recovery keys (on_error = "ask": bot.gate.recoveries).
    recovery_policy: Callable[[str], RecoveryPolicy] = lambda _name: RecoveryPolicy()
    # Where the run's conversation is: rules on arguments see it as ``channel``.
    channel: str = ""
    # Long calls (bot.gate.checkpoints): why a call must stop at its next checkpoint (a
    # shutdown in progress; an operator's pause), else None; where ``progress()`` goes.
    interruption: Callable[[], str | None] = lambda: None
    on_progress: Callable[[ToolProgress], None] | None = None
    # Where the model's text and each call's task go as they happen (bot.gate.stream_events).
    on_event: EventListener | None = None

    # A replay's (``Runner.carry_on``): the callbacks that calls of a drive that died armed
    # for the pause it never stored, still waiting or already completed. That call ran and
    # handed its URL out; the same call in the replay waits on its row, it does not run again.
    armed_by_dead_drive: list[Any] = field(default_factory=list)
    # A replay's too: calls a dead drive recorded under a standing grant (bot.policy.grants). The
    # same call in the replay is answered from its row (run, ran, or outcome unknown).
    granted_by_dead_drive: list[Any] = field(default_factory=list)
    # A run an operator held before a model call (bot.gate.safe_points): its last calls'
    # results, by tool call id, handed back as is when llm re-executes those calls.
    held_results: dict[str, Any] = field(default_factory=dict)
    # The safe points' shortcut (bot.gate.safe_points): ``hold_epoch`` counts the moments
    # something outside this drive's statements may have happened (a safe point passed, a
    # tool or model call ended); ``hold_clear_epoch`` is the epoch in which a statement of
    # this drive last read "no hold" (the result's recording, a fresh run's opening). The
    # tool runners (bot.gate.tool_calls) and the drive's loop add 1 when a call ends.
    hold_epoch: int = 0
    hold_clear_epoch: int | None = None
    # Drafts of new calls that only ask for approval, drafted without a hold read: the
    # pause that stores them is their safe point (``save_pause(stop_if_held=True)``).
    unchecked_drafts: bool = False
    # What the model wrote in the response whose calls the gate is answering now (the drive
    # sets it before llm executes them): each approval keeps it as its "why".
    why: str = ""
    # Sub-agents (bot.gate.pause_rows): None when no agent is configured.
    delegation: DelegationContext | None = None

    def hold_read_since(self, epoch: int, action: str | None) -> None:
        """A statement issued in ``epoch`` read the run's hold: ``action`` (None: none)."""
        if action is None and epoch == self.hold_epoch:
            self.hold_clear_epoch = epoch

    def emit(self, event: RunEvent) -> None:
        """Tell the thread (best effort: a listener's failure never touches the run)."""
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception as exc:
            _log.warning("run %s: an event listener failed: %s", self.run_id, exc)

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
    if not rows:  # no replay (almost every drive): the arguments' round trip through JSON
        return None  # would cost 35 000 instructions, twice per new gated call
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
