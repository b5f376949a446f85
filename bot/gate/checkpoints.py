"""Checkpoints of long calls (``bot.pauses.checkpoint``): storing them, stopping at them, and
resuming a call from its last one.

Owns no durable state of its own: the state is stored by ``Repository.save_checkpoint`` on the
call's approval (so only calls that run under an approval, ``executing``, store one; a call
needing no approval is replayed from the run's history like any other). A save renews the
run's lease in its transaction, and is fenced by it: a drive that lost its run stops there.

``safe_point`` is the one place a running call gives way: a lost lease, a shutdown in
progress (``TurnContext.interruption``); then an operator's hold (``run_holds``, read after the
state is stored): the call stops with :class:`HeldAtCheckpoint`, which the gate turns into the
drive's ``HoldRequested`` (held, or cancelled for a Stop; ``bot.gate.answers``).

A call found ``executing`` (its worker died, or shut down past its grace, or lost its run)
with a checkpoint stored is resumed by the drive that holds the run now, once (one
conditional UPDATE fenced by the run's lease): the same call, with the same arguments, and
``last_checkpoint()`` returns its state. Without one it is "outcome unknown", as ever.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.gate.safe_points import hold_requested
from bot.gate.turn import TurnContext
from bot.pauses import CallContext, Interrupted, ToolProgress
from storage.repository import StoredCheckpoint

log = logging.getLogger(__name__)


class HeldAtCheckpoint(Interrupted):
    """An operator asked to pause (``action == "pause"``) or stop the run: the call stops at
    this checkpoint, its state stored. An ``Interrupted`` (a BaseException), so that a tool's
    ``except Exception`` does not swallow it; the gate raises ``HoldRequested`` for it."""

    def __init__(self, run_id: str, action: str) -> None:
        super().__init__(f"run {run_id}: {action} requested by an operator")
        self.action = action


def safe_point(turn: TurnContext) -> str | None:
    """Why the call running now must stop at this checkpoint, or None to carry on."""
    if turn.lease_lost:
        return f"run {turn.run_id}: another drive holds the run now"
    return turn.interruption()  # a shutdown in progress


async def stop_if_held(turn: TurnContext) -> None:
    """The operators' safe point, after the state is stored: one primary-key read."""
    action = await hold_requested(turn.repo, turn.run_id)
    if action is not None:
        raise HeldAtCheckpoint(turn.run_id, action)


def enable_checkpoints(
    turn: TurnContext, call: CallContext, row: Any, resumed: StoredCheckpoint | None
) -> None:
    """Let the call ``row`` (an approval, executing) store checkpoints and report progress."""
    call.resumed_from = resumed.state if resumed is not None else None
    call.extra["run_id"] = turn.run_id
    approval_id = row.id

    async def save(text: str) -> None:
        lease_until = turn.lease_until() if turn.lease_until is not None else turn.clock()
        try:
            stored = await turn.repo.save_checkpoint(
                approval_id,
                state=text,
                owner=turn.owner or "",
                lease_until=lease_until,
                now=turn.clock(),
            )
        except Exception as exc:
            log.error("run %s: could not store a checkpoint of %s: %s", turn.run_id, row.id, exc)
            raise Interrupted(f"the checkpoint could not be stored: {exc}") from exc
        if not stored:
            turn.lease_lost = True
        else:
            turn.lease_expires_at = lease_until
        reason = safe_point(turn)
        if reason is not None:
            raise Interrupted(reason)
        await stop_if_held(turn)

    call.save_checkpoint = save
    call.report_progress = progress_reporter(turn)


def enable_progress(turn: TurnContext, call: CallContext) -> None:
    """A call without an approval: progress is shown; ``checkpoint()`` stores nothing (the
    run's history replays the call after a crash, from its start), so it stops the call only
    once another drive holds the run, not at a shutdown nor at an operator's pause (either
    would throw its work away: the call finishes, within a shutdown's grace, and the pause
    takes effect at the next safe point after it)."""
    call.extra["run_id"] = turn.run_id

    async def stop_if_handed_over(_text: str) -> None:
        if turn.lease_lost:
            raise Interrupted(f"run {turn.run_id}: another drive holds the run now")

    call.save_checkpoint = stop_if_handed_over
    call.report_progress = progress_reporter(turn)


def progress_reporter(turn: TurnContext) -> Any:
    def report(progress: ToolProgress) -> None:
        if turn.on_progress is None:
            return
        try:
            turn.on_progress(progress)
        except Exception:  # showing progress never breaks the call
            log.exception("run %s: could not report progress", turn.run_id)

    return report


async def resume_from_checkpoint(turn: TurnContext, row: Any) -> StoredCheckpoint | None:
    """Claim the resume of a call found ``executing`` from its checkpoint; None when it has
    none (or this drive does not hold the run, or the call moved on meanwhile)."""
    resumed = await turn.repo.resume_checkpointed(row.id, owner=turn.owner or "", now=turn.clock())
    if resumed is not None:
        log.warning(
            "run %s: resuming %s (approval %s) from its last checkpoint (saved %d times, "
            "resumed %d times)",
            turn.run_id,
            row.tool_name,
            row.id,
            resumed.saves,
            resumed.resumes,
        )
    return resumed
