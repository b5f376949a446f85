"""What a caller gives the runner (a :class:`Request`) and what it gets back (a
:class:`RunOutcome`): plain records, no state."""

from __future__ import annotations

from dataclasses import dataclass, field

from ulid import ULID

from storage.models import Approval, Run


@dataclass
class Request:
    """Something a person asked the bot, and where."""

    text: str
    requester: str
    team_id: str = ""
    channel: str = ""
    thread_ts: str = ""
    # Who asked and where, for the system prompt of a new conversation.
    context: str = ""
    conversation_key: str | None = None

    def key(self) -> str:
        if self.conversation_key:
            return self.conversation_key
        if self.channel and self.thread_ts:
            return f"{self.team_id}:{self.channel}:{self.thread_ts}"
        return f"adhoc:{ULID()}"


@dataclass
class RunOutcome:
    """Where a run stands after the runner let go of it; what the caller should show."""

    run_id: str
    status: str  # completed | paused | held | failed | cancelled | busy | handed_over
    answer: str | None = None
    error: str | None = None
    new_approvals: list[Approval] = field(default_factory=list)
    run: Run | None = None
    # Sub-agents (issue 20 section 1): the child runs this pause started (the caller drives
    # each), and the parent whose resume this child's end claimed (the caller resumes it).
    children: list[Run] = field(default_factory=list)
    parent_resume: str | None = None
