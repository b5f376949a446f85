"""SIGTERM right after an Approve click was answered (a rolling deploy mid-burst).

An Approve click is answered 200 before bolt dispatches it (handlers/app.py), so at the
signal the click may be nothing yet but a tracked background task. Shutdown must still decide
it, and run the approved call, before the process exits: the clicker saw no error and will
not click again.
"""

from __future__ import annotations

import signal

from tests.faults.harness import (
    APPROVER,
    Deployment,
    approval_id_of,
    request,
)


async def test_sigterm_just_after_an_approve_click_still_decides_it(
    deployment: Deployment,
) -> None:
    bot = await deployment.start()
    asked = await deployment.mention(request(("restart_service", {"service": "web"})))
    card = await deployment.card(asked.ts)
    reply = await deployment.slack.click(APPROVER, card, "approval_approve")
    assert reply.status == 200, (reply.status, reply.body)
    await deployment.kill(bot, signal.SIGTERM)  # at once: the dispatch may not have started
    status = await deployment.died(bot, "SIGTERM")
    assert status == 0, bot.output()
    approval = await deployment.approval(approval_id_of(card))
    assert approval.status == "executed", (approval.status, bot.output())
    assert deployment.executions("restart_service", "web") == 1
