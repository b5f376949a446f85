"""A run waiting for a callback survives kill -9: after a restart, the callback resumes it once.

The token is stored before the tool hands its URL out, and the wait with the paused history,
so a process killed while the run waits loses nothing: the pipeline's POST to any process
serving the database completes the wait, the run carries on once, and the tool (whose side
effect already happened) is not run again.
"""

from __future__ import annotations

import asyncio

import aiohttp

from tests.faults.harness import Deployment, eventually, quiet_sweeps, request

DEPLOY_SHOP = request(("start_deploy", {"service": "shop"}))


async def post(url: str, body: str) -> int:
    headers = {"Content-Type": "text/plain"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as r,
    ):
        return r.status


async def test_a_callback_after_kill_9_and_a_restart_resumes_the_run_once(
    deployment: Deployment,
) -> None:
    first = await deployment.start()
    asked = await deployment.mention(DEPLOY_SHOP)
    (url,) = await eventually(deployment.callback_urls, "the tool to hand out a callback URL")
    repo = await deployment.repo()

    async def paused() -> None:
        while not [w for w in await repo.pending_waits() if w.status == "pending"]:
            await asyncio.sleep(0.1)

    await asyncio.wait_for(paused(), 60)
    (wait,) = await repo.pending_waits()
    await deployment.kill(first)

    second = await deployment.start()
    token = url.rsplit("/", 1)[1]
    callback = f"{second.url}/callbacks/{token}"
    assert await post(callback, "deploy-of-shop-succeeded") == 202
    await deployment.answer(asked.ts, "deploy-of-shop-succeeded")
    assert await post(callback, "deploy-of-shop-succeeded-again") == 410
    await quiet_sweeps(deployment)

    assert deployment.executions("start_deploy", "shop") == 1, "the tool ran again"
    assert len(deployment.answers(asked.ts, "deploy-of-shop-succeeded")) == 1
    run = await repo.get_run(wait.run_id)
    assert run is not None and run.status == "completed", run
    trail = [e.event for e in await repo.audit_trail(run_id=wait.run_id)]
    assert trail.count("run_resumed") == 1, trail
    assert trail.count("callback_completed") == 1, trail
    stored = await repo.get_approval(wait.id)
    assert stored is not None and stored.status == "completed"
    assert stored.result == "deploy-of-shop-succeeded"
