"""A callback that arrives while its tool still runs, then kill -9: the 202 the pipeline got
stands. The deploy already started and its result came, so after the restart the run carries
on with that body: the tool is not run again and the callback is not lost."""

from __future__ import annotations

from tests.faults.harness import Deployment, eventually, quiet_sweeps, request
from tests.faults.test_callback_restart import post

DEPLOY_SHOP = request(("slow_deploy", {"service": "shop"}))


async def test_a_callback_completed_before_the_pause_survives_kill_9(
    deployment: Deployment,
) -> None:
    first = await deployment.start()
    asked = await deployment.mention(DEPLOY_SHOP)
    (url,) = await eventually(deployment.callback_urls, "the tool to hand out a callback URL")
    token = url.rsplit("/", 1)[1]
    assert await post(f"{first.url}/callbacks/{token}", "deploy-of-shop-succeeded") == 202
    await deployment.kill(first)  # the tool still sleeps: no pause was stored

    second = await deployment.start()
    await deployment.answer(asked.ts, "deploy-of-shop-succeeded")
    await quiet_sweeps(deployment)
    assert deployment.executions("slow_deploy", "shop") == 1, "the deploy was started twice"
    assert await post(f"{second.url}/callbacks/{token}", "again") == 410
    assert len(deployment.answers(asked.ts, "deploy-of-shop-succeeded")) == 1
