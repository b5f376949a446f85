"""Recovery by a person (``on_error = "ask"``): whether a failed call asks, and who decides.

Owns no state. A tool that raises (a pause is not an error) with ``on_error = "ask"`` pauses
its run on a ``recovery`` row (``bot.gate.recoveries``); this module says whether it may (at
most ``max_recoveries`` rows per call), who may decide the row (``recovery_by``, else the
tool's approvers, else the requester) and how long it waits (``recovery_ttl``, default the
tool's ``ttl``) before the model reads the error as it would have without asking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

ON_ERROR_CHOICES = ("fail", "ask")
DEFAULT_MAX_RECOVERIES = 3


@dataclass(frozen=True)
class RecoveryPolicy:
    """One tool's recovery keys, resolved against the top-level defaults."""

    on_error: str = "fail"
    # recovery_by: who decides instead of the tool's approvers (users and groups).
    recovery_by: list[str] = field(default_factory=list)
    max_recoveries: int = DEFAULT_MAX_RECOVERIES
    ttl: timedelta = timedelta(minutes=30)
    # The tool's approvers and whether its calls need approval (who decides by default).
    approvers: list[str] = field(default_factory=list)
    allow_self_approval: bool = False
    gated: bool = False
    allow_edit: bool = False
    # The tool's reminder (remind_after): one DM to those who decide while it still waits.
    remind_after: timedelta | None = None

    @property
    def asks(self) -> bool:
        return self.on_error == "ask"

    def deciders(self, requester: str) -> tuple[list[str], bool]:
        """Who may decide a recovery row of a call by ``requester``, and whether the
        requester may (``allow_self_approval`` of the row)."""
        if self.recovery_by:
            return list(self.recovery_by), True
        if self.gated:
            return list(self.approvers), self.allow_self_approval
        return [requester], True

    def may_ask_again(self, recoveries_so_far: int) -> bool:
        """Whether a call that already had ``recoveries_so_far`` recovery rows may get one
        more; past ``max_recoveries`` the error goes to the model as without asking."""
        return self.asks and recoveries_so_far < self.max_recoveries
