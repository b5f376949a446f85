"""A streamed answer (issue 21 §1) whose process is killed with SIGKILL is answered once.

The stream holds no state: its message is the run's progress message and the answer stays
in the answer outbox until the stream that showed it in full was stopped. Killed mid-stream
while a tool runs, the run is taken over after its lease and streams again below the dead
stream, which now says it was interrupted. Killed after the run ended but before the stream
was stopped (an append in flight), or after the stop but before the answer was marked done,
the sweeper replaces the stream's message with the answer. Either way the thread shows the
answer once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from playground.slack_server import Message, SlackServer
from tests.faults.harness import Deployment, eventually, quiet_sweeps, request

INTERRUPTED = ":arrows_counterclockwise: Interrupted: carrying on below."


@pytest.fixture
async def deployment(slack: SlackServer, database_url: str, tmp_path: Path) -> Deployment:
    deployment = Deployment(slack, database_url, tmp_path, streaming="on", slow_tool_seconds=3)
    try:
        yield deployment  # type: ignore[misc]
    finally:
        await deployment.close()


def _streams(deployment: Deployment, thread_ts: str) -> list[Message]:
    return [m for m in deployment.bot_replies(thread_ts) if m.stream_state is not None]


async def _answered_once(deployment: Deployment, thread_ts: str, needle: str) -> Message:
    await deployment.answer(thread_ts, needle)
    await quiet_sweeps(deployment, 3)
    answers = deployment.answers(thread_ts, needle)
    assert len(answers) == 1, [m.text for m in deployment.bot_replies(thread_ts)]
    deadline = asyncio.get_running_loop().time() + 60
    while await deployment.rows("SELECT run_id FROM run_answers"):
        assert asyncio.get_running_loop().time() < deadline, "an answer left in the outbox"
        await asyncio.sleep(0.2)
    assert await deployment.rows("SELECT progress_ts FROM runs") == [(None,)]
    assert len(deployment.answers(thread_ts, needle)) == 1
    return answers[0]


async def test_killed_mid_stream_while_a_tool_runs_the_answer_streams_again_once(
    deployment: Deployment,
) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(request(("slow_status", {"service": "web"})))

    def tool_running() -> bool:
        return any(
            c.get("type") == "task_update" and c.get("status") == "in_progress"
            for m in _streams(deployment, asked.ts)
            for c in m.chunks
        )

    await eventually(tool_running, "the slow call streamed as a task in progress")
    [dead] = _streams(deployment, asked.ts)
    assert dead.stream_state == "streaming"
    await deployment.kill(bot)

    await deployment.start()
    answer = await _answered_once(deployment, asked.ts, "web is healthy after a while")
    assert answer.stream_state == "stopped", "the answer streamed in a new stream"
    assert dead.text == INTERRUPTED and dead.stream_state == "stopped"
    statuses = [c["status"] for c in answer.chunks if c["type"] == "task_update"]
    assert statuses == ["pending", "in_progress", "complete"]


@pytest.mark.parametrize("where", ["append_in_flight", "stream_stopped"])
async def test_killed_after_the_run_ended_the_outbox_shows_the_answer_once(
    deployment: Deployment, where: str
) -> None:
    if where == "append_in_flight":
        bot = await deployment.start()
        # The first append takes effect in Slack but is never answered: the run ends
        # meanwhile, and its stop waits for that append when the process is killed.
        held = deployment.slack.hold("chat.appendStream")
        asked = await deployment.mention(request(("get_status", {"service": "web"})))
        await asyncio.wait_for(held.arrived.wait(), 60)
        await _run_ended(deployment)
        await deployment.kill(bot)
        held.release.set()
    else:
        bot = await deployment.start(failpoint="stream_stopped")
        asked = await deployment.mention(request(("get_status", {"service": "web"})))
        await deployment.crashed_at(bot, "stream_stopped")
        [stream] = _streams(deployment, asked.ts)
        assert stream.stream_state == "stopped" and "web is healthy" in stream.text

    await deployment.start()
    answer = await _answered_once(deployment, asked.ts, "web is healthy")
    assert answer.edited, "the outbox replaced the stream's message with the answer"
    assert len(deployment.bot_replies(asked.ts)) == 1, [
        m.text for m in deployment.bot_replies(asked.ts)
    ]


async def _run_ended(deployment: Deployment) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while await deployment.rows("SELECT status FROM runs") != [("completed",)]:
        assert asyncio.get_running_loop().time() < deadline, "the run never ended"
        await asyncio.sleep(0.1)
