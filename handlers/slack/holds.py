"""The thread's progress message while an operator holds a run (issue 19 §2).

Owns no state: it shows, from the rows, whether a run is held (Resume and Stop), pausing at its
next safe point, or back to waiting on people or working (Pause and Stop), by editing the
run's progress message (``runs.progress_ts``) in place, or posting one and recording it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from slack_sdk.web.async_client import AsyncWebClient

from handlers.blocks import held_blocks, hold_text, waiting_text, working_blocks
from handlers.slack.failures import SLACK_FAILURES
from storage.models import Run
from storage.repository import Repository

log = logging.getLogger(__name__)

WORKING = ":hourglass_flowing_sand: Working on it…"


# Two editors may show a hold at once (the Pause click's answer and the drive reaching its
# safe point), and the later chat.update wins whatever it read: each editor reads again after
# its edit and edits once more if the run moved on, as card edits do. A few rounds reach the
# last state (a hold moves through at most pausing → held → released).
_EDIT_ROUNDS = 4

View = tuple[tuple[object, ...], str, list[dict[str, object]]]


async def show_hold(
    repo: Repository, client_for: Callable[[str], Awaitable[AsyncWebClient]], run: Run
) -> None:
    """Show on the run's progress message where an operator's hold stands: Resume while
    it holds the run, "pausing…" until its safe point, the waiting text (or Working)
    once released. Posted (and kept as the progress message) when there is none."""
    view = await _hold_view(repo, run.id)
    for _ in range(_EDIT_ROUNDS):
        if view is None:
            return
        current, (state, text, blocks) = view
        if not await _show(repo, client_for, current, text, blocks):
            return
        view = await _hold_view(repo, run.id)
        if view is not None and view[1][0] == state:
            return


async def _hold_view(repo: Repository, run_id: str) -> tuple[Run, View] | None:
    """The run as it stands and what its progress message shows of it (None once ended)."""
    current = await repo.get_run(run_id)
    if current is None or current.status in ("completed", "failed", "cancelled"):
        return None
    hold = await repo.hold_of(current.id)
    pending = [a for a in await repo.approvals_for_run(current.id) if a.status == "pending"]
    if hold is not None and current.status == "paused":
        text = hold_text(hold.requested_by, hold.reason, in_effect=True)
        if pending:
            text += "\n" + waiting_text(pending)
        blocks = held_blocks(text, current.id)
    elif hold is not None:
        text = hold_text(hold.requested_by, hold.reason, in_effect=False)
        blocks = working_blocks(text, current.id)
    elif current.status == "paused":
        text = waiting_text(pending)
        blocks = working_blocks(text, current.id)
    else:
        text = WORKING
        blocks = working_blocks(text, current.id)
    return current, ((current.status, text), text, blocks)


async def _show(
    repo: Repository,
    client_for: Callable[[str], Awaitable[AsyncWebClient]],
    current: Run,
    text: str,
    blocks: list[dict[str, object]],
) -> bool:
    """Edit the progress message (or post one and record it); False when Slack refused."""
    try:
        client = await client_for(current.team_id)
        if current.progress_ts:
            await client.chat_update(
                channel=current.channel, ts=current.progress_ts, text=text, blocks=blocks
            )
            return True
        posted = await client.chat_postMessage(
            channel=current.channel, thread_ts=current.thread_ts, text=text, blocks=blocks
        )
    except SLACK_FAILURES as exc:
        log.error("run %s: could not show its pause: %s", current.id, exc)
        return False
    if posted.get("ts"):
        await repo.set_progress(current.id, posted["ts"])
    return True
