"""Two replicas on one database, with retries coming due and callbacks POSTed to both at
once: each replica's ~1 s retry timer and each one's callback endpoint race for the same
rows, and still every retry runs once, every callback resumes its run once, and every
thread gets one answer and at most one card."""

from __future__ import annotations

import asyncio

from tests.faults.harness import Deployment, eventually, is_card, quiet_sweeps, request
from tests.faults.test_callback_restart import post

SERVICES = [f"svc{i}" for i in range(8)]


async def test_two_replicas_run_each_retry_once_and_resume_each_callback_once(
    deployment: Deployment,
) -> None:
    deployment.tool_log.touch()
    replicas = [await deployment.start(), await deployment.start()]
    asked = {}
    for i, service in enumerate(SERVICES):
        for tool in ("flaky_api", "start_deploy"):
            deployment.slack.bot_url = replicas[i % 2].events_url
            asked[tool, service] = await deployment.mention(request((tool, {"service": service})))
    urls = await eventually(
        lambda: len(deployment.callback_urls()) == len(SERVICES) and deployment.callback_urls(),
        "every deploy to hand out its callback URL",
    )
    for url in urls:
        token = url.rsplit("/", 1)[1]
        statuses = await asyncio.gather(
            *(post(f"{r.url}/callbacks/{token}", f"deployed-{token[:8]}") for r in replicas)
        )
        # One records the body; the other is a retry of that same body: 202 too, no change.
        assert statuses == [202, 202], statuses
        assert await post(f"{replicas[0].url}/callbacks/{token}", "another body") == 410

    for (tool, _service), message in asked.items():
        await deployment.answer(message.ts, "attempt 2" if tool == "flaky_api" else "deployed-")
    await quiet_sweeps(deployment, 3)
    for (tool, service), message in asked.items():
        assert deployment.executions(tool, service) == (2 if tool == "flaky_api" else 1)
        needle = "attempt 2" if tool == "flaky_api" else "deployed-"
        assert len(deployment.answers(message.ts, needle)) == 1, (tool, service)
        assert len([m for m in deployment.bot_replies(message.ts) if is_card(m)]) <= 1
    resumed = await deployment.rows(
        "SELECT run_id, count(*) FROM audit_events WHERE event = 'run_resumed' GROUP BY run_id"
    )
    lacking = await deployment.rows(
        "SELECT run_id, at, event, approval_id, detail FROM audit_events WHERE run_id IN ("
        "SELECT id FROM runs EXCEPT SELECT run_id FROM audit_events WHERE event = 'run_resumed'"
        ") ORDER BY run_id, id"
    )
    assert len(resumed) == 2 * len(SERVICES) and all(n == 1 for _, n in resumed), (resumed, lacking)
    completed = await deployment.rows(
        "SELECT count(*) FROM audit_events WHERE event = 'callback_completed'"
    )
    assert completed == [(len(SERVICES),)], completed
