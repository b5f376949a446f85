"""POST /callbacks/{token} and the due-retry timer against the real bot (bolt app, handlers,
runner, storage) over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.ops.callback_route import MAX_CALLBACK_BODY, RedactingAccessLogger
from storage.models import Approval
from storage.repository import Repository
from tests.bot.test_engine import calls, executed
from tests.conftest import BASE_CONFIG, make_config
from tests.support import pause_tools
from tests.support.slack_harness import Harness, running_bot

NO_HANG = 30.0


@pytest.fixture(autouse=True)
def _pipeline() -> Iterator[None]:
    pause_tools.reset()
    yield
    pause_tools.reset()


@pytest.fixture
async def harness(repo: Repository) -> AsyncIterator[Harness]:
    config = make_config(
        tools=[
            *BASE_CONFIG["tools"],
            "tests.support.pause_tools:start_deploy",
            "tests.support.pause_tools:start_deploy_async",
            "tests.support.pause_tools:rate_limited",
        ],
        policies={
            **BASE_CONFIG["policies"],
            "start_deploy_async": {"approval": "never", "ttl": "1s"},
        },
    )
    async with running_bot(config, repo) as h:
        yield h


def callback_url_on(h: Harness, url: str) -> str:
    """The URL the tool handed out, on the port the test bot listens on."""
    token = url.rsplit("/", 1)[1]
    return h.server.bot_url.replace("/slack/events", f"/callbacks/{token}")


async def post(url: str, body: bytes | str, content_type: str = "application/json") -> int:
    headers = {"Content-Type": content_type}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as r,
    ):
        return r.status


async def only_wait(repo: Repository) -> Approval:
    (wait,) = await repo.pending_waits()
    return wait


async def run_status(repo: Repository, run_id: str) -> str:
    run = await repo.get_run(run_id)
    assert run is not None
    return run.status


async def test_the_first_post_resumes_once_with_its_body_and_replays_change_nothing(
    harness: Harness,
) -> None:
    h = harness
    reply = await h.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
    wait = await only_wait(h.repo)
    assert wait.kind == "callback" and await run_status(h.repo, wait.run_id) == "paused"
    (handed_out,) = pause_tools.PIPELINE
    assert handed_out.startswith("http://127.0.0.1:8080/callbacks/")  # default public_url
    url = callback_url_on(h, handed_out)

    assert await post(url + "x" * 200, "{}") == 404, "not even a token"
    assert await post(url[:-4] + "AAAA", "{}") == 404, "unknown token"
    assert await post(url, "x" * (MAX_CALLBACK_BODY + 1), "text/plain") == 413
    assert await post(url, "{not json") == 400
    assert (await h.repo.get_approval(wait.id)).status == "pending"  # type: ignore[union-attr]

    assert await post(url, '{"status": "deployed"}') == 202
    await h.settle()
    assert await run_status(h.repo, wait.run_id) == "completed"
    answer = h.thread_of(reply)[-1].text
    assert "start_deploy={&quot;status&quot;: &quot;deployed&quot;}" in answer or (
        'start_deploy={"status": "deployed"}' in answer
    )
    assert await post(url, '{"status": "again"}') == 410
    await h.settle()
    stored = await h.repo.get_approval(wait.id)
    assert stored is not None and stored.result == '{"status": "deployed"}'
    assert len(executed("start_deploy")) == 1
    events = [e.event for e in await h.repo.audit_trail(run_id=wait.run_id)]
    assert events.count("run_resumed") == 1


async def test_a_retry_of_a_body_with_nul_answers_202_again(harness: Harness) -> None:
    """The store keeps NUL as U+FFFD (storage.values); the retry of that very body is still
    recognised as the one recorded, not refused 410; another body after it is."""
    h = harness
    await h.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
    wait = await only_wait(h.repo)
    (handed_out,) = pause_tools.PIPELINE
    url = callback_url_on(h, handed_out)
    assert await post(url, "ok\x00done", "text/plain") == 202
    assert await post(url, "ok\x00done", "text/plain") == 202, "a retry of the recorded body"
    assert await post(url, "ok done", "text/plain") == 410
    await h.settle()
    assert await run_status(h.repo, wait.run_id) == "completed"
    assert len(executed("start_deploy")) == 1


async def test_a_post_after_the_timeout_answers_410_and_the_run_moves_on(
    harness: Harness,
) -> None:
    h = harness
    await h.mention("U0REQUESTER", calls(("start_deploy_async", {"service": "shop"})))
    wait = await only_wait(h.repo)
    await asyncio.sleep(1.2)  # the tool's ttl is 1 s
    assert await post(callback_url_on(h, pause_tools.PIPELINE[0]), "late", "text/plain") == 410
    await h.settle()
    stored = await h.repo.get_approval(wait.id)
    assert stored is not None and stored.status == "expired" and stored.result is None
    assert await run_status(h.repo, wait.run_id) == "completed"
    assert len(executed("start_deploy_async")) == 1


async def test_a_post_before_the_pause_is_stored_resumes_the_run_once(harness: Harness) -> None:
    h = harness
    statuses: list[int] = []

    def pipeline_posts_at_once(url: str) -> None:
        # From the tool's worker thread, before the tool raises WaitForCallback.
        request = urllib.request.Request(
            callback_url_on(h, url), data=b"deployed at once", method="POST"
        )
        request.add_header("Content-Type", "text/plain")
        try:
            with urllib.request.urlopen(request, timeout=NO_HANG) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as error:
            statuses.append(error.code)

    pause_tools.ON_URL.append(pipeline_posts_at_once)
    reply = await h.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
    assert statuses == [202]
    assert "start_deploy=deployed at once" in h.thread_of(reply)[-1].text
    assert await h.repo.pending_waits() == []
    assert len(executed("start_deploy")) == 1


def retry_config() -> Any:
    return make_config(
        tools=[*BASE_CONFIG["tools"], "tests.support.pause_tools:rate_limited"],
        policies=BASE_CONFIG["policies"],
    )


async def wait_until_completed(repo: Repository, run_id: str) -> None:
    async with asyncio.timeout(NO_HANG):
        while await run_status(repo, run_id) != "completed":
            await asyncio.sleep(0.1)


async def test_a_retry_resumes_by_itself_at_its_time(repo: Repository) -> None:
    pause_tools.RETRY_IN[0] = timedelta(seconds=3)
    async with running_bot(retry_config(), repo, sweep=True) as h:
        reply = await h.mention("U0REQUESTER", calls(("rate_limited", {"service": "api"})))
        retry = await only_wait(h.repo)
        assert retry.kind == "retry" and len(executed("rate_limited")) == 1
        await wait_until_completed(h.repo, retry.run_id)
        await h.settle()
        assert "rate_limited=api answered on attempt 2" in h.thread_of(reply)[-1].text
    assert len(executed("rate_limited")) == 2, "two attempts, not more"
    done = await repo.get_approval(retry.id)
    assert done is not None and done.status == "executed"
    assert done.decided_at is not None and retry.due_at is not None
    assert done.decided_at >= retry.due_at, "not before its time"


async def test_a_retry_that_came_due_while_no_bot_ran_resumes_at_start_up(
    repo: Repository,
) -> None:
    pause_tools.RETRY_IN[0] = timedelta(seconds=1)
    async with running_bot(retry_config(), repo) as h:
        await h.mention("U0REQUESTER", calls(("rate_limited", {"service": "api"})))
        retry = await only_wait(h.repo)
    await asyncio.sleep(1.5)  # due while no bot runs
    assert await run_status(repo, retry.run_id) == "paused"
    async with running_bot(retry_config(), repo, sweep=True) as h:
        await wait_until_completed(h.repo, retry.run_id)
        await h.settle()
    assert len(executed("rate_limited")) == 2


async def test_the_access_log_never_shows_a_token(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    runner = web.AppRunner(h.bot.web_app, access_log_class=RedactingAccessLogger)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    token = "T" * 43
    try:
        with caplog.at_level(logging.INFO, logger="aiohttp.access"):
            status = await post(f"http://127.0.0.1:{port}/callbacks/{token}", "{}")
    finally:
        await runner.cleanup()
    assert status == 404
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any('"POST /callbacks/…" 404' in line for line in lines), lines
    assert all(token not in line for line in lines)


FAIL_COMPLETING = {
    "sqlite": [
        "CREATE TRIGGER fail_completing BEFORE UPDATE OF status ON approvals "
        "WHEN NEW.status = 'completed' BEGIN SELECT RAISE(ABORT, 'storage is on fire'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION fail_completing() RETURNS trigger AS $$ BEGIN "
        "RAISE EXCEPTION 'storage is on fire'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER fail_completing BEFORE UPDATE ON approvals FOR EACH ROW "
        "WHEN (NEW.status = 'completed') EXECUTE FUNCTION fail_completing()",
    ],
}


async def test_a_callback_the_database_cannot_record_gets_503_and_changes_nothing(
    harness: Harness,
) -> None:
    h = harness
    await h.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
    wait = await only_wait(h.repo)
    url = callback_url_on(h, pause_tools.PIPELINE[0])
    for statement in FAIL_COMPLETING[h.repo.dialect]:
        await h.repo.execute_sql(statement)
    assert await post(url, '{"status": "deployed"}') == 503
    stored = await h.repo.get_approval(wait.id)
    assert stored is not None and stored.status == "pending" and stored.result is None
    await h.repo.execute_sql(
        "DROP TRIGGER fail_completing" + (" ON approvals" if h.repo.dialect == "postgresql" else "")
    )
    assert await post(url, '{"status": "deployed"}') == 202, "the same POST again works"
    await h.settle()
    assert await run_status(h.repo, wait.run_id) == "completed"


async def test_deeply_nested_json_answers_400_and_changes_nothing(harness: Harness) -> None:
    """A JSON bomb of brackets makes json.loads raise RecursionError, not ValueError: it
    was a 500 with a traceback."""
    h = harness
    await h.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
    wait = await only_wait(h.repo)
    url = callback_url_on(h, pause_tools.PIPELINE[0])
    assert await post(url, "[" * 50_000) == 400
    stored = await h.repo.get_approval(wait.id)
    assert stored is not None and stored.status == "pending" and stored.result is None
    assert await post(url, '{"status": "deployed"}') == 202, "the token is still usable"


async def test_a_body_that_arrives_in_pieces_is_taken_whole(harness: Harness) -> None:
    """A slow sender's body comes in several reads; the first piece alone used to become
    the call's result, and the single-use token was spent on it."""
    h = harness
    await h.mention("U0REQUESTER", calls(("start_deploy", {"service": "shop"})))
    wait = await only_wait(h.repo)
    url = callback_url_on(h, pause_tools.PIPELINE[0])
    host_port, path = url.removeprefix("http://").split("/", 1)
    host, port = host_port.split(":")
    first, rest = b'{"status": ', b'"deployed"}'
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"POST /{path} HTTP/1.1\r\nHost: {host_port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(first) + len(rest)}\r\nConnection: close\r\n\r\n".encode()
        + first
    )
    await writer.drain()
    await asyncio.sleep(0.3)
    writer.write(rest)
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), NO_HANG)
    writer.close()
    assert b" 202 " in status_line, status_line
    await h.settle()
    stored = await h.repo.get_approval(wait.id)
    assert stored is not None and stored.result == '{"status": "deployed"}'
