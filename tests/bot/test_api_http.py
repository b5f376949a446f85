"""The human gate over HTTP (issue 20 section 2), against a real ``approval-bot serve``.

Another system creates an approval with a bearer token, a person clicks its card in Slack
(our Slack server), and the system hears the decision three ways: a long-poll that returns
promptly after the click, a signed webhook with a stable ``delivery_id``, and a plain GET.
Questions are answered from their card's buttons; a cancel by the creating token takes the
buttons off. Every bad input the issue lists is refused with its status and the field named,
and none of them changes anything in the database.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.client import ApprovalClient, ApprovalError
from playground.slack_server import Message
from storage.repository import Repository
from tests.faults.harness import eventually, is_card
from tests.support.api_support import Receiver, create_token
from tests.support.serve_process import ServedBot, served_bot

CHANNEL = "C0OPS"
OTHER_CHANNEL = "C0SECRET"
APPROVER = "U0APPROVER1"
RATE = 50


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServedBot, str]]:
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    extra = f"api_rate_limit = {RATE}\n"
    async with served_bot(url, tmp_path, extra_config=extra, capture_output=True) as bot:
        yield bot, url


async def call(
    session: aiohttp.ClientSession,
    bot: ServedBot,
    method: str,
    path: str,
    token: str | None,
    body: Any = None,
    *,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    async with session.request(method, bot.url + path, data=data, headers=headers) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


def cards(bot: ServedBot) -> list[Message]:
    return [m for m in bot.slack.messages if m.channel == CHANNEL and is_card(m)]


def card_for(bot: ServedBot, approval_id: str) -> Message:
    found = [m for m in cards(bot) if approval_id in json.dumps(m.blocks)]
    assert len(found) == 1, [m.text for m in cards(bot)]
    return found[0]


async def test_an_approval_is_decided_in_slack_and_reported_three_ways(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    bot, url = served
    token = await create_token(url, tmp_path, "ci", CHANNEL)
    async with Receiver() as receiver, aiohttp.ClientSession() as session:
        body = {
            "channel": CHANNEL,
            "action": "Deploy shop 4.2 to production",
            "details": {"service": "shop", "version": "4.2"},
            "approvers": [APPROVER],
            "ttl": "1h",
            "webhook_url": receiver.url,
            "idempotency_key": "deploy-4.2",
        }
        status, created = await call(session, bot, "POST", "/api/v1/approvals", token.token, body)
        assert status == 201, created
        assert created["status"] == "pending" and created["expires_at"].endswith("Z")
        approval_id = created["id"]
        # The same key and body: the same approval, 200; another body: 409.
        again = await call(session, bot, "POST", "/api/v1/approvals", token.token, body)
        assert again == (200, created)
        other = {**body, "details": {"service": "shop", "version": "4.3"}}
        status, conflict = await call(session, bot, "POST", "/api/v1/approvals", token.token, other)
        assert status == 409 and conflict["field"] == "idempotency_key"

        await eventually(lambda: cards(bot), "the approval's card")
        card = card_for(bot, approval_id)
        assert "Deploy shop 4.2 to production" in json.dumps(card.blocks)
        assert "4.2" in json.dumps(card.blocks)

        path = f"/api/v1/approvals/{approval_id}"
        waiting = asyncio.create_task(call(session, bot, "GET", path + "?wait=30", token.token))
        await asyncio.sleep(1.0)
        assert not waiting.done(), "the long-poll returned while still pending"
        click = await bot.slack.click(APPROVER, card, "approval_approve")
        assert click.status == 200
        clicked_at = asyncio.get_running_loop().time()
        status, decided = await asyncio.wait_for(waiting, 30)
        # Promptly after the click (the precise latency is measured in bench/api_longpoll.py).
        assert asyncio.get_running_loop().time() - clicked_at < 5
        assert status == 200 and decided["status"] == "approved", decided
        assert decided["decided_by"]["id"] == APPROVER
        assert decided["decided_at"] and decided["details"] == body["details"]

        await eventually(lambda: receiver.for_request(approval_id), "the webhook")
        [delivery] = receiver.for_request(approval_id)
        assert delivery.signed_with(token.webhook_secret)
        assert delivery.headers["X-Approval-Bot-Delivery"] == delivery.json["delivery_id"]
        assert delivery.json["status"] == "approved"
        assert delivery.json["decided_by"]["id"] == APPROVER

        status, read = await call(session, bot, "GET", path, token.token)
        assert status == 200 and read["status"] == "approved"
        # A settled request's long-poll answers at once.
        status, read = await call(session, bot, "GET", path + "?wait=60", token.token)
        assert status == 200 and read["status"] == "approved"
        status, refused = await call(session, bot, "DELETE", path, token.token)
        assert status == 409, refused


async def test_the_client_waits_for_an_answer_and_a_cancel(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    bot, url = served
    token = await create_token(url, tmp_path, "agent", CHANNEL)
    other = await create_token(url, tmp_path, "other", CHANNEL)
    client = ApprovalClient(bot.url, token.token)
    async with Receiver() as receiver:
        asking = asyncio.create_task(
            client.aask(
                CHANNEL,
                "Which region first?",
                ["eu-west", "us-east"],
                answerers=[APPROVER],
                webhook_url=receiver.url,
            )
        )
        card = await eventually(
            lambda: [
                m for m in bot.slack.messages if "Which region first?" in json.dumps(m.blocks)
            ],
            "the question's card",
        )
        click = await bot.slack.click(APPROVER, card[0], "question_choice:1")
        assert click.status == 200
        answered = await asyncio.wait_for(asking, 30)
        assert answered["status"] == "answered" and answered["answer"] == "us-east"
        assert answered["decided_by"]["id"] == APPROVER
        await eventually(lambda: receiver.for_request(answered["id"]), "the answer's webhook")

        created = await client._acall(
            "POST",
            "/approvals",
            client.approval_body(CHANNEL, "Drop table", {"table": "t"}, webhook_url=receiver.url),
        )
        approval_id = created["id"]
        with pytest.raises(ApprovalError) as not_theirs:
            await ApprovalClient(bot.url, other.token).acancel("approvals", approval_id)
        assert not_theirs.value.status == 404
        cancelled = await client.acancel("approvals", approval_id)
        assert cancelled["status"] == "cancelled"
        assert (await client.acancel("approvals", approval_id))["status"] == "cancelled"
        [delivery] = await eventually(lambda: receiver.for_request(approval_id), "the webhook")
        assert delivery.json["status"] == "cancelled"
        card = await eventually(
            lambda: [
                m
                for m in cards(bot)
                if approval_id in json.dumps(m.blocks)
                and "approval_approve" not in json.dumps(m.blocks)
            ],
            "the cancelled card without its buttons",
        )
        assert card
        # The sync half, from a thread: a settled request's wait returns it at once.
        got = await asyncio.to_thread(client.wait, "approvals", approval_id)
        assert got["status"] == "cancelled"


async def test_every_bad_input_is_refused_and_changes_nothing(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    bot, url = served
    token = await create_token(url, tmp_path, "ci", CHANNEL)
    other = await create_token(url, tmp_path, "other", CHANNEL)
    revoked = await create_token(url, tmp_path, "old", CHANNEL)
    limited = await create_token(url, tmp_path, "busy", CHANNEL)
    good = {"channel": CHANNEL, "action": "Restart", "details": {"service": "api"}}
    repo = await Repository.open(url)
    try:
        async with aiohttp.ClientSession() as session:
            status, created = await call(
                session, bot, "POST", "/api/v1/approvals", token.token, good
            )
            assert status == 201
            theirs = created["id"]
            keyed = {**good, "idempotency_key": "k1"}
            status, _ = await call(session, bot, "POST", "/api/v1/approvals", token.token, keyed)
            assert status == 201
            await _cli(url, tmp_path, "api-tokens", "revoke", "old")
            before = await _state(repo)  # nothing below may change it
            refused: list[tuple[int, str | None, int, Any]] = []

            async def expect(
                status: int,
                field: str | None,
                method: str,
                path: str,
                tok: str | None,
                body: Any = None,
                raw: bytes | None = None,
            ) -> None:
                got, answer = await call(session, bot, method, path, tok, body, raw=raw)
                refused.append((status, field, got, answer))
                assert got == status, (method, path, body, got, answer)
                assert isinstance(answer, dict) and answer.get("error"), answer
                if field is not None:
                    assert answer.get("field") == field, answer

            post = "/api/v1/approvals"
            # 400: each field, named.
            for field, value in [
                ("channel", "general"),
                ("channel", None),
                ("channel", CHANNEL + "\n"),  # "$" matched before a final newline
                ("approvers", [APPROVER + "\n"]),
                ("action", ""),
                ("action", "x" * 300),
                ("details", "not an object"),
                ("approvers", "U0APPROVER1"),
                ("approvers", ["bob"]),
                ("min_approvals", 0),
                ("min_approvals", 3),
                ("ttl", "soon"),
                ("ttl", "90d"),
                ("ttl", -5),
                ("ttl", 10**30),  # overflowed timedelta: a 500
                ("on_expiry", "approve"),
                ("webhook_url", "ftp://example.com/hook"),
                ("webhook_url", "not a url"),
                ("idempotency_key", 42),
                ("idempotency_key", "k" * 201),
                ("colour", "red"),
            ]:
                await expect(400, field, "POST", post, token.token, {**good, field: value})
            await expect(400, "body", "POST", post, token.token, raw=b"{not json")
            await expect(400, "body", "POST", post, token.token, [good])
            await expect(400, "body", "POST", post, token.token, raw=b"\xff\xfe")
            question = {"channel": CHANNEL, "question": "Which?", "answerers": [APPROVER]}
            qpost = "/api/v1/questions"
            for field, value in [
                ("question", ""),
                ("choices", "a,b"),
                ("choices", ["a", "a"]),
                ("choices", [""]),
                ("answerers", ["nobody"]),
            ]:
                await expect(400, field, "POST", qpost, token.token, {**question, field: value})
            # No answerers, and the token names no person who could answer.
            no_one = {"channel": CHANNEL, "question": "Which?"}
            await expect(400, "answerers", "POST", qpost, token.token, no_one)
            await expect(400, "wait", "GET", f"{post}/{theirs}?wait=61", token.token)
            await expect(400, "wait", "GET", f"{post}/{theirs}?wait=soon", token.token)
            # 401: no token, a malformed one, an unknown one, a revoked one.
            await expect(401, None, "POST", post, None, good)
            await expect(401, None, "POST", post, "nonsense", good)
            await expect(401, None, "POST", post, "abt_" + "A" * 43, good)
            await expect(401, None, "POST", post, revoked.token, good)
            await expect(401, None, "GET", f"{post}/{theirs}", revoked.token)
            # 403: a channel the token may not post to.
            await expect(
                403, "channel", "POST", post, token.token, {**good, "channel": OTHER_CHANNEL}
            )
            # 404: no such id, another token's, the wrong kind, an unknown route.
            await expect(404, None, "GET", f"{post}/apr_01AAAAAAAAAAAAAAAAAAAAAAAA", token.token)
            await expect(404, None, "GET", f"{post}/not%20an%20id", token.token)
            await expect(404, None, "GET", f"{post}/{theirs}", other.token)
            await expect(404, None, "DELETE", f"{post}/{theirs}", other.token)
            await expect(404, None, "GET", f"/api/v1/questions/{theirs}", token.token)
            await expect(404, None, "GET", "/api/v1/nothing", token.token)
            # 409: the idempotency key reused with another body.
            await expect(
                409, "idempotency_key", "POST", post, token.token, {**keyed, "action": "Stop"}
            )
            # 413: over 64 KiB (declared, and sent without a length).
            big = {**good, "details": {"blob": "x" * 70_000}}
            await expect(413, None, "POST", post, token.token, big)

            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(70):
                    yield b" " * 1024

            headers = {"Authorization": f"Bearer {token.token}"}
            async with session.post(bot.url + post, data=chunks(), headers=headers) as response:
                assert response.status == 413, await response.text()
            # 429: over the token's rate; other tokens go on.
            statuses = []
            for _ in range(RATE + 1):
                got, _ = await call(session, bot, "GET", f"{post}/{theirs}", limited.token)
                statuses.append(got)
            assert statuses[:RATE] == [404] * RATE and statuses[RATE] == 429, statuses
            got, answer = await call(session, bot, "GET", f"{post}/{theirs}", limited.token)
            assert got == 429 and answer["error"]
            status, _ = await call(session, bot, "GET", f"{post}/{theirs}", token.token)
            assert status == 200
            # None of it changed anything, and none of it was a 5xx.
            assert await _state(repo) == before
            assert all(got < 500 for _, _, got, _ in refused)
            status, spec = await call(session, bot, "GET", "/api/v1/openapi.json", None)
            assert status == 200 and spec["openapi"].startswith("3.")
            assert set(spec["paths"]) >= {"/api/v1/approvals", "/api/v1/questions/{id}"}
    finally:
        await repo.close()
    output = bot.output.decode(errors="replace") if bot.output else ""
    assert token.token not in output and token.webhook_secret not in output


async def _state(repo: Repository) -> tuple[Any, ...]:
    from storage.repository import Mode

    def body(tx: Any) -> tuple[Any, ...]:
        return tuple(
            tx.one(f"SELECT COUNT(*) FROM {table}", {})[0]
            for table in ("approvals", "runs", "api_requests", "audit_events")
        )

    return await repo.database.run(body, Mode.READ)


async def _cli(url: str, workdir: Path, *args: str) -> None:
    import os
    import sys

    from tests.support.serve_process import ROOT

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        env={**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)},
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out, err)


async def test_a_held_long_poll_answers_at_once_when_the_process_stops(
    served: tuple[ServedBot, str], tmp_path: Path
) -> None:
    """SIGTERM: the port closes and a long-poll held there answers (still pending) at once,
    rather than holding the shutdown for its grace; the client asks again elsewhere."""
    bot, url = served
    token = await create_token(url, tmp_path, "ci", CHANNEL)
    async with aiohttp.ClientSession() as session:
        body = {"channel": CHANNEL, "action": "Restart", "approvers": [APPROVER]}
        status, created = await call(session, bot, "POST", "/api/v1/approvals", token.token, body)
        assert status == 201
        path = f"/api/v1/approvals/{created['id']}?wait=60"
        waiting = asyncio.create_task(call(session, bot, "GET", path, token.token))
        await asyncio.sleep(1.0)
        assert not waiting.done()
        started = asyncio.get_running_loop().time()
        bot.process.terminate()
        status, answer = await asyncio.wait_for(waiting, 20)
        assert status == 200 and answer["status"] == "pending", answer
        assert asyncio.get_running_loop().time() - started < 10
