"""A long tool's ``progress()`` on its thread's progress message, edited at most once a second.

The engine hands every report to :meth:`ProgressEdits.report` (on the event loop; see
``bot.gate.checkpoints``); the latest report of each run is kept in memory and the run's
progress message (``runs.progress_ts``, the one its outcome replaces) is edited with it, at
most once per ``interval`` per run: a report that comes sooner is held and shown when the
interval is up (only the latest counts); the message keeps its Pause and Stop buttons. Before
the run's outcome replaces the message, :meth:`settle` drops what is held and waits for an
edit under way, so progress never overwrites an answer. Nothing durable: a run resumed
elsewhere reports again from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.pauses import ToolProgress
from handlers.blocks.holds import working_blocks
from handlers.blocks.progress import tool_progress_text
from handlers.slack.failures import SLACK_FAILURES
from handlers.slack.workspaces import WorkspaceClients
from storage.repository import Repository

log = logging.getLogger(__name__)

INTERVAL = 1.0


@dataclass
class _Shown:
    last_edit: float = float("-inf")
    held: ToolProgress | None = None
    timer: asyncio.TimerHandle | None = None
    editing: set[asyncio.Task[None]] = field(default_factory=set)


class ProgressEdits:
    def __init__(
        self, repo: Repository, clients: WorkspaceClients, *, interval: float = INTERVAL
    ) -> None:
        self.repo = repo
        self.clients = clients
        self.interval = interval
        self._runs: dict[str, _Shown] = {}
        # Shows a report elsewhere, if it can (a streamed run: its task's details); True: done.
        self.divert: Callable[[ToolProgress], bool] = lambda _progress: False

    def report(self, progress: ToolProgress) -> None:
        """The latest progress of a run's call: shown now, or when the interval is up."""
        if self.divert(progress):
            return
        loop = asyncio.get_running_loop()
        shown = self._runs.setdefault(progress.run_id, _Shown())
        shown.held = progress
        if shown.timer is not None:
            return  # an edit is already due: it shows the latest
        wait = shown.last_edit + self.interval - loop.time()
        if wait <= 0:
            self._edit(progress.run_id, shown)
        else:
            shown.timer = loop.call_later(wait, self._edit, progress.run_id, shown)

    def _edit(self, run_id: str, shown: _Shown) -> None:
        shown.timer = None
        progress, shown.held = shown.held, None
        if progress is None:
            return
        shown.last_edit = asyncio.get_running_loop().time()
        task = asyncio.get_running_loop().create_task(self._show(progress))
        shown.editing.add(task)
        task.add_done_callback(shown.editing.discard)

    async def _show(self, progress: ToolProgress) -> None:
        run = await self.repo.get_run(progress.run_id)
        if run is None or run.progress_ts is None or run.status != "running":
            return
        text = tool_progress_text(progress)
        try:
            client = await self.clients.for_team(run.team_id)
            await client.chat_update(
                channel=run.channel,
                ts=run.progress_ts,
                text=text,
                # Pause and Stop stay on it: a long tool is what they are for (issue 19 §2).
                blocks=working_blocks(text, run.id),
            )
        except SLACK_FAILURES as exc:
            log.warning("run %s: could not show its progress: %s", run.id, exc)

    async def settle(self, run_id: str) -> None:
        """The run's outcome is about to replace its progress message: show nothing more."""
        shown = self._runs.pop(run_id, None)
        if shown is None:
            return
        if shown.timer is not None:
            shown.timer.cancel()
        for task in list(shown.editing):
            with contextlib.suppress(Exception):
                await task
