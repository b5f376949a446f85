"""Streamed answers with a task per tool call (issue 21 §1), against the Slack stand-in.

The answer streams into the thread (chat.startStream → appendStream → stopStream), each tool
call is a task (pending → in_progress → complete or error), a pause stops the stream and its
card follows, a resume streams anew, and a workspace whose Slack refuses streaming gets the
edited "Working on it…" message after one logged fallback. SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.engine import RunOutcome
from handlers.slack.publish import NO_LONGER_WAITING
from handlers.slack.streams import close_stream
from playground.slack_server import Message
from storage.repository import Repository
from tests.conftest import BASE_CONFIG, make_config
from tests.support import checkpoint_tools, ops_tools
from tests.support.scripted_model import ScriptedModel, calls
from tests.support.slack_harness import CHANNEL, Harness, running_bot

REQUESTER = "U0REQUESTER"
APPROVER = "U0APPROVER1"


@pytest.fixture
async def slack(repo: Repository) -> AsyncIterator[Harness]:
    # broken_tool runs without approval here: its exception is a task in error.
    policies = {k: v for k, v in BASE_CONFIG["policies"].items() if k != "broken_tool"}
    async with running_bot(make_config(streaming="auto", policies=policies), repo) as harness:
        yield harness


def steps(*steps: dict[str, Any]) -> str:
    return json.dumps({"steps": list(steps)})


def streams(slack: Harness, thread_ts: str) -> list[Message]:
    return [m for m in slack.server.thread(CHANNEL, thread_ts) if m.stream_state is not None]


def flat(stream: Message) -> list[tuple[str, ...]]:
    """The stream's chunks in order: text as it came, tasks by call and status."""
    out: list[tuple[str, ...]] = []
    for chunk in stream.chunks:
        if chunk["type"] == "markdown_text":
            out.append(("text", chunk["text"]))
        elif chunk["type"] == "task_update":
            out.append(("task", chunk["title"], chunk["status"]))
    return out


async def test_the_answer_streams_with_a_task_per_call_in_order(slack: Harness) -> None:
    text = steps(
        {
            "chunks": ["Checking ", "both ", "services."],
            "tool_calls": [
                {"name": "get_status", "arguments": {"service": "web"}, "id": "c1"},
                {"name": "broken_tool", "arguments": {"service": "db"}, "id": "c2"},
            ],
        }
    )
    reply = await slack.mention(REQUESTER, text)
    assert reply.message is not None
    [start] = slack.server.calls_to("chat.startStream")
    assert start.ok and start.args["thread_ts"] == reply.message.ts
    # Slack wants the recipient when a stream is in a channel.
    assert start.args["recipient_user_id"] == REQUESTER
    assert start.args["recipient_team_id"] == slack.server.team_id
    [stream] = streams(slack, reply.message.ts)
    assert stream.stream_state == "stopped"
    buttons = [e["action_id"] for _, e in stream.buttons()]
    assert buttons == ["run_pause", "run_stop"], "Pause and Stop stay on the working message"

    shown = flat(stream)
    texts = [c[1] for c in shown if c[0] == "text"]
    assert texts[0] == "Checking both services."  # the pieces coalesced, in order
    assert texts[-1].startswith("Results: get_status=web is healthy; broken_tool=Error")
    web = [c[2] for c in shown if c[0] == "task" and c[1] == 'get_status(service="web")']
    db = [c[2] for c in shown if c[0] == "task" and c[1] == 'broken_tool(service="db")']
    assert web == ["pending", "in_progress", "complete"]
    assert db == ["pending", "in_progress", "error"]
    assert shown.index(("text", texts[0])) < shown.index(
        ("task", 'get_status(service="web")', "pending")
    )
    [done] = [t for t in stream.tasks if t["status"] == "complete"]
    assert done["output"] == "web is healthy"
    [failed] = [t for t in stream.tasks if t["status"] == "error"]
    assert "db exploded" in failed["output"]

    # Coalesced: a handful of appends, not one per piece and status.
    assert len(slack.server.calls_to("chat.appendStream")) <= 3
    assert [c for c in slack.server.calls_to("chat.stopStream") if c.ok]
    # Shown once: no second copy of the answer, no hourglass, nothing left in the outbox.
    others = [m for m in slack.server.thread(CHANNEL, reply.message.ts) if m is not stream]
    assert not [m for m in others if m.bot_id], [m.text for m in others]
    assert await slack.repo.answers_to_post(_far_future(), created_before=_far_future()) == []


async def test_a_pause_stops_the_stream_the_card_follows_and_a_resume_streams_anew(
    slack: Harness,
) -> None:
    ops_tools.EXECUTED.clear()
    text = steps(
        {
            "say": "Restarting web.",
            "tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}],
        }
    )
    reply = await slack.mention(REQUESTER, text)
    assert reply.message is not None
    [stream] = streams(slack, reply.message.ts)
    assert stream.stream_state == "stopped"
    assert stream.tasks[-1]["status"] == "pending"
    assert "waiting for a person" in stream.tasks[-1]["output"]
    [card] = slack.cards()
    assert card.thread_ts == reply.message.ts
    methods = [c.method for c in slack.server.calls if c.method.startswith("chat.")]
    stopped = methods.index("chat.stopStream")
    assert stopped < len(methods) - 1 - methods[::-1].index("chat.postMessage"), methods
    assert float(card.ts) > float(stream.ts), "the card follows the stream"

    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    assert ("restart_service", {"service": "web"}) in ops_tools.EXECUTED
    first, second = streams(slack, reply.message.ts)
    assert first is stream and second.stream_state == "stopped"
    assert [t["status"] for t in second.tasks] == ["complete"]
    assert second.tasks[0]["output"] == "restarted web"
    assert "Results: restart_service=restarted web" in second.text
    answers = [m for m in slack.server.thread(CHANNEL, reply.message.ts) if "Results:" in m.text]
    assert answers == [second], "the answer is shown once, in the new stream"


async def test_a_workspace_refusing_streaming_gets_the_progress_message_after_one_logged_fallback(
    slack: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    slack.server.refuse_streaming(error="not_allowed")
    caplog.set_level(logging.WARNING, logger="handlers.slack.streams")
    first = await slack.mention(REQUESTER, "hello")
    second = await slack.mention(REQUESTER, "again")
    assert first.message is not None and second.message is not None
    assert len(slack.server.calls_to("chat.startStream")) == 1, "the refusal is remembered"
    for reply in (first, second):
        assert reply.message is not None
        [answer] = [m for m in slack.server.thread(CHANNEL, reply.message.ts) if m.bot_id]
        assert answer.stream_state is None and answer.edited  # today's message, edited
        assert answer.text.startswith("You said:")
    fallbacks = [r for r in caplog.records if "refused text streaming" in r.getMessage()]
    assert len(fallbacks) == 1 and "not_allowed" in fallbacks[0].getMessage()


async def test_a_busy_answer_leaves_the_working_runs_stream_alone(slack: Harness) -> None:
    ScriptedModel.hold = asyncio.Event()  # the answer after the tool waits for the test
    try:
        first = await slack.server.mention(
            REQUESTER, CHANNEL, "<@U0BOT> " + calls(("get_status", {"service": "web"}))
        )
        assert first.message is not None
        thread_ts = first.message.ts
        for _ in range(100):
            if any(t["status"] == "complete" for m in streams(slack, thread_ts) for t in m.tasks):
                break
            await asyncio.sleep(0.05)
        await slack.server.mention(REQUESTER, CHANNEL, "<@U0BOT> again", thread_ts=thread_ts)
        for _ in range(100):
            if any("still working" in m.text for m in slack.server.thread(CHANNEL, thread_ts)):
                break
            await asyncio.sleep(0.05)
        [stream] = streams(slack, thread_ts)
        assert stream.stream_state == "streaming", "the busy answer stopped the run's stream"
    finally:
        ScriptedModel.hold.set()
        ScriptedModel.hold = None
    await slack.settle()
    assert stream.stream_state == "stopped"
    assert "Results: get_status=web is healthy" in stream.text


async def test_a_long_calls_progress_is_its_tasks_details(repo: Repository) -> None:
    checkpoint_tools.reset()
    config = make_config(
        streaming="on",
        tools=[*BASE_CONFIG["tools"], "tests.support.checkpoint_tools:migrate_tenants"],
    )
    async with running_bot(config, repo) as slack:
        reply = await slack.mention(REQUESTER, calls(("migrate_tenants", {"count": 50})))
        assert reply.message is not None
        [stream] = streams(slack, reply.message.ts)
    details = [
        c["details"] for c in stream.chunks if c["type"] == "task_update" and c.get("details")
    ]
    assert details and all(d.startswith("migrate_tenants: ") for d in details), details
    assert len(details) < 50, "the reports are coalesced, not one chunk each"
    assert stream.tasks[0]["status"] == "complete"
    edits = [c for c in slack.server.calls_to("chat.update") if "migrate_tenants" in str(c.args)]
    assert edits == [], "no progress edit over the stream"


async def test_a_long_piece_of_text_streams_in_chunks_within_slacks_limit(
    slack: Harness,
) -> None:
    """Slack takes at most 12,000 characters per markdown_text chunk; one piece of the model's
    text may be longer, and escaping makes it up to 5 times longer (3,000 ``&`` are 15,000).
    Every chunk sent is within the limit, no entity is cut, and the answer shows once in the
    stream (review21 D3: it was refused msg_too_long and the stream broke)."""
    piece = "&" * 3000 + " then " + "x" * 13_000 + " END"
    reply = await slack.mention(REQUESTER, steps({"chunks": [piece]}))
    assert reply.message is not None
    sent = [
        c["text"]
        for call in slack.server.calls_to("chat.appendStream")
        + slack.server.calls_to("chat.stopStream")
        for c in call.args.get("chunks") or []
        if c.get("type") == "markdown_text"
    ]
    assert sent and all(len(t) <= 12_000 for t in sent), [len(t) for t in sent]
    assert all(call.ok for call in slack.server.calls_to("chat.appendStream"))
    assert "".join(sent) == "&amp;" * 3000 + " then " + "x" * 13_000 + " END"
    [stream] = streams(slack, reply.message.ts)
    assert stream.stream_state == "stopped" and stream.text.count("END") == 1
    others = [m for m in slack.server.thread(CHANNEL, reply.message.ts) if m is not stream]
    assert not [m for m in others if m.bot_id and "END" in m.text], "shown once"


async def test_a_stream_broken_before_a_pause_is_replaced_not_left_streaming(
    slack: Harness,
) -> None:
    """An append Slack refuses breaks the stream; when the run then pauses, the stream's
    message says it could not stream and loses Pause and Stop, instead of staying open,
    empty, with live buttons above the card (review21 D4)."""
    slack.server.fail("chat.appendStream", "invalid_arguments", times=1_000)
    text = steps(
        {
            "say": "Restarting web.",
            "tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}],
        }
    )
    reply = await slack.mention(REQUESTER, text)
    assert reply.message is not None
    [card] = slack.cards()
    [stream] = streams(slack, reply.message.ts)
    assert stream.stream_state == "stopped", "the broken stream was left streaming"
    assert "could not be streamed" in stream.text
    assert list(stream.buttons()) == [], "Pause and Stop stayed live above the card"
    assert float(card.ts) > float(stream.ts)


async def test_task_titles_are_escaped_like_their_output(slack: Harness) -> None:
    """A task's title shows the model's arguments: escaped as its output and the text are,
    so ``<!channel>`` in an argument cannot mention the channel (review21 D5)."""
    reply = await slack.mention(REQUESTER, calls(("get_status", {"service": "<!channel>"})))
    assert reply.message is not None
    [stream] = streams(slack, reply.message.ts)
    titles = [c["title"] for c in stream.chunks if c["type"] == "task_update"]
    assert titles and all(t == 'get_status(service="&lt;!channel&gt;")' for t in titles), titles
    assert "<!channel>" not in json.dumps(stream.chunks)


def _far_future() -> Any:
    from datetime import datetime

    return datetime(2100, 1, 1)


async def test_a_pause_told_late_stops_only_its_own_stream_not_the_resumes(
    slack: Harness,
) -> None:
    """Approved from /approvals (or a DM copy) before the pausing drive has told the thread
    of its pause, the run's resume already streams here: the late pause stops only the
    stream it opened, so the resume's answer is not cut off ("message_not_in_streaming_
    state") and left for the outbox."""
    text = steps(
        {
            "say": "Restarting web.",
            "tool_calls": [{"name": "restart_service", "arguments": {"service": "web"}}],
        }
    )
    reply = await slack.mention(REQUESTER, text)
    assert reply.message is not None
    [paused] = streams(slack, reply.message.ts)
    run = await slack.repo.get_run(slack.cards()[0].metadata["event_payload"]["run_id"])
    assert run is not None
    publisher = slack.bot.services.publisher
    resumed = await publisher.streams.start(run, [])  # the resume's stream, opened first
    assert resumed is not None
    late = RunOutcome(run.id, "paused", run=run)
    await close_stream(publisher.streams, slack.repo, publisher.answers, late, paused.ts)
    assert publisher.streams.live(run.id, resumed)
    assert slack.server.message(CHANNEL, resumed).stream_state == "streaming"  # type: ignore[union-attr]
    assert await publisher.streams.finish(run.id, resumed)


async def test_a_waiting_message_posted_after_the_resume_says_the_wait_is_over(
    slack: Harness,
) -> None:
    """The pause's waiting message becomes the run's progress message only while the run
    still waits: one posted after the run was approved and resumed says at once that it no
    longer waits, instead of "Waiting for a human" for good."""
    reply = await slack.mention(REQUESTER, calls(("restart_service", {"service": "web"})))
    [card] = slack.cards()
    await slack.server.click(APPROVER, card, "approval_approve")
    await slack.settle()
    run = await slack.repo.get_run(card.metadata["event_payload"]["run_id"])
    assert run is not None and run.status == "completed"
    late = RunOutcome(run.id, "paused", run=run)
    await slack.bot.services.publisher.outcome(late, progress_ts=None)
    assert reply.message is not None
    last = slack.thread_of(reply)[-1]
    assert last.text == NO_LONGER_WAITING, last.text
    assert (await slack.repo.get_run(run.id)).progress_ts is None  # type: ignore[union-attr]
