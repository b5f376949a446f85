"""``GET /metrics``: scraped from a served bot after an end-to-end run, the counts are right.

The gauges come from the database at scrape time, so a pending approval another replica
created is counted by this one too (the test writes one behind the served bot's back).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.clock import utcnow
from bot.metrics import DATABASE_ERRORS, count_database_errors
from storage.protocol import Mode
from storage.repository import Repository
from tests.serve_process import ServedBot, free_port, served_bot
from tests.served_flow import APPROVER, leave_pending, wait_for_text

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("approval_bot_"), family.name
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def get_status(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status


async def another_replicas_pending_approval(database_url: str) -> None:
    """A paused run and its pending approval, written by someone else than the served bot."""
    now = utcnow()
    repo = await Repository.open(database_url)
    try:
        await repo.insert_rows_for_benchmark(
            runs=[
                {
                    "id": "run_elsewhere",
                    "conversation_key": "elsewhere",
                    "team_id": "T1",
                    "channel": "C1",
                    "thread_ts": "1.0",
                    "requester": "U0REQ",
                    "status": "paused",
                    "model_id": "echo",
                    "history": [],
                    "turn": 1,
                    "created_at": now,
                    "updated_at": now,
                }
            ],
            approvals=[
                {
                    "id": "apr_elsewhere",
                    "run_id": "run_elsewhere",
                    "turn": 1,
                    "tool_call_id": "tc",
                    "tool_name": "deploy",
                    "arguments": {},
                    "payload_hash": "0" * 64,
                    "status": "pending",
                    "requester": "U0REQ",
                    "team_id": "T1",
                    "channel": "C1",
                    "thread_ts": "1.0",
                    "approvers": [],
                    "allow_self_approval": False,
                    "on_expiry": "deny",
                    "created_at": now,
                    "expires_at": now + timedelta(hours=1),
                }
            ],
        )
    finally:
        await repo.close()


@pytest.mark.postgres
async def test_metrics_after_an_end_to_end_run(database_url: str, tmp_path: Path) -> None:
    metrics_port = free_port()
    settings = f'metrics_port = {metrics_port}\nsweep_interval = "1s"\n'
    async with served_bot(database_url, tmp_path, extra_config=settings) as served:
        metrics_url = f"http://127.0.0.1:{metrics_port}"
        # Off the public port when metrics_port is configured.
        assert await get_status(f"{served.url}/metrics") == 404
        assert await get_status(f"{metrics_url}/readyz") == 200
        assert await get_status(f"{metrics_url}/livez") == 200

        await leave_pending(served, "svc-waits")
        card = await leave_pending(served, "svc-metrics")
        # Slack rate limits the next post (retried after Retry-After) and refuses the next
        # edit (the card's, after the click: logged, and the run carries on).
        served.slack.rate_limit("chat.postMessage", times=1, retry_after=1)
        served.slack.fail("chat.update", error="internal_error", times=1)
        click = await served.slack.click(APPROVER, card, "approval_approve")
        assert click.status == 200
        await wait_for_text(served, "restarted svc-metrics")
        await another_replicas_pending_approval(database_url)
        samples = await _settled_scrape(served, metrics_url)

    assert value(samples, "approval_bot_decisions_total", outcome="approved") == 1
    assert value(samples, "approval_bot_decisions_total", outcome="denied") == 0
    assert value(samples, "approval_bot_decision_seconds_count", outcome="approved") == 1
    assert value(samples, "approval_bot_resume_seconds_count") == 1
    assert value(samples, "approval_bot_ack_seconds_count", kind="event") == 2
    assert value(samples, "approval_bot_ack_seconds_count", kind="block_actions") == 1
    assert value(samples, "approval_bot_slack_rate_limited_total", method="chat.postMessage") == 1
    assert (
        value(
            samples,
            "approval_bot_slack_api_errors_total",
            method="chat.update",
            error="internal_error",
        )
        == 1
    )
    # From the database: this bot's waiting approval and the other replica's.
    assert value(samples, "approval_bot_pending_approvals", tool="restart_service") == 1
    assert value(samples, "approval_bot_pending_approvals", tool="deploy") == 1
    assert value(samples, "approval_bot_runs", status="paused") == 2
    assert value(samples, "approval_bot_runs", status="running") == 0
    assert value(samples, "approval_bot_run_drives_total", outcome="completed") == 1
    assert value(samples, "approval_bot_run_drives_total", outcome="paused") == 2
    assert value(samples, "approval_bot_sweeps_total", result="ok") >= 1
    assert value(samples, "approval_bot_sweeper_lag_seconds") == 0
    assert value(samples, "approval_bot_database_up") == 1
    assert not [k for k in samples if k[0] == "approval_bot_database_errors_total"]


async def _settled_scrape(served: ServedBot, metrics_url: str) -> Samples:
    """A scrape once the resumed run's drive has been counted (it ends after its answer)."""
    import asyncio

    for _ in range(100):
        samples = await scrape(metrics_url)
        if value(samples, "approval_bot_run_drives_total", outcome="completed"):
            return samples
        await asyncio.sleep(0.05)
    return samples


async def test_metrics_and_probes_on_the_main_port_by_default(tmp_path: Path) -> None:
    async with served_bot(f"sqlite:///{tmp_path / 'bot.db'}", tmp_path) as served:
        samples = await scrape(served.url)
        assert value(samples, "approval_bot_database_up") == 1
        assert value(samples, "approval_bot_pending_approvals", tool="restart_service") == 0
        assert await get_status(f"{served.url}/readyz") == 200
        assert await get_status(f"{served.url}/livez") == 200


@pytest.mark.postgres
async def test_failed_transactions_are_counted(repo: Repository) -> None:
    count_database_errors(repo)
    count_database_errors(repo)  # once per repository, however often it is asked

    def total() -> float:
        return sum(
            sample.value
            for metric in DATABASE_ERRORS.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        )

    before = total()
    with pytest.raises(Exception):  # noqa: B017 - whichever error the driver raises
        await repo.database.run(lambda tx: tx.one("SELECT * FROM no_such_table"), Mode.READ_ONE)
    await repo.ping()
    assert total() == before + 1
