"""kill -9 in the middle of a long tool that checkpoints (issue 19, section 3).

A real ``approval-bot serve`` runs an approved ``migrate_tenants`` over 200 items, storing a
checkpoint after each; the test kills it with SIGKILL half-way and starts another process on
the same database and Slack. The call resumes by itself from its last checkpoint (nobody
clicks anything): no item before that checkpoint is processed again, every item is processed,
and the run completes once. A tool without a checkpoint still reports "outcome unknown"
(tests/faults/test_crash_windows.py). SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
import signal
from collections import Counter

from tests.faults.harness import Deployment, approve, assert_settled, eventually, request

MIGRATE_200 = request(("migrate_tenants", {"count": 200}))
PROGRESS = re.compile(r"migrate_tenants: (\d+) / 200 \(tenant-\d+\)")


def progress_shown(deployment: Deployment) -> list[int]:
    """How far the thread's progress message said the tool got, edit by edit."""
    return [
        int(match[1])
        for call in deployment.slack.calls_to("chat.update")
        if (match := PROGRESS.search(str(call.args.get("text", ""))))
    ]


def processed(deployment: Deployment) -> list[int]:
    return [
        int(e["service"])
        for e in deployment.tool_events()
        if e["tool"] == "migrate_tenants" and e["event"] == "processed"
    ]


async def test_kill_9_mid_tool_resumes_from_the_last_checkpoint(deployment: Deployment) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(MIGRATE_200)
    approval_id = await approve(deployment, asked.ts)
    await eventually(lambda: len(processed(deployment)) >= 40, "40 items to be processed")
    await eventually(lambda: progress_shown(deployment), "the progress message to show it")
    await deployment.kill(bot)
    before = processed(deployment)
    assert 40 <= len(before) < 200, "the tool was not killed in the middle"
    assert before == list(range(len(before)))

    await deployment.start()

    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="migrated 200 tenants",
        card_says="ran",
    )
    done = processed(deployment)
    assert set(done) == set(range(200)), "an item was never processed"
    again = [item for item, times in Counter(done).items() if times > 1]
    # Only the item done after the last checkpoint the killed process stored (at most one:
    # it checkpoints after each item) may run again; nothing before it.
    assert again in ([], [before[-1]]), (again, before[-1])
    resumed = [
        e["service"]
        for e in deployment.tool_events()
        if e["tool"] == "migrate_tenants" and e["event"] == "resumed"
    ]
    assert resumed in ([str(len(before))], [str(len(before) - 1)]), resumed
    # The restarted process showed its progress on the same message, from where it resumed.
    assert max(progress_shown(deployment)) > len(before)
    trail = await deployment.audit_events(approval_id)
    assert trail.count("execution_resumed") == 1, trail
    assert trail.count("execution_finished") == 1, trail
    assert "execution_outcome_unknown" not in trail


async def test_sigterm_stops_the_tool_at_its_next_checkpoint_and_a_restart_resumes_it(
    deployment: Deployment,
) -> None:
    """A rolling deploy: the 200 items take ~10 s, far less than the 25 s grace, yet the
    process stops at the tool's next checkpoint instead of waiting for it; the next process
    carries the call on from there."""
    bot = await deployment.start()
    asked = await deployment.mention(MIGRATE_200)
    approval_id = await approve(deployment, asked.ts)
    await eventually(lambda: len(processed(deployment)) >= 20, "20 items to be processed")

    await deployment.kill(bot, signal.SIGTERM)
    status = await deployment.died(bot, "SIGTERM")
    assert status == 0, bot.output()
    before = processed(deployment)
    assert len(before) < 200, "the tool ran to its end instead of stopping at a checkpoint"
    assert before == list(range(len(before)))
    approval = await deployment.approval(approval_id)
    assert approval.status == "executing", approval.status

    await deployment.start()
    await assert_settled(
        deployment,
        asked.ts,
        approval_id,
        status="executed",
        answer="migrated 200 tenants",
        card_says="ran",
    )
    assert processed(deployment) == list(range(200)), "an item ran twice or never"
    trail = await deployment.audit_events(approval_id)
    assert trail.count("execution_resumed") == 1, trail
