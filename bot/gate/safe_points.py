"""Safe points: where an operator's pause (or stop) of a run takes effect.

Owns no durable state: the hold is a ``run_holds`` row (:mod:`storage.stores.holds`), asked
for from Slack or the CLI on any replica. A drive looks for it before each tool call starts
(the gate calls :func:`check_hold` first) and before each model call (the drive's loop), and
a long tool's ``checkpoint()`` may look too: calls already executing finish and keep their
results, and the drive stores the history as it stands and releases the run
(``Repository.hold_run``).

One primary-key read per safe point, unless a statement the drive makes anyway already read
the hold with nothing run since (``TurnContext.hold_epoch``): the recording of a gated call's
result (before the model call that follows it) and the opening of a new run (before its first
model call). Nothing but this process's own code ran between that statement and the safe
point, so it is the safe point's read, taken a little earlier, as any read is. An approved
call's safe point is the transaction that starts it (``begin_execution(stop_if_held=True)``).
"""

from __future__ import annotations

import llm

from bot.gate.turn import TurnContext
from storage.repository import Repository


class HoldRequested(llm.PauseChain):
    """Raised at a safe point: an operator asked to pause (``action == "pause"``) or stop the
    run. A PauseChain, so llm propagates it (with the siblings' finished results)."""

    def __init__(self, run_id: str, action: str) -> None:
        super().__init__(f"run {run_id}: {action} requested by an operator")
        self.run_id = run_id
        self.action = action


async def hold_requested(repo: Repository, run_id: str) -> str | None:
    """The hold asked for on ``run_id`` (``"pause"`` or ``"stop"``), or None.

    The one check every safe point makes, K's ``checkpoint()`` included."""
    return await repo.hold_action(run_id)


async def hold_at_safe_point(turn: TurnContext) -> str | None:
    """The hold asked for on the drive's run, at one of its safe points (see the module's
    docstring): read, unless a statement of this drive read none since anything last ran."""
    epoch = turn.hold_epoch
    turn.hold_epoch += 1  # what follows a safe point (a call) needs a read of its own
    if turn.hold_clear_epoch == epoch:
        return None
    return await hold_requested(turn.repo, turn.run_id)


async def check_hold(turn: TurnContext) -> None:
    """Raise :class:`HoldRequested` at this safe point if the run's hold was asked for."""
    action = await hold_at_safe_point(turn)
    if action is not None:
        raise HoldRequested(turn.run_id, action)
