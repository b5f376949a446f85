"""A run's answer streamed into its thread as the model writes, with a task per tool call.

Slack's text streaming (``chat.startStream`` → ``chat.appendStream`` → ``chat.stopStream``)
shows the model's text and each call's ``task_update`` (pending, in progress, complete or
error) in one message. Nothing here is durable, and nothing needs to be: the stream's
message is the run's progress message (``runs.progress_ts``), so the answer outbox
(:mod:`handlers.slack.answers`) still holds the run's last message. A stream this process
stopped after the whole answer was appended marks the answer done without posting it; a
stream that did not finish (the process died, Slack refused an append) leaves the answer to
the outbox, which replaces the stream's message with it (``chat.update``, shown once however
often it is sent). So no answer is lost and none is shown twice.

Slack limits ``chat.appendStream`` (Tier 4: about 100 a minute per workspace): events are
queued in memory and sent coalesced, at most one append per stream per
:data:`APPEND_INTERVAL` and at most :data:`APPENDS_PER_MINUTE` per workspace; a rate-limited
append is sent again after its ``Retry-After``. Text is escaped before it is cut into
``markdown_text`` chunks of at most Slack's 12,000 characters (escaping makes it up to 5
times longer), never inside an entity. With ``streaming = "auto"`` a workspace whose
Slack refuses streaming (an unknown method, a feature not enabled) falls back to the edited
progress message; the refusal is kept for the process's life and logged once (a workspace
that gets the feature later streams after a restart, with nothing stored to clear).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.engine import RunOutcome
from bot.gate.stream_events import RunEvent
from bot.ops import failpoint
from bot.pauses import ToolProgress
from handlers.blocks import escape
from handlers.blocks.progress import tool_progress_text
from handlers.slack.answers import Answers
from handlers.slack.failures import SLACK_FAILURES, transient
from handlers.slack.workspaces import WorkspaceClients
from storage.models import Run
from storage.repository import Repository

log = logging.getLogger(__name__)

APPEND_INTERVAL = 1.0
APPENDS_PER_MINUTE = 80
# Slack's limit on one markdown_text chunk.
MARKDOWN_LIMIT = 12_000
# Rate-limited appends of one stream tried again at most this many times, then it is broken.
APPEND_RETRIES = 3
# Errors by which Slack says it does not stream for this app or workspace (not a failure of
# one call): ``auto`` falls back to the edited progress message and remembers the workspace.
REFUSALS = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "not_allowed_token_type",
        "feature_not_enabled",
        "method_deprecated",
        "missing_scope",
        "team_not_allowed",
        "not_supported",
    }
)
Chunk = dict[str, Any]
# A streamed answer whose worker died: another drive carries the run on in a new stream.
INTERRUPTED = ":arrows_counterclockwise: Interrupted: carrying on below."
# A stream Slack broke (an append refused) when the run paused: its message is replaced, so
# it neither stays "streaming" nor keeps live Pause and Stop buttons above the card.
BROKEN = ":warning: This answer could not be streamed here: it carries on below."


@dataclass
class _Stream:
    run_id: str
    team_id: str
    channel: str
    ts: str
    pending: list[Chunk] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None
    sending: bool = False
    last_append: float = float("-inf")
    broken: bool = False
    # Each task's latest update, by id: a long call's progress() updates its details.
    tasks: dict[str, Chunk] = field(default_factory=dict)


class Streams:
    """The streams this process has open, by run. ``mode``: "auto", "on" or "off"."""

    def __init__(
        self, clients: WorkspaceClients, mode: str = "auto", *, interval: float = APPEND_INTERVAL
    ) -> None:
        self.clients = clients
        self.mode = mode
        self.interval = interval
        self.refused: dict[str, str] = {}  # team -> the error it refused streaming with
        self._live: dict[str, _Stream] = {}
        self._team_next: dict[str, float] = {}

    def wanted(self, team_id: str) -> bool:
        """Whether a run of this workspace should stream its answer."""
        if self.mode == "off":
            return False
        return self.mode == "on" or team_id not in self.refused

    def live(self, run_id: str, ts: str | None = None) -> bool:
        """Whether this process streams the run's answer (into the message ``ts``, if given)."""
        stream = self._live.get(run_id)
        return stream is not None and (ts is None or stream.ts == ts)

    async def start(self, run: Run, blocks: list[Chunk]) -> str | None:
        """Start the run's stream, ``blocks`` at its top (the Pause and Stop buttons); its
        ts, or None when Slack would not stream (the caller posts the progress message)."""
        try:
            client = await self.clients.for_team(run.team_id)
            response = await client.chat_startStream(
                channel=run.channel,
                thread_ts=run.thread_ts,
                # Slack wants both when the stream is in a channel (not a DM).
                recipient_user_id=run.requester,
                recipient_team_id=run.team_id or None,
                chunks=[{"type": "blocks", "blocks": blocks}],
            )
        except SlackApiError as exc:
            self._refused(run, exc)
            return None
        except SLACK_FAILURES as exc:
            log.error("run %s: could not start streaming its answer: %s", run.id, exc)
            return None
        ts = str(response.get("ts") or "")
        if not ts:
            return None
        self._live[run.id] = _Stream(
            run.id, run.team_id, str(response.get("channel") or run.channel), ts
        )
        return ts

    def _refused(self, run: Run, exc: SlackApiError) -> None:
        error = str(exc.response.get("error") if exc.response is not None else "")
        if error not in REFUSALS:
            log.error("run %s: could not start streaming its answer: %s", run.id, exc)
            return
        if self.mode == "on":
            log.error(
                'run %s: Slack refused to stream its answer (%s) although streaming = "on"; '
                "this run shows the progress message",
                run.id,
                error,
            )
            return
        if run.team_id not in self.refused:
            self.refused[run.team_id] = error
            log.warning(
                "workspace %s: Slack refused text streaming (%s); its runs show the edited "
                'progress message instead (streaming = "auto")',
                run.team_id or "(default)",
                error,
            )

    def report(self, event: RunEvent) -> None:
        """The engine's listener (on the event loop): queue the event on its run's stream."""
        stream = self._live.get(event.run_id)
        if stream is None or stream.broken:
            return
        for chunk in _chunks(event):
            if chunk["type"] == "task_update":
                stream.tasks[chunk["id"]] = chunk
            self._send(stream, chunk)

    def progress(self, progress: ToolProgress) -> bool:
        """A long call's ``progress()`` as its task's details ("migrate_tenants: 7,431 /
        10,000"), when its run streams here; False: not streamed (the caller shows it)."""
        stream = self._live.get(progress.run_id)
        if stream is None or stream.broken:
            return stream is not None
        title = f"{escape(progress.tool_name)}("
        running = [
            t
            for t in stream.tasks.values()
            if t["status"] == "in_progress" and t["title"].startswith(title)
        ]
        if running:
            line = tool_progress_text(progress).split(" ", 1)[-1]  # without the hourglass
            self._send(stream, {**running[-1], "details": line})
        return True

    def _send(self, stream: _Stream, chunk: Chunk) -> None:
        _queue(stream.pending, chunk)
        if stream.sender is None:
            stream.sender = asyncio.get_running_loop().create_task(self._send_soon(stream))

    def _wait_for(self, stream: _Stream) -> float:
        now = asyncio.get_running_loop().time()
        team_next = self._team_next.get(stream.team_id, float("-inf"))
        at = max(stream.last_append + self.interval, team_next, now)
        self._team_next[stream.team_id] = at + 60.0 / APPENDS_PER_MINUTE
        return at - now

    async def _send_soon(self, stream: _Stream) -> None:
        try:
            retries = 0
            while stream.pending and not stream.broken:
                await asyncio.sleep(self._wait_for(stream))
                chunks, stream.pending = stream.pending, []
                stream.sending = True
                try:
                    client = await self.clients.for_team(stream.team_id)
                    await client.chat_appendStream(
                        channel=stream.channel, ts=stream.ts, chunks=chunks
                    )
                except SLACK_FAILURES as exc:
                    if transient(exc) and retries < APPEND_RETRIES:
                        retries += 1
                        stream.pending = chunks + stream.pending
                        await asyncio.sleep(_retry_after(exc))
                        continue
                    # The outbox replaces this message with the answer (handlers.slack.answers).
                    stream.broken = True
                    log.warning("run %s: could not append to its stream: %s", stream.run_id, exc)
                finally:
                    stream.sending = False
                    stream.last_append = asyncio.get_running_loop().time()
        finally:
            stream.sender = None

    async def finish(
        self, run_id: str, ts: str | None = None, last: list[Chunk] | None = None
    ) -> bool:
        """Stop the run's stream (the one in the message ``ts``, if given) with what is still
        queued (and ``last``); True when Slack took every chunk and the stop, so the thread
        shows the whole answer."""
        if not self.live(run_id, ts):
            return False
        stream = self._live.pop(run_id)
        sender = stream.sender
        if sender is not None and stream.sending:
            with contextlib.suppress(Exception):
                await sender  # an append in flight: the stop comes after it
        elif sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        if stream.broken:
            # Stop it all the same (nothing more to show), so Slack ends it; the caller
            # replaces what it shows.
            with contextlib.suppress(*SLACK_FAILURES):
                client = await self.clients.for_team(stream.team_id)
                await client.chat_stopStream(channel=stream.channel, ts=stream.ts)
            return False
        chunks = stream.pending
        for chunk in last or []:
            for piece in _pieces(chunk):
                _queue(chunks, piece)
        try:
            client = await self.clients.for_team(stream.team_id)
            await client.chat_stopStream(
                channel=stream.channel, ts=stream.ts, chunks=chunks or None
            )
        except SLACK_FAILURES as exc:
            log.warning("run %s: could not stop its stream: %s", run_id, exc)
            return False
        return True


async def open_stream(
    streams: Streams, repo: Repository, run: Run, stored: str | None, buttons: list[Chunk]
) -> str | None:
    """The run's answer streams from here (its ts is the run's progress message). A message
    a dead worker left (its stream, or a progress message) says it was interrupted: the
    answer streams below it, in full. None: Slack would not stream."""
    if stored is not None:
        try:
            client = await streams.clients.for_team(run.team_id)
            await client.chat_update(channel=run.channel, ts=stored, text=INTERRUPTED, blocks=[])
        except SLACK_FAILURES as exc:
            log.error("run %s: could not update its progress message: %s", run.id, exc)
        await repo.clear_progress(run.id, stored)
    # Pause and Stop only: a block stays in a stream once sent, and an hourglass would
    # outlive the answer below it.
    ts = await streams.start(run, [b for b in buttons if b.get("type") == "actions"])
    if ts is not None:
        await repo.set_progress(run.id, ts)
    return ts


async def close_stream(
    streams: Streams,
    repo: Repository,
    answers: Answers,
    outcome: RunOutcome,
    progress_ts: str | None,
) -> str | None:
    """Stop the run's stream, if this process streams it; the progress message left for the
    outcome to replace. A completed answer the stream showed in full is done (the outbox
    does not post it); any other outcome replaces the stream's message (a failure, a
    cancel) or follows it (a pause's waiting message and cards, a hold), as the progress
    message did."""
    run = outcome.run
    assert run is not None
    # A busy answer is about another request: the run it names works on, streaming. Only
    # the stream this drive opened is its to stop: a run approved (from /approvals, a DM
    # copy) before this drive told the thread of its pause already streams its resume here.
    if outcome.status == "busy" or not streams.live(run.id, progress_ts):
        return progress_ts
    whole = await streams.finish(run.id, progress_ts)
    if outcome.status == "completed" and whole:
        failpoint("stream_stopped")
        await answers.streamed(run.id)
        return progress_ts
    if outcome.status in ("paused", "held") and progress_ts:
        # The stream stays as it is (the waiting call's task says a card follows); the
        # waiting message is posted below it and becomes the progress message. A stream that
        # did not take it all is replaced by a line saying so: it would otherwise stay open,
        # part-shown, with live Pause and Stop above the card.
        if not whole:
            try:
                client = await streams.clients.for_team(run.team_id)
                await client.chat_update(
                    channel=run.channel, ts=progress_ts, text=BROKEN, blocks=[]
                )
            except SLACK_FAILURES as exc:
                log.error("run %s: could not replace its broken stream: %s", run.id, exc)
        await repo.clear_progress(run.id, progress_ts)
        return None
    return progress_ts


def _chunks(event: RunEvent) -> list[Chunk]:
    """The event as stream chunks: text escaped, then cut to Slack's :data:`MARKDOWN_LIMIT`
    per chunk (escaping can make it 5 times longer), never inside an entity."""
    if event.kind == "text":
        return _pieces({"type": "markdown_text", "text": escape(event.text)})
    # Escaped as the output and the text are: Slack's documentation does not say whether a
    # task's title renders mrkdwn, and a model's arguments must not mention @channel there.
    chunk: Chunk = {
        "type": "task_update",
        "id": event.task_id,
        "title": escape(event.title),
        "status": event.status,
    }
    if event.summary:
        chunk["output"] = escape(event.summary)
    return [chunk]


def _pieces(chunk: Chunk, size: int = MARKDOWN_LIMIT) -> list[Chunk]:
    """A markdown_text chunk (its text escaped already) in chunks of at most ``size``
    characters, none cut inside an entity such as ``&amp;``; other chunks as they are."""
    if chunk["type"] != "markdown_text":
        return [chunk]
    text, pieces = chunk["text"], []
    while len(text) > size:
        cut = size
        entity = text.rfind("&", cut - 5, cut)
        if entity != -1 and ";" not in text[entity:cut]:
            cut = entity
        pieces.append(text[:cut])
        text = text[cut:]
    if text or not pieces:
        pieces.append(text)
    return [{"type": "markdown_text", "text": piece} for piece in pieces if piece]


def _queue(pending: list[Chunk], chunk: Chunk) -> None:
    """Coalesce: text joins the text before it (fewer, larger chunks); every change of a
    task's status is kept, in order, but newer details (a long call's progress) of the same
    status replace the queued ones."""
    last = pending[-1] if pending else None
    if (
        last is not None
        and last["type"] == chunk["type"] == "markdown_text"
        and len(last["text"]) + len(chunk["text"]) <= MARKDOWN_LIMIT
    ):
        last["text"] += chunk["text"]
        return
    if (
        last is not None
        and last["type"] == chunk["type"] == "task_update"
        and (last["id"], last["status"]) == (chunk["id"], chunk["status"])
    ):
        pending[-1] = chunk  # newer details of the same status: only the latest is shown
        return
    pending.append(chunk)


def _retry_after(exc: BaseException) -> float:
    if isinstance(exc, SlackApiError) and exc.response is not None:
        with contextlib.suppress(TypeError, ValueError):
            return float(exc.response.headers.get("Retry-After", 1))
    return 1.0
