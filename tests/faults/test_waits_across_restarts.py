"""Waits outlive the process that started them: a SIGTERM while a run waits for a callback
exits cleanly and the callback resumes the run on the next process; a retry that comes due
while no bot runs is run once by the next one, at start-up."""

from __future__ import annotations

import asyncio
import signal

from tests.faults.harness import Deployment, eventually, quiet_sweeps, request
from tests.faults.test_callback_restart import post


async def test_sigterm_while_a_run_waits_for_a_callback(deployment: Deployment) -> None:
    first = await deployment.start()
    asked = await deployment.mention(request(("start_deploy", {"service": "shop"})))
    (url,) = await eventually(deployment.callback_urls, "the tool to hand out a callback URL")
    repo = await deployment.repo()

    async def paused() -> None:
        while not [w for w in await repo.pending_waits() if w.status == "pending"]:
            await asyncio.sleep(0.1)

    await asyncio.wait_for(paused(), 60)
    await deployment.kill(first, signal.SIGTERM)
    assert await deployment.died(first, "exiting on SIGTERM") == 0
    runs = await deployment.rows("SELECT status, lease_owner FROM runs")
    assert runs == [("paused", None)], runs

    second = await deployment.start()
    token = url.rsplit("/", 1)[1]
    assert await post(f"{second.url}/callbacks/{token}", "deploy-of-shop-succeeded") == 202
    await deployment.answer(asked.ts, "deploy-of-shop-succeeded")
    assert deployment.executions("start_deploy", "shop") == 1


async def test_a_retry_that_came_due_while_no_bot_ran_runs_once(deployment: Deployment) -> None:
    deployment.tool_log.touch()
    first = await deployment.start(failpoint="pause_stored")
    asked = await deployment.mention(request(("flaky_api", {"service": "billing"})))
    await deployment.crashed_at(first, "pause_stored")
    await asyncio.sleep(2)  # the retry (1 s) comes due while no bot runs

    await deployment.start()
    await deployment.answer(asked.ts, "billing answered on attempt 2")
    await quiet_sweeps(deployment)
    assert deployment.executions("flaky_api", "billing") == 2
    assert len(deployment.answers(asked.ts, "attempt 2")) == 1
