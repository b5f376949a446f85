"""A retry that came due is recorded as started before its tool runs again: kill -9 right
then, and the next process reports "outcome unknown" rather than running it a second time."""

from __future__ import annotations

from tests.faults.harness import Deployment, quiet_sweeps, request

CALL_API = request(("flaky_api", {"service": "billing"}))


async def test_kill_after_a_retry_is_recorded_as_started_is_never_rerun(
    deployment: Deployment,
) -> None:
    deployment.tool_log.touch()
    bot = await deployment.start(failpoint="execution_started")
    asked = await deployment.mention(CALL_API)
    await deployment.crashed_at(bot, "execution_started")  # the retry, about to run again
    assert deployment.executions("flaky_api", "billing") == 1

    await deployment.start()
    await deployment.answer(asked.ts, "Outcome unknown")
    await quiet_sweeps(deployment)
    assert deployment.executions("flaky_api", "billing") == 1, "the retry ran after all"
    (retry,) = await deployment.rows("SELECT status FROM approvals WHERE kind = 'retry'")
    assert retry == ("unknown",)
