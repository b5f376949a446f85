"""A worker that dies after posting its "Working on it…" message leaves no hourglass behind.

The progress message's ts is stored on the run, so whoever publishes the outcome (here the
restarted process that takes the run over, or that resumes it once the card is decided)
replaces that message instead of posting a new one next to it.
"""

from __future__ import annotations

import pytest

from tests.faults.harness import Deployment, approve, assert_settled, request

RESTART_WEB = request(("restart_service", {"service": "web"}))
HOURGLASS = ":hourglass_flowing_sand:"


@pytest.mark.parametrize(
    ("window", "status", "answer", "card_says", "runs"),
    [
        # Dies with "Working on it…" posted and the pause stored, before it replaced the
        # message with "Waiting for a human"; the restarted process resumes the run.
        ("pause_stored", "executed", "restarted web", "ran", 1),
        # Dies with "Carrying on after the decision…" posted; the restarted process takes
        # the run over once the dead lease runs out.
        ("execution_started", "unknown", "Outcome unknown", "outcome unknown", 0),
    ],
)
async def test_the_progress_message_of_a_dead_worker_is_replaced_by_the_answer(
    deployment: Deployment, window: str, status: str, answer: str, card_says: str, runs: int
) -> None:
    bot = await deployment.start(failpoint=window)
    asked = await deployment.mention(RESTART_WEB)
    approved_before = window == "execution_started"
    approval_id = await approve(deployment, asked.ts) if approved_before else ""
    await deployment.crashed_at(bot, window)
    assert any(HOURGLASS in m.text for m in deployment.bot_replies(asked.ts))

    await deployment.start()
    if not approved_before:
        approval_id = await approve(deployment, asked.ts)  # the card outbox posted it

    await assert_settled(
        deployment, asked.ts, approval_id, status=status, answer=answer, card_says=card_says
    )
    assert deployment.executions("restart_service", "web") == runs
    left = [m.text for m in deployment.bot_replies(asked.ts) if HOURGLASS in m.text]
    assert left == [], f"progress messages nobody replaced: {left}"
    [replaced] = deployment.answers(asked.ts, answer)
    assert replaced.edited, "the answer was posted as a new message next to the progress one"
