"""SIGTERM while an approved tool runs (a rolling deploy): its result is recorded.

Kubernetes sends SIGTERM and kills 30 s later; the bot's grace for in-flight tools is 25 s by
default. The tool here takes 12 s, longer than the 10 s the bot once waited before cancelling
its tasks (which left a finished tool as "outcome unknown"), well within the grace.
"""

from __future__ import annotations

import signal

from tests.faults.harness import Deployment, approve, assert_settled, eventually, request

TOOL_SECONDS = 12.0


async def test_sigterm_during_a_tool_records_its_result(deployment: Deployment) -> None:
    deployment.slow_tool_seconds = TOOL_SECONDS
    bot = await deployment.start()
    asked = await deployment.mention(request(("slow_restart", {"service": "web"})))
    approval_id = await approve(deployment, asked.ts)
    await eventually(
        lambda: deployment.executions("slow_restart", "web", "started"), "the tool to start"
    )

    await deployment.kill(bot, signal.SIGTERM)
    status = await deployment.died(bot, "SIGTERM", timeout=TOOL_SECONDS + 30)

    assert status == 0, bot.output()
    assert deployment.executions("slow_restart", "web", "finished") == 1
    approval = await deployment.approval(approval_id)
    assert approval.status == "executed", (approval.status, bot.output())
    assert approval.result == "restarted web slowly"

    # The next process finishes the run from the recorded result: the tool is not run again.
    await deployment.start()
    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="restarted web slowly",
        card_says="ran",
    )
    assert deployment.executions("slow_restart", "web", "started") == 1
