"""A rolling deploy stops `approval-bot serve` with SIGTERM: a real process, our Slack server.

What must hold: the bot stops taking new work, an approved tool that is running finishes and
its result is recorded, the leases it still holds are released so another replica takes their
runs over at once, and the process exits 0. A tool that outlives the grace is reported
"outcome unknown" only because it truly did not finish.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from bot.clock import utcnow
from bot.config import Config, load_config
from bot.engine import Request, Runner
from playground.slack_server import Message, SlackServer
from storage.repository import Repository
from tests.support.serve_process import CONFIG, ROOT, SECRET, ServedBot, served_bot


async def until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def slow_restart_prompt(log: Path, seconds: float) -> str:
    call = {"name": "slow_restart", "arguments": {"service": "web", "seconds": seconds}}
    call["arguments"]["log"] = str(log)
    return json.dumps({"prompt": "restart web", "tool_calls": [call]})


def served_config(tmp_path: Path) -> Config:
    """The served bot's configuration, for a worker in this process."""
    path = tmp_path / "same-as-served.toml"
    path.write_text(CONFIG)
    return load_config(path, environ={})


def card_in(slack: SlackServer) -> Message | None:
    return next(
        (m for m in slack.messages if "approval_summary" in json.dumps(m.blocks)),
        None,
    )


def approval_of(card: Message) -> str:
    value = next(e["value"] for _, e in card.buttons() if e["action_id"] == "approval_approve")
    return str(value).partition(":")[0]  # the id, then the fingerprint of what it showed


async def approve_slow_restart(served: ServedBot, log: Path, seconds: float) -> str:
    """Ask for a slow restart, approve its card, and wait until the tool has started."""
    prompt = slow_restart_prompt(log, seconds)
    await served.slack.mention("U0REQUESTER", "C0OPS", f"<@U0BOT> {prompt}")

    await until(lambda: card_in(served.slack) is not None, "no approval card was posted")
    message = card_in(served.slack)
    assert message is not None
    approval_id = approval_of(message)
    reply = await served.slack.click("U0APPROVER1", message, "approval_approve")
    assert reply.status == 200
    await until(lambda: "started web" in lines(log), "the approved tool never started")
    return approval_id


async def until_refused(url: str) -> None:
    # A new connection per try: the port closing is what is asked. A kept-alive connection
    # opened before the signal may still be served its requests during the grace.
    # A connection the server accepted just before it closed its port is answered only when
    # the process ends, after the tool: untimed, that one request waited out the tool's 60 s
    # on a loaded machine, and the test saw it finished. It counts as "not yet refused".
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(200):
            try:
                async with session.get(f"{url}/healthz"):
                    pass
            except aiohttp.ClientConnectionError:
                return
            except TimeoutError:
                pass
            await asyncio.sleep(0.02)
    raise AssertionError("the bot still accepts requests after SIGTERM")


async def stop(served: ServedBot) -> int:
    served.process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(served.process.wait(), 60)


async def test_sigterm_lets_a_running_tool_finish_and_records_it(
    database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    # A grace far longer than the hold: on a loaded machine closing the port can take seconds,
    # and the tool must still be running when the test looks.
    grace = 'shutdown_grace = "90s"\n'
    async with served_bot(
        database_url, tmp_path, capture_output=True, extra_config=grace
    ) as served:
        # Held until released (at most 60 s, inside the grace).
        approval_id = await approve_slow_restart(served, log, seconds=60)
        served.process.send_signal(signal.SIGTERM)
        # No new requests: the port is closed while the tool still runs.
        await until_refused(served.url)
        assert "finished web" not in lines(log)
        log.with_name(f"{log.name}.release").touch()
        code = await asyncio.wait_for(served.process.wait(), 60)
        answers = [m.text for m in served.slack.messages if "restarted web slowly" in m.text]
    assert code == 0, served.output.decode()[-3000:]
    assert lines(log) == ["started web", "finished web"]
    repo = await Repository.open(database_url, upgrade=False)
    try:
        approval = await repo.get_approval(approval_id)
        assert approval is not None
        assert (approval.status, approval.result) == ("executed", "restarted web slowly")
        run = await repo.get_run(approval.run_id)
        assert run is not None and run.status == "completed" and run.lease_owner is None
    finally:
        await repo.close()
    # The run carried on to its answer in the thread before the process exited.
    assert answers, "the thread never got the answer"


@pytest.mark.parametrize("ending", ["the grace runs out", "a second signal"])
async def test_a_tool_that_outlives_the_grace_is_unknown_and_its_run_taken_over_at_once(
    ending: str, database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    grace = "1s" if ending == "the grace runs out" else "10m"
    settings = f'shutdown_grace = "{grace}"\n'
    async with served_bot(
        database_url, tmp_path, capture_output=True, extra_config=settings
    ) as served:
        approval_id = await approve_slow_restart(served, log, seconds=120)
        if ending == "a second signal":
            served.process.send_signal(signal.SIGTERM)
            await until_refused(served.url)  # the first one is being handled
        code = await stop(served)
    assert code == 0, served.output.decode()[-3000:]
    # The process is gone, so the call can no longer finish: it truly did not.
    assert lines(log) == ["started web"]
    repo = await Repository.open(database_url, upgrade=False)
    try:
        approval = await repo.get_approval(approval_id)
        assert approval is not None and approval.status == "executing"
        run = await repo.get_run(approval.run_id)
        assert run is not None and run.status == "running" and run.lease_owner
        # Released: it ran out when the process stopped, not a whole run_lease later.
        assert run.lease_expires_at is not None and run.lease_expires_at <= utcnow()

        replica_b = Runner(repo, served_config(tmp_path), worker_id="replica-b")
        [outcome] = await replica_b.recover_stale_runs()
        assert outcome.status == "completed"
        approval = await repo.get_approval(approval_id)
        assert approval is not None and approval.status == "unknown"
    finally:
        await repo.close()


async def test_sigterm_while_the_sweeper_carries_on_a_taken_over_run_records_the_tool(
    database_url: str, tmp_path: Path
) -> None:
    """The sweeper's work is work in flight too: stopping it must not cut off its tool."""
    log = tmp_path / "tool.log"
    repo = await Repository.open(database_url)
    try:
        # A worker paused a run, its approval was approved, and the worker died before
        # resuming it: the run waits for its lease to run out.
        dead = Runner(repo, served_config(tmp_path), worker_id="dead-worker")
        paused = await dead.start(
            Request(text=slow_restart_prompt(log, seconds=3), requester="U0REQUESTER")
        )
        [approval] = paused.new_approvals
        decision = await dead.decide(approval.id, actor="U0APPROVER1", approve=True)
        assert decision.resume_claimed
        await repo.execute_sql(
            "UPDATE runs SET lease_expires_at = :past WHERE id = :id",
            {"past": utcnow() - timedelta(minutes=1), "id": approval.run_id},
        )
    finally:
        await repo.close()

    async with served_bot(database_url, tmp_path, capture_output=True) as served:
        # Its sweeper takes the run over at start-up and runs the approved call.
        await until(lambda: "started web" in lines(log), "the sweeper never ran the tool")
        code = await stop(served)
    assert code == 0, served.output.decode()[-3000:]
    assert lines(log) == ["started web", "finished web"]
    repo = await Repository.open(database_url, upgrade=False)
    try:
        recorded = await repo.get_approval(approval.id)
        assert recorded is not None
        assert (recorded.status, recorded.result) == ("executed", "restarted web slowly")
        run = await repo.get_run(approval.run_id)
        assert run is not None and run.status == "completed"
    finally:
        await repo.close()


async def test_sigterm_in_socket_mode_closes_the_connection_and_records_the_tool(
    tmp_path: Path,
) -> None:
    database_url = f"sqlite:///{tmp_path / 'bot.db'}"
    config = tmp_path / "served-bot.toml"
    config.write_text(CONFIG)
    log = tmp_path / "tool.log"
    async with SlackServer(signing_secret=SECRET) as slack:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_APP_TOKEN": slack.app_token,
            "SLACK_API_URL": slack.api_url,
            "DATABASE_URL": database_url,
            "LLM_USER_PATH": str(tmp_path / "llm"),
            "LLM_LOAD_PLUGINS": "llm-echo",
            "PYTHONPATH": str(ROOT),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "bot.cli", "--config", str(config), "serve", "--socket-mode"),
            env=env,
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await slack.wait_socket_connected(timeout=30)
            prompt = slow_restart_prompt(log, seconds=4)
            await slack.socket_mention("U0REQUESTER", "C0OPS", f"<@U0BOT> {prompt}")
            await until(lambda: card_in(slack) is not None, "no approval card was posted")
            card = card_in(slack)
            assert card is not None
            approval_id = approval_of(card)
            await slack.socket_click("U0APPROVER1", card, "approval_approve")
            await until(lambda: "started web" in lines(log), "the approved tool never started")
            process.send_signal(signal.SIGTERM)
            # No new events: the connection to Slack is closed while the tool still runs.
            await until(lambda: not slack._sockets, "the Socket Mode connection stayed open")
            code = await asyncio.wait_for(process.wait(), 60)
        finally:
            if process.returncode is None:
                process.kill()
            output, _ = await process.communicate()
    assert code == 0, output.decode()[-3000:]
    assert lines(log) == ["started web", "finished web"]
    repo = await Repository.open(database_url, upgrade=False)
    try:
        approval = await repo.get_approval(approval_id)
        assert approval is not None
        assert (approval.status, approval.result) == ("executed", "restarted web slowly")
    finally:
        await repo.close()
