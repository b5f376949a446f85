"""``GET /metrics``: scraped from a served bot after an end-to-end run, the counts are right.

The gauges come from the database at scrape time, so a pending approval another replica
created is counted by this one too (the test writes one behind the served bot's back).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from freezegun import freeze_time
from prometheus_client.parser import text_string_to_metric_families

from bot.clock import utcnow
from bot.engine import Runner
from bot.ops.metrics import DATABASE_ERRORS, count_database_errors
from bot.policy import ApprovalExpired
from storage.repository import Mode, Repository
from tests.support.serve_process import ServedBot, free_port, served_bot
from tests.support.served_flow import APPROVER, leave_pending, wait_for_text

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


async def test_readiness_says_shutting_down_while_work_in_flight_finishes(
    tmp_path: Path,
) -> None:
    """After SIGTERM the public port closes at once; the metrics port stays up until the
    work in flight is done, answering /readyz with 503 and still serving /metrics."""
    import asyncio
    import signal

    from tests.bot.test_shutdown import approve_slow_restart, lines, until_refused

    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}"
    log = tmp_path / "tool.log"
    database = f"sqlite:///{tmp_path / 'bot.db'}"
    settings = f"metrics_port = {metrics_port}\n"
    async with served_bot(database, tmp_path, extra_config=settings) as served:
        await approve_slow_restart(served, log, seconds=20)  # held until released below
        served.process.send_signal(signal.SIGTERM)
        await until_refused(served.url)
        assert "finished web" not in lines(log)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{metrics_url}/readyz") as ready:
                assert ready.status == 503
                assert (await ready.json())["reason"] == "shutting down"
            async with session.get(f"{metrics_url}/livez") as live:
                assert live.status == 200
        samples = await scrape(metrics_url)
        assert value(samples, "approval_bot_decisions_total", outcome="approved") == 1
        log.with_name(f"{log.name}.release").touch()
        code = await asyncio.wait_for(served.process.wait(), 60)
    assert code == 0
    assert lines(log) == ["started web", "finished web"]


async def test_socket_mode_serves_metrics_on_the_metrics_port(tmp_path: Path) -> None:
    import asyncio
    import os
    import sys

    from playground.slack_server import SlackServer
    from tests.support.serve_process import CONFIG, ROOT, SECRET, wait_healthy

    metrics_port = free_port()
    config = tmp_path / "served-bot.toml"
    config.write_text(f"metrics_port = {metrics_port}\n" + CONFIG)
    async with SlackServer(signing_secret=SECRET) as slack:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_APP_TOKEN": slack.app_token,
            "SLACK_API_URL": slack.api_url,
            "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
            "LLM_USER_PATH": str(tmp_path / "llm"),
            "LLM_LOAD_PLUGINS": "llm-echo",
            "PYTHONPATH": str(ROOT),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "bot.cli", "--config", str(config), "serve", "--socket-mode"),
            env=env,
            cwd=tmp_path,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            metrics_url = f"http://127.0.0.1:{metrics_port}"
            served = ServedBot(slack=slack, process=process, url=metrics_url)
            await wait_healthy(served)
            await slack.wait_socket_connected(timeout=30)
            await slack.socket_mention("U0REQUESTER", "C0OPS", "<@U0BOT> hello")
            for _ in range(100):
                samples = await scrape(metrics_url)
                if value(samples, "approval_bot_ack_seconds_count", kind="event"):
                    break
                await asyncio.sleep(0.05)
            assert value(samples, "approval_bot_ack_seconds_count", kind="event") == 1
            assert value(samples, "approval_bot_database_up") == 1
        finally:
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)


def counted(metric: object, **labels: str) -> float:
    """The current value of a labelled counter's ``_total`` sample (or histogram's
    ``_count``) in this process."""
    for family in metric.collect():  # type: ignore[attr-defined]
        for sample in family.samples:
            if sample.name.endswith(("_total", "_count")) and sample.labels == labels:
                return sample.value
    return 0.0


async def test_denials_and_expiries_are_counted_by_outcome(runner: Runner) -> None:
    """Counters live in this process: the deltas of one denial, one expiry found by a
    click and one found by the sweeper."""
    from bot.ops.metrics import DECISION_SECONDS, DECISIONS
    from tests.bot.test_engine import calls, request

    before = {o: counted(DECISIONS, outcome=o) for o in ("approved", "denied", "expired")}
    denied_waits = counted(DECISION_SECONDS, outcome="denied")
    with freeze_time("2026-11-30 10:00:00") as clock:
        first = await runner.start(
            request(calls(("restart_service", {"service": "a"})), thread="1.1")
        )
        clock.tick(timedelta(minutes=2))
        await runner.decide(
            first.new_approvals[0].id, actor="U0APPROVER1", approve=False, reason="no"
        )
        second = await runner.start(
            request(calls(("restart_service", {"service": "b"})), thread="1.2")
        )
        third = await runner.start(
            request(calls(("restart_service", {"service": "c"})), thread="1.3")
        )
        clock.tick(timedelta(minutes=16))
        with pytest.raises(ApprovalExpired):
            await runner.decide(second.new_approvals[0].id, actor="U0APPROVER1", approve=True)
        swept = await runner.expire_due()
    assert [e.approval.id for e in swept] == [third.new_approvals[0].id]
    assert counted(DECISIONS, outcome="denied") == before["denied"] + 1
    assert counted(DECISIONS, outcome="expired") == before["expired"] + 2
    assert counted(DECISIONS, outcome="approved") == before["approved"]
    assert counted(DECISION_SECONDS, outcome="denied") == denied_waits + 1


async def test_metrics_port_that_is_the_main_port_or_taken_is_refused(tmp_path: Path) -> None:
    import asyncio
    import os
    import socket
    import sys

    from tests.support.serve_process import CONFIG, ROOT

    async def serve(metrics_port: int, port: int) -> tuple[int, str]:
        config = tmp_path / "bot.toml"
        config.write_text(f"metrics_port = {metrics_port}\n" + CONFIG)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "bot.cli", "--config", str(config), "serve", "--port", str(port)),
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "SLACK_BOT_TOKEN": "xoxb-unused",
                "SLACK_SIGNING_SECRET": "unused",
                "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
                "LLM_LOAD_PLUGINS": "llm-echo",
            },
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode or 0, err.decode()

    port = free_port()
    code, err = await serve(port, port)
    assert code == 2 and f"metrics_port ({port}) must differ from --port" in err
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        code, err = await serve(busy, free_port())
    assert code == 2 and f"cannot listen on 0.0.0.0:{busy}" in err


@pytest.mark.parametrize("bad", [0, 70000, "9100", True, -1])
def test_a_bad_metrics_port_is_a_configuration_error(bad: object) -> None:
    from bot.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match=r"^metrics_port: .* must be a TCP port \(1-65535\)$"):
        config_from_dict({"metrics_port": bad})
    assert config_from_dict({"metrics_port": 9100}).metrics_port == 9100
    assert config_from_dict({}).metrics_port is None


# PostgreSQL only (the ``backend`` fixture skips it when APPROVAL_BOT_TEST_POSTGRES_URL is
# unset): SQLite readers are never blocked (WAL), so nothing piles up to count there.
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_burst_of_scrapes_holds_one_database_read_at_a_time(
    database_url: str, tmp_path: Path
) -> None:
    """/metrics is unauthenticated and, by default, on Slack's port; each scrape read the
    database, so a burst of them held as many pool connections (the decisions' too) while
    the database was slow. Scrapes that overlap share one read."""
    import asyncpg

    async with served_bot(database_url, tmp_path) as served:
        blocker = await asyncpg.connect(database_url)
        # Not the blocker: inside a transaction pg_stat_activity is read once and cached.
        watcher = await asyncpg.connect(database_url)
        try:
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute("LOCK TABLE runs, approvals IN ACCESS EXCLUSIVE MODE")

            async def waiting_reads() -> int:
                return await watcher.fetchval(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'active' AND wait_event_type = 'Lock' "
                    "AND query LIKE '%GROUP BY tool_name%'"
                )

            async with aiohttp.ClientSession() as session:

                async def get(path: str) -> int:
                    async with session.get(f"{served.url}{path}") as response:
                        return response.status

                burst = asyncio.gather(
                    *(get(path) for path in ("/metrics", "/readyz") for _ in range(8))
                )
                while await waiting_reads() == 0:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)  # the rest of the burst arrives meanwhile
                piled_up = await waiting_reads()
                await transaction.rollback()
                statuses = await burst
        finally:
            await blocker.close()
            await watcher.close()
    assert piled_up == 1, f"{piled_up} reads of the database for one burst"
    assert set(statuses) <= {200, 503}, statuses
